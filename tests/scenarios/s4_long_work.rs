//! The nine-minute bracket answer was a good answer: a turn that keeps working is never
//! cut off. It says so once while the person waits, and stays visibly at work.

use std::time::Duration;

use clankie_model_standin::{Reply, Script};
use clankie_sandbox::rig::{GENERAL, Rig};

#[tokio::test]
async fn long_requested_work_that_keeps_emitting_is_never_aborted() {
    // Silence 600 ms; the answer takes about five seconds: eight silence windows, compressed from nine minutes.
    let rig = Rig::with(&[("CLANKIE_STALL_SILENCE_MS", "600"), ("CLANKIE_STALL_TICK_MS", "50")]).await;
    rig.standin.script(Script::any(Reply::tool(
        "send_text_update",
        serde_json::json!({ "text": "On it: the bracket is long, give me a few minutes." }),
    )));
    let answer: String = (0..50).map(|i| format!("round {i:02}, ")).collect();
    rig.standin.script(Script::any(Reply::Text {
        text: answer.clone(),
        chunk_chars: 10,
        chunk_delay_ms: 100,
        first_delay_ms: 0,
        tail_delay_ms: 0,
    }));
    let started = tokio::time::Instant::now();
    let id = rig.say(GENERAL, "ada", "@Clankie walk me through the whole bracket");
    rig.wait_outcomes(GENERAL, &[id]).await;
    assert!(started.elapsed() > Duration::from_millis(600 * 6), "too quick to prove anything");
    assert_eq!(rig.outcome(GENERAL, id).as_deref(), Some("replied"), "never aborted");
    let posts = rig.sandbox.discord.posts(GENERAL);
    assert_eq!(posts.len(), 2, "one progress note and one reply: {posts:?}");
    assert!(posts[0].content.starts_with("On it"));
    assert_eq!(posts[0].reply_to, Some(id));
    assert_eq!(posts[1].content, answer.trim());
    // Typing lit throughout the writing: from the first trigger to the reply, no gap near Discord's 10 s expiry
    // (the interval here is 200 ms).
    let triggers = rig.sandbox.discord.typing(GENERAL);
    assert!(triggers.len() >= 10, "{triggers:?}");
    let gaps: Vec<i64> = triggers.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps.iter().all(|g| *g < 1_000), "the indicator lapsed: {gaps:?}");
    assert!(posts[1].at_ms - triggers.last().copied().unwrap_or(0) < 1_000, "typing stopped well before the reply");
}
