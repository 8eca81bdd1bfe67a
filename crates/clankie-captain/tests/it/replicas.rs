use std::time::{Duration, Instant};

use tokio::process::Child;

use clankie_model_standin::{Reply, Script};
use clankie_proto::{LaneKey, v1};

use super::{CHANNEL, DumpLogsOnPanic, GUILD, Rig, kind, spawn_captain, until};

#[tokio::test]
async fn two_replicas_share_a_burst_with_one_run_and_one_reply() {
    let rig = Rig::new().await;
    let (a, _ta) = rig.captain("captain-a").await;
    let (b, _tb) = rig.captain("captain-b").await;
    // About 1.6 s of writing, three times the burst's half second: the last message, forwarded
    // between replicas, still lands inside the run on a loaded machine (80 ms chunks once did not).
    rig.standin.script(Script::any(Reply::Text {
        text: "Working on it, ".into(),
        chunk_chars: 2,
        chunk_delay_ms: 200,
        first_delay_ms: 100,
        tail_delay_ms: 0,
    }));
    rig.standin.script(Script::any(Reply::text("All three answered.")));
    let mut ids = vec![rig.say("ada", "@Clankie one", true).await];
    for text in ["two", "three", "four", "five"] {
        tokio::time::sleep(Duration::from_millis(120)).await;
        ids.push(rig.say("ada", text, false).await);
    }
    rig.wait_outcomes(&ids).await;
    assert_eq!(rig.replies().len(), 1, "{:?}", rig.replies());
    let turns: i64 = sqlx::query_scalar("SELECT count(*) FROM turns").fetch_one(rig.store.pool()).await.unwrap();
    assert_eq!(turns, 1, "one live run across both replicas");
    for id in &ids {
        assert_eq!(rig.outcome_of(*id).len(), 1, "delivery {id} has one outcome event");
    }
    let replied = ids.iter().filter(|id| kind(&rig.outcome_of(**id)[0]) == v1::OutcomeKind::Replied).count();
    assert_eq!(replied, 1);
    until("no run left behind", Duration::from_secs(5), || a.live_lanes() + b.live_lanes() == 0).await;
}

/// A first run that hangs `hang_ms` before it writes, long enough to be killed in the middle of
/// it, and the new owner's answers: it may take the deliveries as one burst or steer the later
/// ones in, so one or two calls, one answer.
fn script_a_run_to_kill(rig: &Rig, hang_ms: u64) {
    rig.standin.script(Script::any(Reply::Text {
        text: "never finished".into(),
        chunk_chars: 64,
        chunk_delay_ms: 0,
        first_delay_ms: hang_ms,
        tail_delay_ms: 0,
    }));
    for _ in 0..4 {
        rig.standin.script(Script::any(Reply::text("Taken over and answered.")));
    }
}

/// SIGKILLs whichever of `a` and `b` holds the lane's lease; when it died, and the survivor.
async fn kill_the_owner<'c>(rig: &Rig, a: &'c mut Child, b: &'c mut Child) -> (Instant, &'c mut Child) {
    let lane = LaneKey::Room { guild: GUILD, channel: CHANNEL };
    let owner = rig.store.lane(&lane).await.unwrap().and_then(|l| l.lease_owner).expect("a lease owner");
    let (victim, survivor) = if owner == "captain-a" { (a, b) } else { (b, a) };
    let killed_at = Instant::now();
    victim.start_kill().unwrap();
    victim.wait().await.unwrap();
    (killed_at, survivor)
}

