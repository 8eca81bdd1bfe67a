//! `dave_`: the voice wire as Discord requires it since March 2026, DAVE end-to-end encryption,
//! against the loopback's delivery service, external sender and human members.

use std::time::Duration;

use clankie_discord_loopback::{DaveConfig, DaveView, Loopback, LoopbackConfig};
use clankie_pcm::{best_correlation, resample, trim};
use clankie_voice_body::drops::{self, Drop};
use clankie_voice_body::{Body, BodyConfig, BodyError, HEARD_RATE};

use super::{VOICE, clip, connected, connection, heard_from, loopback, runtime};

async fn until<T>(what: &str, within: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what} within {within:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn view(discord: &Loopback) -> DaveView {
    discord.voice().dave(VOICE).expect("the channel has a DAVE group")
}

/// Waits until the group reaches `epoch` with its transition executed and he is at it too.
async fn settled(discord: &Loopback, body: &Body, epoch: u64) -> DaveView {
    let v = until(&format!("the group at epoch {epoch} with its transition executed"), Duration::from_secs(10), || {
        let v = discord.voice().dave(VOICE)?;
        (v.epoch == epoch && v.executed.last().is_some_and(|(e, _)| *e == epoch)).then_some(v)
    })
    .await;
    until(&format!("his session at epoch {epoch}"), Duration::from_secs(5), || (body.dave().epoch == epoch).then_some(())).await;
    v
}

/// What the loopback hears of him playing `pcm`, and its correlation with it.
async fn played_and_heard(discord: &Loopback, body: &mut Body, pcm: &[i16], rate: u32) -> (f64, f64) {
    let before = discord.voice().heard(VOICE).len();
    body.play(pcm, rate).await.expect("he plays");
    let segment =
        until("the loopback hears what he played", Duration::from_secs(5), || discord.voice().heard(VOICE).into_iter().nth(before)).await;
    let expected = resample(pcm, rate, HEARD_RATE);
    let heard = resample(trim(&segment.pcm, 0), segment.rate, HEARD_RATE);
    (best_correlation(&expected, &heard, (HEARD_RATE / 4) as usize), segment.duration_ms() as f64)
}

#[test]
fn dave_round_trips_hold_both_ways_and_every_frame_of_his_was_end_to_end_encrypted() {
    let (rt, dir) = runtime();
    rt.block_on(async {
        let discord = loopback(dir).await;
        let ada = discord.voice_join(VOICE, "ada").unwrap();
        let (mut body, mut events) = connected(&discord).await;
        let v = settled(&discord, &body, 1).await;
        let handshake = v.bot_first_transition_ms.unwrap() - v.bot_selected_ms.unwrap();
        let state = body.dave();
        println!("dave handshake: Select Protocol to his first transition executed {handshake} ms; epoch {}", state.epoch);
        assert_eq!(state.protocol_version, 1);
        assert_eq!(state.privacy_code, v.privacy_code, "he shows the privacy code his human members show");
        assert_eq!(v.members, vec![ada.to_string(), discord.config().bot_user_id.to_string()], "ada made the group and added him");

        let (source, rate) = clip("Clankie, what is the capital of France? I think it is Paris.", 2.0).await;
        discord.voice_speak(VOICE, "ada", &source, rate).await.unwrap();
        let segment = heard_from(&mut events, ada, Duration::from_secs(10)).await;
        let to_him = best_correlation(&resample(&source, rate, HEARD_RATE), trim(&segment.pcm, 0), (HEARD_RATE / 4) as usize);

        let (line, rate) = clip("Paris is the capital of France, and it is lovely in spring.", 2.5).await;
        let (from_him, heard_ms) = played_and_heard(&discord, &mut body, &line, rate).await;
        let counts = view(&discord).counts;
        println!("dave round trip: ada→him correlation {to_him:.3}, him→ada {from_him:.3} ({heard_ms:.0} ms heard); {counts:?}");
        assert!(to_him >= 0.9, "what ada said reached him as her PCM ({to_him:.3})");
        assert!(from_him >= 0.9, "what he played reached the loopback intact ({from_him:.3})");
        assert!(counts.frames_encrypted_for_him >= 100, "ada's frames were end-to-end encrypted: {counts:?}");
        assert!(counts.frames_decrypted >= 100, "his frames carried the DAVE marker and decrypted: {counts:?}");
        assert_eq!(counts.frames_plain_after_transition, 0, "no frame of his went out unencrypted after the first transition");
        assert_eq!(counts.frames_undecryptable, 0);
        assert_eq!(drops::dropped(Drop::DaveUndecryptable), 0);
    });
}

#[test]
fn dave_a_second_human_joins_and_the_first_leaves_each_moves_the_epoch_and_audio_resumes_within_2_s() {
    let (rt, dir) = runtime();
    rt.block_on(async {
        let discord = loopback(dir).await;
        discord.voice_join(VOICE, "ada").unwrap();
        let (mut body, mut events) = connected(&discord).await;
        settled(&discord, &body, 1).await;
        let first_code = body.dave().privacy_code.expect("a privacy code");

        // He talks through both changes; the loopback's members must keep hearing him.
        let (long, rate) = clip(&"Seven quick brown foxes jumped over the sleeping dogs, and then they ran home. ".repeat(3), 9.0).await;
        let playing = body.play(&long, rate);
        let playing = tokio::spawn(playing);

        tokio::time::sleep(Duration::from_millis(1500)).await;
        let bob = discord.voice_join(VOICE, "bob").unwrap();
        let joined = settled(&discord, &body, 2).await;
        let second_code = body.dave().privacy_code.expect("a privacy code");
        assert_ne!(second_code, first_code, "the privacy code changes with the group");
        assert_eq!(Some(second_code.clone()), joined.privacy_code);
        let (said, said_rate) = clip("I would like a cup of tea with milk and two sugars.", 2.0).await;
        discord.voice_speak(VOICE, "bob", &said, said_rate).await.unwrap();
        let heard = heard_from(&mut events, bob, Duration::from_secs(8)).await;
        let bob_to_him = best_correlation(&resample(&said, said_rate, HEARD_RATE), trim(&heard.pcm, 0), (HEARD_RATE / 4) as usize);

        discord.voice_leave(VOICE, "ada").unwrap();
        let left = settled(&discord, &body, 3).await;
        let third_code = body.dave().privacy_code.expect("a privacy code");
        assert_ne!(third_code, second_code, "the privacy code changes again when ada leaves");
        assert_eq!(left.members.len(), 2, "bob and he are left: {:?}", left.members);
        discord.voice_speak(VOICE, "bob", &said, said_rate).await.unwrap();
        let again = heard_from(&mut events, bob, Duration::from_secs(8)).await;
        let bob_again = best_correlation(&resample(&said, said_rate, HEARD_RATE), trim(&again.pcm, 0), (HEARD_RATE / 4) as usize);

        playing.await.unwrap().expect("he played it all");
        // The loopback closes a heard segment once he has been quiet for its gap.
        let heard = until("the loopback closes what it heard of him", Duration::from_secs(3), || {
            let heard = discord.voice().heard(VOICE);
            (!heard.is_empty()).then_some(heard)
        })
        .await;
        let v = view(&discord);
        let heard_ms: i64 = heard.iter().map(|s| s.duration_ms()).sum();
        println!(
            "dave membership: epochs {:?}; resume after each change {:?} ms; bob→him {bob_to_him:.3} then {bob_again:.3}; him→members {heard_ms} ms heard of 9000 in {} segments; {:?}",
            v.executed.iter().map(|(e, _)| *e).collect::<Vec<_>>(),
            v.resume_ms,
            heard.len(),
            v.counts
        );
        assert!(bob_to_him >= 0.9 && bob_again >= 0.9, "bob was heard after both changes ({bob_to_him:.3}, {bob_again:.3})");
        assert_eq!(v.resume_ms.len(), 2, "his audio resumed after both changes: {:?}", v.resume_ms);
        assert!(v.resume_ms.iter().all(|ms| *ms <= 2000), "his audio resumed within 2 s of each transition: {:?}", v.resume_ms);
        assert!(heard_ms >= 8000, "the members heard {heard_ms} ms of his 9000 ms through both changes");
        assert_eq!(v.counts.frames_plain_after_transition, 0);
    });
}

#[test]
fn dave_a_broken_commit_brings_op_31_a_new_key_package_and_audio_back() {
    let (rt, dir) = runtime();
    rt.block_on(async {
        let discord = loopback(dir).await;
        let ada = discord.voice_join(VOICE, "ada").unwrap();
        let (mut body, mut events) = connected(&discord).await;
        settled(&discord, &body, 1).await;
        let invalid_before = drops::dropped(Drop::DaveCommitInvalid) + drops::dropped(Drop::DaveWelcomeInvalid);
        discord.voice_inject(VOICE, "ada", "corrupt_commit").await.unwrap();
        discord.voice_join(VOICE, "bob").unwrap();
        // Epoch 2 adds bob (his copy of the commit was broken), 3 removes him, 4 adds him again.
        let v = settled(&discord, &body, 4).await;
        let invalid = drops::dropped(Drop::DaveCommitInvalid) + drops::dropped(Drop::DaveWelcomeInvalid) - invalid_before;
        println!("dave broken commit: {:?}; body counted {invalid} invalid", v.counts);
        assert_eq!(v.counts.commits_corrupted, 1);
        assert_eq!(v.counts.invalid_commit_welcome, 1, "he answered the broken commit with op 31");
        assert_eq!(v.counts.key_packages, 2, "and sent a new key package");
        assert_eq!(invalid, 1, "the body counted the commit it could not use");
        assert_eq!(v.members.len(), 3, "ada, bob and he are in the group again: {:?}", v.members);

        let (source, rate) = clip("Could you remind me when the lobby opens tonight, please?", 2.0).await;
        discord.voice_speak(VOICE, "ada", &source, rate).await.unwrap();
        let segment = heard_from(&mut events, ada, Duration::from_secs(10)).await;
        let to_him = best_correlation(&resample(&source, rate, HEARD_RATE), trim(&segment.pcm, 0), (HEARD_RATE / 4) as usize);
        let (line, rate) = clip("The meeting moved to Thursday afternoon at three o'clock.", 2.5).await;
        let (from_him, _) = played_and_heard(&discord, &mut body, &line, rate).await;
        println!("dave broken commit: after recovery ada→him {to_him:.3}, him→members {from_him:.3}");
        assert!(to_him >= 0.9 && from_him >= 0.9, "audio recovered both ways ({to_him:.3}, {from_him:.3})");
    });
}

#[test]
fn dave_a_voice_server_requiring_more_than_he_offers_closes_him_with_4017() {
    let (rt, dir) = runtime();
    rt.block_on(async {
        let config =
            LoopbackConfig { voice_dir: Some(dir), dave: DaveConfig { on: true, required_version: 2 }, ..LoopbackConfig::default() };
        let discord = Loopback::serve(([127, 0, 0, 1], 0).into(), config).await.expect("the loopback starts");
        let (mut body, _events) = Body::new(BodyConfig { connect_timeout: Duration::from_secs(5), ..BodyConfig::default() });
        let started = std::time::Instant::now();
        let refused = body.connect(&connection(&discord)).await.expect_err("a client short of the DAVE version is refused");
        println!("dave 4017: {refused} ({refused:?})");
        assert!(matches!(&refused, BodyError::DaveRequired), "the body says DAVE is required: {refused:?}");
        let closes = discord.voice().counters().get("dave_required_closed").copied().unwrap_or(0);
        println!("dave 4017: closed {closes} times in {:?}", started.elapsed());
        assert!((1..=6).contains(&closes), "songbird gives up after its own few retries, not forever ({closes})");
    });
}
