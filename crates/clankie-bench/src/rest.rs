//! The `rest` part: replies flooded at three gateway replicas over one loopback Discord at
//! Discord's pace, and how its rate limits, delays and duplicates come out.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use clankie_bench::figures::percentile;

/// `rest`, named only: `CLANKIE_BENCH_REST_SECS` (20 unsaid) of flood at 150 replies a second.
pub(crate) async fn report() -> Result<()> {
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
    Ok(())
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
