//! The `economy-mix` part: the economy bench on a real mix. The plain replay's lanes never call a
//! tool, never see a picture and never compact; this one replays a conversation where a third of
//! the bursts read a page, some carry a picture, the long lane compacts and a voice room talks,
//! through the whole stack, durable against one-shot, on the Anthropic stand-in (Anthropic's
//! cache rules) and the OpenAI-compatible stand-in, then (with `CLANKIE_BENCH_MODEL=llama`) the
//! same requests on llama.cpp; each priced as `/clankie usage` prices ([`crate::economy::prices`]).

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clankie_model_standin::{RecordedRequest, Reply, Script};
use clankie_sandbox::rig::{GENERAL, Rig};
use clankie_testkit::pages::{Answer, TestPages};

use clankie_store::{Prices, Tokens};

use crate::economy::{CHARACTER_SHEET, input_of, per_1000_messages, prices, prices_line};
use crate::mix_bill::{Mix, print_goals};

/// The loopback guild's second text channel: the short lane, which must not compact.
const LOBBIES: u64 = 201;
/// The loopback guild's voice channel, live through the whole replay.
const VOICE: u64 = 300;
/// Rounds of the conversation (`CLANKIE_BENCH_MIX_ROUNDS`, 6 by default). A round is two bursts
/// in the long lane (#general), one in the short lane (#lobbies, a second room, so lanes take
/// turns at the provider) and a line typed in the voice room's chat. More rounds make a lane
/// live longer, so each token written to the cache is read more often.
fn rounds() -> usize {
    std::env::var("CLANKIE_BENCH_MIX_ROUNDS").ok().and_then(|v| v.parse().ok()).filter(|&n| n > 0).unwrap_or(6)
}
/// Messages per burst, as in the plain replay.
const PER_BURST: usize = 3;
/// The captain's context budget (`CLANKIE_BENCH_MIX_BUDGET_TOKENS`, 4,000 by default): low enough
/// that #general (some 5,000 tokens of entries by its twelfth burst) compacts once in 6 rounds
/// and #lobbies (under 3,000) never does. The deployment's default is 60,000.
fn budget() -> String {
    std::env::var("CLANKIE_BENCH_MIX_BUDGET_TOKENS").ok().filter(|v| v.parse::<u32>().is_ok()).unwrap_or_else(|| "4000".into())
}
/// What the compaction call is answered: a summary of the size the instruction asks for.
const SUMMARY: &str = "Ada has been asking about the lobby schedule in #general all evening. He read the lobby pages she \
linked and told her the opening times (lobby 1 at nine, lobby 4 at nine as well); she showed him the Hangout map and he \
pointed out the spawn points. She plans to bring her party of six on Friday and wants to know when brackets are posted. \
Nothing is promised beyond telling her when a lobby opens; no one asked him to remember anything.";
/// What the voice room says aloud to each typed line.
const VOICE_ANSWER: &str = "Blue team is two rounds up, but it's close.";
/// A request whose system prompt says this is a compaction's summary call.
const COMPACTION_MARK: &str = "You are compacting your own conversation history";
/// A request whose system prompt says this is the voice room's.
const VOICE_MARK: &str = "spoken aloud";

/// What a burst carries besides its words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Words only, as the plain replay's bursts.
    Plain,
    /// Its first message asks him to read a page, and he calls `read_page`.
    Page,
    /// Its first message carries a picture.
    Picture,
}

/// One step of the conversation, played in order, each settled before the next.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// The `k`-th burst of `PER_BURST` messages in a room.
    Burst { channel: u64, room: &'static str, k: usize, kind: Kind },
    /// The `i`-th line typed into the live voice room's chat.
    Voice { i: usize },
}

impl Step {
    /// The word every message of the step carries, which its scripts wait for.
    fn token(&self) -> String {
        match self {
            Step::Burst { room, k, .. } => format!("[{room}-{k}]"),
            Step::Voice { i } => format!("[vc-{i}]"),
        }
    }

