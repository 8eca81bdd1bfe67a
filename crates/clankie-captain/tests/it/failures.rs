use clankie_model_standin::{Reply, Script};
use clankie_proto::v1;

use super::{Rig, kind};

#[tokio::test]
async fn each_failure_code_reaches_the_outcome_and_a_receipt_that_carries_only_the_code() {
    let rig = Rig::new().await;
    let (_captain, _task) = rig.captain("captain-a").await;
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
