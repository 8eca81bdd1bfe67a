//! The `lanes` part: what a captain's warm lanes cost in memory, as the process's resident size
//! once it holds a thousand and ten thousand of them.

use std::time::{Duration, Instant};

use anyhow::Result;

use crate::rig::bare_captain;

/// `lanes`: resident memory at 1,000 and 10,000 warm lanes.
pub(crate) async fn report() -> Result<()> {
    for (count, mib) in lanes(&[1_000, 10_000]).await? {
        let name = if count >= 1000 { format!("{}k", count / 1000) } else { count.to_string() };
        println!("rss_mib_at_{name}_lanes: {mib:.1}");
    }
    Ok(())
}

/// One captain replica holding `targets` warm lanes (a DM each), answered by an instant model;
/// the process's resident memory once each target is reached.
async fn lanes(targets: &[usize]) -> Result<Vec<(usize, f64)>> {
    use clankie_proto::{Family, Subject, v1};
    let bench = bare_captain().await?;
    let (standin, bus, captain) = (&bench.standin, &bench.bus, &bench.captain);
    let outcomes = clankie_testkit::record::<v1::DeliveryOutcome>(bus, Family::LaneOutcome).await;
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
