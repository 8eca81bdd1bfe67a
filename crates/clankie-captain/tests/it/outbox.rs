//! The reply outbox under faults: a captain dies on either side of the commit that settles a
//! turn, and the burst still gets exactly one reply and every delivery one outcome.

use std::time::Duration;

use clankie_model_standin::{Reply, Script};
use clankie_proto::v1;

use super::{DumpLogsOnPanic, Rig, kind, spawn_captain, spawn_captain_with, until};

/// Runs `captain-a` with `fault` until it dies there, then `captain-b`, whose model answers
/// `then` (scripted before it starts, so its first call cannot come first). Returns the
/// burst's ids, captain-b, and how many model calls captain-a made.
///
/// "two" reaches captain-a's lane either with "one" (one call) or while its run is live (a steer,
/// so a second call): each side is scripted for both, and what no call took is dropped.
async fn die_at(rig: &Rig, fault: &str, then: Option<Reply>) -> (Vec<u64>, tokio::process::Child, usize) {
    let first = || Reply::Text { text: "First try.".into(), chunk_chars: 40, chunk_delay_ms: 0, first_delay_ms: 2_000, tail_delay_ms: 0 };
    rig.standin.script(Script::any(first()));
    rig.standin.script(Script::any(first()));
    let mut a = spawn_captain_with(rig, "captain-a", &[("CLANKIE_FAULT", fault)]);
    let one = rig.say("ada", "@Clankie one", true).await;
    let two = rig.say("ada", "two", false).await;
    let status = tokio::time::timeout(Duration::from_secs(20), a.wait()).await.expect("the fault fired").unwrap();
    assert_eq!(status.code(), Some(clankie_settings::fault::EXIT_CODE), "captain-a died at {fault}");
    let asked_by_a = rig.standin.requests().len();
    rig.standin.clear_scripts();
    if let Some(then) = then {
        rig.standin.script(Script::any(then.clone()));
        rig.standin.script(Script::any(then));
    }
    (vec![one, two], spawn_captain(rig, "captain-b"), asked_by_a)
}

#[tokio::test]
async fn chaos_a_captain_killed_between_its_answer_and_its_outcomes_posts_nothing_and_the_burst_is_answered_once() {
    let rig = Rig::new().await;
    let _dump = DumpLogsOnPanic(rig.dir.path().to_owned());
    let (ids, mut b, _) = die_at(&rig, "captain.before_settle", Some(Reply::text("Second try."))).await;
    rig.wait_outcomes(&ids).await;
    until("the reply", Duration::from_secs(10), || !rig.replies().is_empty()).await;
    rig.standin.clear_scripts();
    // A later message is the barrier: once it is answered, a doubled reply to the burst would be in.
    rig.standin.script(Script::any(Reply::text("Later.")));
    let later = rig.say("bob", "@Clankie later", true).await;
    rig.wait_outcomes(&[later]).await;
    until("the later reply", Duration::from_secs(10), || rig.replies().len() >= 2).await;
    let texts: Vec<String> = rig.replies().iter().map(|r| r.text.clone()).collect();
    let outcomes: Vec<usize> = ids.iter().map(|id| rig.outcome_of(*id).len()).collect();
    println!("chaos before settle: rounds 1, deliveries 2, outcomes {outcomes:?}, replies {texts:?}");
    assert_eq!(texts, ["Second try.", "Later."], "the dead run's answer never went out; the burst got one");
    assert_eq!(outcomes, [1, 1]);
    // The relay publishes a row, then marks it sent: the later reply can be seen a moment before
    // its row is marked. No row may stay unsent (the dead run committed none).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let unsent: i64 =
            sqlx::query_scalar("SELECT count(*) FROM outbox WHERE sent_at IS NULL").fetch_one(rig.store.pool()).await.unwrap();
        if unsent == 0 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{unsent} outbox row(s) still unsent 10 s after the last reply went out");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = b.start_kill();
}

