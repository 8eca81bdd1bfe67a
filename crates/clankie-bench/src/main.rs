//! `cargo run --release -p clankie-bench`: replays a conversation of bursts through the whole
//! stack (real NATS and PostgreSQL, the model stand-in) against durable lanes and against the
//! one-shot baseline, then drives the ingress path with an instant model, and prints one
//! `name: value` line per figure. Needs the local PostgreSQL (`clankie stack up`) and nats-server.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clankie_model_standin::{Reply, Script};
use clankie_sandbox::rig::{GENERAL, Rig};

/// Bursts in the replayed conversation, and messages per burst.
const BURSTS: usize = 8;
const PER_BURST: usize = 3;

/// The bench's character: about 2,000 characters, a modest sheet for a community bot
/// (the deployment in the design records sent some 16,600 input tokens per turn).
const CHARACTER_SHEET: &str = "Clankie is the resident robot of a gaming community that mostly plays Deadlock and runs \
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
    /// Every request's input as Anthropic bills it (plain, cache writes, cache reads), and the
    /// turns' output tokens: what [`Bill`] prices.
    billed: Billed,
}

/// Tokens by the price each is billed at, over a whole replay.
#[derive(Debug, Clone, Copy, Default)]
struct Billed {
    input: u64,
    cache_write: u64,
    cache_read: u64,
    output: u64,
}

impl Billed {
    /// The share of all input read from the cache (the first request's included).
    fn cached_share(&self) -> f64 {
        self.cache_read as f64 / (self.input + self.cache_write + self.cache_read).max(1) as f64
    }
}

/// A model's list prices, in US dollars per million tokens; the cache multipliers are
/// Anthropic's (a 5-minute write 1.25x the input price, a read 0.1x).
struct Bill {
    model: String,
    input: f64,
    output: f64,
}

impl Bill {
    /// The prices from `CLANKIE_BENCH_PRICE_*`, else Claude Sonnet 4.6's as Anthropic's pricing page listed them on 2026-12-03.
    fn from_env() -> Bill {
        let price = |name: &str, default: f64| std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
        Bill {
            model: std::env::var("CLANKIE_BENCH_PRICE_MODEL").unwrap_or_else(|_| "Claude Sonnet 4.6 (list prices of 2026-12-03)".into()),
            input: price("CLANKIE_BENCH_PRICE_INPUT_USD_PER_MTOK", 3.0),
            output: price("CLANKIE_BENCH_PRICE_OUTPUT_USD_PER_MTOK", 15.0),
        }
    }

    /// Dollars per 1,000 messages for `billed` over `messages` messages.
    fn per_1000_messages(&self, billed: &Billed, messages: usize) -> f64 {
        let dollars = (billed.input as f64 * self.input
            + billed.cache_write as f64 * self.input * 1.25
            + billed.cache_read as f64 * self.input * 0.1
            + billed.output as f64 * self.output)
            / 1e6;
        dollars * 1000.0 / messages.max(1) as f64
    }
}