#[tokio::test]
async fn killing_the_owner_mid_run_loses_nothing_and_answers_once() {
    let rig = Rig::new().await;
    let _dump = DumpLogsOnPanic(rig.dir.path().to_owned());
    let mut a = spawn_captain(&rig, "captain-a");
    let mut b = spawn_captain(&rig, "captain-b");
    let lane = LaneKey::Room { guild: GUILD, channel: CHANNEL };
    script_a_run_to_kill(&rig, 8_000);
    let mut ids = vec![rig.say("ada", "@Clankie one", true).await];
    for text in ["two", "three"] {
        // Follow-ups as people type them, a few hundred milliseconds apart.
        tokio::time::sleep(Duration::from_millis(300)).await;
        ids.push(rig.say("ada", text, false).await);
    }
    let requests = rig.standin.wait_for_requests(1, Duration::from_secs(20)).await;
    assert_eq!(requests.len(), 1);
    let (killed_at, survivor) = kill_the_owner(&rig, &mut a, &mut b).await;

    rig.wait_outcomes(&ids).await;
    let taken_over = killed_at.elapsed();
    let new_owner = rig.store.lane(&lane).await.unwrap().map(|l| l.epoch).unwrap();
    assert!(new_owner >= 2, "the lane changed hands");
    // Lease TTL 1 s plus one ack wait (1 s) for JetStream to hand the deliveries over, plus slack.
    assert!(taken_over < Duration::from_secs(5), "takeover took {taken_over:?}");
    // None lost, none answered twice: every delivery has one outcome, and there is one reply per
    // replied delivery (the new owner may take the redelivered burst as one turn or, as the dead
    // owner's deliveries come back at different moments, as two).
    let replied: Vec<u64> =
        ids.iter().copied().filter(|id| rig.outcome_of(*id).iter().any(|o| kind(o) == v1::OutcomeKind::Replied)).collect();
    until("the replies", Duration::from_secs(5), || rig.replies().len() >= replied.len()).await;
    let replies = rig.replies();
    assert_eq!(replies.len(), replied.len(), "{replies:?}");
    assert!(!replied.is_empty());
    assert!(replies.iter().all(|r| r.text == "Taken over and answered."), "the dead owner's run posted nothing");
    let keys: std::collections::BTreeSet<_> = replies.iter().map(|r| r.idempotency_key.clone()).collect();
    assert_eq!(keys.len(), replies.len(), "a delivery answered twice");
    for id in &ids {
        let events = rig.outcome_of(*id);
        assert_eq!(events.len(), 1, "delivery {id}: {events:?}");
        assert!(rig.store.outcome(&id.to_string()).await.unwrap().is_some());
    }
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM deliveries").fetch_one(rig.store.pool()).await.unwrap();
    assert_eq!(rows, 3);
    // A delivery reaches the new owner's model once: the dead run's input, already in the tree,
    // is not written again, and what comes as a message is not also history.
    for request in rig.standin.requests().iter().skip(1) {
        for line in ["@Clankie one", "two", "three"] {
            assert!(request.count(line) <= 1, "{line:?} was sent {} times in one request", request.count(line));
        }
    }
    let _ = survivor.start_kill();
}

#[tokio::test]
async fn sigterm_lets_the_live_run_finish_and_the_lane_goes_on_elsewhere() {
    let rig = Rig::new().await;
    let _dump = DumpLogsOnPanic(rig.dir.path().to_owned());
    let mut a = spawn_captain(&rig, "captain-a");
    let mut b = spawn_captain(&rig, "captain-b");
    let lane = LaneKey::Room { guild: GUILD, channel: CHANNEL };
    // The later question's answer, whenever it is asked; only its request mentions it.
    rig.standin.script(Script::when("still there?", Reply::text("Still here.")));
    // About 1.5 s of writing, during which the owner is told to stop; the second message may take one more call.
    for _ in 0..2 {
        rig.standin.script(Script::any(Reply::Text {
            text: "Finishing what I started.".into(),
            chunk_chars: 2,
            chunk_delay_ms: 120,
            first_delay_ms: 0,
            tail_delay_ms: 0,
        }));
    }
    // A burst as people type it: the follow-up some hundreds of milliseconds after the mention.
    let one = rig.say("ada", "@Clankie one", true).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let first = vec![one, rig.say("ada", "two", false).await];
    rig.standin.wait_for_requests(1, Duration::from_secs(20)).await;
    let owner = rig.store.lane(&lane).await.unwrap().and_then(|l| l.lease_owner).expect("a lease owner");
    let (victim, survivor) = if owner == "captain-a" { (&mut a, &mut b) } else { (&mut b, &mut a) };
    let pid = victim.id().unwrap().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let status = tokio::time::timeout(Duration::from_secs(20), victim.wait()).await.expect("the captain exited").unwrap();
    assert!(status.success(), "a drained captain exits cleanly: {status}");
    rig.wait_outcomes(&first).await;
    // The live run finished instead of being cut off. ("two" is either absorbed into it or, if it was
    // still crossing over as a steer when the owner stopped, answered by the other replica.)
    assert_eq!(rig.replies()[0].text, "Finishing what I started.");
    let before = rig.replies().len();

    let later = rig.say("ada", "@Clankie still there?", true).await;
    rig.wait_outcomes(&[later]).await;
    assert_eq!(rig.replies().len(), before + 1, "the lane goes on on the other replica");
    assert_eq!(rig.replies().last().unwrap().text, "Still here.");
    for id in first.iter().chain([&later]) {
        assert_eq!(rig.outcome_of(*id).len(), 1, "delivery {id}");
    }
    let _ = survivor.start_kill();
}