#[tokio::test]
async fn chaos_a_captain_killed_after_its_commit_before_publishing_the_relay_posts_the_reply_once() {
    let rig = Rig::new().await;
    let _dump = DumpLogsOnPanic(rig.dir.path().to_owned());
    let (ids, mut b, asked_by_a) = die_at(&rig, "captain.after_settle", None).await;
    // The outcomes were committed with the reply; captain-b's relay publishes the row.
    until("the relayed reply", Duration::from_secs(15), || !rig.replies().is_empty()).await;
    rig.wait_outcomes(&ids).await;
    let kinds: Vec<v1::OutcomeKind> = ids.iter().map(|id| kind(&rig.outcome_of(*id)[0])).collect();
    assert_eq!(kinds, [v1::OutcomeKind::Replied, v1::OutcomeKind::Absorbed], "settled by the dead run's commit");
    rig.standin.script(Script::any(Reply::text("Later.")));
    let later = rig.say("bob", "@Clankie later", true).await;
    rig.wait_outcomes(&[later]).await;
    until("the later reply", Duration::from_secs(10), || rig.replies().len() >= 2).await;
    let texts: Vec<String> = rig.replies().iter().map(|r| r.text.clone()).collect();
    println!("chaos after settle: rounds 1, deliveries 2, replies {texts:?}");
    assert_eq!(texts, ["First try.", "Later."], "the committed answer went out once, and nothing answered the burst again");
    assert_eq!(rig.standin.requests().len(), asked_by_a + 1, "nobody ran the settled burst again");
    let _ = b.start_kill();
}

/// PostgreSQL quits as a crash would while a run is live, and comes back 4 s later. The run
/// waits for it (its session and its settling need the store), a message sent meanwhile is
/// admitted once the database is back, and every delivery ends with one outcome and no
/// message is answered twice.
#[tokio::test]
async fn chaos_postgres_restarted_mid_run_loses_and_doubles_nothing() {
    // Shown only when the test fails: what the captain went through.
    let _traces = clankie_http::init_tracing("warn,clankie_captain=debug", "test");
    let pg = clankie_testkit::TestPostgres::start().unwrap();
    let rig = Rig::on(clankie_testkit::TestDb::create_on(&pg.url()).await).await;
    // The stall bound outlasts the outage, as it does with the defaults (90 s against seconds).
    let (_captain, _task) = rig.captain_with("captain-a", &[("CLANKIE_STALL_SILENCE_MS", "15000".into())]).await;
    rig.standin.script(Script::any(Reply::Text {
        text: "Answered across the outage.".into(),
        chunk_chars: 4,
        chunk_delay_ms: 100,
        first_delay_ms: 0,
        tail_delay_ms: 0,
    }));
    // Any later run answers with the stand-in's default words.
    let mut ids = vec![rig.say("ada", "@Clankie one", true).await];
    ids.push(rig.say("ada", "two", false).await);
    rig.standin.wait_for_requests(1, Duration::from_secs(20)).await;
    pg.crash().unwrap();
    ids.push(rig.say("ada", "@Clankie three, while the database is away", true).await);
    tokio::time::sleep(Duration::from_secs(4)).await;
    pg.restart().unwrap();
    until("every outcome", Duration::from_secs(60), || ids.iter().all(|id| !rig.outcome_of(*id).is_empty())).await;
    let later = rig.say("bob", "@Clankie later", true).await;
    rig.wait_outcomes(&[later]).await;
    until("the later reply", Duration::from_secs(10), || rig.replies().iter().any(|r| r.reply_to_message_id == Some(later))).await;
    let replies: Vec<v1::OutboundMessage> = rig.replies().into_iter().filter(|r| r.reply_to_message_id != Some(later)).collect();
    let events: Vec<usize> = ids.iter().map(|id| rig.outcome_of(*id).len()).collect();
    let (mut stored, mut replied, mut kinds) = (0, 0, Vec::new());
    for id in &ids {
        if let Some(o) = rig.store.outcome(&id.to_string()).await.unwrap() {
            stored += 1;
            replied += usize::from(o.kind == v1::OutcomeKind::Replied);
            kinds.push(o.kind);
        }
    }
    let answered: std::collections::BTreeSet<Option<u64>> = replies.iter().map(|r| r.reply_to_message_id).collect();
    println!(
        "chaos postgres restart: rounds 1, deliveries 3, outcomes {stored} (events {events:?}), replies {}, lost {}, doubled {}",
        replies.len(),
        3 - stored,
        replies.len() - answered.len()
    );
    assert_eq!(stored, 3, "nothing lost");
    assert_eq!(kinds[0], v1::OutcomeKind::Replied, "the run in flight waited out the outage and answered: {kinds:?}");
    assert!(
        matches!(kinds[2], v1::OutcomeKind::Replied | v1::OutcomeKind::Absorbed),
        "the message sent meanwhile was admitted and answered: {kinds:?}"
    );
    assert_eq!(events, [1, 1, 1]);
    assert_eq!(replies.len(), replied, "one reply per replied turn: {replies:?}");
    assert_eq!(answered.len(), replies.len(), "no message answered twice: {replies:?}");
}

