//! Hostile voice traffic: dropped, counted by kind, and nobody else's audio stops.

use std::time::Duration;

use clankie_pcm::{best_correlation, resample, trim};
use clankie_voice_body::HEARD_RATE;
use clankie_voice_body::drops::{self, Drop};

use super::{VOICE, clip, connected, heard_from, loopback, runtime};

/// Sends three rounds of `kind` toward him as ada's stream while bob talks; bob must still be
/// heard intact, and the drops of `counted` must grow by at least three.
fn hostile(kind: &'static str, counted: Drop) {
    let (rt, dir) = runtime();
    rt.block_on(async {
        let discord = loopback(dir).await;
        discord.voice_join(VOICE, "ada").unwrap();
        let bob = discord.voice_join(VOICE, "bob").unwrap();
        let (_body, mut events) = connected(&discord).await;
        let before = drops::dropped(counted);

        let (source, rate) = clip("Bob here, the weather is fine and the tea is hot.", 2.0).await;
        let speaking = discord.voice_speak(VOICE, "bob", &source, rate);
        let attack = async {
            for round in 0..3 {
                discord.voice_inject(VOICE, "ada", kind).await.unwrap_or_else(|e| panic!("inject {kind} (round {round}): {e}"));
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        };
        let (frames, ()) = tokio::join!(speaking, attack);
        assert!(frames.unwrap() >= 100);
        let segment = heard_from(&mut events, bob, Duration::from_secs(10)).await;
        let correlation = best_correlation(&resample(&source, rate, HEARD_RATE), trim(&segment.pcm, 0), (HEARD_RATE / 4) as usize);
        assert!(correlation >= 0.8, "bob's audio went on through {kind} ({correlation:.3})");

        // The driver reads what was sent before bob's last frame; the count settles there.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while drops::dropped(counted) - before < 3 {
            assert!(tokio::time::Instant::now() < deadline, "{kind} was counted {} times, not 3", drops::dropped(counted) - before);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        println!(
            "voice bad input {kind}: {} dropped as {}, bob heard at {correlation:.3}",
            drops::dropped(counted) - before,
            counted.as_str()
        );
    });
}

#[test]
fn voice_bad_input_garbage_json_on_the_voice_socket_is_dropped_and_counted() {
    hostile("garbage_json", Drop::GarbageJson);
}

#[test]
fn voice_bad_input_undersized_datagrams_are_dropped_and_counted() {
    hostile("undersized", Drop::Undersized);
}

#[test]
fn voice_bad_input_unauthenticated_datagrams_are_dropped_and_counted() {
    hostile("unauthenticated", Drop::Unauthenticated);
}

#[test]
fn voice_bad_input_audio_from_an_unknown_ssrc_is_dropped_and_counted() {
    hostile("unknown_ssrc", Drop::UnknownSsrc);
}

#[test]
fn voice_bad_input_a_truncated_opus_frame_is_dropped_and_counted() {
    hostile("truncated_opus", Drop::BadOpus);
}

#[test]
fn voice_bad_input_garbage_on_the_voice_socket_does_not_end_the_connection() {
    let (rt, dir) = runtime();
    rt.block_on(async {
        let discord = loopback(dir).await;
        let ada = discord.voice_join(VOICE, "ada").unwrap();
        let (_body, mut events) = connected(&discord).await;
        for _ in 0..20 {
            discord.voice_inject(VOICE, "ada", "garbage_json").await.unwrap();
        }
        let (source, rate) = clip("Still here.", 1.0).await;
        discord.voice_speak(VOICE, "ada", &source, rate).await.unwrap();
        let segment = heard_from(&mut events, ada, Duration::from_secs(10)).await;
        assert!(!segment.pcm.is_empty());
        assert_eq!(discord.voice().counters().get("identify"), Some(&1), "no reconnect was needed");
    });
}

#[test]
fn voice_rtp_a_user_who_leaves_is_forgotten_by_ssrc() {
    let (rt, dir) = runtime();
    rt.block_on(async {
        let discord = loopback(dir).await;
        let ada = discord.voice_join(VOICE, "ada").unwrap();
        let (body, mut events) = connected(&discord).await;
        let (source, rate) = clip("Goodbye everyone.", 1.0).await;
        discord.voice_speak(VOICE, "ada", &source, rate).await.unwrap();
        heard_from(&mut events, ada, Duration::from_secs(10)).await;
        assert!(body.speakers().iter().any(|(_, u)| *u == ada), "her SSRC was mapped while she spoke");

        discord.voice_leave(VOICE, "ada").unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while body.speakers().iter().any(|(_, u)| *u == ada) {
            assert!(tokio::time::Instant::now() < deadline, "her SSRC outlived her leaving (op 13)");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(discord.voice().counters().get("client_disconnect"), Some(&1));
    });
}
