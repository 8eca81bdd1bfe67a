use std::time::Duration;

use clankie_model_standin::{Reply, Script};

use super::{GENERAL, Rig};

#[tokio::test]
async fn a_long_writing_turn_keeps_typing_lit_and_a_silent_one_never_lights() {
    let rig = Rig::new().await;
    // About two seconds of writing, ten typing intervals.
    let text: String = (0..40).map(|i| format!("w{i:02} ")).collect();
    rig.standin.script(Script::any(Reply::Text { text, chunk_chars: 4, chunk_delay_ms: 50, first_delay_ms: 0, tail_delay_ms: 0 }));
    let asked = rig.say(GENERAL, "ada", "@Clankie write a lot");
    rig.wait_outcomes(GENERAL, &[asked]).await;
    let reply_at = rig.sandbox.discord.posts(GENERAL)[0].at_ms;
    let triggers = rig.sandbox.discord.typing(GENERAL);
    assert!(triggers.len() >= 5, "{triggers:?}");
    let gaps: Vec<i64> = triggers.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps.iter().all(|g| *g < 1_000), "typing lapsed: gaps {gaps:?} (interval 200 ms)");
    let settled = tokio::time::Instant::now();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let after: Vec<_> = rig.sandbox.discord.typing(GENERAL).into_iter().filter(|t| *t > reply_at + 50).collect();
    assert!(after.is_empty(), "typing went on after the reply: {after:?}");
    let _ = settled;

    let before = rig.sandbox.discord.typing(GENERAL).len();
    rig.standin.script(Script::any(Reply::Text {
        text: "[[stay-silent]]".into(),
        chunk_chars: 1,
        chunk_delay_ms: 20,
        first_delay_ms: 0,
        tail_delay_ms: 0,
    }));
    let ignored = rig.say(GENERAL, "bob", "@Clankie nobody asked you");
    rig.wait_outcomes(GENERAL, &[ignored]).await;
    assert_eq!(rig.outcome(GENERAL, ignored).as_deref(), Some("silent"));
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(rig.sandbox.discord.typing(GENERAL).len(), before, "a silent turn lit the room");
    assert_eq!(rig.sandbox.discord.posts(GENERAL).len(), 1, "no fragment of the token was posted");
}

#[tokio::test]
async fn a_cold_lane_reads_the_room_through_the_gateways_history() {
    let rig = Rig::new().await;
    rig.say(GENERAL, "cy", "the bracket moved to saturday");
    rig.say(GENERAL, "dee", "who is casting?");
    let asked = rig.say(GENERAL, "ada", "@Clankie what did I miss?");
    rig.wait_outcomes(GENERAL, &[asked]).await;
    let request = &rig.standin.requests()[0];
    assert_eq!(request.count(clankie_captain::prompt::HISTORY_OPEN), 1);
    assert_eq!(request.count("the bracket moved to saturday"), 1);
    assert_eq!(request.count("who is casting?"), 1);
    assert_eq!(request.count("what did I miss?"), 1, "the asking message is the turn, not history");
}
