//! The owner's controls inside Discord through the whole stack: `/clankie` run as a member
//! of the loopback guild, buttons pressed, the answers read back as Discord keeps them.

use std::collections::BTreeMap;
use std::time::Duration;

use clankie_discord_loopback::interactions::{InteractionRecord, PressButton, RunCommand};
use clankie_model_standin::{Reply, Script};
use clankie_proto::{Family, v1};
use clankie_store::{MemoryStatus, OwnerSettings, Store};
use serde_json::{Value, json};

use crate::{GENERAL, Rig, until};

const LOBBIES: u64 = 201;
const VOICE: u64 = 300;
const DM: u64 = 900;

pub(crate) async fn owned_by(rig: &Rig, owner: &str) -> Store {
    let store = Store::connect(&rig.settings.database_url).await.unwrap();
    let settings =
        OwnerSettings { owner_id: Some(clankie_discord_loopback::Loopback::user_id(owner)), ..store.owner_settings().await.unwrap() };
    store.set_owner_settings(&settings).await.unwrap();
    store
}

/// Runs `/clankie <subcommand>` as `author` in `channel` and waits for its answer to be edited in.
pub(crate) async fn run(rig: &Rig, channel: u64, author: &str, subcommand: &str, options: &[(&str, Value)]) -> InteractionRecord {
    let options: BTreeMap<String, Value> = options.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect();
    let started = rig
        .sandbox
        .discord
        .run_command(RunCommand { channel_id: channel, author: author.into(), subcommand: subcommand.into(), options })
        .expect("a command");
    answered(rig, started.id).await
}

async fn answered(rig: &Rig, id: u64) -> InteractionRecord {
    until("the answer edited in", Duration::from_secs(20), || rig.sandbox.discord.interaction(id).is_some_and(|r| !r.content.is_empty()))
        .await;
    let record = rig.sandbox.discord.interaction(id).unwrap();
    println!("interaction {id}: first answer (type {}) after {} ms", record.answered_with, record.answered_after_ms);
    assert!(record.answered_with != 0 && record.answered_after_ms < 3_000, "not answered inside the 3 s: {record:?}");
    assert_eq!(record.refused_answers, 0, "a first answer came late or twice: {record:?}");
    record
}

/// Waits for a forget's final answer, edited over its first ("Forgetting you now").
async fn forgot(rig: &Rig, first: &InteractionRecord, within: Duration) -> InteractionRecord {
    assert!(first.content.starts_with("Forgetting you now"), "not the forget's first answer: {}", first.content);
    until("the forget's counts edited in", within, || {
        rig.sandbox.discord.interaction(first.id).is_some_and(|r| !r.content.starts_with("Forgetting you now"))
    })
    .await;
    rig.sandbox.discord.interaction(first.id).expect("the interaction")
}