    /// What the step's requests are billed under.
    fn source(&self) -> &'static str {
        match self {
            Step::Burst { kind: Kind::Plain, .. } => "plain",
            Step::Burst { kind: Kind::Page, .. } => "page",
            Step::Burst { kind: Kind::Picture, .. } => "picture",
            Step::Voice { .. } => "voice",
        }
    }
}

/// The conversation: #general's bursts two at a time, #lobbies' and a voice line between them.
/// A third of the text bursts read a page (#general's 1, 4, 7, …; #lobbies' 2, 5, …), one in six
/// of #general's carries a picture (2, 8, …), and one in six of #lobbies' (3, 9, …).
fn schedule() -> Vec<Step> {
    // A room's `k`-th burst: a page where `k % 3 == page`, a picture where `k % 6 == picture`.
    let burst = |channel: u64, room: &'static str, page: usize, picture: usize, k: usize| Step::Burst {
        channel,
        room,
        k,
        kind: if k % 3 == page {
            Kind::Page
        } else if k % 6 == picture {
            Kind::Picture
        } else {
            Kind::Plain
        },
    };
    let (general, lobbies) = (|k| burst(GENERAL, "general", 1, 2, k), |k| burst(LOBBIES, "lobbies", 2, 3, k));
    let mut steps = Vec::new();
    for i in 0..rounds() {
        steps.extend([general(2 * i), lobbies(i), general(2 * i + 1), Step::Voice { i }]);
    }
    steps
}

/// The text bursts of `kind` in the conversation.
fn bursts(kind: Kind) -> usize {
    schedule().iter().filter(|s| matches!(s, Step::Burst { kind: k, .. } if *k == kind)).count()
}

/// Messages the conversation sends, which the dollars are per 1,000 of.
fn messages() -> usize {
    rounds() * (3 * PER_BURST + 1)
}

/// The provider a replay speaks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Provider {
    /// The Messages API stand-in, whose cache keeps Anthropic's rules.
    Anthropic,
    /// The OpenAI-compatible stand-in, whose `cached_tokens` are what a prefix cache would hold.
    OpenAi,
}

impl Provider {
    /// The suffix of its figures.
    fn name(self) -> &'static str {
        match self {
            Provider::Anthropic => "anthropic",
            Provider::OpenAi => "openai_standin",
        }
    }
}

/// `economy-mix`: the mix replayed one-shot and durable on each stand-in, then on llama.cpp if asked.
pub(crate) async fn report() -> Result<()> {
    let prices = prices()?;
    println!(
        "economy_mix_prices: {} (the OpenAI-compatible stand-in and llama.cpp priced the same, their cached tokens as cache reads, no writes)",
        prices_line(&prices)
    );
    println!(
        "economy_mix_conversation: {} messages: {} bursts of {PER_BURST} in #general (budget {} tokens), {} in #lobbies, {} of the {} reading a page, {} carrying a picture; {} lines typed in a live voice room",
        messages(),
        2 * rounds(),
        budget(),
        rounds(),
        bursts(Kind::Page),
        3 * rounds(),
        bursts(Kind::Picture),
        rounds()
    );
    let pages = serve_pages().await?;
    let mut openai = None;
    for provider in [Provider::Anthropic, Provider::OpenAi] {
        let oneshot = replay(true, provider, &pages).await?;
        let durable = replay(false, provider, &pages).await?;
        print_mix(&prices, provider.name(), &durable, &oneshot, provider == Provider::Anthropic);
        if provider == Provider::OpenAi {
            openai = Some((oneshot, durable));
        }
    }
    if std::env::var("CLANKIE_BENCH_MODEL").is_ok_and(|m| m == "llama")
        && let Some((oneshot, durable)) = openai
    {
        crate::economy_mix_llama::report(&prices, &oneshot, &durable, messages()).await?;
    }
    Ok(())
}

