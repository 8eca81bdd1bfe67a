//! Hostile voice traffic: dropped, counted by kind, and nobody else's audio stops.

use std::time::Duration;

use clankie_pcm::{best_correlation, resample, trim};
use clankie_voice_body::HEARD_RATE;
use clankie_voice_body::drops::{self, Drop};

use super::{VOICE, clip, connected, heard_from, loopback, runtime};

const KINDS: [(&str, Drop); 5] = [
    ("garbage_json", Drop::GarbageJson),
    ("undersized", Drop::Undersized),
    ("unauthenticated", Drop::Unauthenticated),
    ("unknown_ssrc", Drop::UnknownSsrc),
    ("truncated_opus", Drop::BadOpus),
];

#[test]
fn voice_bad_input_is_dropped_and_counted_by_kind_while_bob_is_still_heard() {
    let (rt, dir) = runtime();
    rt.block_on(async {
        let discord = loopback(dir).await;
        discord.voice_join(VOICE, "ada").unwrap();
        let bob = discord.voice_join(VOICE, "bob").unwrap();
        let (_body, mut events) = connected(&discord).await;
        let before: Vec<u64> = KINDS.iter().map(|(_, d)| drops::dropped(*d)).collect();

        let (source, rate) = clip("Bob here, the weather is fine and the tea is hot.", 2.0).await;
        let speaking = discord.voice_speak(VOICE, "bob", &source, rate);
        let hostile = async {
            for round in 0..3 {
                for (kind, _) in KINDS {
                    discord.voice_inject(VOICE, "ada", kind).await.unwrap_or_else(|e| panic!("inject {kind} (round {round}): {e}"));
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        };
        let (frames, ()) = tokio::join!(speaking, hostile);
        assert!(frames.unwrap() >= 100);
        let segment = heard_from(&mut events, bob, Duration::from_secs(10)).await;
        let correlation = best_correlation(&resample(&source, rate, HEARD_RATE), trim(&segment.pcm, 0), (HEARD_RATE / 4) as usize);
        assert!(correlation >= 0.8, "bob's audio went on through the hostile traffic ({correlation:.3})");

        // The counts settle once the driver has read what was sent.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let grew: Vec<(&str, u64)> = KINDS.iter().zip(&before).map(|((name, d), b)| (*name, drops::dropped(*d) - b)).collect();
            println!("dropped by kind: {grew:?}");
            if grew.iter().all(|(_, n)| *n >= 3) {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "every kind was counted three times: {grew:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
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
