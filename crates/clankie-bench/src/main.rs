//! `cargo run --release -p clankie-bench`: replays a conversation of bursts through the whole
//! stack (real NATS and PostgreSQL, the model stand-in) against durable lanes and against the
//! one-shot baseline (and, named, `economy-mix`: the same on a real mix of pages, pictures, a
//! compaction and a voice room), then drives the ingress path with an instant model, and prints one
//! `name: value` line per figure. Needs the local PostgreSQL (`clankie stack up`) and nats-server.
//!
//! This file reads the command line and runs the parts named, in order; each part is a file of
//! its own that sets up what it measures and prints its figures, over the shared [`rig`].

mod admissions;
mod economy;
mod economy_mix;
mod economy_mix_llama;
mod gateway;
mod ingress;
mod lanes;
mod mix_bill;
mod picture;
mod rest;
mod retention;
mod rig;
mod voice;

use anyhow::Result;

/// The parts the command line may name.
const PARTS: [&str; 12] = [
    "day",
    "economy",
    "economy-mix",
    "ingress",
    "admissions",
    "admissions-traced",
    "gateway",
    "lanes",
    "voice",
    "voice-offline",
    "rest",
    "retention",
];

/// Which parts to run: every one by default, or those named on the command line.
fn wanted(part: &str) -> bool {
    let named: Vec<String> = std::env::args().skip(1).collect();
    named.is_empty() || named.iter().any(|n| n == part)
}

fn main() -> Result<()> {
    // SAFETY: no other thread exists yet.
    unsafe { std::env::set_var("SSL_CERT_FILE", voice::voice_state().join("voice").join("voice-ca.pem")) };
    tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(run())
}

/// Every part named on the command line, in the order their figures are printed.
async fn run() -> Result<()> {
    if std::env::args().nth(1).as_deref() == Some(admissions::ADMISSIONS_CHILD) {
        return admissions::child().await;
    }
    if let Some(unknown) = std::env::args().skip(1).find(|a| !PARTS.contains(&a.as_str())) {
        anyhow::bail!(
            "unknown part {unknown:?}: name any of day, economy, economy-mix, ingress, admissions, admissions-traced, gateway, lanes, voice, voice-offline, rest, retention (default: all but day, economy-mix, admissions, admissions-traced, gateway, voice-offline, rest and retention)"
        );
    }
    // Named only: the admissions flood twice, each in a process of its own, without traces and
    // with every span exported to a real OTLP receiver.
    if std::env::args().skip(1).any(|a| a == "admissions-traced") {
        admissions::report_traced().await?;
    }
    println!("nats_server: {}", rig::nats_server_version().await?);
    if wanted("economy") {
        economy::report().await?;
    }
    // Named only: four replays of the mix through the whole stack take some minutes more.
    if std::env::args().skip(1).any(|a| a == "economy-mix") {
        economy_mix::report().await?;
    }
    if wanted("ingress") {
        ingress::report().await?;
    }
    // Before the floods: what they allocate stays in this process and would count as the captain's.
    if wanted("lanes") {
        lanes::report().await?;
    }
    // Named only: at today's drain rate its backlog takes many minutes to decide.
    if std::env::args().skip(1).any(|a| a == "admissions") {
        admissions::report().await?;
    }
    if std::env::args().skip(1).any(|a| a == "gateway") {
        gateway::report().await?;
    }
    // Named only: a minute and more of flood at Discord's pace.
    if std::env::args().skip(1).any(|a| a == "rest") {
        rest::report().await?;
    }
    // Named only: it writes millions of rows.
    if std::env::args().skip(1).any(|a| a == "retention") {
        retention::report().await?;
    }
    if wanted("voice") {
        voice::report().await?;
    }
    if std::env::args().skip(1).any(|a| a == "voice-offline") {
        voice::report_offline().await?;
    }
    // Named only: every service as a process of its own over a simulated day, at each scale.
    if std::env::args().skip(1).any(|a| a == "day") {
        let clankie = std::env::current_exe()?.with_file_name("clankie");
        anyhow::ensure!(
            clankie.exists(),
            "day runs the services from {}: build it first (cargo build --release -p clankie)",
            clankie.display()
        );
        clankie_bench::day::report(&clankie).await?;
    }
    Ok(())
}
