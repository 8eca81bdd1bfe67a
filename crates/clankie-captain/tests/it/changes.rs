//! Edits and deletions that must not be lost between replicas or across a crash: each change
//! is stored before it is acked, and a change consumed where its message is not held goes to
//! the replica that holds it.

use std::time::Duration;

use clankie_model_standin::{Reply, Script};
use clankie_proto::v1;

use super::{DumpLogsOnPanic, Rig, kind, spawn_captain, spawn_captain_with, until};

/// The run's first answer, held until the test opens `gate`, however busy the machine.
fn held(gate: &str, text: &str) -> Reply {
    Reply::Gated { gate: gate.into(), then: Box::new(Reply::text(text)) }
}

/// Waits until the captains have stored a change of each of `ids` (they do so as they consume it).
async fn changes_stored(rig: &Rig, ids: &[u64]) {
    let ids: Vec<String> = ids.iter().map(u64::to_string).collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM message_changes WHERE delivery_id = ANY($1)")
            .bind(&ids)
            .fetch_one(rig.store.pool())
            .await
            .unwrap();
        if n as usize == ids.len() {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{n} of {} changes stored", ids.len());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn stored_anywhere(rig: &Rig, needle: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM session_entries WHERE body::text LIKE '%' || $1 || '%'")
        .bind(needle)
        .fetch_one(rig.store.pool())
        .await
        .unwrap()
}

/// Five messages wait on a live run and are deleted; with two captains sharing the ingress
/// consumer some deletions are consumed by the replica that does not hold the lane. Each
/// message is withdrawn all the same: not answered, not stored, never sent to the model.
#[tokio::test]
async fn message_delete_consumed_on_the_replica_not_holding_the_lane_withdraws_the_message() {
    let rig = Rig::new().await;
    let _dump = DumpLogsOnPanic(rig.dir.path().to_owned());
    let (_a, _ta) = rig.captain("captain-a").await;
    let (_b, _tb) = rig.captain("captain-b").await;
    let mut forwarded = 0;
    let mut rounds = 0;
    while forwarded == 0 && rounds < 4 {
        rounds += 1;
        let gate = format!("round {rounds}");
        rig.standin.script(Script::any(held(&gate, "Lobby 4 at eight.")));
        let asked = rig.say("ada", &format!("@Clankie round {rounds}: is the lobby up?"), true).await;
        until("the run", Duration::from_secs(10), || {
            rig.receipts.all().iter().any(|r| r.kind == "captain.run" && r.delivery_id == asked.to_string())
        })
        .await;
        // Inside its first model call, held at the gate: a message that came before the call was
        // made would be read by the call itself (the run's receipt comes first), not steered.
        let round = format!("round {rounds}:");
        until("the run's first call", Duration::from_secs(20), || rig.standin.requests().iter().any(|r| r.count(&round) > 0)).await;
        let mut waiting = Vec::new();
        for n in 0..5 {
            waiting.push(rig.say("ada", &format!("canary-{rounds}-{n} one more thing"), false).await);
        }
        for id in &waiting {
            rig.delete(*id).await;
        }
        // Each deletion reached whoever holds its message before the run reads on: withdrawn
        // from the live run's queue (or acked where nothing of it was admitted yet), or its
        // message, forwarded later, held back from the run by the stored deletion.
        until("every deletion applied or its message held back", Duration::from_secs(20), || {
            let receipts = rig.receipts.all();
            waiting.iter().all(|id| {
                receipts.iter().any(|r| {
                    (r.kind == "captain.changed" && r.delivery_id == format!("delete:{id}"))
                        || (r.kind == "captain.withheld" && r.delivery_id == id.to_string())
                })
            })
        })
        .await;
        rig.standin.open_gate(&gate);
        let mut all = vec![asked];
        all.extend(&waiting);
        rig.wait_outcomes(&all).await;
        for id in &waiting {
            let outcomes: Vec<v1::OutcomeKind> = rig.outcome_of(*id).iter().map(kind).collect();
            assert_eq!(outcomes, [v1::OutcomeKind::Withdrawn], "deleted message {id} in round {rounds}");
        }
        forwarded += rig
            .receipts
            .all()
            .iter()
            .filter(|r| r.kind == "captain.forwarded" && waiting.iter().any(|id| r.delivery_id == format!("delete:{id}")))
            .count();
    }
    println!("message delete across replicas: {rounds} round(s), {forwarded} deletion(s) consumed where the lane was not held");
    assert!(forwarded > 0, "in {rounds} rounds no deletion was consumed by the replica not holding the lane; this showed nothing");
    assert!(rig.standin.requests().iter().all(|r| r.count("canary-") == 0), "a deleted message reached the model");
    assert_eq!(stored_anywhere(&rig, "canary-").await, 0, "a deleted message is stored");
    assert_eq!(rig.replies().len(), rounds, "one reply a round");
}