fn custom_ids(components: &[Value]) -> Vec<String> {
    components
        .iter()
        .flat_map(|row| row["components"].as_array().cloned().unwrap_or_default())
        .filter_map(|b| b["custom_id"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn slash_each_command_is_answered_within_the_deadline_and_says_what_it_should() {
    let rig = Rig::new().await;
    let bus = rig.bus().await;
    let receipts = clankie_testkit::record::<v1::Receipt>(&bus, Family::Receipt).await;
    let store = owned_by(&rig, "ada").await;
    until("the command set registered", Duration::from_secs(10), || rig.sandbox.discord.registered_commands().0 > 0).await;
    let (registered, sets) = rig.sandbox.discord.registered_commands();
    assert_eq!((registered, sets.get(&None).cloned()), (1, Some(vec!["clankie".to_owned()])), "the command set, registered once");

    // `status` while a lane runs names that lane.
    rig.standin.script(Script::any(Reply::Text {
        text: "Lobby at eight.".into(),
        chunk_chars: 40,
        chunk_delay_ms: 0,
        first_delay_ms: 4_000,
        tail_delay_ms: 0,
    }));
    let asked = rig.say(GENERAL, "bob", "@Clankie is the lobby up?");
    until("the run", Duration::from_secs(10), || {
        receipts.all().iter().any(|r| r.kind == "captain.run" && r.delivery_id == asked.to_string())
    })
    .await;
    let status = run(&rig, LOBBIES, "ada", "status", &[]).await;
    assert!(status.ephemeral, "{status:?}");
    assert_eq!(status.answered_with, 5, "deferred, then edited in");
    assert!(status.content.contains(&format!("Running: room:100:{GENERAL}")), "{}", status.content);
    rig.wait_outcomes(GENERAL, &[asked]).await;

    // `memory` lists what waits, with buttons.
    let id = store.add_memory("Lobby nights are Fridays.", MemoryStatus::Proposed, "cli").await.unwrap();
    let memory = run(&rig, GENERAL, "ada", "memory", &[]).await;
    assert!(memory.content.contains(&format!("#{id} Lobby nights are Fridays.")), "{}", memory.content);
    let ids = custom_ids(&memory.components);
    assert!(ids.iter().any(|c| c.starts_with(&format!("memory:approve:{id}:"))) && ids.len() == 2, "{ids:?}");

    // `voice join` brings him into the voice channel.
    let joined = run(&rig, GENERAL, "ada", "voice join", &[("channel", json!(VOICE.to_string()))]).await;
    assert!(joined.content.contains("Joining voice channel 300"), "{}", joined.content);
    until("him in voice", Duration::from_secs(20), || rig.sandbox.gateway.live_voice_channel(100) == Some(VOICE)).await;
    let left = run(&rig, GENERAL, "ada", "voice leave", &[]).await;
    assert!(left.content.contains("Leaving voice"), "{}", left.content);
    until("him out of voice", Duration::from_secs(20), || rig.sandbox.gateway.live_voice_channel(100).is_none()).await;

    // `forget-me` is anyone's.
    let bobs_words = || crate::entries_holding(&store, "is the lobby up?");
    assert!(bobs_words().await > 0, "bob's words were never stored, so forgetting them proves nothing");
    let first = run(&rig, GENERAL, "bob", "forget-me", &[]).await;
    let forgot = forgot(&rig, &first, Duration::from_secs(20)).await;
    assert!(forgot.content.starts_with("Done"), "{}", forgot.content);
    assert_eq!(bobs_words().await, 0, "bob's words are still stored");

    // `quiet` hushes the room it is run in.
    let quiet = run(&rig, LOBBIES, "ada", "quiet", &[("minutes", json!(5))]).await;
    assert!(quiet.content.starts_with("Quiet here until"), "{}", quiet.content);
    let hushed = store.quiet_lanes().await.unwrap();
    assert!(hushed.iter().any(|(lane, _)| *lane == format!("room:100:{LOBBIES}")), "the room quiet was run in is not quiet: {hushed:?}");
    // Content-free evidence of every command.
    let codes: Vec<Vec<String>> = receipts.all().into_iter().filter(|r| r.kind == "captain.command").map(|r| r.codes.clone()).collect();
    for code in ["status", "memory", "voice_join", "voice_leave", "forget_me", "quiet"] {
        assert!(codes.iter().any(|c| c.first().map(String::as_str) == Some(code) && c.contains(&"done".to_owned())), "{code}: {codes:?}");
    }
}

#[tokio::test]
async fn slash_a_non_owner_running_an_owner_command_gets_an_ephemeral_refusal_and_nothing_changes() {
    let rig = Rig::new().await;
    let bus = rig.bus().await;
    let receipts = clankie_testkit::record::<v1::Receipt>(&bus, Family::Receipt).await;
    let store = owned_by(&rig, "ada").await;
    let id = store.add_memory("Gil runs the raids.", MemoryStatus::Proposed, "cli").await.unwrap();
    for (subcommand, options) in [("quiet", vec![("minutes", json!(5))]), ("memory", vec![]), ("status", vec![])] {
        let refused = run(&rig, GENERAL, "mallory", subcommand, &options).await;
        assert!(refused.ephemeral && refused.content.starts_with("Only my owner"), "{subcommand}: {refused:?}");
        assert!(refused.components.is_empty());
    }
    // A button of the owner's, pressed by someone else.
    let memory = run(&rig, GENERAL, "ada", "memory", &[]).await;
    let approve = custom_ids(&memory.components).into_iter().find(|c| c.starts_with("memory:approve")).unwrap();
    let press = rig
        .sandbox
        .discord
        .press_button(PressButton { message_id: memory.message_id.unwrap(), custom_id: approve, author: "mallory".into() })
        .unwrap();
    let pressed = answered(&rig, press.id).await;
    assert!(pressed.content.starts_with("Only my owner"), "{pressed:?}");
    assert!(store.quiet_lanes().await.unwrap().is_empty(), "a refused quiet changed the room");
    assert_eq!(store.memories(MemoryStatus::Proposed, 10).await.unwrap().iter().filter(|m| m.id == id).count(), 1);
    let refusals = receipts.all().into_iter().filter(|r| r.kind == "captain.command" && r.codes.contains(&"not_owner".to_owned())).count();
    assert_eq!(refusals, 4, "each refusal is a receipt with its code");
    let mention = rig.say(GENERAL, "bob", "@Clankie still there?");
    rig.standin.script(Script::any(Reply::text("Yes.")));
    rig.wait_outcomes(GENERAL, &[mention]).await;
    assert_eq!(rig.outcome(GENERAL, mention).as_deref(), Some("replied"));
}

#[tokio::test]
async fn button_a_proposed_memory_reaches_the_owners_dm_and_approve_works_once_and_not_after_its_lifetime() {
    let rig = Rig::with(&[("CLANKIE_BUTTON_LIFETIME_MS", "5000")]).await;
    let store = owned_by(&rig, "ada").await;
    rig.standin.script(Script::when("remember", Reply::tool("propose_memory", json!({ "fact": "The raid is on Thursdays (kestrel)." }))));
    rig.standin.script(Script::when("remember", Reply::text("I'll ask.")));
    let first = rig.say(GENERAL, "gil", "@Clankie remember the raid is on thursdays");
    rig.wait_outcomes(GENERAL, &[first]).await;

    let dm = |needle: &str| rig.sandbox.discord.messages(DM).into_iter().find(|m| m.bot && m.content.contains(needle));
    until("the owner's DM", Duration::from_secs(15), || dm("kestrel").is_some()).await;
    let asked = dm("kestrel").unwrap();
    // The loopback has one DM channel for everyone: whom it was opened with says whose DM it is.
    let ada = clankie_discord_loopback::Loopback::user_id("ada");
    let opened = rig.sandbox.discord.dms_opened();
    assert!(!opened.is_empty(), "no DM channel was opened");
    assert!(opened.iter().all(|&(to, channel)| to == ada && channel == DM), "a DM opened with someone but the owner ({ada}): {opened:?}");
    let buttons = custom_ids(&asked.components);
    assert_eq!(buttons.len(), 2, "{buttons:?}");
    let approve = buttons.iter().find(|c| c.starts_with("memory:approve")).unwrap().clone();
    // The same proposal listed by `/clankie memory`: a second message with its own buttons.
    let listed = run(&rig, GENERAL, "ada", "memory", &[]).await;
    let approve_listed = custom_ids(&listed.components).into_iter().find(|c| c.starts_with("memory:approve")).unwrap();
    let press = |message_id: u64, author: &str, custom_id: &str| {
        rig.sandbox.discord.press_button(PressButton { message_id, custom_id: custom_id.into(), author: author.into() }).unwrap()
    };
    let approved = answered(&rig, press(asked.id, "ada", &approve).id).await;
    assert_eq!(approved.answered_with, 6, "a button's answer updates its message");
    assert!(approved.content.contains("kestrel).") && approved.content.contains("approved"), "{approved:?}");
    assert!(custom_ids(&approved.components).is_empty(), "the decided proposal's buttons stay: {:?}", approved.components);
    assert!(store.memories(MemoryStatus::Approved, 10).await.unwrap().iter().any(|m| m.fact.contains("kestrel")));
    let again = answered(&rig, press(listed.message_id.unwrap(), "ada", &approve_listed).id).await;
    assert!(again.content.contains("already decided"), "{again:?}");

    // The next request of the warm lane holds the fact once.
    rig.standin.script(Script::any(Reply::text("Thursdays.")));
    let next = rig.say(GENERAL, "gil", "@Clankie when is the raid?");
    rig.wait_outcomes(GENERAL, &[next]).await;
    let last = rig.standin.requests().pop().unwrap();
    assert_eq!(last.count("The raid is on Thursdays (kestrel)."), 1);

    // A second proposal's button, pressed after its lifetime, changes nothing.
    rig.standin.script(Script::when("remember", Reply::tool("propose_memory", json!({ "fact": "Gil likes heron stew." }))));
    rig.standin.script(Script::when("remember", Reply::text("Noted.")));
    let second = rig.say(GENERAL, "gil", "@Clankie remember I like heron stew");
    rig.wait_outcomes(GENERAL, &[second]).await;
    until("the second DM", Duration::from_secs(15), || dm("heron").is_some()).await;
    let late = dm("heron").unwrap();
    let approve = custom_ids(&late.components).into_iter().find(|c| c.starts_with("memory:approve")).unwrap();
    let expires: i64 = approve.rsplit(':').next().unwrap().parse().unwrap();
    until("the button's lifetime", Duration::from_secs(10), || clankie_bus::now_ms() > expires + 50).await;
    let pressed = rig.sandbox.discord.press_button(PressButton { message_id: late.id, custom_id: approve, author: "ada".into() }).unwrap();
    let expired = answered(&rig, pressed.id).await;
    assert!(expired.content.contains("expired"), "{expired:?}");
    assert!(store.memories(MemoryStatus::Proposed, 10).await.unwrap().iter().any(|m| m.fact.contains("heron")), "a late press decided");
}

#[tokio::test]
async fn button_approving_one_of_three_proposals_leaves_the_other_two_buttons_working() {
    let rig = Rig::new().await;
    let store = owned_by(&rig, "ada").await;
    for fact in ["Lobby nights are Fridays (wren).", "Gil mains support (finch).", "The server resets at dawn (lark)."] {
        rig.standin.script(Script::when("remember", Reply::tool("propose_memory", json!({ "fact": fact }))));
    }
    rig.standin.script(Script::when("remember", Reply::text("I'll ask about all three.")));
    let asked = rig.say(GENERAL, "gil", "@Clankie remember three things");
    rig.wait_outcomes(GENERAL, &[asked]).await;
    let ids: Vec<i64> = store.memories(MemoryStatus::Proposed, 10).await.unwrap().iter().map(|m| m.id).collect();
    assert_eq!(ids.len(), 3, "one turn, three proposals");
    let (first, second, third) = (ids[0], ids[1], ids[2]);

    let list = run(&rig, GENERAL, "ada", "memory", &[]).await;
    let message_id = list.message_id.expect("the list is a message");
    assert_eq!(custom_ids(&list.components).len(), 6, "{:?}", list.components);
    let button = |record: &InteractionRecord, decision: &str, id: i64| {
        custom_ids(&record.components).into_iter().find(|c| c.starts_with(&format!("memory:{decision}:{id}:")))
    };
    let press = |custom_id: String| {
        rig.sandbox.discord.press_button(PressButton { message_id, custom_id, author: "ada".into() }).expect("the button is on the message")
    };
    let line = |content: &str, id: i64| content.lines().find(|l| l.starts_with(&format!("#{id} "))).map(str::to_owned);

    let approved = answered(&rig, press(button(&list, "approve", second).expect("#2's approve")).id).await;
    println!("after approving #{second}: {:?}", approved.content);
    assert!(line(&approved.content, second).is_some_and(|l| l.ends_with("— approved")), "{}", approved.content);
    for id in [first, third] {
        assert_eq!(line(&approved.content, id), line(&list.content, id), "another proposal's line changed");
        assert!(button(&approved, "approve", id).is_some() && button(&approved, "reject", id).is_some(), "#{id}'s buttons went");
    }
    assert!(button(&approved, "approve", second).is_none() && button(&approved, "reject", second).is_none(), "#{second}'s buttons stayed");
    assert_eq!(custom_ids(&approved.components).len(), 4);

    // The two left work, on the message as it now stands.
    let rejected = answered(&rig, press(button(&approved, "reject", third).expect("#3's reject")).id).await;
    assert!(line(&rejected.content, third).is_some_and(|l| l.ends_with("— rejected")), "{}", rejected.content);
    assert!(line(&rejected.content, second).is_some_and(|l| l.ends_with("— approved")), "{}", rejected.content);
    let last = answered(&rig, press(button(&rejected, "approve", first).expect("#1's approve")).id).await;
    assert!(custom_ids(&last.components).is_empty(), "{:?}", last.components);
    let status = |status| {
        let store = store.clone();
        async move { store.memories(status, 10).await.unwrap().iter().map(|m| m.id).collect::<Vec<i64>>() }
    };
    assert_eq!(status(MemoryStatus::Approved).await, [first, second]);
    assert_eq!(status(MemoryStatus::Rejected).await, [third]);
    assert!(status(MemoryStatus::Proposed).await.is_empty());
}

#[tokio::test]
async fn slash_quiet_5_makes_a_channel_silent_for_five_minutes_and_others_still_answer() {
    // A "minute" of quiet is 400 ms here.
    let rig = Rig::with(&[("CLANKIE_QUIET_MINUTE_MS", "400")]).await;
    let bus = rig.bus().await;
    let receipts = clankie_testkit::record::<v1::Receipt>(&bus, Family::Receipt).await;
    let store = owned_by(&rig, "ada").await;
    const MINUTE_MS: i64 = 400;
    rig.standin.script(Script::any(Reply::text("Here.")));
    let commanded_at = clankie_bus::now_ms();
    let quiet = run(&rig, GENERAL, "ada", "quiet", &[("minutes", json!(5))]).await;
    assert!(quiet.content.starts_with("Quiet here until"), "{}", quiet.content);
    let quiet_until = store.quiet_lanes().await.unwrap().into_iter().find(|(lane, _)| *lane == format!("room:100:{GENERAL}")).map(|q| q.1);
    let quiet_until = quiet_until.expect("the room is quiet");
    assert!(
        quiet_until >= commanded_at + 5 * MINUTE_MS,
        "quiet until {quiet_until}, less than five minutes ({} ms) after the command at {commanded_at}",
        5 * MINUTE_MS
    );
    let hushed = rig.say(GENERAL, "bob", "@Clankie is the quiet room hearing this?");
    let elsewhere = rig.say(LOBBIES, "bob", "@Clankie is the lobby channel hearing this?");
    rig.wait_outcomes(GENERAL, &[hushed]).await;
    rig.wait_outcomes(LOBBIES, &[elsewhere]).await;
    assert_eq!(rig.outcome(GENERAL, hushed).as_deref(), Some("silent"));
    assert_eq!(rig.outcome(LOBBIES, elsewhere).as_deref(), Some("replied"));
    let quiet_code = receipts
        .all()
        .into_iter()
        .any(|r| r.kind == "captain.outcome" && r.delivery_id == hushed.to_string() && r.codes.contains(&"quiet".to_owned()));
    assert!(quiet_code, "the silent outcome carries the quiet code");
    let requests = rig.standin.requests();
    assert!(requests.iter().all(|r| r.count("is the quiet room hearing this?") == 0), "the quiet room reached the model");
    assert!(requests.iter().any(|r| r.count("is the lobby channel hearing this?") > 0), "the other room never reached the model");
    let status = run(&rig, LOBBIES, "ada", "status", &[]).await;
    assert!(status.content.contains(&format!("Quiet in room:100:{GENERAL}")), "{}", status.content);

    // Five "minutes" on, the room speaks again.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !store.quiet_lanes().await.unwrap().is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "the quiet never ended");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let ended_at = clankie_bus::now_ms();
    assert!(ended_at >= commanded_at + 5 * MINUTE_MS, "the quiet ended {} ms after the command", ended_at - commanded_at);
    let again = rig.say(GENERAL, "bob", "@Clankie and now?");
    rig.wait_outcomes(GENERAL, &[again]).await;
    assert_eq!(rig.outcome(GENERAL, again).as_deref(), Some("replied"));
}

#[tokio::test]
async fn slash_voice_join_checks_the_room_list_before_op_4_and_a_second_listed_channel_moves_him_once() {
    use clankie_discord_loopback::ChannelSpec;
    let stage = ChannelSpec { id: 301, name: "Stage".into(), voice: true, ..Default::default() };
    let backroom = ChannelSpec { id: 302, name: "Backroom".into(), voice: true, ..Default::default() };
    let rig = Rig::with_channels(&[("CLANKIE_VOICE_ROOMS", "100:300,100:301")], vec![stage, backroom]).await;
    let _store = owned_by(&rig, "ada").await;
    let discord = &rig.sandbox.discord;
    // An unlisted channel: the keeper refuses it, and nothing sends op 4 for it.
    run(&rig, GENERAL, "ada", "voice join", &[("channel", json!("302"))]).await;
    // A listed one after it, through the same path: its op 4 is the barrier.
    run(&rig, GENERAL, "ada", "voice join", &[("channel", json!(VOICE.to_string()))]).await;
    until("him in the listed channel", Duration::from_secs(20), || rig.sandbox.gateway.live_voice_channel(100) == Some(VOICE)).await;
    let updates = discord.bot_voice_updates();
    assert!(!updates.contains(&(100, Some(302))), "op 4 into a channel CLANKIE_VOICE_ROOMS does not list: {updates:?}");
    assert_eq!(updates, [(100, Some(VOICE))], "one op 4, into the listed channel");

    // A second listed channel of the same guild: he moves there with one op 4, and stays.
    run(&rig, GENERAL, "ada", "voice join", &[("channel", json!("301"))]).await;
    until("him in the second channel", Duration::from_secs(20), || rig.sandbox.gateway.live_voice_channel(100) == Some(301)).await;
    // The owner's leave goes out as op 4 at once: whatever the move caused came before it.
    run(&rig, GENERAL, "ada", "voice leave", &[]).await;
    until("his leave", Duration::from_secs(20), || discord.bot_voice_updates().iter().skip(1).any(|u| u.1.is_none())).await;
    let after: Vec<(u64, Option<u64>)> = discord.bot_voice_updates().into_iter().skip(1).collect();
    let moves: Vec<_> = after.iter().take_while(|u| u.1.is_some()).copied().collect();
    assert_eq!(moves, [(100, Some(301))], "the move is one op 4 and he never went back: {after:?}");
    assert!(after.iter().all(|u| u.1 != Some(VOICE)), "he flipped back to the first channel: {after:?}");
}

#[tokio::test]
async fn slash_a_non_owners_voice_join_and_leave_are_refused_and_an_operators_are_done() {
    let stage = clankie_discord_loopback::ChannelSpec { id: 301, name: "Stage".into(), voice: true, ..Default::default() };
    let rig = Rig::with_channels(&[("CLANKIE_VOICE_ROOMS", "100:300,100:301")], vec![stage]).await;
    let store = owned_by(&rig, "ada").await;
    let olive = clankie_discord_loopback::Loopback::user_id("olive");
    store.set_owner_settings(&OwnerSettings { operators: vec![olive], ..store.owner_settings().await.unwrap() }).await.unwrap();
    let discord = &rig.sandbox.discord;
    let refused = run(&rig, GENERAL, "mallory", "voice join", &[("channel", json!(VOICE.to_string()))]).await;
    assert!(refused.ephemeral && refused.content.starts_with("Only my owner"), "{refused:?}");
    // The operator's join is the barrier: had mallory's gone out, its op 4 would be before it.
    let joined = run(&rig, GENERAL, "olive", "voice join", &[("channel", json!("301"))]).await;
    assert!(joined.content.starts_with("Joining voice channel"), "{joined:?}");
    until("him in the operator's channel", Duration::from_secs(20), || rig.sandbox.gateway.live_voice_channel(100) == Some(301)).await;
    assert_eq!(discord.bot_voice_updates(), [(100, Some(301))], "one op 4, the operator's");

    let refused = run(&rig, GENERAL, "mallory", "voice leave", &[]).await;
    assert!(refused.content.starts_with("Only my owner"), "{refused:?}");
    // The operator moves him next: had mallory's leave gone out, a leave would come before the move.
    run(&rig, GENERAL, "olive", "voice join", &[("channel", json!(VOICE.to_string()))]).await;
    until("him moved", Duration::from_secs(20), || rig.sandbox.gateway.live_voice_channel(100) == Some(VOICE)).await;
    let left = run(&rig, GENERAL, "olive", "voice leave", &[]).await;
    assert!(left.content.starts_with("Leaving voice"), "{left:?}");
    until("his leave", Duration::from_secs(20), || discord.bot_voice_updates().iter().any(|u| u.1.is_none())).await;
    let updates = discord.bot_voice_updates();
    assert_eq!(updates, [(100, Some(301)), (100, Some(VOICE)), (100, None)], "only the operator's join, move and leave reached Discord");
}

/// Bob runs `/clankie forget-me` in a room where ada used the same everyday words: bob's
/// messages, his answers to them and the memory proposed from them go; ada's messages, his
/// answers to her (in those same words), the memory proposed from hers and the owner's own
/// fact (sharing a word with bob's) stay byte for byte; and the room answers bob at once.
/// Experience events on the self stream with `name` among the participants.
async fn experiences_with(bus: &clankie_bus::Bus, name: &str) -> usize {
    let mut n = 0;
    bus.read_family(Family::SelfExperience, |_, payload| {
        let x = <v1::Experience as prost::Message>::decode(payload).expect("an experience");
        n += usize::from(x.participants.iter().any(|p| p == name));
    })
    .await
    .unwrap();
    n
}

/// A forget whose process died after the store forgot the person and before the streams did
/// (nothing erased from them): the store kept what the streams' erase had to find, so the
/// person's next forget-me erases his replies to them and their experiences too, although
/// the entries it would learn them from are withdrawn by then.
#[tokio::test]
async fn erase_a_forget_cut_off_before_the_streams_is_finished_by_the_next_one() {
    let rig = Rig::new().await;
    let store = owned_by(&rig, "owner").await;
    rig.standin.script(Script::when("bob-quokka", Reply::text("Noted: the quokka ferry leaves at nine.")));
    let bobs = rig.say(GENERAL, "bob", "@Clankie when does the ferry leave? bob-quokka");
    rig.wait_outcomes(GENERAL, &[bobs]).await;
    let bus = rig.bus().await;
    let reply = "the quokka ferry leaves at nine";
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while experiences_with(&bus, "bob").await == 0 {
        assert!(tokio::time::Instant::now() < deadline, "no experience with bob on the bus");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (reply_before, lived_before) = (crate::on_the_bus(&bus, reply).await, experiences_with(&bus, "bob").await);
    assert!(reply_before > 0 && lived_before > 0, "his reply and the experience were never on the bus");

    // The first forget: the store's part only, as a process killed before its erase leaves it.
    let bob = clankie_discord_loopback::Loopback::user_id("bob");
    let first = clankie_self::rewrite::forget_user(&store, bob, Duration::from_secs(20), |_| {}).await.unwrap();
    assert!(first.answers > 0 && !first.answered.is_empty() && !first.names.is_empty(), "{first:?}");
    assert_eq!(crate::on_the_bus(&bus, reply).await, reply_before, "nothing was erased from the streams yet");

    let again = run(&rig, GENERAL, "bob", "forget-me", &[]).await;
    let done = forgot(&rig, &again, Duration::from_secs(20)).await;
    let (reply_after, lived_after) = (crate::on_the_bus(&bus, reply).await, experiences_with(&bus, "bob").await);
    println!(
        "erase: after a forget cut off before the streams, the next one answered {:?}; his reply on the bus {reply_before} -> {reply_after}, experiences with bob {lived_before} -> {lived_after}",
        done.content
    );
    assert_eq!(reply_after, 0, "his reply to bob is still in the egress stream");
    assert_eq!(lived_after, 0, "an experience with bob is still in the self stream");
    let pending: (Vec<String>, Vec<String>) =
        sqlx::query_as("SELECT erase_answered, erase_names FROM forgotten_users WHERE author_id = $1")
            .bind(bob as i64)
            .fetch_one(store.pool())
            .await
            .unwrap();
    assert_eq!(pending, (vec![], vec![]), "the store still lists an erase as pending");
}

#[tokio::test]
async fn erase_bobs_forget_me_leaves_adas_words_the_owners_fact_and_his_answers_to_her() {
    let rig = Rig::new().await;
    let store = owned_by(&rig, "owner").await;
    // The same long words on both sides: "meeting", "tomorrow", "cancelled".
    rig.standin
        .script(Script::when("bob-quokka", Reply::tool("propose_memory", json!({ "fact": "Bob's meeting tomorrow is cancelled." }))));
    rig.standin.script(Script::when("bob-quokka", Reply::text("Noted: your meeting tomorrow is cancelled.")));
    // With a picture, which media stores in its root as the model is shown it.
    let bobs = rig.sandbox.discord.user_message(clankie_discord_loopback::NewMessage {
        channel_id: GENERAL,
        author: "bob".into(),
        content: "@Clankie my meeting tomorrow is cancelled, bob-quokka".into(),
        attachments: vec![clankie_discord_loopback::NewAttachment {
            filename: "agenda.png".into(),
            content_type: "image/png".into(),
            text: Some("bob-pixels".into()),
            ..Default::default()
        }],
        ..Default::default()
    });
    rig.wait_outcomes(GENERAL, &[bobs]).await;
    rig.standin
        .script(Script::when("ada-heron", Reply::tool("propose_memory", json!({ "fact": "Ada's meeting tomorrow was cancelled too." }))));
    rig.standin.script(Script::when("ada-heron", Reply::text("Your meeting tomorrow is cancelled as well, then.")));
    let adas = rig.say(GENERAL, "ada", "@Clankie was the meeting tomorrow cancelled? ada-heron");
    rig.wait_outcomes(GENERAL, &[adas]).await;
    // In another room mallory has him read a page whose address holds bob's words: his
    // stored tool call and its result must come out of bob's forget untouched.
    let url = "http://127.0.0.1:9/intranet/meeting-tomorrow-cancelled";
    rig.standin.script(Script::when("mallory-ibis", Reply::tool("read_page", json!({ "url": url }))));
    rig.standin.script(Script::when("mallory-ibis", Reply::text("That page would not open.")));
    let mallorys = rig.say(LOBBIES, "mallory", &format!("@Clankie read {url} for me, mallory-ibis"));
    rig.wait_outcomes(LOBBIES, &[mallorys]).await;
    store.add_memory("Water the plants tomorrow before the meeting.", MemoryStatus::Approved, "cli").await.unwrap();
    for m in store.memories(MemoryStatus::Proposed, 10).await.unwrap() {
        store.decide_memory(m.id, MemoryStatus::Proposed, MemoryStatus::Approved).await.unwrap();
    }
    // Everything not bob's, as stored before: it must come out of the forget byte for byte.
    // The lane's entries from ada's message on are hers and his answer to her.
    let not_bobs = || async {
        let entries: Vec<(i64, String)> = sqlx::query_as(
            "SELECT seq, body::text FROM session_entries
             WHERE seq >= (SELECT min(seq) FROM session_entries WHERE strpos(body::text, 'ada-heron') > 0) AND body->>'type' <> 'note'
             ORDER BY seq",
        )
        .fetch_all(store.pool())
        .await
        .unwrap();
        let memory: Vec<(i64, String)> = sqlx::query_as("SELECT id, fact FROM self_memory WHERE fact NOT LIKE 'Bob%' ORDER BY id")
            .fetch_all(store.pool())
            .await
            .unwrap();
        (entries, memory)
    };
    let (entries_before, memory_before) = not_bobs().await;
    assert!(crate::entries_holding(&store, "bob-quokka").await > 0, "bob's words were never stored");
    assert!(crate::entries_holding(&store, "Your meeting tomorrow is cancelled as well").await > 0, "his answer to ada was never stored");
    assert_eq!(memory_before.len(), 2, "ada's fact and the owner's: {memory_before:?}");
    let mallorys_call: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM session_entries WHERE body->>'type' = 'assistant' AND strpos(body::text, 'intranet/meeting-tomorrow-cancelled') > 0",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(mallorys_call, 1, "his tool call reading mallory's page was never stored");
    assert!(entries_before.len() >= 4, "ada's message and his answer to her: {entries_before:?}");

    let bus = rig.bus().await;
    let (bobs_before, adas_before) = (crate::on_the_bus(&bus, "bob-quokka").await, crate::on_the_bus(&bus, "ada-heron").await);
    assert!(bobs_before > 0 && adas_before > 0, "their messages were never on the bus ({bobs_before}, {adas_before})");
    // His replies, kept a day on the egress stream: to bob alone, and to ada.
    let (to_bob, to_ada) = ("Noted: your meeting tomorrow", "Your meeting tomorrow is cancelled as well");
    let (to_bob_before, to_ada_before) = (crate::on_the_bus(&bus, to_bob).await, crate::on_the_bus(&bus, to_ada).await);
    assert!(to_bob_before > 0 && to_ada_before > 0, "his replies were never on the bus ({to_bob_before}, {to_ada_before})");
    // The experiences each took part in, on the self stream.
    let lived_with = |name: &'static str| experiences_with(&bus, name);
    let (with_bob_before, with_ada_before) = (lived_with("bob").await, lived_with("ada").await);
    assert!(with_bob_before > 0 && with_ada_before > 0, "no experience with them on the bus ({with_bob_before}, {with_ada_before})");
    assert_eq!(crate::files_holding(&rig.attachment_root, b"bob-pixels"), 1, "bob's picture was never stored by media");
    let first = run(&rig, GENERAL, "bob", "forget-me", &[]).await;
    let forgot = forgot(&rig, &first, Duration::from_secs(20)).await;
    assert!(forgot.content.starts_with("Done"), "{}", forgot.content);
    println!("erase: bob's forget-me answered {:?}", forgot.content);
    let (bobs_after, adas_after) = (crate::on_the_bus(&bus, "bob-quokka").await, crate::on_the_bus(&bus, "ada-heron").await);
    println!("erase: events holding bob's words on the bus {bobs_before} -> {bobs_after}; ada's {adas_before} -> {adas_after}");
    assert_eq!(bobs_after, 0, "bob's words are still in a stream");
    assert_eq!(adas_after, adas_before, "ada's events left the streams");
    let (to_bob_after, to_ada_after) = (crate::on_the_bus(&bus, to_bob).await, crate::on_the_bus(&bus, to_ada).await);
    println!("erase: his replies on the bus: to bob {to_bob_before} -> {to_bob_after}; to ada {to_ada_before} -> {to_ada_after}");
    assert_eq!(to_bob_after, 0, "his reply to bob alone is still in the egress stream");
    assert_eq!(to_ada_after, to_ada_before, "his reply to ada left the egress stream");
    let (with_bob_after, with_ada_after) = (lived_with("bob").await, lived_with("ada").await);
    println!(
        "erase: experiences on the bus with bob {with_bob_before} -> {with_bob_after}; with ada {with_ada_before} -> {with_ada_after}"
    );
    assert_eq!(with_bob_after, 0, "an experience bob took part in is still in the self stream");
    assert_eq!(with_ada_after, with_ada_before, "an experience bob had no part in left the self stream");
    assert_eq!(crate::files_holding(&rig.attachment_root, b"bob-pixels"), 0, "bob's picture is still in the media root");
    assert_eq!(crate::entries_holding(&store, "bob-quokka").await, 0, "bob's message is still stored");
    assert_eq!(crate::entries_holding(&store, "Noted: your meeting").await, 0, "his answer to bob alone is still stored");
    assert_eq!(crate::entries_holding(&store, "Bob's meeting").await, 0, "his tool call proposing bob's fact is still stored");
    let bobs_memory: i64 =
        sqlx::query_scalar("SELECT count(*) FROM self_memory WHERE fact LIKE 'Bob%'").fetch_one(store.pool()).await.unwrap();
    assert_eq!(bobs_memory, 0, "the memory proposed from bob's message is still kept");
    let (entries_after, memory_after) = not_bobs().await;
    assert_eq!(memory_after, memory_before, "ada's or the owner's memory changed");
    assert_eq!(entries_after, entries_before, "an entry that was not bob's changed");

    // The room answers bob at once, with ada's words still in it.
    let from = rig.standin.requests().len();
    rig.standin.script(Script::when("anything else", Reply::text("That's all I have.")));
    let again = rig.say(GENERAL, "bob", "@Clankie anything else?");
    rig.wait_outcomes(GENERAL, &[again]).await;
    assert_eq!(rig.outcome(GENERAL, again).as_deref(), Some("replied"), "the room no longer answers bob");
    let request = rig.standin.requests().into_iter().nth(from).expect("the next request");
    assert_eq!(request.count("bob-quokka"), 0, "bob's words reached the next request");
    assert_eq!(request.count("ada-heron"), 1, "ada's words left the next request");
    assert_eq!(request.count("Your meeting tomorrow is cancelled as well, then."), 1, "his answer to ada left the next request");
}

/// The first request the stand-in got whose last message holds `needle`.
fn request_with(rig: &Rig, needle: &str) -> clankie_model_standin::RecordedRequest {
    rig.standin
        .requests()
        .into_iter()
        .find(|r| r.messages().last().is_some_and(|m| m.to_string().contains(needle)))
        .unwrap_or_else(|| panic!("no request answered {needle:?}"))
}

/// Bob's words travel inside other people's events: ada's reply quoting him, and the thread
/// started from his message. His forget reaches them there (no stream and no table holds
/// them), and after it neither ada's new reply to his old message nor a post in his thread,
/// both fetched fresh from Discord, brings them back into a request.
#[tokio::test]
async fn erase_bobs_words_quoted_by_ada_go_with_his_forget_and_no_reply_or_thread_post_brings_them_back() {
    const BOBS_WORDS: &str = "Pimblewick-quokka";
    let rig = Rig::new().await;
    let store = owned_by(&rig, "owner").await;
    let to_him_replying = |author: &str, content: &str, reply_to: Option<u64>, channel: u64| clankie_discord_loopback::NewMessage {
        channel_id: channel,
        author: author.into(),
        content: content.into(),
        mention: true,
        reply_to,
        ..Default::default()
    };
    let bobs = rig.say(GENERAL, "bob", &format!("my cat is called {BOBS_WORDS}"));
    rig.standin.script(Script::when("ada-heron", Reply::text("A fine name for a cat.")));
    let adas = rig.sandbox.discord.user_message(to_him_replying("ada", "what do you make of that name? ada-heron", Some(bobs), GENERAL));
    rig.wait_outcomes(GENERAL, &[adas]).await;
    assert!(request_with(&rig, "ada-heron").count(BOBS_WORDS) >= 1, "bob's words never reached the model before his forget");
    let thread = rig.sandbox.discord.start_thread(GENERAL, Some(bobs), "cat names", false);
    let bus = rig.bus().await;
    let (bobs_before, adas_before) = (crate::on_the_bus(&bus, BOBS_WORDS).await, crate::on_the_bus(&bus, "ada-heron").await);
    let rows_before = crate::rows_holding(&store, BOBS_WORDS).await;
    assert!(bobs_before >= 2, "bob's message and ada's quoting it were never both on the bus: {bobs_before}");
    assert!(!rows_before.is_empty(), "bob's words were never stored");

    let first = run(&rig, GENERAL, "bob", "forget-me", &[]).await;
    let forgot = forgot(&rig, &first, Duration::from_secs(20)).await;
    assert!(forgot.content.starts_with("Done"), "{}", forgot.content);
    let (bobs_after, adas_after) = (crate::on_the_bus(&bus, BOBS_WORDS).await, crate::on_the_bus(&bus, "ada-heron").await);
    let rows_after = crate::rows_holding(&store, BOBS_WORDS).await;
    println!(
        "erase: events holding bob's words {bobs_before} -> {bobs_after}, ada's {adas_before} -> {adas_after}; tables {rows_before:?} -> {rows_after:?}"
    );
    assert_eq!(bobs_after, 0, "bob's words are still in a stream, inside someone else's event");
    assert_eq!(adas_after, adas_before, "ada's events left the streams with bob's words");
    assert!(rows_after.is_empty(), "tables still hold bob's words: {rows_after:?}");
    assert_eq!(crate::files_holding(&rig.attachment_root, BOBS_WORDS.as_bytes()), 0, "a file holds bob's words");

    // After the forget, Discord still has his message: a new reply to it and a post in his
    // thread fetch it fresh, and the rule keeps it from the model.
    rig.standin.script(Script::when("ada-wren", Reply::text("Still a fine name.")));
    let again = rig.sandbox.discord.user_message(to_him_replying("ada", "and what about it now? ada-wren", Some(bobs), GENERAL));
    rig.wait_outcomes(GENERAL, &[again]).await;
    rig.standin.script(Script::when("ada-kite", Reply::text("Whiskers, maybe.")));
    let in_thread = rig.sandbox.discord.user_message(to_him_replying("ada", "any other names for it? ada-kite", None, thread));
    rig.wait_outcomes(thread, &[in_thread]).await;
    for needle in ["ada-wren", "ada-kite"] {
        let request = request_with(&rig, needle);
        assert_eq!(request.count(BOBS_WORDS), 0, "bob's words came back into the request answering {needle}");
        assert!(request.count(clankie_proto::audience::FORGOTTEN_WORDS) >= 1, "no marker where bob's words were ({needle})");
    }
}

const PETS_GATE: &str = "bob's words are in the run";

/// Ada's run is held while bob's message arrives and is absorbed into it; the run proposes a
/// fact drawn from bob's words and names him. The fact goes with bob's forget, and the owner's
/// DM about it from the egress stream; ada's forget (whose turn it was) leaves it.
#[tokio::test]
async fn erase_a_fact_drawn_from_bobs_absorbed_message_goes_with_his_forget_and_survives_adas() {
    let rig = Rig::new().await;
    let store = owned_by(&rig, "owner").await;
    let bus = rig.bus().await;
    let receipts = clankie_testkit::record::<v1::Receipt>(&bus, Family::Receipt).await;
    let bob = clankie_discord_loopback::Loopback::user_id("bob");
    let fact = "Bob's dog is called Rufus.";
    rig.standin.script(Script::when(
        "ada-heron",
        Reply::Gated {
            gate: PETS_GATE.into(),
            then: Box::new(Reply::tool("propose_memory", json!({ "fact": fact, "from": [bob.to_string()] }))),
        },
    ));
    rig.standin.script(Script::when("ada-heron", Reply::text("Rufus, then.")));
    let adas = rig.say(GENERAL, "ada", "@Clankie what are everyone's pets called? ada-heron");
    until("ada's run at the model", Duration::from_secs(20), || rig.standin.requests().iter().any(|r| r.count("ada-heron") > 0)).await;
    let bobs = rig.say(GENERAL, "bob", "@Clankie my dog is called Rufus, bob-quokka");
    let admitted = bobs.to_string();
    until("bob's message admitted", Duration::from_secs(20), || {
        receipts.all().iter().any(|r| r.kind == "captain.admitted" && r.delivery_id == admitted)
    })
    .await;
    rig.standin.open_gate(PETS_GATE);
    rig.wait_outcomes(GENERAL, &[adas, bobs]).await;
    assert_eq!(rig.outcome(GENERAL, bobs).as_deref(), Some("absorbed"), "bob's message was not absorbed into ada's run");
    let kept = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM self_memory WHERE fact = $1").bind(fact).fetch_one(store.pool()).await.unwrap()
    };
    assert_eq!(kept().await, 1, "the fact was never proposed");
    // The owner's DM about the fact holds its words, on the egress stream once posted.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while crate::on_the_bus(&bus, fact).await == 0 {
        assert!(tokio::time::Instant::now() < deadline, "the owner's DM about the fact never reached the egress stream");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let adas_forget = run(&rig, GENERAL, "ada", "forget-me", &[]).await;
    assert!(forgot(&rig, &adas_forget, Duration::from_secs(20)).await.content.starts_with("Done"));
    let after_ada = kept().await;
    let bobs_forget = run(&rig, GENERAL, "bob", "forget-me", &[]).await;
    assert!(forgot(&rig, &bobs_forget, Duration::from_secs(20)).await.content.starts_with("Done"));
    let after_bob = kept().await;
    let dm_after_bob = crate::on_the_bus(&bus, fact).await;
    println!(
        "erase: the fact drawn from bob's words: after ada's forget {after_ada}, after bob's {after_bob}; events holding it after bob's {dm_after_bob}"
    );
    assert_eq!(after_ada, 1, "ada's forget took a fact drawn from bob's words");
    assert_eq!(after_bob, 0, "bob's forget left a fact drawn from his words");
    assert_eq!(dm_after_bob, 0, "the owner's DM about the fact is still on the egress stream");
}

const TWENTY_GATE: &str = "the twenty have arrived";

/// Bob asks to be forgotten twenty times at once, while a run of his holds his lane (so the
/// forget is still running when the last arrives): one forget runs (one `captain.forget`
/// receipt), every command gets its first answer within 3 s, the other nineteen are told one
/// is running, and once it is done asking again runs anew.
#[tokio::test]
async fn erase_twenty_forget_mes_at_once_by_one_person_run_one_forget_and_each_is_answered_within_3_s() {
    let rig = Rig::new().await;
    let bus = rig.bus().await;
    let receipts = clankie_testkit::record::<v1::Receipt>(&bus, Family::Receipt).await;
    let store = owned_by(&rig, "owner").await;
    rig.standin.script(Script::any(Reply::text("Noted.")));
    let said = rig.say(GENERAL, "bob", "@Clankie my locker code is puffin-77");
    rig.wait_outcomes(GENERAL, &[said]).await;
    assert!(crate::entries_holding(&store, "puffin-77").await > 0, "bob's words were never stored");
    // A run of bob's held at a gate keeps the forget waiting for his lane, so all twenty arrive
    // while it runs, however slowly a busy machine hands them over (one finished already would
    // rightly let the next run anew).
    rig.standin.script(Script::when("hold-on", Reply::Gated { gate: TWENTY_GATE.into(), then: Box::new(Reply::text("Held.")) }));
    let held = rig.say(GENERAL, "bob", "@Clankie hold-on a moment");
    assert_eq!(rig.standin.wait_for_requests(2, Duration::from_secs(20)).await.len(), 2, "the held run never reached the model");

    let discord = &rig.sandbox.discord;
    let asked_at = std::time::Instant::now();
    let started: Vec<u64> = (0..20)
        .map(|_| {
            let c = RunCommand { channel_id: GENERAL, author: "bob".into(), subcommand: "forget-me".into(), options: BTreeMap::new() };
            discord.run_command(c).expect("a command").id
        })
        .collect();
    let mut first_answer_ms = Vec::new();
    let mut pending: Vec<u64> = started.clone();
    while !pending.is_empty() {
        assert!(asked_at.elapsed() < Duration::from_secs(20), "commands never answered: {pending:?}");
        pending.retain(|id| match discord.interaction(*id) {
            Some(r) if !r.content.is_empty() => {
                first_answer_ms.push(asked_at.elapsed().as_millis());
                false
            }
            _ => true,
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let slowest = first_answer_ms.iter().max().copied().unwrap_or_default();
    println!("erase: 20 forget-me's answered, the slowest first answer after {slowest} ms");
    assert!(slowest < 3_000, "a forget-me's first answer took {slowest} ms");
    let records: Vec<InteractionRecord> = started.iter().map(|id| discord.interaction(*id).expect("the interaction")).collect();
    assert!(records.iter().all(|r| r.answered_with == 5 && r.answered_after_ms < 3_000 && r.refused_answers == 0), "{records:?}");
    // The one that runs says "Forgetting you now", then its counts (by now, maybe, already).
    let (told, running): (Vec<&InteractionRecord>, Vec<&InteractionRecord>) =
        records.iter().partition(|r| r.content.starts_with("I'm already forgetting you"));
    assert_eq!((running.len(), told.len()), (1, 19), "{:?}", records.iter().map(|r| &r.content).collect::<Vec<_>>());
    let id = running[0].id;
    assert!(running[0].content.starts_with("Forgetting you now"), "the forget ended while bob's run held his lane: {}", running[0].content);
    rig.standin.open_gate(TWENTY_GATE);
    rig.wait_outcomes(GENERAL, &[held]).await;
    until("the forget's counts", Duration::from_secs(30), || discord.interaction(id).is_some_and(|r| r.content.starts_with("Done"))).await;
    let done = discord.interaction(id).expect("the interaction");
    assert!(done.content.starts_with("Done") && done.content.contains("2 message(s)"), "{}", done.content);
    assert_eq!(crate::entries_holding(&store, "puffin-77").await, 0, "bob's words are still stored");
    let forgets = || receipts.all().into_iter().filter(|r| r.kind == "captain.forget").count();
    until("the forget's receipt", Duration::from_secs(10), || forgets() >= 1).await;
    assert_eq!(forgets(), 1, "more than one forget ran");

    // Done, it can be asked again, and runs again.
    let again = run(&rig, GENERAL, "bob", "forget-me", &[]).await;
    let again = forgot(&rig, &again, Duration::from_secs(30)).await;
    assert!(again.content.starts_with("Done") && again.content.contains("0 message(s)"), "{}", again.content);
    until("the second forget's receipt", Duration::from_secs(10), || forgets() == 2).await;
}

const GATE: &str = "the forget is waiting";

async fn until_stored(store: &Store, words: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while crate::entries_holding(store, words).await == 0 {
        assert!(tokio::time::Instant::now() < deadline, "{words:?} was never stored");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Ada's forget-me while a run holds her message: the forget answers at once, waits for the
/// run to let go of the lane (its counts come only after), and then nothing attributed to her
/// is stored, her message and his answer to it included; bob's edit of his own message, made
/// meanwhile, is kept.
#[tokio::test]
async fn erase_while_a_run_holds_her_message_forgets_it_once_the_run_settles_and_keeps_bobs_edit() {
    let rig = Rig::new().await;
    let bus = rig.bus().await;
    let receipts = clankie_testkit::record::<v1::Receipt>(&bus, Family::Receipt).await;
    let store = owned_by(&rig, "owner").await;
    rig.standin.script(Script::when("bob-otter-seven", Reply::text("Seven, noted.")));
    let bobs = rig.say(GENERAL, "bob", "@Clankie the raid starts at seven, bob-otter-seven");
    rig.wait_outcomes(GENERAL, &[bobs]).await;
    rig.standin.script(Script::when(
        "ada-lynx",
        Reply::Gated { gate: GATE.into(), then: Box::new(Reply::text("The raid is at seven, ada-lynx-answer.")) },
    ));
    let adas = rig.say(GENERAL, "ada", "@Clankie when does the raid start? ada-lynx");
    until("her run", Duration::from_secs(10), || {
        receipts.all().iter().any(|r| r.kind == "captain.run" && r.delivery_id == adas.to_string())
    })
    .await;
    // Her message is in the lane already; his answer to it comes only once the gate opens.
    until_stored(&store, "when does the raid start? ada-lynx").await;
    assert_eq!(crate::entries_holding(&store, "ada-lynx-answer").await, 0, "his answer came before the gate opened");

    let first = run(&rig, GENERAL, "ada", "forget-me", &[]).await;
    assert!(first.content.starts_with("Forgetting you now"), "{}", first.content);
    assert!(rig.sandbox.discord.user_edit(bobs, "@Clankie the raid starts at eight, bob-otter-eight".into()));
    until("bob's edit consumed", Duration::from_secs(20), || receipts.all().iter().any(|r| r.kind == "gateway.change")).await;
    // The run still holds the lane: the forget has not finished.
    let waiting = rig.sandbox.discord.interaction(first.id).expect("the interaction");
    assert!(waiting.content.starts_with("Forgetting you now"), "the forget finished while the run held her message: {}", waiting.content);
    rig.standin.open_gate(GATE);
    rig.wait_outcomes(GENERAL, &[adas]).await;
    let done = forgot(&rig, &first, Duration::from_secs(60)).await;
    println!("erase: ada's forget during her run answered {:?}", done.content);
    assert!(done.content.starts_with("Done") && done.content.contains("1 message(s)"), "{}", done.content);
    until("bob's edit applied", Duration::from_secs(20), || {
        receipts.all().iter().any(|r| r.kind == "captain.changed" && r.delivery_id.starts_with("edit:"))
    })
    .await;

    assert_eq!(crate::entries_holding(&store, "ada-lynx").await, 0, "her message or his answer to her is still stored");
    let hers: i64 = sqlx::query_scalar("SELECT count(*) FROM session_entries WHERE authors @> ARRAY[$1::BIGINT]")
        .bind(clankie_discord_loopback::Loopback::user_id("ada") as i64)
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(hers, 0, "an entry attributed to her remains");
    assert!(crate::entries_holding(&store, "bob-otter-eight").await > 0, "bob's edit made meanwhile was lost");
    assert_eq!(crate::entries_holding(&store, "bob-otter-seven").await, 0, "bob's edit was reverted");
}
