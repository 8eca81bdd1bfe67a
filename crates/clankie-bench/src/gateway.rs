//! The `gateway` part: the gateway's own ingest path, from the loopback Discord's dispatches to
//! `Ingress` stored in JetStream, in messages per second.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clankie_sandbox::rig::GENERAL;

/// `gateway`, named only: `CLANKIE_BENCH_GATEWAY_MESSAGES` (20,000 unsaid) through one gateway.
pub(crate) async fn report() -> Result<()> {
    let count = std::env::var("CLANKIE_BENCH_GATEWAY_MESSAGES").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000);
    println!("gateway_ingest_per_s: {:.0}", gateway_ingest(count).await?);
    Ok(())
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
