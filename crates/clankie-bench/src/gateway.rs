//! The `gateway` part: what ingest costs with context gathering on, as Discord's REST API
//! answers after 0, 100 and 300 ms, on a realistic mix (nine in ten messages between people,
//! half of those replies to the message before; one in ten to him):
//! - ingest messages a second through one gateway, from the loopback's dispatches to `Ingress`
//!   stored in JetStream, for a burst of `CLANKIE_BENCH_GATEWAY_MESSAGES` (20,000 unsaid);
//! - a mention's arrival to its admission by the captain, p50 and p99, over the whole stack;
//! - REST calls per 1,000 messages by route kind, as the loopback counted them, and for the
//!   messages between people alone.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clankie_discord_loopback::NewMessage;
use clankie_proto::{Family, v1};
use clankie_sandbox::rig::GENERAL;

use clankie_bench::figures::percentile;

/// REST latencies measured, in ms.
const LATENCIES_MS: [u64; 3] = [0, 100, 300];

/// `gateway`, named only.
pub(crate) async fn report() -> Result<()> {
    let count = std::env::var("CLANKIE_BENCH_GATEWAY_MESSAGES").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000);
    let mixed = std::env::var("CLANKIE_BENCH_GATEWAY_MIX").ok().and_then(|v| v.parse().ok()).unwrap_or(2_000);
    for latency in LATENCIES_MS {
        let rate = gateway_ingest(count, Duration::from_millis(latency)).await?;
        println!("gateway_ingest_per_s_rest_{latency}ms: {rate:.0}");
    }
    for latency in LATENCIES_MS {
        let mix = mention_admission(mixed, Duration::from_millis(latency)).await?;
        println!("gateway_mention_admitted_p50_ms_rest_{latency}ms: {:.1}", percentile(&mix.admitted_ms, 0.50));
        println!("gateway_mention_admitted_p99_ms_rest_{latency}ms: {:.1}", percentile(&mix.admitted_ms, 0.99));
        println!(
            "gateway_rest_calls_per_1000_between_people_rest_{latency}ms: {:.1}",
            mix.between_people_calls as f64 * 1000.0 / mix.between_people as f64
        );
        for (kind, calls) in &mix.calls {
            println!("gateway_rest_calls_per_1000_rest_{latency}ms[{kind}]: {:.1}", *calls as f64 * 1000.0 / mix.messages as f64);
        }
    }
    Ok(())
}

/// The mix's `i`th message: who writes it, whether it is to him, and whether it replies to the
/// message before.
fn shape(i: u64) -> (String, bool, bool) {
    let author = format!("member{}", i % 97);
    let to_him = i % 10 == 9;
    (author, to_him, !to_him && i % 2 == 1)
}

/// The mix's `i`th message in #general, replying to `previous` when its shape says so.
fn mix_message(i: u64, previous: Option<u64>) -> NewMessage {
    let (author, to_him, reply) = shape(i);
    NewMessage {
        channel_id: GENERAL,
        author,
        content: if to_him { format!("@Clankie what about {i}?") } else { format!("chatter {i}") },
        mention: to_him,
        reply_to: if reply { previous } else { None },
        ..Default::default()
    }
}

