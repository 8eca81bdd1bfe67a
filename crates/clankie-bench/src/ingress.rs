//! The `ingress` part: sustained ingress through the whole stack with an instant model, its rate
//! and its latency from the loopback Discord accepting a message to its outcome reaction.

use std::time::Instant;

use anyhow::Result;
use clankie_sandbox::rig::{GENERAL, Rig};

/// `ingress`: the sustained rate and its p50 and p99 latency.
pub(crate) async fn report() -> Result<()> {
    let (rate, p50, p99) = ingress().await?;
    println!("ingress_sustained_msgs_per_s: {rate:.1}");
    println!("ingress_p50_ms: {p50:.1}");
    println!("ingress_p99_ms: {p99:.1}");
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