/// Prints one provider's figures and the goals beside them.
fn print_mix(prices: &Prices, p: &str, durable: &Mix, oneshot: &Mix, cache_goal: bool) {
    let mut d = 0.0;
    let mut o = 0.0;
    for (mode, mix) in [("oneshot", oneshot), ("durable", durable)] {
        let billed = mix.billed();
        let usd = per_1000_messages(&billed, prices, messages());
        println!("economy_mix_tokens_billed_{mode}_{p}: {billed:?}");
        println!("economy_mix_cached_share_{mode}_{p}: {:.3}", billed.cached_share());
        println!("economy_mix_cache_write_share_of_spend_{mode}_{p}: {:.3}", billed.cache_write_share_of_spend(prices));
        println!("economy_mix_usd_per_1000_messages_{mode}_{p}: {usd:.4}");
        // How often a token written to the cache is read back: what decides the writes' share of spend.
        if billed.cache_write > 0 {
            println!("economy_mix_reads_per_written_token_{mode}_{p}: {:.2}", billed.cached as f64 / billed.cache_write as f64);
        }
        let by = |f: &dyn Fn(&Tokens) -> String| mix.by_source.iter().map(|(s, b)| format!("{s}={}", f(b))).collect::<Vec<_>>().join(" ");
        let requests = |source: &str| mix.requests.iter().filter(|(s, _)| *s == source).count();
        println!(
            "economy_mix_requests_by_source_{mode}_{p}: {}",
            mix.by_source.iter().map(|(s, _)| format!("{s}={}", requests(s))).collect::<Vec<_>>().join(" ")
        );
        println!("economy_mix_cache_write_tokens_by_source_{mode}_{p}: {}", by(&|b| b.cache_write.to_string()));
        println!("economy_mix_cached_share_by_source_{mode}_{p}: {}", by(&|b| format!("{:.3}", b.cached_share())));
        // Input only (the turns' output is not split by source): which requests the input dollars went to.
        let spend = billed.dollars(prices).max(f64::MIN_POSITIVE);
        println!(
            "economy_mix_input_share_of_spend_by_source_{mode}_{p}: {}",
            by(&|b| format!("{:.3}", Tokens { output: 0, ..*b }.dollars(prices) / spend))
        );
        println!("economy_mix_compactions_{mode}_{p}: {}", mix.compactions);
        println!("economy_mix_page_reads_{mode}_{p}: {}", mix.page_reads);
        println!("economy_mix_failed_deliveries_{mode}_{p}: {}", mix.failed);
        println!("economy_mix_receipts_over_invoice_input_{mode}_{p}: {:.3}", mix.receipts_over_invoice);
        if mode == "durable" {
            d = usd;
        } else {
            o = usd;
        }
    }
    print_goals(prices, p, durable.billed(), d / o.max(f64::MIN_POSITIVE), cache_goal);
}

/// The pages the tool reads: one per page burst, each some 2,400 characters of text, so the
/// result is over the 600 characters a stored result is stubbed past.
async fn serve_pages() -> Result<TestPages> {
    let routes: Vec<(String, Answer)> = schedule()
        .into_iter()
        .filter_map(|s| match s {
            Step::Burst { room, k, kind: Kind::Page, .. } => Some((format!("/{room}/lobby-{k}"), Answer::html(page_html(room, k)))),
            _ => None,
        })
        .collect();
    let routes: Vec<(&str, Answer)> = routes.iter().map(|(p, a)| (p.as_str(), a.clone())).collect();
    TestPages::start("127.0.0.1", routes).await.context("serving the pages")
}

/// A lobby's page: its week, a paragraph a day, and its rules.
fn page_html(room: &str, k: usize) -> String {
    let mut html = format!("<!doctype html><html><head><title>Lobby {k}</title></head><body><h1>Lobby {k} ({room})</h1>");
    for (n, day) in ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"].iter().enumerate() {
        html.push_str(&format!(
            "<p>{day}: lobby {k} opens at {} for ranked practice. Bring a full party of six, keep voice chat on, and pick heroes \
             from the current pool only; late arrivals wait for the next rotation, which starts every forty minutes.</p>",
            18 + (n + k) % 5
        ));
    }
    html.push_str(
        "<h2>Rules</h2><p>No smurf accounts. Scrims are recorded and posted to the highlights channel on Sunday. The bracket \
         for the monthly cup is posted on the first Friday; sign-ups close the Wednesday before. Disputes go to the organisers, \
         never to the chat. Spectators are welcome in the Hangout voice channel but stay muted during rounds.</p></body></html>",
    );
    html
}

