//! `clankie run` under steady traffic, as a newcomer's sandbox gets it on a busy evening: a
//! debug build, the model answering in 300 ms, a message every 250 ms over the sandbox's text
//! rooms and its DM from sixteen authors (fifteen a minute each, under the flood guard's 20).
//! `CLANKIE_SOAK_SECS` sets how long it writes (600, ten minutes; 3600 in its long mode).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clankie_model_standin::{Reply, Script, StandIn};
use clankie_proto::{Family, v1};
use clankie_testkit::{TestDb, TestDir, TestNats};
use futures::StreamExt as _;
use prost::Message as _;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

const AUTHORS: usize = 16;
const EVERY: Duration = Duration::from_millis(250);
/// How long the last admitted message may wait for its outcome once writing stops.
const DRAIN: Duration = Duration::from_secs(90);
/// A lane's session compacts past this: each of the soak's lanes reaches it within a minute.
const CONTEXT_BUDGET_TOKENS: usize = 1_000;
/// How much what the process allocated may grow from the first minute's end to the last half
/// minute whatever the message count: the stores that fill to their bounds more slowly than a
/// minute (the loopback's enforced nonces, 4,096, and each room's typing records, 4,096, its
/// request logs, a session's 1,024 resume frames; about 1.5 MiB together) and the allocator's
/// own steps.
const FLAT_STORES_MIB: f64 = 2.0;
/// What each message written after the first minute may add on top, so the bound scales with
/// the run: a process that kept anything of each message (its ids and a receipt are more than
/// this) grows past it once the stores are full.
const FLAT_BYTES_PER_MESSAGE: f64 = 200.0;
/// The steepest the second half of an hour's run may climb, in MiB per ten minutes, once every
/// store has filled: a leak of 200 bytes a message climbs 0.47.
const FLAT_SLOPE_MIB_PER_10_MIN: f64 = 0.3;

/// What the bus said about one delivery: when it was admitted, and whether it has its outcome.
#[derive(Default)]
struct Seen {
    admitted: HashMap<String, i64>,
    refused: BTreeMap<String, usize>,
    /// Each delivery's outcome kind, as the lane decided it.
    outcomes: HashMap<String, i32>,
    /// How many replies the gateway posted for each delivery.
    posted: HashMap<String, usize>,
}

/// One line of `/proc/<pid>/status` in KiB: `VmRSS` (all it holds in memory) or `RssAnon`
/// (what it allocated, without the pages of its own binary it has read so far).
fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix(field)?.strip_prefix(':')).and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

