//! `voice_room_lease`: two replicas, one owner per live room, and the room moves when it dies.

use std::time::Duration;

use super::{LEASE_TTL_MS, Rig, VOICE, audio_restored, has_code, id, keeping, until};

fn owners(rig: &Rig) -> Vec<(String, i64)> {
    rig.receipts("voice.room")
        .into_iter()
        .filter(|r| has_code(r, "owned"))
        .map(|r| (id(&r, "replica_pid").unwrap_or_default(), super::count(&r, "epoch").unwrap_or(0)))
        .collect()
}

#[tokio::test]
async fn voice_room_lease_one_owner_per_room_and_a_killed_owner_hands_it_over() {
    let rig = Rig::new().await;
    let a = rig.voice_floor("floor-a");
    let b = rig.voice_floor("floor-b");
    keeping(&rig, "floor-a").await;
    keeping(&rig, "floor-b").await;
    let pids = [a.id().unwrap(), b.id().unwrap()];

    rig.discord.voice_join(VOICE, "ada").unwrap();
    until("the room live", Duration::from_secs(10), || rig.live() == Some(VOICE)).await;
    rig.connected(Duration::from_secs(10)).await;
    // Several lease lifetimes pass: still exactly one owner, never a second taker.
    tokio::time::sleep(Duration::from_millis(LEASE_TTL_MS * 2)).await;
    let taken = owners(&rig);
    assert_eq!(taken.len(), 1, "one room, one owner: {taken:?}");
    let owner: u32 = taken[0].0.parse().unwrap();
    assert!(pids.contains(&owner));
    let survivor = *pids.iter().find(|p| **p != owner).unwrap();
    audio_restored(&rig, "ada", 0, Some(owner), Duration::from_secs(10)).await;
    // A line of the room's conversation heard by the first owner...
    let decisions = clankie_testkit::record::<clankie_proto::v1::FloorDecision>(&rig.bus, clankie_proto::Family::VoiceFloor).await;
    let remembered = rig.discord.user_message(clankie_discord_loopback::NewMessage {
        channel_id: VOICE,
        author: "ada".into(),
        content: "the password tonight is periwinkle".into(),
        ..Default::default()
    });
    until("the first owner heard it", Duration::from_secs(10), || decisions.all().iter().any(|d| d.delivery_id == remembered.to_string()))
        .await;

    let killed = clankie_bus::now_ms();
    assert!(std::process::Command::new("kill").args(["-KILL", &owner.to_string()]).status().unwrap().success());
    let bound = LEASE_TTL_MS as i64 + 5_000;
    let flowing = audio_restored(&rig, "ada", killed, Some(survivor), Duration::from_millis(bound as u64 + 2_000)).await;
    println!("voice_room_lease: audio restored by the survivor {} ms after SIGKILL (bound {bound} ms)", flowing - killed);
    assert!(flowing - killed <= bound, "the room moved and audio came back {} ms after the kill", flowing - killed);
    let taken = owners(&rig);
    assert_eq!(taken.len(), 2, "exactly one takeover: {taken:?}");
    assert_eq!(taken[1].0, survivor.to_string());
    assert!(taken[1].1 > taken[0].1, "the takeover fenced the dead owner's epoch");
    assert_eq!(rig.live(), Some(VOICE), "the room stayed live through the handover");

    // ...is in the new owner's context: the room's conversation is durable, not the dead owner's memory.
    rig.discord.user_message(clankie_discord_loopback::NewMessage {
        channel_id: VOICE,
        author: "ada".into(),
        content: "clankie, what was the password?".into(),
        ..Default::default()
    });
    let requests = rig.standin.wait_for_requests(1, Duration::from_secs(20)).await;
    assert!(requests.iter().any(|r| r.all_text().contains("periwinkle")), "the new owner's persona did not hear what was said before");
    drop((a, b));
}
