use clankie_captain::prompt::HISTORY_OPEN;
use clankie_model_standin::{Reply, Script};

use super::Rig;

#[tokio::test]
async fn a_warm_lane_is_never_resent_its_history_and_a_restart_reads_cold() {
    let rig = Rig::new().await;
    rig.say_as(1, "cy", "earlier chatter about brackets", false, Some(super::GUILD)).await;
    rig.say_as(2, "dee", "who is playing tonight", false, Some(super::GUILD)).await;
    let (_captain, task) = rig.captain("captain-a").await;
    // Those two were not addressed to him: not admitted, but they are the room's history.
    rig.standin.script(Script::any(Reply::text("one")));
    let m1 = rig.say("ada", "@Clankie what did I miss?", true).await;
    rig.wait_outcomes(&[m1]).await;
    rig.standin.script(Script::any(Reply::text("two")));
    let m2 = rig.say("ada", "@Clankie and now?", true).await;
    rig.wait_outcomes(&[m2]).await;

    let requests = rig.standin.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].count(HISTORY_OPEN), 1, "a cold lane walks in with the room's history");
    assert_eq!(requests[0].count("earlier chatter about brackets"), 1);
    assert_eq!(requests[1].count(HISTORY_OPEN), 1, "the warm lane holds its one block and is sent no second copy");
    assert_eq!(requests[1].count("earlier chatter about brackets"), 1);

    // A restart: the new process holds nothing warm, so its first turn carries history again.
    task.abort();
    let _ = task.await;
    let (_captain, _task) = rig.captain("captain-a").await;
    rig.standin.script(Script::any(Reply::text("three")));
    let m3 = rig.say("ada", "@Clankie back?", true).await;
    rig.wait_outcomes(&[m3]).await;
    let requests = rig.standin.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[2].count(HISTORY_OPEN), 2, "resumed from the store, the lane reads as cold and fetches history again");
    assert_eq!(requests[2].count("and now?"), 2, "its own session and the fresh history both hold the last exchange");
}