/// A message is edited while the run that read it is live, and the captain dies before
/// settling that run (`captain.before_settle`). The replacement run reads the edited words, and
/// they are what is stored: the edit was stored when it was consumed, before any ack.
#[tokio::test]
async fn message_edit_during_a_run_then_a_crash_before_settle_reaches_the_replacement_run_and_the_store() {
    let rig = Rig::new().await;
    let _dump = DumpLogsOnPanic(rig.dir.path().to_owned());
    rig.standin.script(Script::any(held("edited", "First try.")));
    let mut a = spawn_captain_with(&rig, "captain-a", &[("CLANKIE_FAULT", "captain.before_settle")]);
    let asked = rig.say("ada", "@Clankie is the lobby at 8pm? (walrus)", true).await;
    until("the run", Duration::from_secs(10), || {
        rig.receipts.all().iter().any(|r| r.kind == "captain.run" && r.delivery_id == asked.to_string())
    })
    .await;
    // Edited inside the run's first call (held at the gate), not before the call is made.
    until("the run's first call", Duration::from_secs(20), || rig.standin.requests().iter().any(|r| r.count("walrus") > 0)).await;
    rig.edit(asked, "ada", "@Clankie is the lobby at 9pm? (narwhal)", true).await;
    changes_stored(&rig, &[asked]).await;
    rig.standin.open_gate("edited");
    let status = tokio::time::timeout(Duration::from_secs(20), a.wait()).await.expect("the fault fired").unwrap();
    assert_eq!(status.code(), Some(clankie_settings::fault::EXIT_CODE));
    // The dead run read the first words (and heard the edit as a correction at its next call).
    let dead = rig.standin.requests().len();
    assert_eq!(rig.standin.requests()[0].count("walrus"), 1, "the dead run read the first words");

    rig.standin.script(Script::any(Reply::text("Second try.")));
    let mut b = spawn_captain(&rig, "captain-b");
    rig.wait_outcomes(&[asked]).await;
    // The edit is applied to what is stored (its copy of a dead run's entries too) by the time
    // it is acked, which may be after the message's outcome.
    until("the edit applied", Duration::from_secs(10), || {
        rig.receipts.all().iter().any(|r| r.kind == "captain.changed" && r.delivery_id.starts_with("edit:"))
    })
    .await;
    let requests = rig.standin.requests();
    assert!(requests.len() > dead, "no replacement run");
    let replacement = requests.last().expect("the replacement run's request");
    println!(
        "edit then crash: {} requests; the replacement's holds narwhal {} and walrus {}",
        requests.len(),
        replacement.count("narwhal"),
        replacement.count("walrus")
    );
    assert!(replacement.count("narwhal") >= 1, "the replacement run did not read the edit");
    assert!(requests[dead..].iter().all(|r| r.count("walrus") == 0), "the replacement run read the old words");
    let old: Vec<(String, i64, String)> =
        sqlx::query_as("SELECT tree, epoch, body::text FROM session_entries WHERE body::text LIKE '%walrus%'")
            .fetch_all(rig.store.pool())
            .await
            .unwrap();
    assert!(old.is_empty(), "the old words are stored: {old:?}");
    assert!(stored_anywhere(&rig, "narwhal").await >= 1, "the edited words are not stored");
    assert_eq!(rig.outcome_of(asked).iter().map(kind).collect::<Vec<_>>(), [v1::OutcomeKind::Replied]);
    let _ = b.start_kill();
}

/// Bob is forgotten, then edits a message he wrote before: the message is withdrawn
/// everywhere, so the edit's words are stored nowhere (not in the store, not in the ingress
/// stream). An edit of a message he writes after the forget is an edit like any other.
#[tokio::test]
async fn erase_a_forgotten_persons_edit_of_a_message_from_before_the_forget_is_kept_nowhere() {
    let rig = Rig::new().await;
    let _dump = DumpLogsOnPanic(rig.dir.path().to_owned());
    let (_c, _t) = rig.captain("captain-a").await;
    rig.standin.script(Script::any(Reply::text("Noon.")));
    let before = rig.say("bob", "@Clankie canary-before when is lunch?", true).await;
    rig.wait_outcomes(&[before]).await;
    let bob = super::author_id("bob");
    let forgotten = clankie_self::rewrite::forget_user(&rig.store, bob, Duration::from_secs(10), |_| {}).await.unwrap();
    assert_eq!(forgotten.messages, 1);

    rig.edit(before, "bob", "canary-edited-after-forget lunch at one", false).await;
    // Made after the forget, so its snowflake says so.
    let after_ms = clankie_bus::now_ms() + 1_000;
    let after = ((after_ms as u64) - clankie_proto::time::DISCORD_EPOCH_MS) << 22;
    rig.standin.script(Script::any(Reply::text("Hello again.")));
    rig.say_as(after, "bob", "@Clankie canary-after I am back", true, Some(super::GUILD)).await;
    rig.wait_outcomes(&[after]).await;
    rig.edit(after, "bob", "canary-after-edited I am back, edited", false).await;

    let handled = |id: u64, kinds: &[&str]| {
        rig.receipts.all().into_iter().find(|r| kinds.contains(&r.kind.as_str()) && r.delivery_id.starts_with(&format!("edit:{id}:")))
    };
    let both = ["captain.change_ignored", "captain.changed"];
    until("both edits handled", Duration::from_secs(20), || handled(before, &both).is_some() && handled(after, &both).is_some()).await;
    assert_eq!(stored_anywhere(&rig, "canary-edited-after-forget").await, 0, "the edit's words are in a session");
    let changes: i64 = sqlx::query_scalar("SELECT count(*) FROM message_changes WHERE delivery_id = $1")
        .bind(before.to_string())
        .fetch_one(rig.store.pool())
        .await
        .unwrap();
    assert_eq!(changes, 0, "the edit of a forgotten message was kept for a copy of it arriving later");
    let mut in_stream = 0;
    let words = b"canary-edited-after-forget";
    rig.bus
        .read_family(clankie_proto::Family::IngressText, |_, payload| {
            in_stream += usize::from(payload.windows(words.len()).any(|w| w == words))
        })
        .await
        .unwrap();
    assert_eq!(in_stream, 0, "the edit is still in the ingress stream");
    assert_eq!(stored_anywhere(&rig, "canary-after-edited").await, 1, "the edit of his new message was not applied");
    let ignored = handled(before, &both).unwrap();
    assert_eq!((ignored.kind.as_str(), ignored.codes.as_slice()), ("captain.change_ignored", ["author_forgotten".to_owned()].as_slice()));
    assert_eq!(handled(after, &both).unwrap().kind, "captain.changed");
}
