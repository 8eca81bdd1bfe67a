//! The audio body against the loopback voice server: real TLS, real AEAD, real Opus, real time.
//!
//! Each test plays the gateway's part itself (the loopback's `bot_voice` is what op 4 does), so
//! what is under test is songbird's driver as the body runs it and the loopback's voice wire.

mod bad_input;
mod dave;
mod rtp;

use std::path::PathBuf;
use std::time::Duration;

use clankie_discord_loopback::{Loopback, LoopbackConfig};
use clankie_voice_body::{Body, BodyConfig, BodyEvent, Connection, Segment};
use tokio::sync::mpsc::UnboundedReceiver;

pub const GUILD: u64 = 100;
pub const VOICE: u64 = 300;

/// A runtime whose voice connections trust the loopback's CA at `dir/voice-ca.pem`. The
/// variable is set before any thread exists (each test is its own process under nextest), and
/// songbird's connector reads the file at each connect, after the loopback has written it.
pub fn runtime() -> (tokio::runtime::Runtime, PathBuf) {
    let dir = std::env::temp_dir().join(format!("clankie-voice-body-test-{}", std::process::id()));
    // SAFETY: no other thread exists yet in this test process.
    unsafe { std::env::set_var("SSL_CERT_FILE", dir.join("voice-ca.pem")) };
    let _ = tracing_subscriber::registry().with(clankie_voice_body::drops::layer()).try_init();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a runtime");
    (rt, dir)
}

use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

pub async fn loopback(dir: PathBuf) -> Loopback {
    let config = LoopbackConfig { voice_dir: Some(dir), ..LoopbackConfig::default() };
    Loopback::serve(([127, 0, 0, 1], 0).into(), config).await.expect("the loopback starts")
}

/// The body, connected to the loopback's voice channel as op 4 would have it.
#[allow(dead_code)]
pub async fn connected(discord: &Loopback) -> (Body, UnboundedReceiver<BodyEvent>) {
    let (mut body, events) = Body::new(BodyConfig::default());
    let connection = connection(discord);
    body.connect(&connection).await.expect("the driver connects");
    (body, events)
}

pub fn connection(discord: &Loopback) -> Connection {
    let (session_id, token, endpoint) = discord.bot_voice(VOICE).expect("a voice channel");
    Connection { guild_id: GUILD, channel_id: VOICE, user_id: discord.config().bot_user_id, session_id, endpoint, token }
}

/// A spoken clip of espeak-ng, cut to `seconds`.
pub async fn clip(text: &str, seconds: f64) -> (Vec<i16>, u32) {
    let (mut pcm, rate) = Loopback::synthesize(text).await.expect("espeak-ng speaks");
    pcm.truncate((seconds * f64::from(rate)) as usize);
    (pcm, rate)
}

/// The next segment heard from `user`, skipping other events.
/// The next segment the body heard from anyone: its attribution is the caller's to check.
pub async fn next_heard(events: &mut UnboundedReceiver<BodyEvent>, within: Duration) -> Segment {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Ok(Some(BodyEvent::Heard(s))) => return s,
            Ok(Some(_)) => continue,
            Ok(None) => panic!("the body's events ended"),
            Err(_) => panic!("nothing heard within {within:?}"),
        }
    }
}

pub async fn heard_from(events: &mut UnboundedReceiver<BodyEvent>, user: u64, within: Duration) -> Segment {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Ok(Some(BodyEvent::Heard(s))) if s.user_id == user => return s,
            Ok(Some(_)) => continue,
            Ok(None) => panic!("the body's events ended"),
            Err(_) => panic!("nothing heard from user {user} within {within:?}"),
        }
    }
}