/// One gateway over its own nats-server and the loopback: `count` messages of the mix
/// dispatched at once; messages a second from the first dispatch until JetStream holds them all.
async fn gateway_ingest(count: u64, latency: Duration) -> Result<f64> {
    use clankie_discord_loopback::{Loopback, LoopbackConfig};
    let (nats, dir) = (clankie_testkit::TestNats::start()?, clankie_testkit::TestDir::new());
    let discord = Loopback::serve("127.0.0.1:0".parse()?, LoopbackConfig::default()).await?;
    let settings = clankie_settings::Settings::for_endpoints(&nats.url(), "postgres://unused@127.0.0.1:1/x", dir.path())?;
    let bus = clankie_bus::Bus::connect(&settings, "bench").await?;
    bus.ensure_streams().await?;
    bus.record_admitted_channels(&[]).await?;
    let config = clankie_gateway::GatewayConfig {
        token: discord.config().token.clone(),
        api: Some(discord.addr().to_string()),
        gateway_url: Some(discord.gateway_url()),
        ..clankie_gateway::GatewayConfig::from_settings(&settings)
    };
    let gateway = clankie_gateway::Gateway::new(clankie_bus::Bus::connect(&settings, "gateway").await?, config);
    let running = gateway.clone();
    let _gateway = clankie_http::Aborting(tokio::spawn(async move {
        let _ = running.run().await;
    }));
    anyhow::ensure!(discord.wait_for_session(Duration::from_secs(30)).await, "the gateway never attached");
    while gateway.bot_id() == 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    discord.set_rest_latency(latency);
    let stored = || async {
        let mut stream = bus.jetstream().get_stream("CLANKIE_INGRESS").await.context("the ingress stream")?;
        anyhow::Ok(stream.info().await.context("ingress stream info")?.state.messages)
    };
    let started = Instant::now();
    let mut previous = None;
    for i in 0..count {
        previous = Some(discord.user_message(mix_message(i, previous)));
    }
    eprintln!("gateway: {count} dispatched in {:.1} s (REST at {} ms)", started.elapsed().as_secs_f64(), latency.as_millis());
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let n = stored().await?;
        if n >= count {
            return Ok(n as f64 / started.elapsed().as_secs_f64());
        }
        anyhow::ensure!(Instant::now() < deadline, "only {n} of {count} stored");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What the whole stack did with the mix.
struct Mix {
    messages: u64,
    between_people: u64,
    /// REST calls the part between people made alone (sent first, counted apart).
    between_people_calls: u64,
    /// REST calls for the whole mix, by kind.
    calls: BTreeMap<String, u64>,
    /// Each mention's arrival to its `captain.admitted` receipt, sorted.
    admitted_ms: Vec<f64>,
}

/// The whole stack (gateway, captain, model stand-in) on the loopback with REST answering
/// after `latency`: first the mix's messages between people alone, their REST calls counted;
/// then `count` messages of the mix at 200 a second, each mention timed to its admission.
async fn mention_admission(count: u64, latency: Duration) -> Result<Mix> {
    let rig = clankie_sandbox::rig::Rig::with(&[("CLANKIE_FLOOD_ADMISSIONS_PER_MINUTE", "0"), ("CLANKIE_HISTORY_LIMIT", "0")]).await;
    let receipts = clankie_testkit::record::<v1::Receipt>(&rig.bus().await, Family::Receipt).await;
    let discord = &rig.sandbox.discord;
    let warm = rig.say(GENERAL, "member0", "evening");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !receipts.all().iter().any(|r| r.kind == "gateway.ingress" && r.delivery_id == warm.to_string()) {
        anyhow::ensure!(Instant::now() < deadline, "the stack never stored its first message");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    discord.set_rest_latency(latency);
    tokio::time::sleep(latency + Duration::from_millis(500)).await;

    discord.reset_rest_calls();
    let mut previous = Some(warm);
    let mut between_people = 0;
    for i in (0..count).filter(|i| !shape(*i).1) {
        previous = Some(discord.user_message(mix_message(i, previous)));
        between_people += 1;
    }
    let settled = |n: usize| receipts.all().iter().filter(|r| r.kind == "captain.not_admitted").count() >= n;
    let deadline = Instant::now() + Duration::from_secs(300);
    while !settled(between_people as usize) {
        anyhow::ensure!(Instant::now() < deadline, "the messages between people were never all decided");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let between_people_calls = discord.rest_calls_total();

    discord.reset_rest_calls();
    let mut sent_ms = BTreeMap::new();
    let started = Instant::now();
    for i in 0..count {
        let id = discord.user_message(mix_message(i, previous));
        if shape(i).1 {
            sent_ms.insert(id.to_string(), clankie_bus::now_ms());
        }
        previous = Some(id);
        // 200 a second: a busy server's pace, not a flood.
        tokio::time::sleep_until((started + Duration::from_millis(5 * (i + 1))).into()).await;
    }
    let admitted = || -> Vec<(String, i64)> {
        receipts
            .all()
            .into_iter()
            .filter(|r| r.kind == "captain.admitted" && sent_ms.contains_key(&r.delivery_id))
            .map(|r| (r.delivery_id.clone(), r.at_ms))
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(300);
    while admitted().len() < sent_ms.len() {
        anyhow::ensure!(Instant::now() < deadline, "{} of {} mentions admitted", admitted().len(), sent_ms.len());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut admitted_ms: Vec<f64> = admitted().into_iter().map(|(id, at)| (at - sent_ms[&id]) as f64).collect();
    admitted_ms.sort_by(f64::total_cmp);
    Ok(Mix { messages: count, between_people, between_people_calls, calls: discord.rest_calls(), admitted_ms })
}