/// A run whose lane is fenced from outside (the epoch bumped, as a takeover does) stops at its
/// next renewal: no more progress acks hold its deliveries, so they come back after the ack
/// wait and are answered long before the fenced run's own ten-second answer would have ended,
/// and nothing of that answer is ever posted.
#[tokio::test]
async fn chaos_a_run_fenced_from_outside_stops_and_posts_nothing() {
    let rig = Rig::new().await;
    let (_captain, _task) = rig.captain("captain-a").await;
    rig.standin.script(Script::any(Reply::Text {
        text: "fenced words that never go out".into(),
        chunk_chars: 1,
        chunk_delay_ms: 350,
        first_delay_ms: 0,
        tail_delay_ms: 0,
    }));
    rig.standin.script(Script::any(Reply::text("Answered after the fence.")));
    let id = rig.say("ada", "@Clankie hello", true).await;
    rig.standin.wait_for_requests(1, Duration::from_secs(10)).await;
    let fenced_at = Instant::now();
    sqlx::query("UPDATE lanes SET epoch = epoch + 1").execute(rig.store.pool()).await.unwrap();
    until("the fenced receipt", Duration::from_secs(5), || {
        rig.receipts.all().iter().any(|r| r.kind == "captain.fenced" && r.delivery_id == id.to_string())
    })
    .await;
    assert!(fenced_at.elapsed() < Duration::from_millis(1_500), "noticed at the next renewal (a third of the 1 s TTL)");
    rig.wait_outcomes(&[id]).await;
    let answered_in = fenced_at.elapsed();
    // The fenced answer alone would stream for about 10 s and hold the delivery all that time.
    assert!(answered_in < Duration::from_secs(6), "the fenced run held its delivery for {answered_in:?}");
    let replies = rig.replies();
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert_eq!(replies[0].text, "Answered after the fence.");
    assert_eq!(rig.outcome_of(id).len(), 1);
    // Give a fenced run that went on the time of another model call: none comes.
    let settled_at = clankie_bus::now_ms();
    while clankie_bus::now_ms() < settled_at + 1_500 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(rig.standin.requests().len(), 2, "the fenced run's one call and the new owner's, no more");
    assert_eq!(kind(&rig.outcome_of(id)[0]), v1::OutcomeKind::Replied);
}

/// The ack wait JetStream holds for the captains' ingress consumer.
async fn ingress_ack_wait(rig: &Rig) -> Option<Duration> {
    let stream = rig.bus.jetstream().get_stream("CLANKIE_INGRESS").await.ok()?;
    stream.consumer_info("captain").await.ok().map(|info| info.config.ack_wait)
}

/// Waits until the consumer's ack wait is `want`, and says what it was when it never became so.
async fn until_ack_wait(rig: &Rig, want: Duration) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut held = None;
    while Instant::now() < deadline {
        held = ingress_ack_wait(rig).await;
        if held == Some(want) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the captain consumer's ack wait stayed {held:?}, not {want:?}");
}

#[tokio::test]
async fn consumer_config_follows_the_settings() {
    let rig = Rig::new().await;
    let _dump = DumpLogsOnPanic(rig.dir.path().to_owned());
    // A first deployment with the library default, stopped as an operator would.
    let mut first = super::spawn_captain_with(&rig, "captain-a", &[("CLANKIE_INGRESS_ACK_WAIT_MS", "30000")]);
    until_ack_wait(&rig, Duration::from_secs(30)).await;
    let pid = first.id().unwrap().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    assert!(first.wait().await.unwrap().success());

    // The operator shortens the ack wait and starts two captains again.
    const ACK_WAIT: Duration = Duration::from_secs(3);
    const LEASE_TTL: Duration = Duration::from_secs(1);
    let setting = ("CLANKIE_INGRESS_ACK_WAIT_MS", "3000");
    let mut a = super::spawn_captain_with(&rig, "captain-a", &[setting]);
    let mut b = super::spawn_captain_with(&rig, "captain-b", &[setting]);
    until_ack_wait(&rig, ACK_WAIT).await;

    // A burst whose owner is SIGKILLed mid-run is taken over within the new ack wait plus one lease TTL.
    script_a_run_to_kill(&rig, 20_000);
    let ids = [rig.say("ada", "@Clankie one", true).await];
    rig.standin.wait_for_requests(1, Duration::from_secs(20)).await;
    let (killed_at, survivor) = kill_the_owner(&rig, &mut a, &mut b).await;
    rig.wait_outcomes(&ids).await;
    let taken_over = killed_at.elapsed();
    println!("consumer config: ack wait {ACK_WAIT:?}, takeover {taken_over:?}");
    assert!(taken_over < ACK_WAIT + LEASE_TTL, "takeover took {taken_over:?}, more than the new ack wait plus one lease TTL");
    assert!(rig.outcome_of(ids[0]).iter().any(|o| kind(o) == v1::OutcomeKind::Replied), "the new owner answered");
    let _ = survivor.start_kill();
}
