//! The ingest path under a slow lane: every lane is its own actor, so admission never waits on a run.

use clankie_model_standin::{Reply, Script};
use clankie_proto::v1;

use super::{CHANNEL, Rig};

#[tokio::test]
async fn ingest_concurrency_a_lane_with_a_slow_model_does_not_delay_admissions_or_answers_for_other_lanes() {
    let rig = Rig::new().await;
    let (_captain, _task) = rig.captain("captain-a").await;
    // The room's answer streams for about four seconds, a word at a time.
    rig.standin.script(Script::when(
        "slow question",
        Reply::Text { text: "s".repeat(40), chunk_chars: 2, chunk_delay_ms: 200, first_delay_ms: 0, tail_delay_ms: 0 },
    ));
    for _ in 0..5 {
        rig.standin.script(Script::when("quick one", Reply::text("quick answer")));
    }
    let slow = rig.say("ada", "@Clankie slow question", true).await;
    super::until("the slow run started", std::time::Duration::from_secs(10), || {
        rig.receipts.all().iter().any(|r| r.kind == "captain.run" && r.delivery_id == slow.to_string())
    })
    .await;

    // Five DMs (each its own lane, dm:<channel>) arrive while the room's model is still writing.
    let dms: Vec<u64> = (0..5).map(|i| 9_000 + i).collect();
    for (i, id) in dms.iter().enumerate() {
        let ingress_channel = CHANNEL + 1 + i as u64;
        rig.say_in(*id, "bob", "a quick one please", ingress_channel).await;
    }
    rig.wait_outcomes(&dms).await;
    assert!(rig.outcome_of(slow).is_empty(), "the DMs waited for the slow room: it settled first");
    for id in &dms {
        assert_eq!(super::kind(&rig.outcome_of(*id)[0]), v1::OutcomeKind::Replied);
    }
    rig.wait_outcomes(&[slow]).await;
    assert_eq!(super::kind(&rig.outcome_of(slow)[0]), v1::OutcomeKind::Replied);
}