#[tokio::test]
async fn soak_clankie_run_answers_a_message_every_250_ms_from_sixteen_authors_with_no_panic_and_no_leak() {
    let secs: u64 = std::env::var("CLANKIE_SOAK_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(600);
    let (nats, db, dir) = (TestNats::start().unwrap(), TestDb::create().await, TestDir::new());
    let standin = StandIn::start().await.unwrap();
    let settings = clankie_testkit::settings(&nats, &db, &dir);
    let bus = clankie_bus::Bus::connect(&settings, "soak").await.unwrap();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let mut receipts = bus.client().subscribe(Family::Receipt.wildcard()).await.unwrap();
    let mut outcomes = bus.client().subscribe(Family::LaneOutcome.wildcard()).await.unwrap();
    let sink = seen.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                Some(m) = receipts.next() => {
                    let Ok(r) = v1::Receipt::decode(m.payload) else { continue };
                    let mut seen = sink.lock().unwrap();
                    match r.kind.as_str() {
                        "captain.admitted" => { seen.admitted.entry(r.delivery_id).or_insert(r.at_ms); }
                        "captain.not_admitted" => *seen.refused.entry(r.codes.join(",")).or_default() += 1,
                        "gateway.posted" if r.codes.iter().any(|c| c == "reply") => *seen.posted.entry(r.delivery_id).or_default() += 1,
                        _ => {}
                    }
                }
                Some(m) = outcomes.next() => {
                    let Ok(o) = v1::DeliveryOutcome::decode(m.payload) else { continue };
                    sink.lock().unwrap().outcomes.insert(o.delivery_id, o.kind);
                }
                else => return,
            }
        }
    });

    // Every store that fills up to a bound is given a bound it reaches within the first minute
    // (a lane's session compacts at 1,000 tokens, a sandbox room keeps its newest 30 messages),
    // so what the process holds after it is flat unless something leaks.
    let mut run = crate::run_voice::clankie_run_command(&nats, &db, &dir)
        .env("CLANKIE_MODEL_BASE_URL", standin.base_url())
        .env("CLANKIE_CONTEXT_BUDGET_TOKENS", CONTEXT_BUDGET_TOKENS.to_string())
        .env("CLANKIE_SANDBOX_MESSAGES_KEPT", "30")
        .spawn()
        .unwrap();
    let pid = run.id().unwrap();
    let mut lines = BufReader::new(run.stderr.take().unwrap()).lines();
    let printed = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut sandbox = None;
    // The first run on a machine installs the speech engines from PyPI.
    let started = tokio::time::timeout(Duration::from_secs(240), async {
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(url) = line.strip_prefix("Open the sandbox room: ") {
                sandbox = Some(url.trim_end_matches('/').to_owned());
            }
            // The room is announced once the shard is identified.
            let up = line.starts_with("Open the sandbox room: ");
            printed.lock().unwrap().push(line);
            if up {
                return;
            }
        }
    })
    .await;
    let shown = |printed: &Mutex<Vec<String>>| printed.lock().unwrap().iter().rev().take(60).rev().cloned().collect::<Vec<_>>().join("\n");
    assert!(started.is_ok() && sandbox.is_some(), "clankie run did not start:\n{}", shown(&printed));
    let sandbox = sandbox.unwrap();
    let sink = printed.clone();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            sink.lock().unwrap().push(line);
        }
    });

    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
    let rooms: Value = http.get(format!("{sandbox}/control/rooms")).send().await.unwrap().json().await.unwrap();
    // A forum takes posts, not messages (Discord refuses one with 50008): the soak writes in the others.
    let mut channels: Vec<u64> = rooms["channels"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["voice"] != true && c["kind"] != "forum")
        .filter_map(|c| c["id"].as_u64())
        .collect();
    channels.extend(rooms["dm_channels"].as_array().unwrap().iter().filter_map(Value::as_u64));
    assert!(channels.len() >= 3, "the sandbox's text rooms and DM: {rooms}");

    // The first message waits for its outcome: the whole path is up.
    let answer = || Reply::Text { text: "Heard.".into(), chunk_chars: 40, chunk_delay_ms: 0, first_delay_ms: 300, tail_delay_ms: 0 };
    standin.script(Script::any(answer()));
    let first = json!({ "channel_id": channels[0], "author": "soak-0", "content": "@Clankie are you there?", "mention": true });
    http.post(format!("{sandbox}/control/messages")).json(&first).send().await.unwrap();
    let attached = Instant::now() + Duration::from_secs(120);
    while seen.lock().unwrap().outcomes.is_empty() {
        assert!(Instant::now() < attached, "no first outcome within 2 minutes:\n{}", shown(&printed));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let began = Instant::now();
    let began_ms = clankie_bus::now_ms();
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // (seconds in, RSS, anonymous RSS) every 10 s.
    let (mut sent, mut refused_posts, mut rss) = (0u64, 0u64, Vec::<(u64, u64, u64)>::new());
    let mut next_sample = Duration::ZERO;
    while began.elapsed() < Duration::from_secs(secs) {
        tick.tick().await;
        let n = sent as usize;
        // One script per message: a burst that a run absorbs leaves some over, never too few.
        standin.script(Script::any(answer()));
        let message = json!({
            "channel_id": channels[n % channels.len()],
            "author": format!("soak-{}", n % AUTHORS),
            "content": format!("@Clankie soak line {n}"),
            "mention": true,
        });
        match http.post(format!("{sandbox}/control/messages")).json(&message).send().await {
            Ok(r) if r.status().is_success() => sent += 1,
            _ => refused_posts += 1,
        }
        if began.elapsed() >= next_sample {
            rss.push((began.elapsed().as_secs(), status_kib(pid, "VmRSS").unwrap_or(0), status_kib(pid, "RssAnon").unwrap_or(0)));
            next_sample += Duration::from_secs(10);
            // What the stand-in keeps of each request is the test's memory, not his.
            standin.forget_requests();
        }
        if let Ok(Some(status)) = run.try_wait() {
            panic!("clankie run exited with {status} after {} s:\n{}", began.elapsed().as_secs(), shown(&printed));
        }
    }
    let wrote_for = began.elapsed();
    rss.push((wrote_for.as_secs(), status_kib(pid, "VmRSS").unwrap_or(0), status_kib(pid, "RssAnon").unwrap_or(0)));

    // Every admitted message gets its outcome.
    let drained = Instant::now() + DRAIN;
    let missing = loop {
        let missing: Vec<String> = {
            let seen = seen.lock().unwrap();
            // A replied message is done once its reply is posted too.
            let replied = |id: &String| seen.outcomes.get(id) == Some(&(v1::OutcomeKind::Replied as i32));
            seen.admitted
                .keys()
                .filter(|id| !seen.outcomes.contains_key(*id) || (replied(id) && !seen.posted.contains_key(*id)))
                .cloned()
                .collect()
        };
        if missing.is_empty() || Instant::now() > drained {
            break missing;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let seen = seen.lock().unwrap();
    let ended_ms = began_ms + wrote_for.as_millis() as i64;
    // Admissions by minute of the writing: none may stop before the end.
    let minutes = wrote_for.as_secs().div_ceil(60).max(1) as usize;
    let mut per_minute = vec![0usize; minutes];
    for at in seen.admitted.values().filter(|at| **at >= began_ms && **at <= ended_ms) {
        per_minute[(((at - began_ms) / 60_000) as usize).min(minutes - 1)] += 1;
    }
    let last_30_s = seen.admitted.values().filter(|at| **at > ended_ms - 30_000 && **at <= ended_ms).count();
    let log = printed.lock().unwrap().clone();
    let panics = log.iter().filter(|l| l.contains("panicked")).count();
    let mib = |kib: u64| (kib as f64 / 1024.0 * 10.0).round() / 10.0;
    // Flat is judged on anonymous memory: a debug binary's own pages come in as code runs for
    // the first time, which is no growth of what it holds.
    // Each figure the mean of three samples (30 s), so the allocator's own jitter decides nothing.
    let mean = |samples: Vec<u64>| samples.iter().sum::<u64>() / samples.len().max(1) as u64;
    let baseline = mean(rss.iter().filter(|(s, _, _)| (60..90).contains(s)).map(|(_, _, anon)| *anon).collect());
    let last = mean(rss.iter().rev().skip(1).take(3).map(|(_, _, anon)| *anon).collect());
    let after_first_minute: Vec<u64> = rss.iter().filter(|(s, _, _)| *s >= 60).map(|(_, _, anon)| *anon).collect();
    let peak = after_first_minute.iter().copied().max().unwrap_or(0);
    // The second half's slope, in MiB per ten minutes: a leak shows as a steady one.
    let second_half: Vec<(f64, f64)> =
        rss.iter().filter(|(s, _, _)| *s >= secs / 2).map(|(s, _, anon)| (*s as f64, *anon as f64 / 1024.0)).collect();
    let slope = {
        let n = second_half.len().max(1) as f64;
        let (mx, my) = (second_half.iter().map(|p| p.0).sum::<f64>() / n, second_half.iter().map(|p| p.1).sum::<f64>() / n);
        let (sxy, sxx) = second_half.iter().fold((0.0, 0.0), |(sxy, sxx), (x, y)| (sxy + (x - mx) * (y - my), sxx + (x - mx) * (x - mx)));
        if sxx > 0.0 { sxy / sxx * 600.0 } else { 0.0 }
    };
    println!(
        "soak: wrote {sent} messages in {} s ({refused_posts} not taken by the sandbox), admitted {}, refused {:?}, outcomes for all \
but {} of the admitted; admissions per minute {per_minute:?}, in the last 30 s {last_30_s}; panics in the log {panics}; \
anonymous RSS {} MiB at 1 min, {} MiB peak after it, {} MiB at the end, second half's slope {slope:.2} MiB per 10 min; \
samples (s, RSS MiB, anonymous MiB) {:?}",
        wrote_for.as_secs(),
        seen.admitted.len(),
        seen.refused,
        missing.len(),
        mib(baseline),
        mib(peak),
        mib(last),
        rss.iter().map(|(s, all, anon)| (*s, mib(*all), mib(*anon))).collect::<Vec<_>>(),
    );
    assert_eq!(
        panics,
        0,
        "the log has a panic:\n{}",
        log.iter().filter(|l| l.contains("panicked")).cloned().collect::<Vec<_>>().join("\n")
    );
    assert!(
        missing.is_empty(),
        "{} admitted messages never got an outcome, or their reply was never posted (of {}): {:?}",
        missing.len(),
        seen.admitted.len(),
        &missing[..missing.len().min(10)]
    );
    // Answered: each admitted message replied to or absorbed into a run that replied, none
    // failed or left silent; one post for each reply, and none for a message that was absorbed.
    let kind_of = |k: i32| v1::OutcomeKind::try_from(k).map_or_else(|_| k.to_string(), |k| k.as_str_name().to_owned());
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for id in seen.admitted.keys() {
        *kinds.entry(seen.outcomes.get(id).map_or_else(|| "none".to_owned(), |k| kind_of(*k))).or_default() += 1;
    }
    let answered = |k: &i32| *k == v1::OutcomeKind::Replied as i32 || *k == v1::OutcomeKind::Absorbed as i32;
    let unanswered: Vec<(&String, String)> =
        seen.admitted.keys().filter_map(|id| seen.outcomes.get(id).filter(|k| !answered(k)).map(|k| (id, kind_of(*k)))).collect();
    assert!(
        unanswered.is_empty(),
        "admitted messages not answered: {} ({kinds:?}), such as {:?}",
        unanswered.len(),
        &unanswered[..unanswered.len().min(10)]
    );
    let replied: HashSet<&String> =
        seen.admitted.keys().filter(|id| seen.outcomes.get(*id) == Some(&(v1::OutcomeKind::Replied as i32))).collect();
    let twice: Vec<(&String, &usize)> = seen.posted.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "a reply was posted more than once: {twice:?}");
    let unposted: Vec<&&String> = replied.iter().filter(|id| !seen.posted.contains_key(**id)).collect();
    assert!(unposted.is_empty(), "{} replied messages have no post, such as {:?}", unposted.len(), &unposted[..unposted.len().min(10)]);
    let stray: Vec<&String> = seen.posted.keys().filter(|id| seen.admitted.contains_key(*id) && !replied.contains(id)).collect();
    assert!(stray.is_empty(), "posts for messages that were not replied to: {:?}", &stray[..stray.len().min(10)]);
    println!("soak: outcomes of the admitted {kinds:?}; {} replies posted once each", replied.len());
    assert!(
        seen.admitted.len() as u64 >= sent * 9 / 10,
        "only {} of {sent} messages were admitted: {:?}",
        seen.admitted.len(),
        seen.refused
    );
    assert!(per_minute.iter().all(|n| *n > 0) && last_30_s > 0, "admissions stopped: per minute {per_minute:?}, last 30 s {last_30_s}");
    if secs >= 120 {
        // Flat after the first minute but for the slower stores filling to their bounds; in the
        // hour mode, with every store full, the second half does not climb.
        let grew = last as f64 / 1024.0 - baseline as f64 / 1024.0;
        // The bound grows with the messages written after the first minute, at a rate a leak of
        // anything kept per message would pass.
        let after_minute = seen.admitted.values().filter(|at| **at >= began_ms + 60_000).count() as f64;
        let allowed = FLAT_STORES_MIB + after_minute * FLAT_BYTES_PER_MESSAGE / (1024.0 * 1024.0);
        println!("soak: anonymous RSS grew {grew:.2} MiB over {after_minute} messages after the first minute (allowed {allowed:.2} MiB)");
        assert!(
            baseline > 0 && grew <= allowed,
            "anonymous RSS grew {grew:.1} MiB after the first minute ({after_minute} messages), from {} MiB to {} MiB, past {allowed:.2} MiB",
            mib(baseline),
            mib(last)
        );
    }
    if secs >= 1800 {
        assert!(slope <= FLAT_SLOPE_MIB_PER_10_MIN, "anonymous RSS climbed {slope:.2} MiB per 10 min in the second half");
    }
    let _ = run.start_kill();
}
