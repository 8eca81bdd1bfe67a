//! The admissions parts: unaddressed ingress flooded at one or two captains, their decisions per
//! second and the latency of each, and the same flood in a child process with and without tracing.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::rig::{bare_captain, bare_captains};
use clankie_bench::figures::percentile;

/// `admissions`, named only: the flood at one captain and at two, then the admit latency at 1,000 a second.
pub(crate) async fn report() -> Result<()> {
    let seconds = std::env::var("CLANKIE_BENCH_INGEST_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(30);
    println!("ingest_admissions_per_s_1_captain: {:.0}", admissions(seconds, 1).await?);
    println!("ingest_admissions_per_s_2_captains: {:.0}", admissions(seconds, 2).await?);
    let latencies = admit_latency(1_000, seconds.min(10)).await?;
    println!("ingest_admit_p50_ms: {:.1}", percentile(&latencies, 0.50));
    println!("ingest_admit_p99_ms: {:.1}", percentile(&latencies, 0.99));
    Ok(())
}

/// `admissions-traced`, named only: the flood in a child process, without traces and with every
/// span exported to a real OTLP receiver, taken in turns.
pub(crate) async fn report_traced() -> Result<()> {
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
    Ok(())
}

/// The child's part: one captain's admissions, tracing as the environment says.
pub(crate) const ADMISSIONS_CHILD: &str = "admissions-child";

/// The child's part: one captain's admissions, tracing as the environment says, its figure
/// printed for the parent to read.
pub(crate) async fn child() -> Result<()> {
    let _traces = clankie_http::init_tracing("warn", "captain");
    let seconds = std::env::var("CLANKIE_BENCH_INGEST_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(10);
    println!("admissions_per_s: {:.1}", admissions(seconds, 1).await?);
    Ok(())
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
