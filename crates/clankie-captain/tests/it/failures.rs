use clankie_model_standin::{Reply, Script};
use clankie_proto::v1;

use super::{Rig, kind};

#[tokio::test]
async fn each_failure_code_reaches_the_outcome_and_a_receipt_that_carries_only_the_code() {
    let rig = Rig::new().await;
    // The stalled case is aborted by the watchdog: a short silence, which the other cases never reach.
    let (_captain, _task) = rig.captain_with("captain-a", &[("CLANKIE_STALL_SILENCE_MS", "600".into())]).await;
    let cases = [
        (Reply::InsufficientQuota, v1::FailureCode::CaptainUsageLimitReached),
        (Reply::Status { status: 400 }, v1::FailureCode::CaptainModelFailed),
        (Reply::Empty, v1::FailureCode::CaptainResponseMissing),
        (Reply::Stall { text_before: String::new() }, v1::FailureCode::CaptainTurnStalled),
    ];
    for (reply, code) in cases {
        rig.standin.script(Script::any(reply));
        let id = rig.say("ada", "@Clankie please look zanzibar up", true).await;
        rig.wait_outcomes(&[id]).await;
        let outcomes = rig.outcome_of(id);
        assert_eq!(outcomes.len(), 1);
        assert_eq!(kind(&outcomes[0]), v1::OutcomeKind::Failed);
        assert_eq!(outcomes[0].failure_code, code as i32, "{code:?}");
        let stored = rig.store.outcome(&id.to_string()).await.unwrap().unwrap();
        assert_eq!(stored.failure_code, Some(code));
        super::until("the outcome receipt", std::time::Duration::from_secs(5), || {
            rig.receipts.all().iter().any(|r| r.kind == "captain.outcome" && r.delivery_id == id.to_string())
        })
        .await;
        let receipt = rig.receipts.all().into_iter().find(|r| r.kind == "captain.outcome" && r.delivery_id == id.to_string()).unwrap();
        assert_eq!(receipt.codes, vec!["failed".to_owned(), code.code().to_owned()]);
    }
    assert!(rig.replies().is_empty(), "a failed turn posts nothing");
    // No provider words anywhere in the trail.
    let trail = format!("{:?}", rig.receipts.all());
    assert!(!trail.contains("billing"), "provider text reached a receipt");
    assert!(!trail.contains("zanzibar"), "message text reached a receipt");
    let turn_receipts = rig.receipts.all().into_iter().filter(|r| r.kind == "captain.turn").count();
    assert_eq!(turn_receipts, 4);
}

/// A delivery whose handling fails every time (here PostgreSQL refuses to record its
/// admission, and only its) is retried with growing backoff, then settled `failed` with
/// `captain_lane_unavailable` on its last delivery instead of looping; the lane's next message
/// is answered.
#[tokio::test]
async fn chaos_a_poison_delivery_fails_after_bounded_retries_and_the_lane_goes_on() {
    let rig = Rig::new().await;
    let (_captain, _task) = rig.captain_with("captain-a", &[("CLANKIE_INGRESS_MAX_DELIVER", "4".into())]).await;
    sqlx::raw_sql(
        "CREATE FUNCTION refuse_poison() RETURNS trigger AS $$
         BEGIN IF NEW.delivery_id = '777' THEN RAISE EXCEPTION 'poison'; END IF; RETURN NEW; END $$ LANGUAGE plpgsql;
         CREATE TRIGGER poison BEFORE INSERT ON admissions FOR EACH ROW EXECUTE FUNCTION refuse_poison();",
    )
    .execute(rig.store.pool())
    .await
    .unwrap();
    let started = std::time::Instant::now();
    rig.say_as(777, "ada", "@Clankie this one is poison", true, Some(super::GUILD)).await;
    rig.wait_outcomes(&[777]).await;
    let outcome = &rig.outcome_of(777)[0];
    assert_eq!(kind(outcome), v1::OutcomeKind::Failed);
    assert_eq!(outcome.failure_code, v1::FailureCode::CaptainLaneUnavailable as i32);
    let stored = rig.store.outcome("777").await.unwrap().unwrap();
    assert_eq!(stored.failure_code, Some(v1::FailureCode::CaptainLaneUnavailable));
    super::until("the outcome receipt", std::time::Duration::from_secs(5), || {
        rig.receipts.all().iter().any(|r| r.kind == "captain.outcome" && r.delivery_id == "777")
    })
    .await;
    let receipt = rig.receipts.all().into_iter().find(|r| r.kind == "captain.outcome" && r.delivery_id == "777").unwrap();
    assert_eq!(receipt.codes, ["failed", "captain_lane_unavailable"]);
    assert_eq!(receipt.counts["delivered"], 4, "given up on the fourth and last delivery");
    // Three failed tries waited 100, 200 and 400 ms (a tenth of the 1 s lease TTL, doubling).
    assert!(started.elapsed() >= std::time::Duration::from_millis(700), "no backoff: {:?}", started.elapsed());
    assert!(rig.replies().is_empty());

    rig.standin.script(Script::any(Reply::text("Still here.")));
    let next = rig.say("ada", "@Clankie still there?", true).await;
    rig.wait_outcomes(&[next]).await;
    assert_eq!(kind(&rig.outcome_of(next)[0]), v1::OutcomeKind::Replied);
    assert_eq!(rig.replies().len(), 1);
}
