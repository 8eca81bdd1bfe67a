//! `remind_`: reminders set by the model's `remind` tool and by `/clankie remind`, fired by
//! nats-server's own scheduler, and posted once by a lane turn, with every service its own
//! process against the loopback Discord. The server's clock cannot be moved, so every
//! reminder is a few seconds away.

use std::collections::BTreeMap;
use std::time::Duration;

use clankie_discord_loopback::interactions::{PressButton, RunCommand};
use clankie_discord_loopback::{Loopback, LoopbackConfig};
use clankie_model_standin::{Reply, Script};
use clankie_store::OwnerSettings;
use clankie_testkit::until;
use serde_json::{Value, json};
use tokio::process::Child;

use crate::chaos::{Cast, DumpLogsOnPanic, GENERAL, Nats, sigkill};

/// The words of the request a reminder's turn sends, and of no other.
const DUE: &str = "you set for them on";

/// Settings that let a lane change hands in seconds.
const FAST: [(&str, &str); 4] = [
    ("CLANKIE_LANE_LEASE_TTL_MS", "1500"),
    ("CLANKIE_INGRESS_ACK_WAIT_MS", "5000"),
    ("CLANKIE_OUTBOX_RELAY_MS", "1000"),
    ("CLANKIE_LOG", "warn,clankie_captain=debug"),
];

async fn cast_with(owner: &str) -> Cast {
    owned_by(Cast::start(LoopbackConfig::default()).await, owner).await
}

async fn owned_by(cast: Cast, owner: &str) -> Cast {
    let settings = OwnerSettings { owner_id: Some(Loopback::user_id(owner)), ..cast.store.owner_settings().await.unwrap() };
    cast.store.set_owner_settings(&settings).await.unwrap();
    cast
}

async fn gateway(cast: &Cast) -> Child {
    let gateway = cast.service("gateway", "gateway", None, &[]);
    assert!(cast.discord.wait_for_session(Duration::from_secs(30)).await, "the gateway never attached");
    gateway
}

