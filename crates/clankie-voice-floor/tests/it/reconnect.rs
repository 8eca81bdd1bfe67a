//! `voice_reconnect`: the voice socket closed under him, and the call moved.

use std::time::Duration;

use super::{GUILD, Rig, VOICE, audio_restored, until};

async fn live_with_audio(rig: &Rig) {
    rig.discord.voice_join(VOICE, "ada").unwrap();
    until("the room live", Duration::from_secs(10), || rig.live() == Some(VOICE)).await;
    rig.connected(Duration::from_secs(10)).await;
    audio_restored(rig, "ada", 0, None, Duration::from_secs(10)).await;
}

fn counter(rig: &Rig, name: &str) -> u64 {
    rig.discord.voice().counters().get(name).copied().unwrap_or(0)
}

#[tokio::test]
async fn voice_reconnect_a_4015_close_resumes_and_audio_flows_again() {
    let rig = Rig::new().await;
    let _floor = rig.keeping_floor("floor-a").await;
    live_with_audio(&rig).await;
    let identifies = counter(&rig, "identify");

    let dropped = clankie_bus::now_ms();
    assert!(rig.discord.voice().drop_socket(GUILD, 4015));
    until("the resume", Duration::from_secs(5), || counter(&rig, "resume") >= 1).await;
    let flowing = audio_restored(&rig, "ada", dropped, None, Duration::from_secs(5)).await;
    println!("voice_reconnect 4015: audio flowing again {} ms after the close", flowing - dropped);
    assert!(flowing - dropped <= 3_000, "audio came back {} ms after a 4015 close", flowing - dropped);
    assert_eq!(counter(&rig, "identify"), identifies, "a 4015 close resumed rather than identifying afresh");
}

#[tokio::test]
async fn voice_reconnect_a_4006_close_and_a_moved_call_reconnect_and_audio_flows_again() {
    let rig = Rig::new().await;
    let _floor = rig.keeping_floor("floor-a").await;
    live_with_audio(&rig).await;

    // 4006, session no longer valid: the driver ends, and a fresh op 4 brings a new session.
    let identifies = counter(&rig, "identify");
    let dropped = clankie_bus::now_ms();
    assert!(rig.discord.voice().drop_socket(GUILD, 4006));
    until("a new identify", Duration::from_secs(5), || counter(&rig, "identify") > identifies).await;
    let flowing = audio_restored(&rig, "ada", dropped, None, Duration::from_secs(5)).await;
    println!("voice_reconnect 4006: audio flowing again {} ms after the close", flowing - dropped);
    assert!(flowing - dropped <= 3_000, "audio came back {} ms after a 4006 close", flowing - dropped);
    assert!(rig.receipts("voice.connection").iter().any(|r| super::has_code(r, "disconnected")));

    // The call moved: a changed VOICE_SERVER_UPDATE (a new token) and he connects again with it.
    let identifies = counter(&rig, "identify");
    let moved = clankie_bus::now_ms();
    rig.discord.voice_server_update(false);
    until("an identify with the new token", Duration::from_secs(5), || counter(&rig, "identify") > identifies).await;
    let flowing = audio_restored(&rig, "ada", moved, None, Duration::from_secs(5)).await;
    println!("voice_reconnect server update: audio flowing again {} ms after it", flowing - moved);
    assert!(flowing - moved <= 3_000, "audio came back {} ms after the server update", flowing - moved);
    assert_eq!(counter(&rig, "identify_refused"), 0, "every identify carried a current session and token");

    // The voice tokens are credentials: none reached the voice floor's log (at debug).
    let log = rig.log("floor-a");
    assert!(log.contains("voice room taken"), "the log was read");
    for token in rig.discord.voice().tokens_issued() {
        assert!(!log.contains(&token), "a voice token reached the log");
    }
}

#[tokio::test]
async fn voice_reconnect_a_null_endpoint_is_waited_out() {
    let rig = Rig::new().await;
    let _floor = rig.keeping_floor("floor-a").await;
    live_with_audio(&rig).await;
    let identifies = counter(&rig, "identify");
    rig.discord.voice_server_update(true);
    // The whole bound the other reconnect tests allow for a reconnect: none may come meanwhile.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while tokio::time::Instant::now() < deadline {
        assert_eq!(counter(&rig, "identify"), identifies, "he connected to a voice server that went away");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let back = clankie_bus::now_ms();
    rig.discord.voice_server_update(false);
    until("an identify with the new server", Duration::from_secs(5), || counter(&rig, "identify") > identifies).await;
    audio_restored(&rig, "ada", back, None, Duration::from_secs(5)).await;
}
