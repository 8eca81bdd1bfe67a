//! `voice_join`: humans entering and leaving make the room live and not, and typed text follows.

use std::time::Duration;

use clankie_discord_loopback::NewMessage;
use clankie_proto::{Family, Subject, v1};
use clankie_testkit::record;

use super::{GRACE_MS, GUILD, Rig, VOICE, until};

fn him_in(rig: &Rig) -> Option<u64> {
    rig.members.all().into_iter().filter(|m| m.is_him).last().and_then(|m| m.channel_id)
}

#[tokio::test]
async fn voice_join_a_human_joining_brings_him_in_live_and_the_last_leaving_sees_him_out_after_the_grace() {
    let rig = Rig::new().await;
    let decisions = record::<v1::FloorDecision>(&rig.bus, Family::VoiceFloor).await;
    let text = record::<v1::Ingress>(&rig.bus, Family::IngressText).await;
    let _floor = rig.keeping_floor("floor-a").await;
    assert_eq!(rig.live(), None, "no room is live before anyone joins");

    // Before anyone is in voice, the channel's chat is a text lane.
    let before = rig.discord.user_message(NewMessage {
        channel_id: VOICE,
        author: "ada".into(),
        content: "anyone around?".into(),
        ..Default::default()
    });
    until("the text-lane ingress", Duration::from_secs(10), || text.all().iter().any(|i| i.delivery_id == before.to_string())).await;

    rig.discord.voice_join(VOICE, "ada").unwrap();
    until("him in the voice channel", Duration::from_secs(10), || him_in(&rig) == Some(VOICE)).await;
    until("the room live", Duration::from_secs(10), || rig.live() == Some(VOICE)).await;
    rig.connected(Duration::from_secs(10)).await;

    // While live, typed text in the channel's chat goes to the voice room, not a text lane.
    let during = rig.discord.user_message(NewMessage {
        channel_id: VOICE,
        author: "ada".into(),
        content: "hello room".into(),
        ..Default::default()
    });
    until("the floor's decision", Duration::from_secs(10), || decisions.all().iter().any(|d| d.delivery_id == during.to_string())).await;
    assert!(text.all().iter().all(|i| i.delivery_id != during.to_string()), "typed text in a live room opened a text lane");

    let left_at = clankie_bus::now_ms();
    rig.discord.voice_leave(VOICE, "ada").unwrap();
    until("the room no longer live", Duration::from_secs(15), || rig.live().is_none()).await;
    let ended = rig.sessions.all().last().unwrap().updated_at_ms;
    println!("voice_join: left {} ms after the last human (grace {GRACE_MS} ms)", ended - left_at);
    assert!(ended - left_at >= GRACE_MS as i64 - 50, "he left {} ms after the last human, before the grace", ended - left_at);
    until("him out of voice", Duration::from_secs(10), || him_in(&rig).is_none()).await;
    until("his voice connection closed", Duration::from_secs(10), || !rig.discord.voice().bot_connected(VOICE)).await;

    // Not live again: the chat is a text lane once more.
    let after =
        rig.discord.user_message(NewMessage { channel_id: VOICE, author: "ada".into(), content: "bye all".into(), ..Default::default() });
    until("the text-lane ingress", Duration::from_secs(10), || text.all().iter().any(|i| i.delivery_id == after.to_string())).await;
    assert!(decisions.all().iter().all(|d| d.delivery_id != after.to_string()), "the voice room heard typed text while not live");
    assert!(decisions.all().iter().all(|d| d.delivery_id != before.to_string()));
}