/// One replay of the conversation: a stack of its own (its voice state where the bench's voice
/// CA is trusted), the character set, the voice room live, every step played and settled.
async fn replay(one_shot: bool, provider: Provider, pages: &TestPages) -> Result<Mix> {
    let state = crate::voice::voice_state();
    std::fs::create_dir_all(&state).context("the voice state directory")?;
    let (state_dir, allow) = (state.display().to_string(), pages.addr().to_string());
    let hold = std::env::var("CLANKIE_TYPING_HOLD_MS").unwrap_or_else(|_| "8000".into());
    let budget = budget();
    let mut vars = vec![
        ("CLANKIE_STATE_DIR", state_dir.as_str()),
        ("CLANKIE_CAPTAIN_ONE_SHOT", if one_shot { "true" } else { "false" }),
        ("CLANKIE_TYPING_HOLD_MS", hold.as_str()),
        ("CLANKIE_FLOOD_ADMISSIONS_PER_MINUTE", "0"),
        ("CLANKIE_EGRESS_ALLOW", allow.as_str()),
        ("CLANKIE_CONTEXT_BUDGET_TOKENS", budget.as_str()),
    ];
    if provider == Provider::Anthropic {
        vars.push(("CLANKIE_MODEL_PROVIDER", "anthropic"));
    }
    let rig = Rig::with(&vars).await;
    let store = clankie_store::Store::connect(&rig.settings.database_url).await.context("store")?;
    store
        .set_persona(&clankie_store::Persona {
            character_sheet: CHARACTER_SHEET.into(),
            speaking_style: "Short, warm, a little dry; one or two sentences unless asked for more.".into(),
            ..Default::default()
        })
        .await
        .context("setting the persona")?;
    let bus = rig.bus().await;
    let speaks = clankie_testkit::record::<clankie_proto::v1::Speak>(&bus, clankie_proto::Family::VoiceSpeak).await;
    rig.voice_live(VOICE, "ada").await;
    let (hits, picture) = (pages.all_hits(), crate::picture::base64(&crate::picture::png(48, 32)));
    let mut starts = Vec::new();
    let began = Instant::now();
    for step in schedule() {
        rig.standin.clear_scripts();
        starts.push((rig.standin.requests().len(), step));
        play(&rig, &speaks, pages, &picture, step).await.with_context(|| format!("step {}", step.token()))?;
        eprintln!(
            "economy-mix ({}, {}): {} settled at {:.0} s",
            if one_shot { "one-shot" } else { "durable" },
            provider.name(),
            step.token(),
            began.elapsed().as_secs_f64()
        );
    }
    rig.standin.clear_scripts();
    // The last turn's row and receipts land just after its outcome.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mix = settle(&rig, &store, &starts, pages.all_hits() - hits, one_shot, provider).await;
    let _ = std::fs::remove_dir_all(&state);
    mix
}

