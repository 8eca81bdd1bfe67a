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

/// A fixed-seed generator, so every run replays the same conversation.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, lo: u64, hi: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        lo + (self.0 >> 33) % (hi - lo)
    }
}

struct Economy {
    runs: f64,
    input_tokens: f64,
    duplicate_replies: f64,
}

async fn economy(one_shot: bool) -> Result<Economy> {
    let mode = if one_shot { "true" } else { "false" };
    let rig = Rig::with(&[("CLANKIE_CAPTAIN_ONE_SHOT", mode)]).await;
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
    for burst in 0..BURSTS {
        let mut ids = Vec::new();
        for i in 0..PER_BURST {
            if i > 0 {
                tokio::time::sleep(Duration::from_millis(rng.next(150, 450))).await;
            }
            let text = if i == 0 { format!("@Clankie question {burst}: is the lobby up?") } else { format!("and detail {i} about question {burst}") };
            ids.push(rig.say(GENERAL, "ada", &text));
        }
        rig.wait_outcomes(GENERAL, &ids).await;
    }
    let store = clankie_store::Store::connect(&rig.settings.database_url).await.context("store")?;
    let (turns, tokens) = store.turn_totals().await.context("reading turns")?;
    let replies = rig.sandbox.discord.posts(GENERAL).len();
    Ok(Economy {
        runs: turns as f64 / BURSTS as f64,
        input_tokens: tokens.unwrap_or(0) as f64 / BURSTS as f64,
        duplicate_replies: replies.saturating_sub(BURSTS) as f64,
    })
}

async fn ingress() -> Result<(f64, f64, f64)> {
    let rig = Rig::new().await;
    let messages = 60;
    let started = Instant::now();
    let mut latencies = Vec::new();
    for i in 0..messages {
        let sent = Instant::now();
        let id = rig.say(GENERAL, "ada", &format!("@Clankie ping {i}"));
        rig.wait_outcomes(GENERAL, &[id]).await;
        latencies.push(sent.elapsed().as_secs_f64() * 1000.0);
    }
    let rate = messages as f64 / started.elapsed().as_secs_f64();
    latencies.sort_by(|a, b| a.total_cmp(b));
    let pick = |q: f64| latencies[((latencies.len() as f64 - 1.0) * q).round() as usize];
    Ok((rate, pick(0.5), pick(0.99)))
}

#[tokio::main]
async fn main() -> Result<()> {
    let oneshot = economy(true).await?;
    let durable = economy(false).await?;
    println!("runs_per_burst_oneshot: {:.2}", oneshot.runs);
    println!("runs_per_burst_durable: {:.2}", durable.runs);
    println!("input_tokens_per_burst_oneshot: {:.0}", oneshot.input_tokens);
    println!("input_tokens_per_burst_durable: {:.0}", durable.input_tokens);
    println!("token_ratio_durable_over_oneshot: {:.2}", durable.input_tokens / oneshot.input_tokens.max(1.0));
    println!("duplicate_replies_oneshot: {}", oneshot.duplicate_replies);
    println!("duplicate_replies_durable: {}", durable.duplicate_replies);
    let (rate, p50, p99) = ingress().await?;
    println!("ingress_sequential_msgs_per_s: {rate:.1}");
    println!("ingress_p50_ms: {p50:.1}");
    println!("ingress_p99_ms: {p99:.1}");
    Ok(())
}