#[tokio::test]
async fn voice_join_a_human_back_within_the_grace_keeps_him_and_the_owner_can_summon_and_dismiss_him() {
    let rig = Rig::new().await;
    let _floor = rig.keeping_floor("floor-a").await;
    rig.discord.voice_join(VOICE, "ada").unwrap();
    until("the room live", Duration::from_secs(10), || rig.live() == Some(VOICE)).await;
    let sessions = rig.sessions.all().len();

    rig.discord.voice_leave(VOICE, "ada").unwrap();
    tokio::time::sleep(Duration::from_millis(GRACE_MS / 3)).await;
    rig.discord.voice_join(VOICE, "bob").unwrap();
    tokio::time::sleep(Duration::from_millis(GRACE_MS * 2)).await;
    assert_eq!(rig.live(), Some(VOICE), "he left although a human came back within the grace");
    // Sessions are vouched for again at each lease renewal; none in between said he had left.
    let since: Vec<_> = rig.sessions.all().into_iter().skip(sessions).collect();
    assert!(since.iter().all(|s| s.channel_id == Some(VOICE)), "the room flickered: {since:?}");

    // The owner dismisses him (what `clankie voice leave` publishes): he leaves though bob stays.
    let leave = v1::VoiceCommand { guild_id: GUILD, channel_id: None, reason: "owner".into(), epoch: 0, at_ms: clankie_bus::now_ms() };
    rig.bus.publish(&Subject::VoiceCommand { guild: GUILD }, &leave, None).await.unwrap();
    until("the room no longer live", Duration::from_secs(10), || rig.live().is_none()).await;
    // Another human joining would bring him in; the leave holds for the whole bound he is
    // otherwise given to go live.
    rig.discord.voice_join(VOICE, "cy").unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokio::time::Instant::now() < deadline {
        assert_eq!(rig.live(), None, "he came back while the owner's leave held");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Once the room has emptied, the owner summons him back into the empty room.
    rig.discord.voice_leave(VOICE, "bob").unwrap();
    rig.discord.voice_leave(VOICE, "cy").unwrap();
    let join =
        v1::VoiceCommand { guild_id: GUILD, channel_id: Some(VOICE), reason: "owner".into(), epoch: 0, at_ms: clankie_bus::now_ms() };
    rig.bus.publish(&Subject::VoiceCommand { guild: GUILD }, &join, None).await.unwrap();
    until("the room live on the owner's word", Duration::from_secs(10), || rig.live() == Some(VOICE)).await;
    // Nobody comes: he leaves after the grace.
    until("the summoned room let go", Duration::from_secs(15), || rig.live().is_none()).await;
}

/// A live voice room with ada in it, whose chat the floor hears: its floor, and what the floor
/// decided of each line.
async fn live_voice_chat(rig: &Rig) -> (tokio::process::Child, clankie_testkit::Recorder<v1::FloorDecision>) {
    let decisions = record::<v1::FloorDecision>(&rig.bus, Family::VoiceFloor).await;
    let floor = rig.keeping_floor("floor-a").await;
    rig.discord.voice_join(VOICE, "ada").unwrap();
    until("the room live", Duration::from_secs(10), || rig.live() == Some(VOICE)).await;
    rig.connected(Duration::from_secs(10)).await;
    (floor, decisions)
}

/// A line `author` types in the voice channel's chat; its message id.
fn typed(rig: &Rig, author: &str, content: &str) -> u64 {
    rig.discord.user_message(NewMessage { channel_id: VOICE, author: author.into(), content: content.into(), ..Default::default() })
}

/// The model requests of the room's answers so far (their prompt says the answer is spoken aloud).
fn spoken_requests(rig: &Rig) -> Vec<clankie_model_standin::RecordedRequest> {
    rig.standin.requests().into_iter().filter(|r| r.all_text().contains("spoken aloud")).collect()
}

/// An edit and a deletion in the live voice room's chat reach the room's ring through its owner:
/// the next room block holds the edited words, and neither the deleted line nor the words the
/// edit replaced.
#[tokio::test]
async fn message_edit_and_delete_in_the_live_voice_chat_change_the_next_room_block() {
    use clankie_model_standin::{Reply, Script};
    let rig = Rig::new().await;
    let (_floor, decisions) = live_voice_chat(&rig).await;
    let typed = |author: &str, content: &str| typed(&rig, author, content);
    let heard = |id: u64| decisions.all().iter().any(|d| d.delivery_id == id.to_string());
    let secret = typed("ada", "the gate code is heron-33");
    let lunch = typed("bob", "lunch is at noon");
    until("both lines in the room", Duration::from_secs(10), || heard(secret) && heard(lunch)).await;

    // The control: before the changes, the room block holds both lines as typed.
    rig.standin.script(Script::when("spoken aloud", Reply::text("Noted.")));
    typed("ada", "Clankie, what did we say?");
    until("the first answer's request", Duration::from_secs(30), || !spoken_requests(&rig).is_empty()).await;
    let before = spoken_requests(&rig).remove(0);
    assert!(before.count("heron-33") >= 1 && before.count("lunch is at noon") >= 1, "the room block lacked the typed lines");

    assert!(rig.discord.user_delete(secret));
    assert!(rig.discord.user_edit(lunch, "lunch is at one".into()));
    let changed = || rig.receipts("voice.changed");
    until("both changes in the room", Duration::from_secs(10), || changed().len() >= 2).await;
    rig.standin.script(Script::when("spoken aloud", Reply::text("Noted again.")));
    typed("bob", "Clankie, and now?");
    until("the second answer's request", Duration::from_secs(30), || spoken_requests(&rig).len() >= 2).await;
    let after = spoken_requests(&rig).remove(1);
    println!(
        "voice chat changes: {:?}; the next room block holds the deleted line {} time(s), the old words {}, the edit {}",
        changed().iter().map(|r| (r.codes.clone(), r.counts.get("ring_lines").copied())).collect::<Vec<_>>(),
        after.count("heron-33"),
        after.count("lunch is at noon"),
        after.count("lunch is at one")
    );
    assert_eq!(after.count("heron-33"), 0, "the deleted line is still in the room block");
    assert_eq!(after.count("lunch is at noon"), 0, "the words the edit replaced are still in the room block");
    assert!(after.count("lunch is at one") >= 1, "the edit never reached the room block");
}

/// A forget reaches a live voice room: the person's lines leave the ring it holds in memory, so
/// the next room block has none of them, and everyone else's stay. Forgotten as `clankie self
/// forget-user` does it: the store first, then the streams, whose erase tells the live rooms.
#[tokio::test]
async fn erase_a_forgotten_persons_lines_leave_the_live_voice_rooms_next_room_block() {
    use clankie_model_standin::{Reply, Script};
    let rig = Rig::new().await;
    let (_floor, decisions) = live_voice_chat(&rig).await;
    let typed = |author: &str, content: &str| typed(&rig, author, content);
    let heard = |id: u64| decisions.all().iter().any(|d| d.delivery_id == id.to_string());
    let (secret, other, lunch) =
        (typed("ada", "the gate code is heron-33"), typed("ada", "my cat is called pelican-9"), typed("bob", "lunch is at noon"));
    until("the three lines in the room", Duration::from_secs(10), || heard(secret) && heard(other) && heard(lunch)).await;

    // The control: before the forget, the room block holds all three lines. Ada asks, so his
    // spoken answer is to a run her words began.
    rig.standin.script(Script::when("spoken aloud", Reply::text("Noted.")));
    let adas_question = typed("ada", "Clankie, what did we say?");
    until("the first answer's request", Duration::from_secs(30), || !spoken_requests(&rig).is_empty()).await;
    let before = spoken_requests(&rig).remove(0);
    assert!(before.count("heron-33") >= 1 && before.count("pelican-9") >= 1, "the room block lacked ada's lines");
    let spoken_to = |delivery: u64| {
        let bus = rig.bus.clone();
        async move {
            let mut n = 0;
            bus.read_family(Family::VoiceSpeak, |_, payload| {
                use prost::Message as _;
                n += usize::from(v1::Speak::decode(payload).is_ok_and(|s| s.delivery_id == delivery.to_string()));
            })
            .await
            .unwrap();
            n
        }
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while spoken_to(adas_question).await == 0 {
        assert!(tokio::time::Instant::now() < deadline, "his spoken answer to ada never reached the voice stream");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let ada = clankie_discord_loopback::Loopback::user_id("ada");
    let store = clankie_store::Store::connect(rig.db.url()).await.unwrap();
    let forgotten = clankie_self::rewrite::forget_user(&store, ada, Duration::from_secs(20), |_| {}).await.unwrap();
    clankie_self::rewrite::erase_from_streams(&store, &rig.bus, ada, &forgotten).await.unwrap();
    let forgotten = || rig.receipts("voice.forgotten");
    until("the room's forget", Duration::from_secs(10), || !forgotten().is_empty()).await;
    rig.standin.script(Script::when("spoken aloud", Reply::text("Noted again.")));
    typed("bob", "Clankie, and now?");
    until("the second answer's request", Duration::from_secs(30), || spoken_requests(&rig).len() >= 2).await;
    let after = spoken_requests(&rig).remove(1);
    let ring = store.ring(GUILD, VOICE, 64).await.unwrap();
    let spoken_to_her = spoken_to(adas_question).await;
    println!(
        "voice forget: the room dropped {:?} ring line(s); his spoken answers to her left on the voice stream {spoken_to_her}; the next room block holds ada's lines {} and {} time(s), bob's {}; stored ring lines of hers {}",
        forgotten()[0].counts.get("ring_lines"),
        after.count("heron-33"),
        after.count("pelican-9"),
        after.count("lunch is at noon"),
        ring.iter().filter(|r| r.author_id == ada).count()
    );
    assert_eq!(forgotten()[0].counts.get("ring_lines"), Some(&3), "{:?}", forgotten());
    assert_eq!(spoken_to_her, 0, "his spoken answer to ada's question is still on the voice stream");
    assert_eq!((after.count("heron-33"), after.count("pelican-9")), (0, 0), "ada's lines are still in the room block");
    assert!(after.count("lunch is at noon") >= 1, "bob's line left the room block with hers");
    assert_eq!(ring.iter().filter(|r| r.author_id == ada).count(), 0, "her lines are still stored");
}

/// A voice floor whose connection to NATS is cut while a person is forgotten learns of the
/// forget once it is back: the forget is a fact in the audience bucket, read again by a watch
/// that takes up where it left off, not a signal that passes while the floor is away. The room
/// stays owned throughout (no new epoch), so it is the live ring that drops her lines.
#[tokio::test]
async fn erase_a_voice_floor_reconnecting_during_the_forget_drops_the_persons_lines_from_its_ring() {
    use clankie_model_standin::{Reply, Script};
    let rig = Rig::new().await;
    let relay = crate::Relay::start(rig.nats.port()).await;
    let decisions = record::<v1::FloorDecision>(&rig.bus, Family::VoiceFloor).await;
    let _floor = rig.voice_floor_with("floor-a", &[("CLANKIE_NATS_URL", relay.url())]);
    crate::keeping(&rig, "floor-a").await;
    rig.discord.voice_join(VOICE, "ada").unwrap();
    until("the room live", Duration::from_secs(10), || rig.live() == Some(VOICE)).await;
    rig.connected(Duration::from_secs(10)).await;
    let typed = |author: &str, content: &str| typed(&rig, author, content);
    let heard = |id: u64| decisions.all().iter().any(|d| d.delivery_id == id.to_string());
    let (secret, lunch) = (typed("ada", "the gate code is heron-33"), typed("bob", "lunch is at noon"));
    until("both lines in the room", Duration::from_secs(10), || heard(secret) && heard(lunch)).await;
    let owned = || rig.receipts("voice.room").into_iter().filter(|r| r.codes.iter().any(|c| c == "owned")).count();
    let owned_before = owned();

    relay.cut();
    let ada = clankie_discord_loopback::Loopback::user_id("ada");
    let store = clankie_store::Store::connect(rig.db.url()).await.unwrap();
    let forgotten = clankie_self::rewrite::forget_user(&store, ada, Duration::from_secs(20), |_| {}).await.unwrap();
    clankie_self::rewrite::erase_from_streams(&store, &rig.bus, ada, &forgotten).await.unwrap();
    relay.mend();
    let forgets = || rig.receipts("voice.forgotten");
    until("the room's forget, once the floor is back", Duration::from_secs(30), || !forgets().is_empty()).await;

    rig.standin.script(Script::when("spoken aloud", Reply::text("Noted.")));
    typed("bob", "Clankie, what did we say?");
    until("the answer's request", Duration::from_secs(30), || !spoken_requests(&rig).is_empty()).await;
    let request = spoken_requests(&rig).remove(0);
    println!(
        "voice forget while away: the room dropped {:?} ring line(s) once back; the room was taken {} time(s) before and {} after; the next room block holds ada's line {} time(s), bob's {}",
        forgets()[0].counts.get("ring_lines"),
        owned_before,
        owned(),
        request.count("heron-33"),
        request.count("lunch is at noon")
    );
    assert_eq!(owned(), owned_before, "the room was taken again: this is not the live ring's forget");
    assert_eq!(forgets()[0].counts.get("ring_lines"), Some(&1), "{:?}", forgets());
    assert_eq!(request.count("heron-33"), 0, "ada's line is still in the room block");
    assert!(request.count("lunch is at noon") >= 1, "bob's line left the room block with hers");
}