/// Plays one step: its scripts, its messages, and a wait until it is settled.
async fn play(
    rig: &Rig,
    speaks: &clankie_testkit::Recorder<clankie_proto::v1::Speak>,
    pages: &TestPages,
    picture: &str,
    step: Step,
) -> Result<()> {
    let token = step.token();
    // A compaction's call, if the lane needs one, takes the summary: its transcript renders his
    // answers as `you: …` lines, which no turn's request has.
    rig.standin.script(Script::when("\nyou: ", Reply::text(SUMMARY)));
    match step {
        Step::Voice { i } => {
            rig.standin.script(Script::when(&token, Reply::text(VOICE_ANSWER)));
            let id = rig.say(VOICE, "ada", &format!("clankie {token} who is winning the scrim in lobby {i}?"));
            let deadline = Instant::now() + Duration::from_secs(30);
            while !speaks.all().iter().any(|s| s.delivery_id == id.to_string()) {
                anyhow::ensure!(Instant::now() < deadline, "the voice room never answered {token}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Step::Burst { channel, room, k, kind } => {
            let url = pages.url(&format!("/{room}/lobby-{k}"));
            // The page is read once a burst in either mode: by the durable lane's one run, or by
            // whichever one-shot run asks first (one-shot gives each message a run, and an answer each).
            if kind == Kind::Page {
                rig.standin.script(Script::when(&token, Reply::tool("read_page", serde_json::json!({ "url": url }))));
            }
            for _ in 0..PER_BURST {
                rig.standin.script(Script::when(&token, slow(answer(kind, k))));
            }
            let mut ids = Vec::new();
            let mut rng = (k as u64 + 1) * 0x9E37_79B9;
            for i in 0..PER_BURST {
                if i > 0 {
                    rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                    tokio::time::sleep(Duration::from_millis(150 + (rng >> 33) % 300)).await;
                }
                ids.push(rig.sandbox.discord.user_message(message(channel, &token, kind, k, i, &url, picture)));
                if i + 1 < PER_BURST {
                    rig.sandbox.discord.user_typing(channel, "ada");
                }
            }
            rig.wait_outcomes(channel, &ids).await;
        }
    }
    Ok(())
}

/// The `i`-th message of a burst: the first asks (reading a page, or with a picture), the
/// others add detail, as the plain replay's do.
fn message(channel: u64, token: &str, kind: Kind, k: usize, i: usize, url: &str, picture: &str) -> clankie_discord_loopback::NewMessage {
    let content = match (i, kind) {
        (0, Kind::Page) => format!("@Clankie {token} can you read {url} and tell me when lobby {k} opens?"),
        (0, Kind::Picture) => format!("@Clankie {token} what is on this map?"),
        (0, Kind::Plain) => format!("@Clankie {token} is lobby {k} up tonight?"),
        _ => format!("and detail {i} about {token}"),
    };
    let attachments = if i == 0 && kind == Kind::Picture {
        vec![clankie_discord_loopback::NewAttachment {
            filename: format!("map-{k}.png"),
            content_type: "image/png".into(),
            base64: Some(picture.to_owned()),
            ..Default::default()
        }]
    } else {
        Vec::new()
    };
    clankie_discord_loopback::NewMessage { channel_id: channel, author: "ada".into(), content, attachments, ..Default::default() }
}

/// What a burst is answered.
fn answer(kind: Kind, k: usize) -> String {
    match kind {
        Kind::Plain => "Lobby four opens at eight; bring whoever you like.".into(),
        Kind::Page => format!("The page says lobby {k} opens at nine on Fridays; bring a party of six."),
        Kind::Picture => "That's the Hangout map; the red marks are the spawn points.".into(),
    }
}

/// `text` streamed over about a second, as a real answer would be.
fn slow(text: String) -> Reply {
    Reply::Text { text, chunk_chars: 5, chunk_delay_ms: 100, first_delay_ms: 200, tail_delay_ms: 0 }
}

/// What a request is billed under: a compaction's or the voice room's call by its system
/// prompt, else the step it was sent in.
fn source_of(request: &RecordedRequest, step: Option<&Step>) -> &'static str {
    let body = request.body.to_string();
    if body.contains(COMPACTION_MARK) {
        "compaction"
    } else if body.contains(VOICE_MARK) {
        "voice"
    } else {
        step.map_or("plain", Step::source)
    }
}

/// Reads what the replay cost and did, once every step is settled.
async fn settle(
    rig: &Rig,
    store: &clankie_store::Store,
    starts: &[(usize, Step)],
    page_reads: usize,
    one_shot: bool,
    provider: Provider,
) -> Result<Mix> {
    let recorded = rig.standin.requests();
    let requests: Vec<(&'static str, RecordedRequest)> = recorded
        .into_iter()
        .enumerate()
        .map(|(n, r)| {
            let step = starts.iter().rev().find(|(first, _)| *first <= n).map(|(_, s)| s);
            (source_of(&r, step), r)
        })
        .collect();
    let (turn_input, turn_output): (i64, i64) =
        sqlx::query_as("SELECT COALESCE(sum(input_tokens), 0)::bigint, COALESCE(sum(output_tokens), 0)::bigint FROM turns")
            .fetch_one(store.pool())
            .await
            .context("reading the turns' tokens")?;
    let tokens = |text: &str| (text.chars().count() as i64 + 3) / 4;
    let mut by_source: Vec<(&'static str, Tokens)> =
        ["plain", "page", "picture", "voice", "compaction"].into_iter().map(|s| (s, Tokens::default())).collect();
    for (source, r) in &requests {
        if let Some((_, b)) = by_source.iter_mut().find(|(s, _)| s == source) {
            *b += input_of(r);
            // The turns count the captain's output; the voice room's and compaction's are what they were scripted.
            b.output += match *source {
                "voice" => tokens(VOICE_ANSWER),
                "compaction" => tokens(SUMMARY),
                _ => 0,
            };
        }
    }
    if let Some((_, b)) = by_source.iter_mut().find(|(s, _)| *s == "plain") {
        b.output += turn_output;
    }
    let all_input: u64 = requests.iter().map(|(_, r)| r.token_estimate).sum();
    log_requests(one_shot, provider, &requests);
    warn_strays(rig);
    Ok(Mix {
        by_source,
        compactions: compactions(store).await?,
        failed: sqlx::query_scalar("SELECT count(*) FROM deliveries WHERE outcome = 'failed'")
            .fetch_one(store.pool())
            .await
            .context("reading failed deliveries")?,
        page_reads,
        receipts_over_invoice: turn_input as f64 / all_input.max(1) as f64,
        requests,
    })
}

/// Compaction entries per room, `general=N lobbies=N`.
async fn compactions(store: &clankie_store::Store) -> Result<String> {
    let rows: Vec<(String, i64)> = sqlx::query_as("SELECT lane, count(*) FROM session_entries WHERE kind = $1 GROUP BY lane")
        .bind(clankie_agent::COMPACTION_KIND)
        .fetch_all(store.pool())
        .await
        .context("reading compactions")?;
    let count = |channel: u64| rows.iter().filter(|(lane, _)| lane.ends_with(&format!(":{channel}"))).map(|(_, n)| n).sum::<i64>();
    let other = rows.iter().map(|(_, n)| n).sum::<i64>() - count(GENERAL) - count(LOBBIES);
    Ok(format!("general={} lobbies={} other={other}", count(GENERAL), count(LOBBIES)))
}

/// Every request's cache use, to stderr: which requests write the cache, and how much; with
/// `CLANKIE_BENCH_SHOW=1` every body too, one JSON line each, in a file named there.
fn log_requests(one_shot: bool, provider: Provider, requests: &[(&'static str, RecordedRequest)]) {
    let mode = if one_shot { "one-shot" } else { "durable" };
    if std::env::var("CLANKIE_BENCH_SHOW").is_ok_and(|v| v == "1") {
        let path = std::env::temp_dir().join(format!("clankie-bench-economy-mix-{mode}-{}.jsonl", provider.name()));
        let lines: Vec<String> = requests.iter().map(|(s, r)| serde_json::json!({ "source": s, "request": r }).to_string()).collect();
        match std::fs::write(&path, lines.join("\n")) {
            Ok(()) => eprintln!("economy-mix ({mode}, {}): the request bodies are in {}", provider.name(), path.display()),
            Err(e) => eprintln!("economy-mix: could not write {}: {e}", path.display()),
        }
    }
    for (n, (source, r)) in requests.iter().enumerate() {
        eprintln!(
            "economy-mix ({mode}, {}): request {n} {source}: {} tokens, read {}, written {}, plain {}, {} messages",
            provider.name(),
            r.token_estimate,
            r.cached_estimate,
            r.cache_write_estimate,
            r.token_estimate - r.cached_estimate - r.cache_write_estimate,
            r.messages().len()
        );
    }
}

/// Says so when a turn's request took the summary or went unscripted (answered `ok`): then a
/// script matched what it should not have, and the figures are not of the conversation meant.
fn warn_strays(rig: &Rig) {
    for channel in [GENERAL, LOBBIES] {
        let strays = rig.sandbox.discord.posts(channel).into_iter().filter(|p| p.content == SUMMARY || p.content == "ok").count();
        if strays > 0 {
            eprintln!("economy-mix: WARNING {strays} posts in channel {channel} were a summary or an unscripted answer");
        }
    }
}