/// `/clankie <subcommand>` by `author` in `channel`, answered: the answer's text.
async fn command(cast: &Cast, author: &str, channel: u64, subcommand: &str, options: Value) -> (u64, String) {
    let options: BTreeMap<String, Value> = serde_json::from_value(options).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let run = RunCommand { channel_id: channel, author: author.into(), subcommand: subcommand.into(), options: options.clone() };
        let started = cast.discord.run_command(run).unwrap();
        until("the answer edited in", Duration::from_secs(60), || {
            cast.discord.interaction(started.id).is_some_and(|r| !r.content.is_empty())
        })
        .await;
        let answer = cast.discord.interaction(started.id).unwrap();
        // A captain still starting is not listening yet: asked again, as a person would.
        if !answer.content.contains("can't do that right now") {
            return (started.id, answer.content);
        }
        assert!(tokio::time::Instant::now() < deadline, "no captain answered: {answer:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The posts in `channel` saying `words`.
fn posts_saying(discord: &Loopback, channel: u64, words: &str) -> Vec<clankie_discord_loopback::Post> {
    discord.posts(channel).into_iter().filter(|p| p.content.contains(words)).collect()
}

/// The reminder deliveries settled so far, with their outcomes.
async fn reminder_outcomes(cast: &Cast) -> Vec<(String, String)> {
    sqlx::query_as("SELECT delivery_id, outcome FROM deliveries WHERE delivery_id LIKE 'reminder:%' ORDER BY recorded_at")
        .fetch_all(cast.store.pool())
        .await
        .unwrap()
}

/// ada asks him by mention; the model calls `remind` with `arguments`, then says `ack`; when the
/// reminder comes due its turn answers `due_words` after thinking `think_ms`, streamed over about
/// half a second as a model writes: typing lights at the first words, and an answer that came
/// whole at once would race its own typing start to the gateway.
fn script_reminder(cast: &Cast, arguments: Value, ack: &str, due_words: &str, think_ms: u64) {
    cast.standin.script(Script::when("remind me", Reply::tool("remind", arguments)));
    cast.standin.script(Script::any(Reply::text(ack)));
    let chunk_chars = due_words.len().div_ceil(6).max(1);
    let due = Reply::Text { text: due_words.into(), chunk_chars, chunk_delay_ms: 100, first_delay_ms: think_ms, tail_delay_ms: 0 };
    cast.standin.script(Script::when(DUE, due));
}

#[tokio::test]
async fn remind_me_in_5_seconds_posts_once_in_the_room_5_s_later_typing_first_across_two_captains() {
    let cast = cast_with("owner").await;
    let _dump = DumpLogsOnPanic(cast.dir.path().to_owned(), &["captain-a", "captain-b", "gateway"]);
    let _captains = [cast.service("captain", "captain-a", None, &FAST), cast.service("captain", "captain-b", None, &FAST)];
    let _gateway = gateway(&cast).await;
    script_reminder(&cast, json!({ "what": "stretch", "when": "in 5 seconds" }), "Set.", "Time to stretch, ada!", 0);

    let asked = cast.mention("ada", "@Clankie remind me in 5 seconds to stretch");
    until("the answer", Duration::from_secs(30), || cast.discord.posts(GENERAL).iter().any(|p| p.reply_to == Some(asked))).await;
    let pending = cast.store.pending_reminders(None).await.unwrap();
    assert_eq!(pending.len(), 1, "{pending:?}");
    let due_at = pending[0].due_at_ms;
    let tool_result = cast.standin.requests().iter().any(|r| r.body.to_string().contains("I'll remind you"));
    assert!(tool_result, "the tool answered the model with the time it resolved to");

    until("the reminder's post", Duration::from_secs(30), || !posts_saying(&cast.discord, GENERAL, "Time to stretch").is_empty()).await;
    // Barrier: a second post would come from a second firing or a second turn within seconds.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let posts = posts_saying(&cast.discord, GENERAL, "Time to stretch");
    let late = posts[0].at_ms - due_at;
    let typed: Vec<i64> = cast.discord.typing(GENERAL).into_iter().filter(|t| *t >= due_at - 500 && *t <= posts[0].at_ms).collect();
    let outcomes = reminder_outcomes(&cast).await;
    println!(
        "remind 5 s: posts {}, posted {late:+} ms from due, typing {} time(s) before it, outcomes {outcomes:?}",
        posts.len(),
        typed.len()
    );
    assert_eq!(posts.len(), 1, "one post for one reminder, with two captains: {posts:?}");
    assert!((-2_000..=2_000).contains(&late), "posted {late} ms from its due time");
    assert!(!typed.is_empty(), "typing came first");
    assert_eq!(outcomes.len(), 1);
    assert_eq!(outcomes[0].1, "replied");
    let receipts = cast.store.receipts_for_delivery(&outcomes[0].0).await.unwrap();
    let kinds: Vec<&str> = receipts.iter().map(|r| r.receipt.kind.as_str()).collect();
    for kind in ["captain.reminder", "captain.admitted", "captain.run", "captain.turn"] {
        assert!(kinds.contains(&kind), "{kind} missing from {kinds:?}");
    }
    assert!(cast.store.pending_reminders(None).await.unwrap().is_empty(), "a one-off that fired waits no more");
}

#[tokio::test]
async fn remind_a_dm_reminder_goes_to_the_asker_only() {
    let cast = cast_with("owner").await;
    let _dump = DumpLogsOnPanic(cast.dir.path().to_owned(), &["captain", "gateway"]);
    let _captain = cast.service("captain", "captain", None, &FAST);
    let _gateway = gateway(&cast).await;
    script_reminder(&cast, json!({ "what": "call the vet", "when": "in 4 seconds", "dm": true }), "I'll DM you.", "Your vet call, ada.", 0);

    let asked = cast.mention("ada", "@Clankie remind me in 4 seconds to call the vet, by DM please");
    until("the answer", Duration::from_secs(30), || cast.discord.posts(GENERAL).iter().any(|p| p.reply_to == Some(asked))).await;
    until("a DM opened", Duration::from_secs(30), || !cast.discord.dms_opened().is_empty()).await;
    let ada = Loopback::user_id("ada");
    let opened = cast.discord.dms_opened();
    assert!(opened.iter().all(|(to, _)| *to == ada), "DMs opened only to the asker: {opened:?}");
    until("the DM", Duration::from_secs(30), || opened.iter().any(|(_, c)| !posts_saying(&cast.discord, *c, "vet").is_empty())).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let in_room = posts_saying(&cast.discord, GENERAL, "Your vet call");
    let dm: usize = opened.iter().map(|(_, c)| posts_saying(&cast.discord, *c, "Your vet call").len()).sum();
    println!("remind dm: DMs opened {opened:?}, posts in the DM {dm}, in the room {}", in_room.len());
    assert_eq!(dm, 1);
    assert!(in_room.is_empty(), "the room saw nothing of it: {in_room:?}");
    let typing_after: Vec<i64> = cast.discord.typing(GENERAL).into_iter().filter(|t| *t > cast.discord.posts(GENERAL)[0].at_ms).collect();
    assert!(typing_after.is_empty(), "no typing in the room for a DM: {typing_after:?}");
}

#[tokio::test]
async fn remind_cancelled_before_due_posts_nothing_and_forget_me_removes_the_persons_reminders() {
    let cast = cast_with("owner").await;
    let _dump = DumpLogsOnPanic(cast.dir.path().to_owned(), &["captain", "gateway"]);
    let _captain = cast.service("captain", "captain", None, &FAST);
    let _gateway = gateway(&cast).await;
    cast.standin.script(Script::when(DUE, Reply::text("Water the plants!")));

    let (_, set) = command(&cast, "ada", GENERAL, "remind", json!({ "what": "water the plants", "when": "in 4 seconds" })).await;
    assert!(set.starts_with("I'll remind you"), "{set}");
    let (list_id, list) = command(&cast, "ada", GENERAL, "reminders", json!({})).await;
    assert!(list.contains("water the plants"), "{list}");
    let id = cast.store.pending_reminders(None).await.unwrap()[0].reminder_id;
    let message = cast.discord.interaction(list_id).unwrap().message_id.unwrap();
    let press = PressButton { message_id: message, author: "ada".into(), custom_id: format!("reminder:cancel:{id}") };
    let pressed = cast.discord.press_button(press).unwrap();
    until("the cancel answered", Duration::from_secs(30), || {
        cast.discord.interaction(pressed.id).is_some_and(|r| r.content.contains("cancelled"))
    })
    .await;
    // Past its time and the firing's way to a post: nothing comes.
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert!(posts_saying(&cast.discord, GENERAL, "Water the plants").is_empty());
    assert!(reminder_outcomes(&cast).await.is_empty());

    // bob's reminder an hour away, then his forget: the row, his time zone and the schedule go.
    command(&cast, "bob", GENERAL, "timezone", json!({ "zone": "Europe/Berlin" })).await;
    let (_, set) = command(&cast, "bob", GENERAL, "remind", json!({ "what": "the dentist", "when": "in 1 hour" })).await;
    assert!(set.contains("Europe/Berlin"), "read in his zone: {set}");
    let bobs = cast.store.pending_reminders(Some(Loopback::user_id("bob"))).await.unwrap();
    assert_eq!(bobs.len(), 1);
    let (forget_id, _) = command(&cast, "bob", GENERAL, "forget-me", json!({})).await;
    until("the forget done", Duration::from_secs(60), || {
        cast.discord.interaction(forget_id).is_some_and(|r| !r.content.starts_with("Forgetting"))
    })
    .await;
    assert!(cast.store.pending_reminders(Some(Loopback::user_id("bob"))).await.unwrap().is_empty());
    assert_eq!(cast.store.time_zone(Loopback::user_id("bob")).await.unwrap(), None);
    assert_eq!(cast.store.reminder(bobs[0].reminder_id).await.unwrap(), None);
    assert_eq!(cast.bus.cancel_schedule(bobs[0].reminder_id).await.unwrap(), 0, "its schedule was purged by the forget");
    println!("remind cancel and forget: cancelled {id} posted nothing; forget removed reminder {}", bobs[0].reminder_id);
}

#[tokio::test]
async fn remind_the_captain_sigkilled_while_the_reminders_turn_runs_posts_once() {
    let cast = cast_with("owner").await;
    let _dump = DumpLogsOnPanic(cast.dir.path().to_owned(), &["captain-a", "captain-b", "gateway"]);
    let mut captains = [
        ("captain-a", cast.service("captain", "captain-a", None, &FAST)),
        ("captain-b", cast.service("captain", "captain-b", None, &FAST)),
    ];
    let _gateway = gateway(&cast).await;
    // The reminder's turn thinks 4 s: long enough to be killed in.
    script_reminder(&cast, json!({ "what": "feed the cat", "when": "in 3 seconds" }), "Will do.", "Feed the cat, ada.", 4_000);
    cast.standin.script(Script::when(DUE, Reply::text("Feed the cat, ada.")));

    let asked = cast.mention("ada", "@Clankie remind me in 3 seconds to feed the cat");
    until("the answer", Duration::from_secs(30), || cast.discord.posts(GENERAL).iter().any(|p| p.reply_to == Some(asked))).await;
    let lane = clankie_proto::LaneKey::Room { guild: cast.discord.config().guild_id, channel: GENERAL };
    let asked_requests = cast.standin.requests().len();
    cast.standin.wait_for_requests(asked_requests + 1, Duration::from_secs(30)).await;
    let owner = cast.store.lane(&lane).await.unwrap().and_then(|l| l.lease_owner).expect("a captain runs the reminder's turn");
    let (name, child) = captains.iter_mut().find(|(n, _)| *n == owner).expect("one of ours");
    sigkill(child).await;
    println!("remind kill: killed {name} while the reminder's turn ran");

    until("the reminder's post", Duration::from_secs(60), || !posts_saying(&cast.discord, GENERAL, "Feed the cat").is_empty()).await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    let posts = posts_saying(&cast.discord, GENERAL, "Feed the cat");
    let outcomes = reminder_outcomes(&cast).await;
    println!("remind kill: posts {}, outcomes {outcomes:?}", posts.len());
    assert_eq!(posts.len(), 1, "{posts:?}");
    assert_eq!(outcomes.len(), 1);
}

#[tokio::test]
async fn remind_a_cron_check_in_fires_on_each_of_three_due_times_and_stops_when_removed() {
    let cast = cast_with("owner").await;
    let _dump = DumpLogsOnPanic(cast.dir.path().to_owned(), &["captain", "gateway"]);
    let _captain = cast.service("captain", "captain", None, &FAST);
    let _gateway = gateway(&cast).await;
    for n in 1..=6 {
        cast.standin.script(Script::when(DUE, Reply::text(format!("Check-in {n}: how is the build?"))));
    }
    let (refused_id, refused) =
        command(&cast, "ada", GENERAL, "remind", json!({ "what": "the build", "when": "now", "every": "*/4 * * * * *" })).await;
    assert!(refused.contains("Only my owner"), "{refused_id}: {refused}");
    let (_, set) =
        command(&cast, "owner", GENERAL, "remind", json!({ "what": "how is the build?", "when": "now", "every": "*/4 * * * * *" })).await;
    assert!(set.contains("until it is cancelled"), "{set}");
    until("three check-ins", Duration::from_secs(40), || posts_saying(&cast.discord, GENERAL, "Check-in").len() >= 3).await;
    let id = cast.store.pending_reminders(None).await.unwrap()[0].reminder_id;
    let (list_id, _) = command(&cast, "owner", GENERAL, "reminders", json!({})).await;
    let message = cast.discord.interaction(list_id).unwrap().message_id.unwrap();
    let pressed = cast
        .discord
        .press_button(PressButton { message_id: message, author: "owner".into(), custom_id: format!("reminder:cancel:{id}") })
        .unwrap();
    until("the cancel answered", Duration::from_secs(30), || {
        cast.discord.interaction(pressed.id).is_some_and(|r| r.content.contains("cancelled"))
    })
    .await;
    // A firing already out when it was cancelled may still post; none after that.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after_cancel = posts_saying(&cast.discord, GENERAL, "Check-in").len();
    tokio::time::sleep(Duration::from_secs(9)).await;
    let posts = posts_saying(&cast.discord, GENERAL, "Check-in");
    let gaps: Vec<i64> = posts.windows(2).map(|w| w[1].at_ms - w[0].at_ms).collect();
    println!("remind cron: {} check-ins, {after_cancel} when cancelled settled, gaps {gaps:?} ms", posts.len());
    assert!(posts.len() >= 3);
    assert_eq!(posts.len(), after_cancel, "nothing fired after it was removed");
    let outcomes = reminder_outcomes(&cast).await;
    assert_eq!(outcomes.len(), posts.len(), "one delivery per firing: {outcomes:?}");
}

#[tokio::test]
async fn remind_a_past_time_a_room_the_person_cannot_write_in_and_the_per_person_limit_each_get_a_clear_line() {
    let cast = cast_with("owner").await;
    let _dump = DumpLogsOnPanic(cast.dir.path().to_owned(), &["captain", "gateway"]);
    let _captain = cast.service("captain", "captain", None, &[("CLANKIE_REMINDERS_PER_PERSON", "2")]);
    let _gateway = gateway(&cast).await;

    let (_, past) = command(&cast, "ada", GENERAL, "remind", json!({ "what": "lunch", "when": "2020-01-01 12:00" })).await;
    assert!(past.contains("That time has passed"), "{past}");

    let carl = Loopback::user_id("carl");
    cast.discord.set_member_overwrite(GENERAL, carl, 0, 1 << 11).unwrap();
    let (_, cannot) = command(&cast, "carl", GENERAL, "remind", json!({ "what": "lunch", "when": "in 1 hour" })).await;
    assert!(cannot.contains("can't write in this channel"), "{cannot}");
    let (_, by_dm) = command(&cast, "carl", GENERAL, "remind", json!({ "what": "lunch", "when": "in 1 hour", "dm": true })).await;
    assert!(by_dm.starts_with("I'll remind you") && by_dm.contains("by DM"), "a DM needs no right to write in the room: {by_dm}");

    for n in 1..=2 {
        let (_, ok) =
            command(&cast, "ada", GENERAL, "remind", json!({ "what": format!("errand {n}"), "when": format!("in {n} hours") })).await;
        assert!(ok.starts_with("I'll remind you"), "{ok}");
    }
    let (_, full) = command(&cast, "ada", GENERAL, "remind", json!({ "what": "errand 3", "when": "in 3 hours" })).await;
    assert!(full.contains("You have 2 reminders waiting already"), "{full}");
    let (_, far) = command(&cast, "bob", GENERAL, "remind", json!({ "what": "renew", "when": "2030-01-01 09:00" })).await;
    assert!(far.contains("days ahead"), "{far}");
    // A person's zone is theirs to set, or the owner's; nobody else's.
    let carl_id = carl.to_string();
    let (_, not_yours) = command(&cast, "ada", GENERAL, "timezone", json!({ "zone": "Asia/Tokyo", "user": carl_id })).await;
    assert!(not_yours.contains("Only my owner"), "{not_yours}");
    let (_, owners) = command(&cast, "owner", GENERAL, "timezone", json!({ "zone": "Asia/Tokyo", "user": carl_id })).await;
    assert!(owners.contains("Asia/Tokyo"), "{owners}");
    assert_eq!(cast.store.time_zone(carl).await.unwrap().as_deref(), Some("Asia/Tokyo"));
    let (_, unknown) = command(&cast, "ada", GENERAL, "timezone", json!({ "zone": "Mars/Olympus" })).await;
    assert!(unknown.contains("I don't know the time zone"), "{unknown}");
    println!("remind refusals: past {past:?}; cannot write {cannot:?}; limit {full:?}; horizon {far:?}; zone {not_yours:?}");
    let receipts: Vec<String> =
        sqlx::query_scalar("SELECT kind FROM receipts WHERE kind = 'captain.command'").fetch_all(cast.store.pool()).await.unwrap();
    assert!(receipts.len() >= 7);
}

#[tokio::test]
async fn remind_a_nats_node_killed_between_definition_and_due_time_in_a_3_node_cluster_posts_once() {
    let mut cast = owned_by(Cast::on_a_cluster(LoopbackConfig::default()).await, "owner").await;
    let _dump = DumpLogsOnPanic(cast.dir.path().to_owned(), &["captain-a", "captain-b", "gateway"]);
    let _captains = [cast.service("captain", "captain-a", None, &FAST), cast.service("captain", "captain-b", None, &FAST)];
    let _gateway = gateway(&cast).await;
    script_reminder(&cast, json!({ "what": "open the lobby", "when": "in 6 seconds" }), "Noted.", "Lobby time, ada!", 0);

    let asked = cast.mention("ada", "@Clankie remind me in 6 seconds to open the lobby");
    until("the answer", Duration::from_secs(30), || cast.discord.posts(GENERAL).iter().any(|p| p.reply_to == Some(asked))).await;
    let due_at = cast.store.pending_reminders(None).await.unwrap()[0].due_at_ms;
    // The node that leads the schedules stream, whose scheduler holds the reminder, goes.
    let mut stream = cast.bus.jetstream().get_stream(clankie_bus::SCHEDULES_STREAM).await.unwrap();
    let leader = stream.info().await.unwrap().cluster.clone().and_then(|c| c.leader).expect("the stream has a leader");
    let Nats::Cluster(cluster) = &mut cast.nats else { unreachable!("a cluster cast") };
    let node = cluster.node_named(&leader).expect("the leader is one of ours");
    let before_due = due_at - clankie_bus::now_ms();
    cluster.kill(node);

    until("the reminder's post", Duration::from_secs(60), || !posts_saying(&cast.discord, GENERAL, "Lobby time").is_empty()).await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    let posts = posts_saying(&cast.discord, GENERAL, "Lobby time");
    let outcomes = reminder_outcomes(&cast).await;
    println!(
        "remind cluster: killed {leader} (the schedules stream's leader) {before_due} ms before due; posts {}, posted {:+} ms from due, outcomes {outcomes:?}",
        posts.len(),
        posts[0].at_ms - due_at
    );
    assert_eq!(posts.len(), 1, "{posts:?}");
    assert_eq!(outcomes.len(), 1);
}
