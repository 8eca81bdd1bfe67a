//! Edits and deletions through the whole stack: the loopback sends MESSAGE_UPDATE and
//! MESSAGE_DELETE as Discord does, the gateway publishes them, the captain changes what the
//! lane holds.

use std::time::Duration;

use clankie_model_standin::{Reply, Script};
use clankie_proto::{Family, v1};
use clankie_store::Store;

use crate::{GENERAL, Rig, until};

/// The run's first answer, held until the test opens the gate: the run stays in its first call
/// while the test changes the room, however busy the machine.
fn held(text: &str) -> Reply {
    Reply::Gated { gate: GATE.into(), then: Box::new(Reply::text(text)) }
}

const GATE: &str = "the room changed";

async fn changed(receipts: &clankie_testkit::Recorder<v1::Receipt>, delivery_prefix: &str, n: usize) {
    until("the changes applied", Duration::from_secs(20), || {
        receipts.all().iter().filter(|r| r.kind == "captain.changed" && r.delivery_id.starts_with(delivery_prefix)).count() >= n
    })
    .await;
}

/// Waits until the captain has stored a change of message `id` (it does so as it consumes it).
async fn change_stored(store: &Store, id: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM message_changes WHERE delivery_id = $1")
            .bind(id.to_string())
            .fetch_one(store.pool())
            .await
            .expect("message changes");
        if n > 0 {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "the change of {id} was never stored");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until an edit reached the live run as a correction.
async fn steered_correction(receipts: &clankie_testkit::Recorder<v1::Receipt>) {
    until("the correction steered", Duration::from_secs(20), || {
        receipts.all().iter().any(|r| r.kind == "captain.correction" && r.flags.get("steered") == Some(&true))
    })
    .await;
}

/// Waits until the run answering `id` is in its first model call (held at the gate): the run
/// receipt comes before the request is built, and a change made in between would be read by
/// the first call itself instead of reaching the run as a change.
async fn in_its_first_call(rig: &Rig, receipts: &clankie_testkit::Recorder<v1::Receipt>, id: u64) {
    until("the run", Duration::from_secs(10), || receipts.all().iter().any(|r| r.kind == "captain.run" && r.delivery_id == id.to_string()))
        .await;
    let first = rig.standin.wait_for_requests(1, Duration::from_secs(20)).await;
    assert!(!first.is_empty(), "the run's first call never reached the model");
}

async fn stored_anywhere(store: &Store, needle: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM session_entries WHERE body::text LIKE '%' || $1 || '%'")
        .bind(needle)
        .fetch_one(store.pool())
        .await
        .expect("session entries")
}

#[tokio::test]
async fn message_delete_before_the_turn_reads_it_never_reaches_the_model() {
    let rig = Rig::new().await;
    let bus = rig.bus().await;
    let receipts = clankie_testkit::record::<v1::Receipt>(&bus, Family::Receipt).await;
    rig.standin.script(Script::any(held("Lobby 4 at eight.")));
    let first = rig.say(GENERAL, "ada", "@Clankie is the lobby up tonight?");
    in_its_first_call(&rig, &receipts, first).await;
    // Steered into the live run, then deleted before the run's next boundary reads it.
    let second = rig.say(GENERAL, "ada", "my locker code is quetzal-4471");
    rig.sandbox.discord.user_delete(second).then_some(()).expect("the loopback deletes it");
    changed(&receipts, "delete:", 1).await;
    rig.standin.open_gate(GATE);
    rig.wait_outcomes(GENERAL, &[first]).await;

    let store = Store::connect(&rig.settings.database_url).await.unwrap();
    assert_eq!(store.outcome(&second.to_string()).await.unwrap().map(|o| o.kind), Some(v1::OutcomeKind::Withdrawn));
    let requests = rig.standin.requests();
    assert!(requests.iter().all(|r| r.count("quetzal") == 0), "a deleted message reached the model");
    assert_eq!(requests.len(), 1, "the withdrawn steer cost no model call");
    assert_eq!(rig.sandbox.discord.posts(GENERAL).len(), 1);
    assert_eq!(stored_anywhere(&store, "quetzal").await, 0);
    assert_eq!(rig.outcome(GENERAL, first).as_deref(), Some("replied"));
}

/// A moderator's purge (MESSAGE_DELETE_BULK) of five messages waiting on a live run withdraws
/// each of them, as five deletions would.
#[tokio::test]
async fn message_delete_bulk_of_5_messages_withdraws_all_5() {
    let rig = Rig::new().await;
    let bus = rig.bus().await;
    let receipts = clankie_testkit::record::<v1::Receipt>(&bus, Family::Receipt).await;
    rig.standin.script(Script::any(held("Lobby 4 at eight.")));
    let first = rig.say(GENERAL, "ada", "@Clankie is the lobby up tonight?");
    in_its_first_call(&rig, &receipts, first).await;
    let purged: Vec<u64> = (0..5).map(|n| rig.say(GENERAL, "ada", &format!("spam-canary-{n} and another thing"))).collect();
    assert_eq!(rig.sandbox.discord.bulk_delete(GENERAL, &purged), purged, "the loopback purges all five");
    changed(&receipts, "delete:", 5).await;
    rig.standin.open_gate(GATE);
    rig.wait_outcomes(GENERAL, &[first]).await;

    let store = Store::connect(&rig.settings.database_url).await.unwrap();
    for id in &purged {
        assert_eq!(
            store.outcome(&id.to_string()).await.unwrap().map(|o| o.kind),
            Some(v1::OutcomeKind::Withdrawn),
            "purged message {id} was not withdrawn"
        );
    }
    let requests = rig.standin.requests();
    assert!(requests.iter().all(|r| r.count("spam-canary") == 0), "a purged message reached the model");
    assert_eq!(requests.len(), 1, "the withdrawn messages cost no model call");
    assert_eq!(stored_anywhere(&store, "spam-canary").await, 0);
    assert_eq!(rig.sandbox.discord.posts(GENERAL).len(), 1);
}

#[tokio::test]
async fn message_delete_after_the_turn_is_absent_from_the_next_cold_open_and_the_next_history_block() {
    let rig = Rig::new().await;
    let bus = rig.bus().await;
    let receipts = clankie_testkit::record::<v1::Receipt>(&bus, Family::Receipt).await;
    rig.standin.script(Script::any(Reply::text("Noted.")));
    // A line only history carries, then a turn that walks in with it.
    let aside = rig.say(GENERAL, "ada", "the raid password is marmoset-91");
    let kept = rig.say(GENERAL, "bob", "bring snacks, everyone");
    let opener = rig.say(GENERAL, "bob", "@Clankie hello");
    rig.wait_outcomes(GENERAL, &[opener]).await;
    assert_eq!(rig.standin.requests()[0].count("marmoset-91"), 1, "the history block carried the aside");
    // A delivery of hers that a turn reads.
    let asked = rig.say(GENERAL, "ada", "@Clankie my backup code is pangolin-22");
    rig.wait_outcomes(GENERAL, &[asked]).await;
    let store = Store::connect(&rig.settings.database_url).await.unwrap();
    assert!(stored_anywhere(&store, "pangolin-22").await > 0 && stored_anywhere(&store, "marmoset-91").await > 0);

    assert!(rig.sandbox.discord.user_delete(aside) && rig.sandbox.discord.user_delete(asked));
    changed(&receipts, "delete:", 2).await;
    assert_eq!(stored_anywhere(&store, "pangolin-22").await, 0, "the deleted delivery is still stored");
    assert_eq!(stored_anywhere(&store, "marmoset-91").await, 0, "the deleted history line is still stored");
    assert!(stored_anywhere(&store, "bring snacks").await > 0, "another person's history line went too");
    let _ = kept;

    // The next turn opens the rewritten tree from the store and reads none of it.
    let before = rig.standin.requests().len();
    let next = rig.say(GENERAL, "bob", "@Clankie what did ada say?");
    rig.wait_outcomes(GENERAL, &[next]).await;
    let request = rig.standin.requests().into_iter().nth(before).expect("the next request");
    assert_eq!(request.count("pangolin-22") + request.count("marmoset-91"), 0, "a deleted message reached the next request");
    assert_eq!(request.count("bring snacks, everyone"), 1);
    assert_eq!(request.count("what did ada say?"), 1);
    let run =
        receipts.all().into_iter().find(|r| r.kind == "captain.run" && r.delivery_id == next.to_string()).expect("the next run's receipt");
    assert!(run.flags.get("from_store").copied().unwrap_or(false), "the next run used a warm copy of the old words");

    // Cold, on a fresh tree: a new lane's first turn reads a line from Discord's history, and the
    // line is deleted while that turn runs. (Discord leaves a deleted message out of any later
    // fetch, so only what the lane itself keeps can bring it back.) What the lane stored of it
    // goes, and its next turn, opened from what it keeps rather than a fresh fetch, reads none of it.
    rig.standin.script(Script::when("ocelot-55", held("Hi.")));
    let fresh = rig.standin.requests().len();
    let deleted_during_the_turn = rig.say(201, "ada", "the vault pin is ocelot-55");
    let there = rig.say(201, "bob", "and the snacks");
    let cold = rig.say(201, "bob", "@Clankie hi");
    let requests = rig.standin.wait_for_requests(fresh + 1, Duration::from_secs(30)).await;
    assert_eq!(requests[fresh].count("ocelot-55"), 1, "the cold open's history block carried the line");
    assert!(rig.sandbox.discord.user_delete(deleted_during_the_turn));
    // The run holds the line in its history block, so the deletion is applied once it is over:
    // the run goes on once the captain has the deletion.
    change_stored(&store, deleted_during_the_turn).await;
    rig.standin.open_gate(GATE);
    changed(&receipts, "delete:", 3).await;
    rig.wait_outcomes(201, &[cold]).await;
    assert_eq!(stored_anywhere(&store, "ocelot-55").await, 0, "the line deleted during the cold turn is still stored");
    assert!(stored_anywhere(&store, "and the snacks").await > 0, "the other line of the history block went too");
    let before = rig.standin.requests().len();
    let later = rig.say(201, "bob", "@Clankie anything new?");
    rig.wait_outcomes(201, &[later]).await;
    let request = rig.standin.requests().into_iter().nth(before).expect("the later request");
    assert_eq!(request.count("ocelot-55"), 0, "the deleted line reached the lane's next request");
    assert_eq!(request.count("and the snacks"), 1, "the lane's next request reads its kept history");
    let run = receipts.all().into_iter().find(|r| r.kind == "captain.run" && r.delivery_id == later.to_string()).expect("the later run");
    assert_eq!(
        run.flags.get("cold").copied(),
        Some(false),
        "the later run fetched the room afresh: it proves nothing of what the lane kept"
    );
    let _ = there;
}

/// A message deleted after he answered it: its words leave what the lane keeps, while his reply
/// stays posted, its outcome stays `replied` (not `withdrawn`), and nothing is asked of the
/// model again; the room goes on answering.
#[tokio::test]
async fn message_delete_of_a_message_already_answered_keeps_his_reply_and_its_outcome_and_asks_nothing_again() {
    let rig = Rig::new().await;
    let bus = rig.bus().await;
    let receipts = clankie_testkit::record::<v1::Receipt>(&bus, Family::Receipt).await;
    rig.standin.script(Script::any(Reply::text("Lobby 4, at eight.")));
    let asked = rig.say(GENERAL, "ada", "@Clankie where is the lobby? my door code is tapir-19");
    rig.wait_outcomes(GENERAL, &[asked]).await;
    until("his reply", Duration::from_secs(20), || rig.sandbox.discord.posts(GENERAL).iter().any(|p| p.reply_to == Some(asked))).await;
    let store = Store::connect(&rig.settings.database_url).await.unwrap();
    assert!(stored_anywhere(&store, "tapir-19").await > 0, "the answered message was stored");
    let asked_model = rig.standin.requests().len();

    assert!(rig.sandbox.discord.user_delete(asked));
    changed(&receipts, "delete:", 1).await;
    assert_eq!(stored_anywhere(&store, "tapir-19").await, 0, "the deleted message is still stored");
    assert_eq!(rig.outcome(GENERAL, asked).as_deref(), Some("replied"), "the answered message's outcome changed");
    let replies: Vec<_> = rig.sandbox.discord.posts(GENERAL).into_iter().filter(|p| p.reply_to == Some(asked)).collect();
    assert_eq!(replies.len(), 1, "his reply was posted again or removed: {replies:?}");
    assert!(!replies[0].deleted, "his reply was deleted with the message");
    // The lane's next turn is the barrier: had the delete set off a run, it would come first.
    rig.standin.script(Script::any(Reply::text("You're welcome.")));
    let thanks = rig.say(GENERAL, "bob", "@Clankie thanks");
    rig.wait_outcomes(GENERAL, &[thanks]).await;
    let requests = rig.standin.requests();
    assert_eq!(requests.len(), asked_model + 1, "the delete asked the model again");
    assert_eq!(requests[asked_model].count("tapir-19"), 0, "the deleted words reached the next request");
    assert_eq!(rig.outcome(GENERAL, thanks).as_deref(), Some("replied"));
}

#[tokio::test]
async fn message_edit_during_the_run_reaches_the_same_run_as_a_correction_and_the_burst_gets_one_reply() {
    let rig = Rig::new().await;
    let bus = rig.bus().await;
    let receipts = clankie_testkit::record::<v1::Receipt>(&bus, Family::Receipt).await;
    rig.standin.script(Script::any(held("The lobby opens at eight, ")));
    rig.standin.script(Script::any(Reply::text("Nine it is: lobby 4 at nine.")));
    let asked = rig.say(GENERAL, "ada", "@Clankie is the lobby at 8pm?");
    in_its_first_call(&rig, &receipts, asked).await;
    assert!(rig.sandbox.discord.user_edit(asked, "@Clankie is the lobby at 9pm?".into()));
    steered_correction(&receipts).await;
    rig.standin.open_gate(GATE);
    rig.wait_outcomes(GENERAL, &[asked]).await;

    let posts = rig.sandbox.discord.posts(GENERAL);
    assert_eq!(posts.len(), 1, "{posts:?}");
    assert_eq!(rig.outcome(GENERAL, asked).as_deref(), Some("replied"));
    let requests = rig.standin.requests();
    assert_eq!(requests.len(), 2, "the correction reached the run at its next boundary");
    assert_eq!(requests[0].count("9pm"), 0);
    assert_eq!(requests[1].count("is the lobby at 9pm?"), 1, "the second call heard the edit");
    assert_eq!(requests[1].count("edited=\"true\""), 1, "the edit came as a marked correction");
    let correction = receipts.all().into_iter().find(|r| r.kind == "captain.correction").expect("the correction receipt");
    assert_eq!(correction.flags.get("steered"), Some(&true));
    // After the run the stored entry is the edited message too.
    changed(&receipts, "edit:", 1).await;
    let store = Store::connect(&rig.settings.database_url).await.unwrap();
    assert_eq!(stored_anywhere(&store, "is the lobby at 8pm?").await, 0, "the stored entry kept the old words");
}

#[tokio::test]
async fn message_edit_after_the_turn_is_what_the_next_request_shows() {
    let rig = Rig::new().await;
    let bus = rig.bus().await;
    let receipts = clankie_testkit::record::<v1::Receipt>(&bus, Family::Receipt).await;
    rig.standin.script(Script::any(Reply::text("Got it.")));
    let said = rig.say(GENERAL, "ada", "@Clankie the door code is alpha-one");
    rig.wait_outcomes(GENERAL, &[said]).await;
    assert!(rig.sandbox.discord.user_edit(said, "@Clankie the door code is bravo-two".into()));
    changed(&receipts, "edit:", 1).await;
    let before = rig.standin.requests().len();
    let next = rig.say(GENERAL, "ada", "@Clankie what's the door code?");
    rig.wait_outcomes(GENERAL, &[next]).await;
    let request = rig.standin.requests().into_iter().nth(before).expect("the next request");
    assert_eq!(request.count("the door code is bravo-two"), 1, "the edit is what the next request shows");
    assert_eq!(request.count("alpha-one"), 0, "the old words are still in the lane");
    let edits = receipts.all().iter().filter(|r| r.kind == "gateway.change").count();
    assert_eq!(edits, 1);
}

/// An edit the run heard as a correction, then the message deleted: after the run neither the
/// first words nor the edited ones are stored anywhere (the correction carries the edit's
/// delivery id and its author's block, so the deletion finds it too).
#[tokio::test]
async fn message_edit_then_delete_during_a_run_leaves_no_trace_of_either_text() {
    let rig = Rig::new().await;
    let bus = rig.bus().await;
    let receipts = clankie_testkit::record::<v1::Receipt>(&bus, Family::Receipt).await;
    rig.standin.script(Script::any(held("The lobby opens at eight, ")));
    rig.standin.script(Script::any(Reply::text("Noted.")));
    let asked = rig.say(GENERAL, "ada", "@Clankie is the lobby at 8pm? my code is walrus-1");
    in_its_first_call(&rig, &receipts, asked).await;
    assert!(rig.sandbox.discord.user_edit(asked, "@Clankie is the lobby at 9pm? my code is narwhal-2".into()));
    steered_correction(&receipts).await;
    rig.standin.open_gate(GATE);
    // The run reads the correction at its next call; deleted only after that.
    rig.standin.wait_for_requests(2, Duration::from_secs(20)).await;
    assert!(rig.sandbox.discord.user_delete(asked));
    // Both are applied to the stored entries once the run is over (its outcome's reaction has
    // no message left to go on).
    changed(&receipts, "edit:", 1).await;
    changed(&receipts, "delete:", 1).await;

    let requests = rig.standin.requests();
    assert!(requests.iter().any(|r| r.count("narwhal-2") == 1), "the run never heard the correction, so this shows nothing");
    let store = Store::connect(&rig.settings.database_url).await.unwrap();
    assert_eq!(stored_anywhere(&store, "walrus-1").await, 0, "the first words are still stored");
    assert_eq!(stored_anywhere(&store, "narwhal-2").await, 0, "the edited words (the correction) are still stored");
}

/// Edited, then deleted before the run read the correction: the correction is taken back from
/// the run's queue, so the model never sees the edited words, and neither text is stored.
#[tokio::test]
async fn message_edit_then_delete_before_the_run_reads_the_correction_takes_the_correction_back() {
    let rig = Rig::new().await;
    let bus = rig.bus().await;
    let receipts = clankie_testkit::record::<v1::Receipt>(&bus, Family::Receipt).await;
    rig.standin.script(Script::any(held("The lobby opens at eight, ")));
    let asked = rig.say(GENERAL, "ada", "@Clankie is the lobby at 8pm? my code is walrus-1");
    in_its_first_call(&rig, &receipts, asked).await;
    assert!(rig.sandbox.discord.user_edit(asked, "@Clankie is the lobby at 9pm? my code is narwhal-2".into()));
    steered_correction(&receipts).await;
    assert!(rig.sandbox.discord.user_delete(asked));
    until("the correction taken back", Duration::from_secs(20), || {
        receipts.all().iter().any(|r| r.kind == "captain.correction" && r.flags.get("withdrawn") == Some(&true))
    })
    .await;
    rig.standin.open_gate(GATE);
    changed(&receipts, "edit:", 1).await;
    changed(&receipts, "delete:", 1).await;

    assert!(rig.standin.requests().iter().all(|r| r.count("narwhal-2") == 0), "the model read the correction of a deleted message");
    let store = Store::connect(&rig.settings.database_url).await.unwrap();
    assert_eq!(stored_anywhere(&store, "walrus-1").await, 0, "the first words are still stored");
    assert_eq!(stored_anywhere(&store, "narwhal-2").await, 0, "the edited words are still stored");
}

/// A change to a message another lane quotes reaches that lane too: a linked message in
/// another channel, and a thread's starter in its parent. Edited, the quoting lane's next
/// request shows the new words and not the old; deleted, neither.
#[tokio::test]
async fn message_edit_and_delete_of_a_quoted_message_reach_the_lanes_that_quote_it() {
    const LOBBIES: u64 = 201;
    let rig = Rig::new().await;
    let guild = rig.sandbox.discord.config().guild_id;
    let bus = rig.bus().await;
    let receipts = clankie_testkit::record::<v1::Receipt>(&bus, Family::Receipt).await;
    rig.standin.script(Script::any(Reply::text("Noted.")));
    let to_him = |channel: u64, text: &str| {
        rig.sandbox.discord.user_message(clankie_discord_loopback::NewMessage {
            channel_id: channel,
            author: "ada".into(),
            content: format!("@Clankie {text}"),
            mention: true,
            ..Default::default()
        })
    };
    // The next request after `asked` is answered: its text.
    let next_request = |channel: u64, text: &'static str| {
        let rig = &rig;
        async move {
            let before = rig.standin.requests().len();
            let asked = to_him(channel, text);
            rig.wait_outcomes(channel, &[asked]).await;
            rig.standin.requests().into_iter().skip(before).find(|r| r.count(text) > 0).expect("the request").all_text()
        }
    };

    // A linked message, quoted in the general channel's lane.
    let linked = rig.say(LOBBIES, "cy", "the server password rotates on monday");
    let first = to_him(GENERAL, &format!("what does https://discord.com/channels/{guild}/{LOBBIES}/{linked} say?"));
    rig.wait_outcomes(GENERAL, &[first]).await;
    // A thread's starter, quoted in the thread's lane.
    let starter = rig.say(GENERAL, "bob", "the winter bracket starts in march");
    let thread = rig.sandbox.discord.start_thread(GENERAL, Some(starter), "winter bracket", false);
    let in_thread = to_him(thread, "when does it start?");
    rig.wait_outcomes(thread, &[in_thread]).await;

    // Both edited: each change is passed on to the lane quoting it (a copy, `<change>@<lane>`).
    assert!(rig.sandbox.discord.user_edit(linked, "the server password rotates on friday".into()));
    assert!(rig.sandbox.discord.user_edit(starter, "the winter bracket starts in april".into()));
    let changes = || -> Vec<(String, String, Vec<String>)> {
        receipts
            .all()
            .into_iter()
            .filter(|r| r.kind.contains("change"))
            .map(|r| (r.kind.clone(), r.delivery_id.clone(), r.codes.clone()))
            .collect()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    // A copy's receipt names it by a digest of its id (`<change>@<lane>` holds the lane's key).
    let copies = |code: &str| {
        receipts
            .all()
            .iter()
            .filter(|r| r.kind == "captain.changed" && r.codes.iter().any(|c| c == code) && r.delivery_id.starts_with('#'))
            .count()
    };
    loop {
        if copies("edit") >= 2 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the edits of {linked} (linked) and {starter} (starter) were not passed on to the lanes quoting them: {:?}",
            changes()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let general = next_request(GENERAL, "and the password?").await;
    assert!(
        general.contains("rotates on friday") && !general.contains("rotates on monday"),
        "the linked edit did not reach the lane quoting it"
    );
    let threaded = next_request(thread, "and the bracket?").await;
    assert!(
        threaded.contains("starts in april") && !threaded.contains("starts in march"),
        "the starter's edit did not reach the thread's lane"
    );

    // Both deleted: neither lane shows either text.
    assert!(rig.sandbox.discord.user_delete(linked));
    assert!(rig.sandbox.discord.user_delete(starter));
    until("the deletions passed on to the quoting lanes", Duration::from_secs(20), || copies("delete") >= 2).await;
    let general = next_request(GENERAL, "anything else?").await;
    assert!(!general.contains("rotates on"), "the deleted linked message is still in the general lane");
    let threaded = next_request(thread, "anything more?").await;
    assert!(!threaded.contains("the winter bracket starts"), "the deleted starter is still in the thread's lane");
}
