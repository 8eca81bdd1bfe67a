//! `voice_rtp`: audio both ways through the real voice wire, in both AEAD modes.
//!
//! `CLANKIE_VOICE_CLIPS` sets how many different spoken clips go each way per mode (1 by
//! default, as CI runs it; the long mode is 8).

use std::time::Duration;

use clankie_discord_loopback::Loopback;
use clankie_pcm::{best_correlation, resample, trim};
use clankie_voice_body::songbird::driver::CryptoMode;
use clankie_voice_body::{Body, BodyConfig, HEARD_RATE};

use super::{VOICE, clip, connection, loopback, next_heard, runtime};

const LINES: [&str; 8] = [
    "Clankie, what is the capital of France? I think it is Paris.",
    "Paris is the capital of France, and it is lovely in spring.",
    "Could you remind me when the lobby opens tonight, please?",
    "Seven quick brown foxes jumped over the sleeping dogs.",
    "I would like a cup of tea with milk and two sugars.",
    "The meeting moved to Thursday afternoon at three o'clock.",
    "Turn left at the lighthouse and follow the coast road north.",
    "Numbers now: one, two, three, four, five, six, seven, eight.",
];

fn clips() -> usize {
    std::env::var("CLANKIE_VOICE_CLIPS").ok().and_then(|v| v.parse().ok()).unwrap_or(1).clamp(1, LINES.len())
}

const MODES: [(CryptoMode, &str); 2] = [(CryptoMode::Aes256Gcm, "aes256_gcm"), (CryptoMode::XChaCha20Poly1305, "xchacha20_poly1305")];

/// A body connected in `mode`; checks the voice server saw that mode selected.
async fn body_in(
    discord: &Loopback,
    mode: (CryptoMode, &str),
) -> (Body, tokio::sync::mpsc::UnboundedReceiver<clankie_voice_body::BodyEvent>) {
    let selected = format!("selected_{}", mode.1);
    let before = discord.voice().counters().get(selected.as_str()).copied().unwrap_or(0);
    let (mut body, events) = Body::new(BodyConfig { crypto_mode: mode.0, ..BodyConfig::default() });
    body.connect(&connection(discord)).await.expect("the driver connects");
    assert_eq!(discord.voice().counters().get(selected.as_str()).copied().unwrap_or(0), before + 1, "the connection selected {}", mode.1);
    (body, events)
}

#[test]
fn voice_rtp_clips_voiced_by_ada_reach_the_body_as_her_pcm_in_both_modes() {
    let (rt, dir) = runtime();
    rt.block_on(async {
        let discord = loopback(dir).await;
        let ada = discord.voice_join(VOICE, "ada").unwrap();
        // Someone else in the room whose stream he knows: a segment attributed by anything but
        // the speaker's own SSRC shows.
        let bob = discord.voice_join(VOICE, "bob").unwrap();
        assert_ne!(ada, bob);
        let mut worst = f64::MAX;
        for (mode, name) in MODES {
            let (_body, mut events) = body_in(&discord, (mode, name)).await;
            let (hello, rate) = clip(LINES[0], 1.0).await;
            discord.voice_speak(VOICE, "bob", &hello, rate).await.unwrap();
            assert_eq!(next_heard(&mut events, Duration::from_secs(10)).await.user_id, bob, "bob's line is his");
            for line in &LINES[..clips()] {
                let (source, rate) = clip(line, 2.0).await;
                assert!((source.len() as f64 / f64::from(rate) - 2.0).abs() < 0.01, "a 2-second clip");
                let frames = discord.voice_speak(VOICE, "ada", &source, rate).await.unwrap();
                assert!(frames >= 100, "every frame reached his connection ({frames})");
                let segment = next_heard(&mut events, Duration::from_secs(10)).await;
                assert_eq!(segment.user_id, ada, "attributed by the speaking update's SSRC");
                let correlation = best_correlation(&resample(&source, rate, HEARD_RATE), trim(&segment.pcm, 0), (HEARD_RATE / 4) as usize);
                println!("voice_rtp user→bot {name}: correlation {correlation:.3}, heard {} ms of 2000 ms", segment.duration().as_millis());
                assert!(correlation >= 0.8, "the heard PCM correlates {correlation:.3} with the source ({name})");
                worst = worst.min(correlation);
            }
        }
        println!("voice_rtp user→bot: worst correlation {worst:.3} over {} clips", clips() * MODES.len());
    });
}

#[test]
fn voice_rtp_pcm_played_by_the_body_arrives_at_the_loopback_intact_in_both_modes() {
    let (rt, dir) = runtime();
    rt.block_on(async {
        let discord = loopback(dir).await;
        discord.voice_join(VOICE, "ada").unwrap();
        let mut worst = f64::MAX;
        for (mode, name) in MODES {
            let (mut body, _events) = body_in(&discord, (mode, name)).await;
            for line in &LINES[..clips()] {
                let (source, rate) = clip(line, 2.5).await;
                let before = discord.voice().heard(VOICE).len();
                body.play(&source, rate).await.unwrap();
                let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
                let segment = loop {
                    if let Some(s) = discord.voice().heard(VOICE).into_iter().nth(before) {
                        break s;
                    }
                    assert!(
                        tokio::time::Instant::now() < deadline,
                        "the loopback heard nothing of what he played: {:?}",
                        discord.voice().counters()
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                };
                let expected = resample(&source, rate, HEARD_RATE);
                let heard = resample(trim(&segment.pcm, 0), segment.rate, HEARD_RATE);
                let correlation = best_correlation(&expected, &heard, (HEARD_RATE / 4) as usize);
                let (source_ms, heard_ms) = (expected.len() as f64 * 1000.0 / f64::from(HEARD_RATE), segment.duration_ms() as f64);
                println!("voice_rtp bot→loopback {name}: correlation {correlation:.3}, source {source_ms:.0} ms, heard {heard_ms:.0} ms");
                assert!(correlation >= 0.8, "what arrived correlates {correlation:.3} with what was played ({name})");
                assert!((heard_ms - source_ms).abs() <= source_ms * 0.10, "heard {heard_ms} ms of a {source_ms} ms source ({name})");
                worst = worst.min(correlation);
            }
        }
        println!("voice_rtp bot→loopback: worst correlation {worst:.3} over {} clips", clips() * MODES.len());
    });
}

#[test]
fn voice_rtp_without_the_loopback_ca_the_connection_is_refused() {
    // A voice server whose certificate nobody vouches for is not spoken to.
    let (rt, dir) = runtime();
    rt.block_on(async {
        let other = std::env::temp_dir().join(format!("clankie-voice-body-test-other-{}", std::process::id()));
        let discord = loopback(other).await;
        let config = || BodyConfig { connect_timeout: Duration::from_secs(3), ..Default::default() };
        let (mut body, _events) = Body::new(config());
        let refused = match body.connect(&connection(&discord)).await {
            Ok(()) => panic!("a voice server with an untrusted certificate was accepted"),
            Err(e) => format!("{e} ({e:?})"),
        };
        println!("voice_rtp untrusted: {refused}");
        assert!(refused.contains("UnknownIssuer"), "refused for its certificate, not for something else: {refused}");
        // The same body and settings against a voice server whose CA it trusts connect.
        let trusted = loopback(dir).await;
        let (mut body, _events) = Body::new(config());
        body.connect(&connection(&trusted)).await.expect("the trusted voice server is spoken to");
    });
}