/// A run proposes a memory and its captain dies before the turn settles; the retried run on
/// another captain proposes the same fact. The owner gets one DM, about the one proposal.
#[tokio::test]
async fn button_a_retried_runs_proposal_makes_one_dm() {
    let rig = Rig::new().await;
    let _dump = DumpLogsOnPanic(rig.dir.path().to_owned());
    const OWNER: u64 = 4242;
    let settings = clankie_store::OwnerSettings { owner_id: Some(OWNER), ..rig.store.owner_settings().await.unwrap() };
    rig.store.set_owner_settings(&settings).await.unwrap();
    const FACT: &str = "Raids start at nine (plover).";
    for _ in 0..2 {
        rig.standin.script(Script::when("remember", Reply::tool("propose_memory", serde_json::json!({ "fact": FACT }))));
        rig.standin.script(Script::when("remember", Reply::text("I'll ask my owner.")));
    }
    let mut a = spawn_captain_with(&rig, "captain-a", &[("CLANKIE_FAULT", "captain.before_settle")]);
    let asked = rig.say("ada", "@Clankie remember raids start at nine", true).await;
    let status = tokio::time::timeout(Duration::from_secs(30), a.wait()).await.expect("the fault fired").unwrap();
    assert_eq!(status.code(), Some(clankie_settings::fault::EXIT_CODE), "captain-a died before settling");
    let mut b = spawn_captain(&rig, "captain-b");
    rig.wait_outcomes_within(&[asked], Duration::from_secs(40)).await;
    // A later turn is the barrier: once it is answered, a second DM would be in.
    rig.standin.script(Script::any(Reply::text("Later.")));
    let later = rig.say("bob", "@Clankie later", true).await;
    rig.wait_outcomes(&[later]).await;
    until("the later reply", Duration::from_secs(10), || rig.replies().iter().any(|r| r.reply_to_message_id == Some(later))).await;

    // Each run's second request carries its proposal's tool result.
    let proposing = rig.standin.requests().iter().filter(|r| r.messages().iter().any(|m| m["role"] == "tool")).count();
    assert!(proposing >= 2, "both runs proposed the fact ({proposing} requests carried the proposal)");
    let proposed: Vec<i64> = rig
        .store
        .memories(clankie_store::MemoryStatus::Proposed, 10)
        .await
        .unwrap()
        .iter()
        .filter(|m| m.fact == FACT)
        .map(|m| m.id)
        .collect();
    assert_eq!(proposed.len(), 1, "one proposal for one fact of one turn: {proposed:?}");
    let dms: Vec<v1::OutboundMessage> = rig.sent.all().into_iter().filter(|m| m.kind == v1::OutboundKind::Direct as i32).collect();
    let keys: Vec<&str> = dms.iter().map(|m| m.idempotency_key.as_str()).collect();
    println!("retried proposal: runs 2, proposals {}, DMs {keys:?}", proposed.len());
    assert_eq!(keys, [format!("memory:{}", proposed[0])], "the owner is asked once, about the recorded proposal");
    assert_eq!(dms[0].direct_user_id, OWNER);
    assert!(dms[0].text.contains(&format!("#{} {FACT}", proposed[0])), "{}", dms[0].text);
    let _ = b.start_kill();
}

/// The replica that would relay a dead replica's committed reply has its relay panic on its
/// first pass: the relay is started again (logged by name) and the reply still goes out once.
#[tokio::test]
async fn supervise_a_relay_that_panics_is_started_again_and_posts_what_a_dead_replica_committed() {
    let rig = Rig::new().await;
    let _dump = DumpLogsOnPanic(rig.dir.path().to_owned());
    rig.standin.script(Script::any(Reply::text("Committed by a.")));
    let mut a = spawn_captain_with(&rig, "captain-a", &[("CLANKIE_FAULT", "captain.after_settle")]);
    let asked = rig.say("ada", "@Clankie one", true).await;
    let status = tokio::time::timeout(Duration::from_secs(30), a.wait()).await.expect("the fault fired").unwrap();
    assert_eq!(status.code(), Some(clankie_settings::fault::EXIT_CODE), "captain-a died after its commit");
    let mut b = spawn_captain_with(&rig, "captain-b", &[("CLANKIE_FAULT_PANIC", "captain.relay")]);
    until("the relayed reply", Duration::from_secs(20), || !rig.replies().is_empty()).await;
    let log = std::fs::read_to_string(rig.dir.path().join("captain-b.log")).unwrap();
    assert!(log.contains("fault injected at captain.relay"), "the relay's panic never fired");
    assert!(log.contains("a part of this process panicked") && log.contains("captain.relay"), "the restart was not logged by name");
    rig.wait_outcomes(&[asked]).await;
    let texts: Vec<String> = rig.replies().iter().map(|r| r.text.clone()).collect();
    assert_eq!(texts, ["Committed by a."]);
    assert!(b.try_wait().unwrap().is_none(), "captain-b is still running");
    let _ = b.start_kill();
}
