//! `voice_rtp`: audio both ways through the real voice wire.

use std::time::Duration;

use clankie_discord_loopback::Loopback;
use clankie_pcm::{best_correlation, resample, trim};
use clankie_voice_body::HEARD_RATE;

use super::{VOICE, clip, connected, heard_from, loopback, runtime};

#[test]
fn voice_rtp_a_clip_voiced_by_ada_reaches_the_body_as_her_pcm() {
    let (rt, dir) = runtime();
    rt.block_on(async {
        let discord = loopback(dir).await;
        let ada = discord.voice_join(VOICE, "ada").unwrap();
        let (_body, mut events) = connected(&discord).await;
        let (source, rate) = clip("Clankie, what is the capital of France? I think it is Paris.", 2.0).await;
        assert!((source.len() as f64 / f64::from(rate) - 2.0).abs() < 0.01, "a 2-second clip");

        let frames = discord.voice_speak(VOICE, "ada", &source, rate).await.unwrap();
        assert!(frames >= 100, "every frame reached his connection ({frames})");
        let segment = heard_from(&mut events, ada, Duration::from_secs(10)).await;

        let expected = resample(&source, rate, HEARD_RATE);
        let heard = trim(&segment.pcm, 0);
        let correlation = best_correlation(&expected, heard, (HEARD_RATE / 4) as usize);
        println!(
            "voice_rtp user→bot: correlation {correlation:.3}, source {} ms, heard {} ms",
            expected.len() as u64 * 1000 / u64::from(HEARD_RATE),
            segment.duration().as_millis()
        );
        assert_eq!(segment.user_id, ada, "attributed by the speaking update's SSRC");
        assert!(correlation >= 0.8, "the heard PCM correlates {correlation:.3} with the source");
    });
}

#[test]
fn voice_rtp_pcm_played_by_the_body_arrives_at_the_loopback_intact() {
    let (rt, dir) = runtime();
    rt.block_on(async {
        let discord = loopback(dir).await;
        discord.voice_join(VOICE, "ada").unwrap();
        let (mut body, _events) = connected(&discord).await;
        let (source, rate) = clip("Paris is the capital of France, and it is lovely in spring.", 2.5).await;

        let t0 = std::time::Instant::now();
        body.play(&source, rate).await.unwrap();
        println!("played in {:?}", t0.elapsed());
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let segment = loop {
            if let Some(s) = discord.voice().heard(VOICE).into_iter().next() {
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
        println!("voice_rtp bot→loopback: correlation {correlation:.3}, source {source_ms:.0} ms, heard {heard_ms:.0} ms");
        assert!(correlation >= 0.8, "what arrived correlates {correlation:.3} with what was played");
        assert!((heard_ms - source_ms).abs() <= source_ms * 0.10, "heard {heard_ms} ms of a {source_ms} ms source");
    });
}

#[test]
fn voice_rtp_without_the_loopback_ca_the_connection_is_refused() {
    // A voice server whose certificate nobody vouches for is not spoken to.
    let (rt, _dir) = runtime();
    rt.block_on(async {
        let other = std::env::temp_dir().join(format!("clankie-voice-body-test-other-{}", std::process::id()));
        let discord = loopback(other).await;
        let (mut body, _events) =
            clankie_voice_body::Body::new(clankie_voice_body::BodyConfig { connect_timeout: Duration::from_secs(3), ..Default::default() });
        let result = body.connect(&super::connection(&discord)).await;
        assert!(result.is_err(), "a voice server with an untrusted certificate was accepted");
        let _ = Loopback::user_id("ada");
    });
}
