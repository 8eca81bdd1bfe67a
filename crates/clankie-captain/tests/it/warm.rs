use clankie_captain::prompt::HISTORY_OPEN;
use clankie_model_standin::{Reply, Script};

use super::{DumpLogsOnPanic, GUILD, Rig, spawn_captain};

/// The rule (seed ADR 0118): a lane's session is sent the room's history when it opens cold and
/// never again while warm; a session resumed from the store after a restart is sent only what
/// it has not heard. Across the three turns the model sees every line of the room exactly once.
#[tokio::test]
async fn a_warm_lane_is_never_resent_its_history_and_a_restart_reads_cold() {
    let rig = Rig::new().await;
    let _dump = DumpLogsOnPanic(rig.dir.path().to_owned());
    // Not addressed to him and before any exchange: not admitted, but they are the room's history.
    rig.say_as(1, "cy", "earlier chatter about brackets", false, Some(GUILD)).await;
    rig.say_as(2, "dee", "who is playing tonight", false, Some(GUILD)).await;
    let mut captain = spawn_captain(&rig, "captain-a");
    rig.standin.script(Script::any(Reply::text("reply alpha")));
    let m1 = rig.say("ada", "@Clankie what did I miss?", true).await;
    rig.wait_outcomes(&[m1]).await;
    rig.posted_by_him("reply alpha");
    rig.standin.script(Script::any(Reply::text("reply beta")));
    let m2 = rig.say("ada", "@Clankie and now?", true).await;
    rig.wait_outcomes(&[m2]).await;
    rig.posted_by_him("reply beta");

    let requests = rig.standin.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].count(HISTORY_OPEN), 1, "a cold lane walks in with the room's history");
    assert_eq!(requests[0].count("earlier chatter about brackets"), 1);
    assert_eq!(requests[1].count(HISTORY_OPEN), 1, "the warm lane holds its one block and is sent no second copy");
    for line in ["earlier chatter about brackets", "what did I miss?", "reply alpha"] {
        assert_eq!(requests[1].count(line), 1, "warm turn: {line:?}");
    }

    // A real restart: the process dies and a new one holds nothing warm.
    captain.start_kill().unwrap();
    captain.wait().await.unwrap();
    // The room goes on while he is away.
    rig.overheard("eve", "the stream starts soon");
    let _captain = spawn_captain(&rig, "captain-a");
    rig.standin.script(Script::any(Reply::text("reply gamma")));
    let m3 = rig.say("ada", "@Clankie back?", true).await;
    rig.wait_outcomes(&[m3]).await;
    let requests = rig.standin.requests();
    assert_eq!(requests.len(), 3);
    let cold = &requests[2];
    for line in [
        "earlier chatter about brackets",
        "who is playing tonight",
        "what did I miss?",
        "reply alpha",
        "and now?",
        "reply beta",
        "the stream starts soon",
        "back?",
    ] {
        assert_eq!(cold.count(line), 1, "after the restart the model saw {line:?} {} times", cold.count(line));
    }
}