/// Replays the bursts against the sandbox's captain, and as many more replicas as `captains` asks;
/// `model` is a real server's base URL to answer instead of the stand-in.
async fn economy(one_shot: bool, captains: usize, model: Option<&str>, anthropic: bool) -> Result<Economy> {
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
    let mut rng = Lcg(0x5eed);
    let bus = rig.bus().await;
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
    let totals = store.turn_totals().await.context("reading turns")?;
    let turns = totals.turns;
    let (after_first_input, after_first_cached): (i64, i64) = sqlx::query_as(
        "SELECT COALESCE(sum(input_tokens), 0)::bigint, COALESCE(sum(cached_input_tokens), 0)::bigint
         FROM (SELECT input_tokens, cached_input_tokens FROM turns ORDER BY started_at OFFSET 1) later",
    )
    .fetch_one(store.pool())
    .await
    .context("reading the later turns' tokens")?;
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
    let (output,): (i64,) = sqlx::query_as("SELECT COALESCE(sum(output_tokens), 0)::bigint FROM turns")
        .fetch_one(store.pool())
        .await
        .context("reading the turns' output tokens")?;
    let billed = Billed {
        input: requests.iter().map(|r| r.token_estimate - r.cached_estimate - r.cache_write_estimate).sum(),
        cache_write: requests.iter().map(|r| r.cache_write_estimate).sum(),
        cache_read: requests.iter().map(|r| r.cached_estimate).sum(),
        output: output as u64,
    };
    if anthropic {
        let shares: Vec<String> =
            requests.iter().map(|r| format!("{:.2}", r.cached_estimate as f64 / r.token_estimate.max(1) as f64)).collect();
        eprintln!("economy ({}, Anthropic): cached share per request {}", if one_shot { "one-shot" } else { "durable" }, shares.join(" "));
        let breakpoints: Vec<usize> = requests.iter().map(|r| r.body.to_string().matches("\"cache_control\"").count()).collect();
        eprintln!("economy: breakpoints per request {breakpoints:?}");
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

/// Sustained ingress: four rooms (three guild channels and a DM) each keep one message
/// in flight, answered by an instant model; a message counts from the loopback Discord
/// accepting it to its outcome reaction, with receipts recorded throughout.
async fn ingress() -> Result<(f64, f64, f64)> {
    // One asker in four rooms sends 240 messages: the flood guard is not what this measures.
    let rig = Rig::with(&[("CLANKIE_FLOOD_ADMISSIONS_PER_MINUTE", "0")]).await;
    let rooms = [GENERAL, 201, 210, 900];
    let per_room = 60;
    let started = Instant::now();
    let per_room_latencies = futures::future::join_all(rooms.iter().map(|&room| {
        let rig = &rig;
        async move {
            let mut latencies = Vec::with_capacity(per_room);
            for i in 0..per_room {
                let sent = Instant::now();
                let id = rig.say(room, "ada", &format!("@Clankie ping {i}"));
                rig.wait_outcomes(room, &[id]).await;
                latencies.push(sent.elapsed().as_secs_f64() * 1000.0);
            }
            latencies
        }
    }))
    .await;
    let mut latencies: Vec<f64> = per_room_latencies.into_iter().flatten().collect();
    let rate = latencies.len() as f64 / started.elapsed().as_secs_f64();
    latencies.sort_by(|a, b| a.total_cmp(b));
    let pick = |q: f64| latencies[((latencies.len() as f64 - 1.0) * q).round() as usize];
    Ok((rate, pick(0.5), pick(0.99)))
}

/// This process's resident memory, in MiB.
fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib: f64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    kib / 1024.0
}

/// One captain replica over a nats-server and database of its own, with the model stand-in.
struct BareCaptain {
    _nats: clankie_testkit::TestNats,
    _db: clankie_testkit::TestDb,
    _dir: clankie_testkit::TestDir,
    standin: clankie_model_standin::StandIn,
    bus: clankie_bus::Bus,
    store: clankie_store::Store,
    captain: clankie_captain::Captain,
    /// Every replica's task, aborted when the part ends so it does not compete with the next one.
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for BareCaptain {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

async fn bare_captain() -> Result<BareCaptain> {
    bare_captains(1).await
}

/// Like [`bare_captain`], with `replicas` captains sharing the bus and the store.
async fn bare_captains(replicas: usize) -> Result<BareCaptain> {
    let (nats, db, dir) = (clankie_testkit::TestNats::start()?, clankie_testkit::TestDb::create().await, clankie_testkit::TestDir::new());
    let standin = clankie_model_standin::StandIn::start().await?;
    let vars: Vec<(&str, String)> = vec![
        ("CLANKIE_NATS_URL", nats.url()),
        ("CLANKIE_DATABASE_URL", db.url().to_owned()),
        ("CLANKIE_STATE_DIR", dir.path().display().to_string()),
        ("CLANKIE_MODEL_BASE_URL", standin.base_url()),
        // No body answers history here; cold lanes skip it rather than wait for one.
        ("CLANKIE_HISTORY_LIMIT", "0".into()),
        // One author writes everything; the flood guard would stop her at twenty a minute.
        ("CLANKIE_FLOOD_ADMISSIONS_PER_MINUTE", "0".into()),
    ];
    let settings = clankie_settings::Settings::from_lookup(|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone()))?;
    let bus = clankie_bus::Bus::connect(&settings, "bench").await?;
    bus.ensure_streams().await?;
    let store = clankie_store::Store::connect(db.url()).await?;
    store.migrate().await?;
    let agent = clankie_agent::Agent::new(clankie_agent::model_from_settings(&settings)?, clankie_agent::config_from_settings(&settings));
    let (mut captains, mut tasks) = (Vec::new(), Vec::new());
    for replica in 0..replicas.max(1) {
        let config = clankie_captain::CaptainConfig {
            replica: format!("bench-{replica}"),
            ..clankie_captain::CaptainConfig::from_settings(&settings)
        };
        let captain =
            clankie_captain::Captain::new(clankie_bus::Bus::connect(&settings, "captain").await?, store.clone(), agent.clone(), config);
        let running = captain.clone();
        tasks.push(tokio::spawn(async move {
            let _ = running.run().await;
        }));
        captains.push(captain);
    }
    let captain = captains.swap_remove(0);
    Ok(BareCaptain { _nats: nats, _db: db, _dir: dir, standin, bus, store, captain, tasks })
}

/// The version of the nats-server the benches run against, as the running server reports it.
async fn nats_server_version() -> Result<String> {
    let (nats, dir) = (clankie_testkit::TestNats::start()?, clankie_testkit::TestDir::new());
    let settings = clankie_settings::Settings::for_endpoints(&nats.url(), "postgres://unused@127.0.0.1:1/x", dir.path())?;
    let bus = clankie_bus::Bus::connect(&settings, "bench").await?;
    Ok(bus.client().server_info().version)
}

/// The `n`th unaddressed message of the ingest benches, in one of 1,000 rooms.
fn chatter(n: u64) -> (clankie_proto::Subject, clankie_proto::v1::Ingress) {
    let channel = 10_000 + n % 1_000;
    let ingress = clankie_proto::v1::Ingress {
        delivery_id: (9_000_000 + n).to_string(),
        guild_id: Some(100),
        channel_id: channel,
        author_id: 7,
        author_name: "ada".into(),
        content: "chatter".into(),
        received_at_ms: clankie_bus::now_ms(),
        ..Default::default()
    };
    (clankie_proto::Subject::ingress_text(Some(100), channel), ingress)
}

/// Unaddressed ingress over 1,000 rooms, published as fast as JetStream takes it for `seconds`;
/// `replicas` captains decide each (none is admitted: nobody spoke to him). Decisions per
/// second from the first publish until every decision's receipt is stored in PostgreSQL.
async fn admissions(seconds: u64, replicas: usize) -> Result<f64> {
    let bench = bare_captains(replicas).await?;
    let started = Instant::now();
    let mut sent = 0u64;
    while started.elapsed() < Duration::from_secs(seconds) {
        let batch: Vec<_> = (0..128).map(|i| chatter(sent + i)).collect();
        for published in futures::future::join_all(batch.iter().map(|(s, i)| bench.bus.publish(s, i, None))).await {
            published?;
        }
        sent += batch.len() as u64;
    }
    eprintln!("admissions: {sent} published in {:.1} s", started.elapsed().as_secs_f64());
    let deadline = Instant::now() + Duration::from_secs(1_800);
    let mut decided: i64 = 0;
    while (decided as u64) < sent {
        anyhow::ensure!(Instant::now() < deadline, "only {decided} of {sent} decisions stored");
        tokio::time::sleep(Duration::from_millis(500)).await;
        decided = sqlx::query_scalar("SELECT count(*) FROM receipts WHERE kind = 'captain.not_admitted'")
            .fetch_one(bench.store.pool())
            .await
            .context("counting decisions")?;
        let (ingress, receipts) =
            (backlog(&bench.bus, "CLANKIE_INGRESS", "captain").await, backlog(&bench.bus, "CLANKIE_RECEIPTS", "receipts-recorder").await);
        eprintln!(
            "admissions: {decided} of {sent} decided after {:.1} s; waiting/unacked: ingress {ingress:?}, receipts {receipts:?}",
            started.elapsed().as_secs_f64()
        );
    }
    Ok(decided as f64 / started.elapsed().as_secs_f64())
}

/// Unaddressed ingress over 1,000 rooms offered at `per_s` for `seconds` to one captain; the
/// time from each publish to its decision's receipt stored in PostgreSQL (`receipts.stored_at`),
/// in milliseconds, sorted.
async fn admit_latency(per_s: u64, seconds: u64) -> Result<Vec<f64>> {
    const TICK: Duration = Duration::from_millis(10);
    let per_tick = (per_s / 100).max(1);
    let bench = bare_captain().await?;
    let mut published_us = std::collections::HashMap::new();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut sent = 0u64;
    // The first second warms the captain (its store connections open, its statements are
    // prepared) and is left out of the figures, which are the steady state's.
    const WARM_UP_TICKS: u64 = 100;
    let ticks = seconds * 100;
    for n in 0..WARM_UP_TICKS + ticks {
        tick.tick().await;
        let batch: Vec<_> = (0..per_tick).map(|i| chatter(sent + i)).collect();
        let at_us = now_us();
        for published in futures::future::join_all(batch.iter().map(|(s, i)| bench.bus.publish(s, i, None))).await {
            published?;
        }
        if n >= WARM_UP_TICKS {
            for (_, ingress) in batch {
                published_us.insert(ingress.delivery_id, at_us);
            }
        }
        sent += per_tick;
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let rows: Vec<(String, Option<i64>, Option<i64>)> = sqlx::query_as(
            "SELECT delivery_id, (extract(epoch from stored_at) * 1000000)::bigint, (extract(epoch from at) * 1000000)::bigint
             FROM receipts WHERE kind = 'captain.not_admitted'",
        )
        .fetch_all(bench.store.pool())
        .await
        .context("reading decisions")?;
        eprintln!("admit latency: {} of {sent} decided", rows.len());
        if rows.len() as u64 >= sent {
            // Where the time goes: publish to decision (the receipt's own time, to the
            // millisecond), and decision to stored.
            let mut decided: Vec<f64> =
                rows.iter().filter_map(|(id, _, at)| Some((at.as_ref()? - published_us.get(id)?) as f64 / 1000.0)).collect();
            let mut recorded: Vec<f64> =
                rows.iter().filter_map(|(_, stored, at)| Some((stored.as_ref()? - at.as_ref()?) as f64 / 1000.0)).collect();
            decided.sort_by(f64::total_cmp);
            recorded.sort_by(f64::total_cmp);
            eprintln!(
                "admit latency: publish to decision p50 {:.1} ms, p99 {:.1} ms; decision to stored p50 {:.1} ms, p99 {:.1} ms",
                percentile(&decided, 0.5),
                percentile(&decided, 0.99),
                percentile(&recorded, 0.5),
                percentile(&recorded, 0.99)
            );
            let mut ms: Vec<f64> =
                rows.iter().filter_map(|(id, stored, _)| Some((stored.as_ref()? - published_us.get(id)?) as f64 / 1000.0)).collect();
            ms.sort_by(f64::total_cmp);
            return Ok(ms);
        }
        anyhow::ensure!(Instant::now() < deadline, "only {} of {sent} decisions stored", rows.len());
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The gateway's own path: the loopback Discord dispatches `count` messages over its gateway
/// as fast as it can, and one gateway reads, normalises and stores each as `Ingress`;
/// messages per second from the first dispatch until JetStream holds them all.
async fn gateway_ingest(count: u64) -> Result<f64> {
    use clankie_discord_loopback::{Loopback, LoopbackConfig, NewMessage};
    let (nats, dir) = (clankie_testkit::TestNats::start()?, clankie_testkit::TestDir::new());
    let discord = Loopback::serve("127.0.0.1:0".parse()?, LoopbackConfig::default()).await?;
    let settings = clankie_settings::Settings::for_endpoints(&nats.url(), "postgres://unused@127.0.0.1:1/x", dir.path())?;
    let bus = clankie_bus::Bus::connect(&settings, "bench").await?;
    bus.ensure_streams().await?;
    let config = clankie_gateway::GatewayConfig {
        token: discord.config().token.clone(),
        api: Some(discord.addr().to_string()),
        gateway_url: Some(discord.gateway_url()),
        ..clankie_gateway::GatewayConfig::from_settings(&settings)
    };
    let gateway = clankie_gateway::Gateway::new(clankie_bus::Bus::connect(&settings, "gateway").await?, config);
    let running = gateway.clone();
    let _gateway = tokio::spawn(async move {
        let _ = running.run().await;
    });
    anyhow::ensure!(discord.wait_for_session(Duration::from_secs(30)).await, "the gateway never attached");
    while gateway.bot_id() == 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stored = || async {
        let mut stream = bus.jetstream().get_stream("CLANKIE_INGRESS").await.context("the ingress stream")?;
        anyhow::Ok(stream.info().await.context("ingress stream info")?.state.messages)
    };
    let started = Instant::now();
    for i in 0..count {
        discord.user_message(NewMessage {
            channel_id: GENERAL,
            author: "ada".into(),
            content: format!("chatter {i}"),
            ..Default::default()
        });
    }
    eprintln!("gateway: {count} dispatched in {:.1} s", started.elapsed().as_secs_f64());
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let n = stored().await?;
        if n >= count {
            return Ok(n as f64 / started.elapsed().as_secs_f64());
        }
        anyhow::ensure!(Instant::now() < deadline, "only {n} of {count} stored");
        eprintln!("gateway: {n} of {count} stored after {:.1} s", started.elapsed().as_secs_f64());
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Median lane open (its open turns and its session since the compaction) and admission, in
/// ms, over `n` of each on `store`.
async fn hot_paths(store: &clankie_store::Store, n: usize, tag: &str) -> Result<(f64, f64)> {
    let (mut opens, mut admits) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..n {
        let lane = clankie_proto::LaneKey::Room { guild: 100, channel: 1 + (i as u64 * 7) % 200 };
        let started = Instant::now();
        store.abandoned_epochs(&lane).await?;
        store.entries_since_compaction(&format!("rooms/{lane}")).await?;
        opens.push(started.elapsed().as_secs_f64() * 1000.0);
        let started = Instant::now();
        store
            .admit_within_flood(&format!("bench-{tag}-{i}"), &lane, "mentioned", 7 + i as u64, 20, i as u64, clankie_bus::now_ms())
            .await?;
        admits.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    opens.sort_by(f64::total_cmp);
    admits.sort_by(f64::total_cmp);
    Ok((percentile(&opens, 0.5), percentile(&admits, 0.5)))
}

/// What the retention part measured.
struct Aged {
    messages: i64,
    bytes_per_message: f64,
    mib_empty: f64,
    mib_aged: f64,
    mib_swept: f64,
    sweep_s: f64,
    /// One person forgotten on the 30-day store: how long it took and what it touched.
    forget_ms: f64,
    forgotten: clankie_self::rewrite::Forgotten,
    empty: (f64, f64),
    swept: (f64, f64),
}

/// A store of 30 days at `per_day` messages a day over 200 lanes, swept to 7 days: its size
/// before and after, and the hot paths against a store that only ever held the last 10 days
/// (the sessions the swept store keeps).
async fn retention(per_day: i64) -> Result<Aged> {
    let size = |pool: sqlx::PgPool| async move {
        let bytes: i64 = sqlx::query_scalar("SELECT pg_database_size(current_database())").fetch_one(&pool).await?;
        anyhow::Ok(bytes as f64 / (1 << 20) as f64)
    };
    let (empty_db, aged_db) = (clankie_testkit::TestDb::create().await, clankie_testkit::TestDb::create().await);
    let empty = clankie_store::Store::connect(empty_db.url()).await?;
    empty.migrate().await?;
    let store = clankie_store::Store::connect(aged_db.url()).await?;
    store.migrate().await?;
    let mib_empty = size(store.pool().clone()).await?;
    // The baseline holds what the swept store still needs (each lane's session since its
    // compaction, 10 days ago) and nothing older: the difference is the age alone.
    clankie_testkit::fill_aged_store(empty.pool(), 10, per_day, 200).await;
    let empty_paths = hot_paths(&empty, 500, "fresh").await?;
    eprintln!("retention: filling 30 days of {per_day} messages a day over 200 lanes");
    clankie_testkit::fill_aged_store(store.pool(), 30, per_day, 200).await;
    let mib_aged = size(store.pool().clone()).await?;
    let started = Instant::now();
    let forgotten = clankie_self::rewrite::forget_user(&store, 42, Duration::from_secs(5), |_| {}).await?;
    let forget_ms = started.elapsed().as_secs_f64() * 1e3;
    let week = Duration::from_secs(7 * 86_400);
    let started = Instant::now();
    store.sweep(&clankie_store::Retention { receipts: week, records: week, replaced_entries: week, batch: 5_000 }).await?;
    store.sweep_voice_ring(&clankie_store::RingRetention { age: week, lines_per_room: 2_000, batch: 5_000 }).await?;
    let sweep_s = started.elapsed().as_secs_f64();
    sqlx::query("VACUUM").execute(store.pool()).await?;
    let mib_swept = size(store.pool().clone()).await?;
    let swept_paths = hot_paths(&store, 500, "aged").await?;
    let messages = 30 * per_day;
    Ok(Aged {
        messages,
        bytes_per_message: (mib_aged - mib_empty) * (1 << 20) as f64 / messages as f64,
        mib_empty,
        mib_aged,
        mib_swept,
        sweep_s,
        forget_ms,
        forgotten,
        empty: empty_paths,
        swept: swept_paths,
    })
}

/// What the REST flood measured.
struct RestFlood {
    offered: usize,
    per_second: f64,
    limited: clankie_discord_loopback::LimitCounts,
    delays_ms: Vec<f64>,
    posted_twice: usize,
}

/// Three gateway replicas (in this process, each its own bus connection and twilight client)
/// over one loopback Discord with 60 channels; replies are published straight onto the body's
/// subjects at 150 a second for `seconds`, as captains would, and counted as the loopback
/// posts them.
async fn rest_flood(seconds: u64) -> Result<RestFlood> {
    use clankie_discord_loopback::{ChannelSpec, Loopback, LoopbackConfig};
    let (nats, dir) = (clankie_testkit::TestNats::start()?, clankie_testkit::TestDir::new());
    let mut config = LoopbackConfig::default();
    config.channels.extend((0..60).map(|n| ChannelSpec {
        id: 1_000 + n,
        name: format!("room-{n}"),
        voice: false,
        guild: None,
        overwrites: vec![],
        ..Default::default()
    }));
    let discord = Loopback::serve("127.0.0.1:0".parse()?, config).await?;
    let settings = clankie_settings::Settings::for_endpoints(&nats.url(), "postgres://unused@127.0.0.1:1/x", dir.path())?;
    let bus = clankie_bus::Bus::connect(&settings, "bench").await?;
    bus.ensure_streams().await?;
    let mut tasks = Vec::new();
    for replica in ["bench-gateway-a", "bench-gateway-b", "bench-gateway-c"] {
        let config = clankie_gateway::GatewayConfig {
            token: discord.config().token.clone(),
            api: Some(discord.addr().to_string()),
            gateway_url: Some(discord.gateway_url()),
            replica: replica.into(),
            state_dir: dir.path().join(replica),
            ..clankie_gateway::GatewayConfig::from_settings(&settings)
        };
        let gateway = clankie_gateway::Gateway::new(clankie_bus::Bus::connect(&settings, "gateway").await?, config);
        tasks.push(tokio::spawn(async move {
            let _ = gateway.run().await;
        }));
    }
    anyhow::ensure!(discord.wait_for_session(Duration::from_secs(30)).await, "no gateway attached");
    let per_second = 150u64;
    let mut sent_at = std::collections::HashMap::new();
    let started = tokio::time::Instant::now();
    for n in 0..seconds * per_second {
        tokio::time::sleep_until(started + Duration::from_micros(n * 1_000_000 / per_second)).await;
        let channel = 1_000 + n % 60;
        let text = format!("flood {n}");
        let out = clankie_proto::v1::OutboundMessage {
            idempotency_key: format!("reply:flood:{n}"),
            kind: clankie_proto::v1::OutboundKind::Reply as i32,
            guild_id: Some(discord.config().guild_id),
            channel_id: channel,
            text: text.clone(),
            delivery_id: n.to_string(),
            ..Default::default()
        };
        sent_at.insert(text, clankie_bus::now_ms());
        bus.publish(&clankie_proto::Subject::BodySend { channel }, &out, None).await.context("publishing a reply")?;
    }
    let offered = sent_at.len();
    let posted = || (0..60).flat_map(|n| discord.posts(1_000 + n)).collect::<Vec<_>>();
    let deadline = Instant::now() + Duration::from_secs(seconds * 5 + 120);
    loop {
        let n = posted().len();
        if n >= offered {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "only {n} of {offered} replies posted");
        eprintln!("rest: {n} of {offered} replies posted after {:.1} s", started.elapsed().as_secs_f64());
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let drained = started.elapsed().as_secs_f64();
    let posts = posted();
    let mut seen = std::collections::HashMap::<&str, usize>::new();
    for p in &posts {
        *seen.entry(p.content.as_str()).or_default() += 1;
    }
    let delays_ms = posts.iter().filter_map(|p| Some((p.at_ms - sent_at.get(&p.content)?) as f64)).collect();
    for task in &tasks {
        task.abort();
    }
    Ok(RestFlood {
        offered,
        per_second: offered as f64 / drained,
        limited: discord.limit_counts(),
        delays_ms,
        posted_twice: seen.values().filter(|n| **n > 1).count(),
    })
}

/// Wall-clock microseconds, the scale `receipts.stored_at` is read at.
fn now_us() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_micros() as i64).unwrap_or(0)
}

/// A durable consumer's messages not yet delivered and delivered but unacked, for progress lines.
async fn backlog(bus: &clankie_bus::Bus, stream: &str, consumer: &str) -> (u64, usize) {
    let Ok(stream) = bus.jetstream().get_stream(stream).await else { return (0, 0) };
    match stream.consumer_info(consumer).await {
        Ok(info) => (info.num_pending, info.num_ack_pending),
        Err(_) => (0, 0),
    }
}

/// One captain replica holding `targets` warm lanes (a DM each), answered by an instant model;
/// the process's resident memory once each target is reached.
async fn lanes(targets: &[usize]) -> Result<Vec<(usize, f64)>> {
    use clankie_proto::{Family, Subject, v1};
    let bench = bare_captain().await?;
    let (standin, bus, captain) = (&bench.standin, &bench.bus, &bench.captain);
    let outcomes = clankie_testkit::record::<v1::DeliveryOutcome>(&bus, Family::LaneOutcome).await;
    let mut figures = Vec::new();
    let mut sent = 0usize;
    for &target in targets {
        while sent < target {
            sent += 1;
            let channel = 1_000_000 + sent as u64;
            let ingress = v1::Ingress {
                delivery_id: (5_000_000 + sent).to_string(),
                channel_id: channel,
                author_id: 7,
                author_name: "ada".into(),
                content: "hi".into(),
                ..Default::default()
            };
            bus.publish(&Subject::ingress_text(None, channel), &ingress, None).await?;
        }
        let deadline = Instant::now() + Duration::from_secs(600);
        while outcomes.all().len() < target {
            anyhow::ensure!(Instant::now() < deadline, "only {} of {target} lanes answered", outcomes.all().len());
            // The stand-in shares the process: what it records is not the captain's memory.
            standin.forget_requests();
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        standin.forget_requests();
        eprintln!(
            "lanes: {target} answered, {} warm in {:.1} MiB of warm sessions",
            captain.warm_lanes(),
            captain.warm_bytes() as f64 / 1_048_576.0
        );
        figures.push((target, rss_mib()));
    }
    Ok(figures)
}

/// Which parts to run: every one by default, or those named on the command line.
fn wanted(part: &str) -> bool {
    let named: Vec<String> = std::env::args().skip(1).collect();
    named.is_empty() || named.iter().any(|n| n == part)
}

/// The voice part's state directory: its embedded audio body trusts the loopback's voice CA,
/// written there, through `SSL_CERT_FILE`, which must be set before any thread exists.
fn voice_state() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("clankie-bench-voice-{}", std::process::id()))
}

fn main() -> Result<()> {
    // SAFETY: no other thread exists yet.
    unsafe { std::env::set_var("SSL_CERT_FILE", voice_state().join("voice").join("voice-ca.pem")) };
    tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(run())
}

/// Phrases the offline transcriber may hear in the voice part.
const VOICE_PHRASES: [&str; 7] = [
    "Clankie, what time is it",
    "Clankie, tell me a long story",
    "good morning everyone",
    "tell me a joke",
    "how is the weather today",
    "the train leaves at nine",
    "clankie play some music",
];

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Prints a voice run's first-audio and barge-in percentiles under `prefix`.
fn print_voice(prefix: &str, (mut first, mut stops): (Vec<f64>, Vec<f64>)) {
    first.sort_by(f64::total_cmp);
    stops.sort_by(f64::total_cmp);
    println!("{prefix}_first_audio_ms_p50: {:.0}", percentile(&first, 0.50));
    println!("{prefix}_first_audio_ms_p99: {:.0}", percentile(&first, 0.99));
    println!("{prefix}_barge_in_stop_ms_p50: {:.0}", percentile(&stops, 0.50));
    println!("{prefix}_barge_in_stop_ms_p99: {:.0}", percentile(&stops, 0.99));
    let (p50, p99) = (percentile(&stops, 0.50), percentile(&stops, 0.99));
    let met = |v: f64| if v <= BARGE_IN_GOAL_MS { "met" } else { "MISSED" };
    println!("{prefix}_barge_in_goal_ms: {BARGE_IN_GOAL_MS:.0} (p50 {}, p99 {})", met(p50), met(p99));
}

/// How soon his audio should stop once someone speaks over him, from the start of their speech
/// to his last frame: the voice floor's barge-in goal, which the bench reports against.
const BARGE_IN_GOAL_MS: f64 = 600.0;

/// A clip of `text` said aloud: by the local speech service's Piper when there is one, else by espeak-ng.
async fn say(speech: Option<&clankie_stack::SpeechServer>, text: &str) -> Result<(Vec<i16>, u32)> {
    use clankie_speech::TextToSpeech as _;
    match speech {
        Some(s) => {
            let piper = clankie_speech::openai::OpenAiSpeaker::new(&s.base_url(), "piper", "joe", None, Duration::from_secs(30))?;
            let audio = piper.synthesize(text).await?;
            Ok((audio.pcm, audio.rate))
        }
        None => clankie_discord_loopback::Loopback::synthesize(text).await.map_err(anyhow::Error::msg),
    }
}

/// How long the clip's quiet tail lasts, in ms (Piper ends a sentence with some silence).
fn quiet_tail_ms(pcm: &[i16], rate: u32) -> i64 {
    let last = pcm.iter().rposition(|s| s.unsigned_abs() > 300).unwrap_or(pcm.len());
    ((pcm.len() - last) as i64 * 1000) / i64::from(rate)
}

/// The local speech service's own pace over the open-speech sentences: the real-time factors of
/// Piper and Whisper, and how long Smart Turn takes per decision.
async fn speech_pace(speech: &clankie_stack::SpeechServer) -> Result<(f64, f64, Vec<f64>)> {
    use clankie_speech::{SpeechToText as _, TextToSpeech as _};
    let base = speech.base_url();
    let piper = clankie_speech::openai::OpenAiSpeaker::new(&base, "piper", "joe", None, Duration::from_secs(30))?;
    let whisper = clankie_speech::openai::OpenAiTranscriber::new(&base, "whisper", None, Duration::from_secs(30))?;
    let turns = clankie_speech::openai::HttpTurnDetector::new(&base, Duration::from_secs(5))?;
    let (mut audio_s, mut tts_s, mut stt_s, mut decisions) = (0.0, 0.0, 0.0, Vec::new());
    for text in PACE_SENTENCES {
        let began = Instant::now();
        let audio = piper.synthesize(text).await?;
        tts_s += began.elapsed().as_secs_f64();
        audio_s += audio.duration().as_secs_f64();
        let began = Instant::now();
        whisper.transcribe(&audio).await?;
        stt_s += began.elapsed().as_secs_f64();
        let began = Instant::now();
        turns.finished(&audio, None).await?;
        decisions.push(began.elapsed().as_secs_f64() * 1000.0);
    }
    decisions.sort_by(f64::total_cmp);
    Ok((tts_s / audio_s, stt_s / audio_s, decisions))
}

/// Sentences the speech pace is measured over.
const PACE_SENTENCES: [&str; 5] = [
    "The weather was warm enough to eat outside on the terrace.",
    "My brother moved to a small town near the mountains last year.",
    "Could you turn the music down a little, please?",
    "I am reading a book about the history of the ocean.",
    "We cooked dinner together and talked for hours.",
];

/// From the end of a user's utterance to his first audio frame at the loopback, with an instant
/// model, on the local speech service (Whisper, Piper, Smart Turn) or, without one, the offline
/// engines; then how fast his audio stops when someone speaks over him. With `dave` the call is
/// end-to-end encrypted (DAVE, as Discord requires), else passthrough.
async fn voice(utterances: usize, barges: usize, speech: Option<&clankie_stack::SpeechServer>, dave: bool) -> Result<(Vec<f64>, Vec<f64>)> {
    let state = voice_state();
    std::fs::create_dir_all(&state)?;
    let grammar = state.join("bench.gram");
    std::fs::write(&grammar, clankie_speech::offline::grammar(&VOICE_PHRASES))?;
    let (state_dir, grammar) = (state.display().to_string(), grammar.display().to_string());
    let base = speech.map(clankie_stack::SpeechServer::base_url).unwrap_or_default();
    let mut settings = vec![("CLANKIE_STATE_DIR", state_dir.as_str())];
    match speech {
        Some(_) => settings.extend([
            ("CLANKIE_STT_BASE_URL", base.as_str()),
            ("CLANKIE_TTS_BASE_URL", base.as_str()),
            ("CLANKIE_TURN_BASE_URL", base.as_str()),
        ]),
        None => settings.push(("CLANKIE_STT_GRAMMAR", grammar.as_str())),
    }
    if !dave {
        settings.push(("CLANKIE_LOOPBACK_DAVE", "off"));
    }
    let rig = Rig::with(&settings).await;
    const VOICE: u64 = 300;
    rig.voice_live(VOICE, "ada").await;
    let voice = rig.sandbox.discord.voice();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !voice.bot_connected(VOICE) {
        anyhow::ensure!(Instant::now() < deadline, "his voice connection never came up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (question, rate) = say(speech, "Clankie, what time is it?").await?;
    let tail = quiet_tail_ms(&question, rate);
    let mut first_audio = Vec::new();
    for _ in 0..utterances {
        rig.standin.script(Script::when("spoken aloud", Reply::text("It is nine.")));
        let before = voice.heard(VOICE).len();
        rig.sandbox.discord.voice_speak(VOICE, "ada", &question, rate).await?;
        // The clip ends with five 20 ms silence frames and its own quiet tail; her speech ended before them.
        let ended = clankie_bus::now_ms() - 100 - tail;
        let deadline = Instant::now() + Duration::from_secs(20);
        let started = loop {
            if let Some(since) = voice.speaking_since(VOICE).filter(|s| *s > ended) {
                break since;
            }
            if let Some(s) = voice.heard(VOICE).get(before) {
                break s.start_ms;
            }
            anyhow::ensure!(Instant::now() < deadline, "no spoken answer");
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        first_audio.push((started - ended) as f64);
        // Let the answer finish before the next question.
        while voice.heard(VOICE).len() <= before {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let story = "Once upon a time, in a quiet village by the sea, there lived an old lighthouse keeper who counted the ships \
                 every evening and wrote their names in a great blue book, one by one, until the stars came out.";
    let (ask, ask_rate) = say(speech, "Clankie, tell me a long story").await?;
    let (interruption, i_rate) = say(speech, "good morning everyone").await?;
    let mut stops = Vec::new();
    for _ in 0..barges {
        rig.standin.script(Script::when("spoken aloud", Reply::text(story)));
        let before = voice.heard(VOICE).len();
        rig.sandbox.discord.voice_speak(VOICE, "ada", &ask, ask_rate).await?;
        let deadline = Instant::now() + Duration::from_secs(20);
        while !voice.speaking_since(VOICE).is_some_and(|since| clankie_bus::now_ms() - since > 1_000) {
            anyhow::ensure!(Instant::now() < deadline, "he never began the story");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let spoke_at = clankie_bus::now_ms();
        rig.sandbox.discord.voice_speak(VOICE, "ada", &interruption, i_rate).await?;
        let deadline = Instant::now() + Duration::from_secs(20);
        let story = loop {
            if let Some(s) = voice.heard(VOICE).get(before).cloned() {
                break s;
            }
            anyhow::ensure!(Instant::now() < deadline, "the story never ended");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        stops.push((story.end_ms - spoke_at) as f64);
        // Her interruption is a line of its own; let whatever answers it pass.
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    let _ = std::fs::remove_dir_all(&state);
    Ok((first_audio, stops))
}

/// The admissions flood in a process of its own, logging as a service does, its spans exported
/// to `otlp` when given: what tracing costs a captain. Its decisions per second.
async fn admissions_in_child(seconds: u64, otlp: Option<&str>) -> Result<f64> {
    let mut child = tokio::process::Command::new(std::env::current_exe()?);
    child.arg(ADMISSIONS_CHILD).env("CLANKIE_BENCH_INGEST_SECS", seconds.to_string()).stderr(std::process::Stdio::null());
    child.env_remove("OTEL_EXPORTER_OTLP_ENDPOINT").env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
    if let Some(endpoint) = otlp {
        child.env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint).env("OTEL_TRACES_SAMPLER", "always_on");
    }
    let out = child.output().await.context("running the admissions child")?;
    let said = String::from_utf8_lossy(&out.stdout);
    anyhow::ensure!(out.status.success(), "the admissions child failed: {said}");
    said.lines()
        .find_map(|l| l.strip_prefix("admissions_per_s: ").and_then(|v| v.trim().parse().ok()))
        .context("the admissions child printed no figure")
}

/// The child's part: one captain's admissions, tracing as the environment says.
const ADMISSIONS_CHILD: &str = "admissions-child";

async fn run() -> Result<()> {
    if std::env::args().nth(1).as_deref() == Some(ADMISSIONS_CHILD) {
        let _traces = clankie_http::init_tracing("warn", "captain");
        let seconds = std::env::var("CLANKIE_BENCH_INGEST_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(10);
        println!("admissions_per_s: {:.1}", admissions(seconds, 1).await?);
        return Ok(());
    }
    if let Some(unknown) = std::env::args().skip(1).find(|a| {
        !["economy", "ingress", "admissions", "admissions-traced", "gateway", "lanes", "voice", "voice-offline", "rest", "retention"]
            .contains(&a.as_str())
    }) {
        anyhow::bail!(
            "unknown part {unknown:?}: name any of economy, ingress, admissions, admissions-traced, gateway, lanes, voice, voice-offline, rest, retention (default: all but admissions, admissions-traced, gateway, voice-offline, rest and retention)"
        );
    }
    // Named only: the admissions flood twice, each in a process of its own, without traces and
    // with every span exported to a real OTLP receiver.
    if std::env::args().skip(1).any(|a| a == "admissions-traced") {
        let seconds = std::env::var("CLANKIE_BENCH_INGEST_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(10);
        // The receiver decodes nothing: the machine's two cores are the bench's, not a collector's.
        let otlp =
            tokio::task::spawn_blocking(|| clankie_stack::OtlpReceiver::start_counting(&mut |m| eprintln!("clankie-bench: {m}"))).await??;
        // Off and on taken in turns, twice, so a slow minute of the machine weighs on both.
        let (mut off, mut on) = (0.0, 0.0);
        for round in 0..2 {
            let (a, b) = (admissions_in_child(seconds, None).await?, admissions_in_child(seconds, Some(&otlp.endpoint())).await?);
            eprintln!("admissions-traced: round {round}: off {a:.0}/s, on {b:.0}/s");
            (off, on) = (off + a / 2.0, on + b / 2.0);
        }
        let spans: serde_json::Value = serde_json::from_str(&otlp.spans_json()?)?;
        println!("ingest_admissions_per_s_tracing_off: {off:.0}");
        println!("ingest_admissions_per_s_tracing_on: {on:.0}");
        println!("ingest_admissions_tracing_on_over_off: {:.3}", on / off.max(1.0));
        println!("otlp_exports_tracing_on: {}", spans["requests"]);
        println!("otlp_bytes_tracing_on: {}", spans["bytes"]);
    }
    println!("nats_server: {}", nats_server_version().await?);
    if wanted("economy") {
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
        let bill = Bill::from_env();
        let oneshot = economy(true, 1, None, true).await?;
        let durable = economy(false, 1, None, true).await?;
        let messages = BURSTS * PER_BURST;
        let (d, o) = (bill.per_1000_messages(&durable.billed, messages), bill.per_1000_messages(&oneshot.billed, messages));
        println!(
            "prices: {} at ${}/MTok input, ${}/MTok output, cache writes 1.25x, cache reads 0.1x",
            bill.model, bill.input, bill.output
        );
        println!("tokens_billed_durable_anthropic: {:?}", durable.billed);
        println!("tokens_billed_oneshot_anthropic: {:?}", oneshot.billed);
        println!("cached_tokens_share_durable_anthropic: {:.3}", durable.billed.cached_share());
        println!("cached_tokens_share_oneshot_anthropic: {:.3}", oneshot.billed.cached_share());
        println!("usd_per_1000_messages_durable_anthropic: {d:.4}");
        println!("usd_per_1000_messages_oneshot_anthropic: {o:.4}");
        println!("usd_ratio_durable_over_oneshot_anthropic: {:.3}", d / o.max(f64::MIN_POSITIVE));
        println!("duplicate_replies_durable_anthropic: {}", durable.duplicate_replies);
    }
    if wanted("ingress") {
        let (rate, p50, p99) = ingress().await?;
        println!("ingress_sustained_msgs_per_s: {rate:.1}");
        println!("ingress_p50_ms: {p50:.1}");
        println!("ingress_p99_ms: {p99:.1}");
    }
    // Before the floods: what they allocate stays in this process and would count as the captain's.
    if wanted("lanes") {
        for (count, mib) in lanes(&[1_000, 10_000]).await? {
            let name = if count >= 1000 { format!("{}k", count / 1000) } else { count.to_string() };
            println!("rss_mib_at_{name}_lanes: {mib:.1}");
        }
    }
    // Named only: at today's drain rate its backlog takes many minutes to decide.
    if std::env::args().skip(1).any(|a| a == "admissions") {
        let seconds = std::env::var("CLANKIE_BENCH_INGEST_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(30);
        println!("ingest_admissions_per_s_1_captain: {:.0}", admissions(seconds, 1).await?);
        println!("ingest_admissions_per_s_2_captains: {:.0}", admissions(seconds, 2).await?);
        let latencies = admit_latency(1_000, seconds.min(10)).await?;
        println!("ingest_admit_p50_ms: {:.1}", percentile(&latencies, 0.50));
        println!("ingest_admit_p99_ms: {:.1}", percentile(&latencies, 0.99));
    }
    if std::env::args().skip(1).any(|a| a == "gateway") {
        let count = std::env::var("CLANKIE_BENCH_GATEWAY_MESSAGES").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000);
        println!("gateway_ingest_per_s: {:.0}", gateway_ingest(count).await?);
    }
    // Named only: a minute and more of flood at Discord's pace.
    if std::env::args().skip(1).any(|a| a == "rest") {
        let seconds = std::env::var("CLANKIE_BENCH_REST_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(20);
        let mut flood = rest_flood(seconds).await?;
        flood.delays_ms.sort_by(f64::total_cmp);
        println!("rest_replies_offered: {}", flood.offered);
        println!("replies_per_s_3_gateways: {:.1}", flood.per_second);
        println!("rest_429s: {}", flood.limited.rate_limited_user + flood.limited.rate_limited_global);
        println!("rest_invalid_requests: {}", flood.limited.invalid_total);
        println!("rest_reply_delay_ms_p50: {:.0}", percentile(&flood.delays_ms, 0.50));
        println!("rest_reply_delay_ms_p99: {:.0}", percentile(&flood.delays_ms, 0.99));
        println!("rest_replies_posted_twice: {}", flood.posted_twice);
    }
    // Named only: it writes millions of rows.
    if std::env::args().skip(1).any(|a| a == "retention") {
        let per_day = std::env::var("CLANKIE_BENCH_MESSAGES_PER_DAY").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
        let aged = retention(per_day).await?;
        println!("retention_messages: {}", aged.messages);
        println!("pg_bytes_per_message: {:.0}", aged.bytes_per_message);
        println!("pg_mib_empty: {:.1}", aged.mib_empty);
        println!("pg_mib_30_days: {:.1}", aged.mib_aged);
        println!("pg_mib_swept_to_7_days: {:.1}", aged.mib_swept);
        println!("sweep_seconds: {:.1}", aged.sweep_s);
        println!("forget_one_person_ms_30_days: {:.0}", aged.forget_ms);
        println!("forget_one_person_lanes: {}", aged.forgotten.lanes);
        println!("forget_one_person_messages: {}", aged.forgotten.messages);
        println!("forget_one_person_answers_withdrawn: {}", aged.forgotten.answers);
        println!("lane_open_p50_ms_fresh_10_days: {:.3}", aged.empty.0);
        println!("lane_open_p50_ms_swept_30_days: {:.3}", aged.swept.0);
        println!("admit_p50_ms_fresh_10_days: {:.3}", aged.empty.1);
        println!("admit_p50_ms_swept_30_days: {:.3}", aged.swept.1);
    }
    if wanted("voice") {
        let speech =
            tokio::task::spawn_blocking(|| clankie_stack::SpeechServer::start(&Default::default(), &mut |m| eprintln!("{m}"))).await??;
        let (tts_rtf, stt_rtf, decisions) = speech_pace(&speech).await?;
        println!("tts_rtf: {tts_rtf:.3}");
        println!("stt_rtf: {stt_rtf:.3}");
        println!("turn_decision_ms_p50: {:.0}", percentile(&decisions, 0.50));
        print_voice("voice", voice(20, 10, Some(&speech), true).await?);
        print_voice("voice_passthrough", voice(20, 10, Some(&speech), false).await?);
    }
    if std::env::args().skip(1).any(|a| a == "voice-offline") {
        print_voice("voice_offline", voice(20, 10, None, true).await?);
        print_voice("voice_offline_passthrough", voice(20, 10, None, false).await?);
    }
    Ok(())
}
