//! `voice_room_lease`: two replicas, one owner per live room, and the room moves when it dies.

use std::time::Duration;

use clankie_model_standin::{Reply, Script};

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

#[tokio::test]
async fn voice_actor_an_owner_killed_with_the_room_empty_hands_typed_chat_back_and_leaves_no_stale_input() {
    use clankie_discord_loopback::NewMessage;
    use clankie_proto::{Family, v1};
    let rig = Rig::new().await;
    let _captain = rig.captain().await;
    rig.standin.script(Script::any(Reply::text("Nobody is in voice right now.")));
    let a = rig.voice_floor("floor-a");
    keeping(&rig, "floor-a").await;
    rig.discord.voice_join(VOICE, "ada").unwrap();
    until("the room live", Duration::from_secs(10), || rig.live() == Some(VOICE)).await;
    rig.connected(Duration::from_secs(10)).await;
    until("the gateway routes the voice chat to the room", Duration::from_secs(10), || {
        rig.gateway.live_voice_channel(super::GUILD) == Some(VOICE)
    })
    .await;
    // She leaves; within his grace, with the room empty, his owner dies.
    rig.discord.voice_leave(VOICE, "ada").unwrap();
    let killed = clankie_bus::now_ms();
    assert!(std::process::Command::new("kill").args(["-KILL", &a.id().unwrap().to_string()]).status().unwrap().success());
    let typed = clankie_testkit::record::<v1::Ingress>(&rig.bus, Family::IngressText).await;
    let say = |content: &str| {
        rig.discord.user_message(NewMessage { channel_id: VOICE, author: "bob".into(), content: content.into(), ..Default::default() })
    };
    // The dead owner's pulls are gone from the server (its connection closed), so what is typed
    // next waits in the room's stream for whoever keeps the room next.
    let stream = rig.bus.jetstream().get_stream("CLANKIE_ROOM_INPUT").await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while stream.consumer_info(format!("voice-floor-room-{}-{VOICE}", super::GUILD)).await.map(|i| i.num_waiting).unwrap_or(0) > 0 {
        assert!(tokio::time::Instant::now() < deadline, "the dead owner's pull never went");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Typed while the dead owner's session still stands: it goes to the room nobody keeps.
    let room = clankie_testkit::record::<v1::RoomInput>(&rig.bus, Family::IngressRoom).await;
    let stale = say("clankie, tell me about the stale line");
    until("the stale line routed to the room", Duration::from_secs(10), || room.all().iter().any(|i| i.delivery_id == stale.to_string()))
        .await;
    // ...where it waits, unread: nobody pulls the room's input.
    let keeper = format!("voice-floor-room-{}-{VOICE}", super::GUILD);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let info = stream.consumer_info(&keeper).await.unwrap();
        if info.num_pending >= 1 {
            assert_eq!((info.num_ack_pending, info.num_waiting), (0, 0), "someone pulled the room's input: {info:?}");
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the stale line never waited in the room's input: {info:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Within one lease time the session lapses by itself: typed chat goes to the text lane.
    until("the session lapsed", Duration::from_millis(LEASE_TTL_MS + 2_000), || rig.gateway.live_voice_channel(super::GUILD).is_none())
        .await;
    let lapsed = clankie_bus::now_ms() - killed;
    println!("voice_actor: the dead owner's session lapsed {lapsed} ms after SIGKILL (lease {LEASE_TTL_MS} ms)");
    assert!(lapsed <= LEASE_TTL_MS as i64 + 1_000, "typed chat went to a dead room for {lapsed} ms");
    let text = say("@Clankie is anyone in voice?");
    until("the typed line on the text lane", Duration::from_secs(10), || typed.all().iter().any(|i| i.delivery_id == text.to_string()))
        .await;
    assert!(typed.all().iter().all(|i| i.delivery_id != stale.to_string()), "the stale line went to the text lane, not the room");
    // The captain answers it in the channel's chat, as a text turn.
    until("the text lane's answer", Duration::from_secs(20), || rig.discord.posts(VOICE).iter().any(|p| p.reply_to == Some(text))).await;
    let answered = clankie_bus::now_ms() - killed;
    println!("voice_actor: typed chat answered by the text lane {answered} ms after SIGKILL");

    // A new owner hears only what is said from its taking of the room on.
    let decisions = clankie_testkit::record::<v1::FloorDecision>(&rig.bus, Family::VoiceFloor).await;
    let _b = rig.voice_floor("floor-b");
    keeping(&rig, "floor-b").await;
    rig.discord.voice_join(VOICE, "ada").unwrap();
    until("the room live again", Duration::from_secs(15), || rig.gateway.live_voice_channel(super::GUILD) == Some(VOICE)).await;
    let fresh = say("clankie, are you back?");
    until("the new owner heard the new line", Duration::from_secs(15), || {
        decisions.all().iter().any(|d| d.delivery_id == fresh.to_string())
    })
    .await;
    assert!(decisions.all().iter().all(|d| d.delivery_id != stale.to_string()), "the new owner was handed the dead owner's backlog");
}

#[tokio::test]
async fn voice_actor_publishes_held_12_s_with_a_10_s_room_lease_keep_one_owner_and_one_body() {
    // Every publish of the voice floor's (receipts, the live session) takes 12 s, as during a
    // held stream leader; the room lease lives 10 s.
    let slow = [("CLANKIE_FAULT_HOLD", "voice.publish=12000".to_owned()), ("CLANKIE_VOICE_LEASE_TTL_MS", "10000".to_owned())];
    let rig = Rig::new().await;
    let a = rig.voice_floor_with("floor-a", &slow);
    let b = rig.voice_floor_with("floor-b", &slow);
    keeping(&rig, "floor-a").await;
    keeping(&rig, "floor-b").await;
    let pids = [a.id().unwrap(), b.id().unwrap()];
    rig.discord.voice_join(VOICE, "ada").unwrap();
    rig.connected(Duration::from_secs(15)).await;
    let connected_at = clankie_bus::now_ms();
    // Three lease lifetimes with every publish held past the lease: he stays connected once.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while tokio::time::Instant::now() < deadline {
        assert!(rig.discord.voice().bot_connected(VOICE), "his voice connection dropped");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let counters = rig.discord.voice().counters();
    let identifies = counters.get("identify").copied().unwrap_or(0);
    let tokens = rig.discord.voice().tokens_issued().len();
    let holders: Vec<(String, i64)> = owners(&rig);
    println!(
        "voice_actor: 30 s after connecting ({connected_at}) with publishes held 12 s: lease holders {holders:?}, voice identifies {identifies}, tokens {tokens}"
    );
    assert_eq!(identifies, 1, "a second body connected: {counters:?}");
    assert_eq!(tokens, 1, "op 4 was asked again");
    assert_eq!(holders.len(), 1, "the room changed hands: {holders:?}");
    assert!(pids.iter().any(|p| p.to_string() == holders[0].0));
    // The hold fired: the owner's publishes were held, not merely asked to be.
    let owner = if holders[0].0 == pids[0].to_string() { "floor-a" } else { "floor-b" };
    let held = rig.log(owner).lines().filter(|l| l.contains("fault injected at voice.publish: holding 12000 ms")).count();
    println!("voice_actor: {owner} logged {held} held publishes");
    assert!(held >= 1, "the voice.publish hold never fired in {owner}, the owner:\n{}", rig.log(owner));
    drop((a, b));
}

#[tokio::test]
async fn voice_actor_with_every_publish_held_10_s_a_second_persons_line_is_decided_within_1_s() {
    // Every publish of the voice floor's waits 10 s, as during a held stream leader.
    let held = [("CLANKIE_FAULT_HOLD", "voice.publish=10000".to_owned())];
    let rig = Rig::new().await;
    let _floor = rig.voice_floor_with("floor-a", &held);
    keeping(&rig, "floor-a").await;
    rig.discord.voice_join(VOICE, "ada").unwrap();
    rig.connected(Duration::from_secs(20)).await;
    // The live session is a publish too, held past its own life, so the gateway would not route
    // the channel's chat here: the test puts the lines on the room's input as the gateway does.
    let line = |id: &str, author: &str, text: &str| clankie_proto::v1::RoomInput {
        delivery_id: id.into(),
        guild_id: super::GUILD,
        channel_id: VOICE,
        author_id: clankie_discord_loopback::Loopback::user_id(author),
        author_name: author.into(),
        source: clankie_proto::v1::RoomInputSource::Text as i32,
        text: text.into(),
        received_at_ms: clankie_bus::now_ms(),
        ..Default::default()
    };
    let input = clankie_proto::Subject::VoiceInput { guild: super::GUILD, channel: VOICE };
    // The room goes live (takes input) once connected; a line said before would wait for it.
    until("the room taking input", Duration::from_secs(20), || rig.log("floor-a").contains("room live: taking input")).await;
    // ada's line is decided first (not for him: no run), then bob asks him.
    rig.bus.publish(&input, &line("9001", "ada", "nice weather today"), None).await.unwrap();
    let asked_at = clankie_bus::now_ms();
    rig.bus.publish(&input, &line("9002", "bob", "Clankie, what time is it?"), None).await.unwrap();
    until("bob's line in a model request", Duration::from_secs(60), || {
        rig.standin.requests().iter().any(|r| r.count("what time is it") > 0)
    })
    .await;
    let reached = rig.standin.requests().iter().find(|r| r.count("what time is it") > 0).map(|r| r.at_ms).unwrap_or_default();
    let took = reached - asked_at;
    // The hold fired: the room's publishes were held while bob's line was decided, not merely
    // asked to be (a hold that never fires would leave nothing for the line to wait behind).
    let held = rig.log("floor-a").lines().filter(|l| l.contains("fault injected at voice.publish: holding 10000 ms")).count();
    println!("voice_actor: with every publish held 10 s ({held} held), bob's line reached the model {took} ms after he wrote it");
    assert!(held >= 1, "the voice.publish hold never fired:\n{}", rig.log("floor-a"));
    assert!(took < 1_000, "bob's line waited {took} ms behind the room's held publishes");
}
