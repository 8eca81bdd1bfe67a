//! 2026-08-18: three messages 4 s and 6 s apart got two answers. Now a burst gets one.

use std::time::Duration;

use clankie_model_standin::{Reply, Script};
use clankie_sandbox::rig::{GENERAL, Rig};

#[tokio::test]
async fn three_messages_four_and_six_seconds_apart_get_one_answer() {
    let rig = Rig::new().await;
    // About two seconds of writing: the whole burst arrives while the first answer is being written.
    rig.standin.script(Script::any(Reply::Text {
        text: "Lobbies open at eight, ".into(),
        chunk_chars: 2,
        chunk_delay_ms: 150,
        first_delay_ms: 100,
        tail_delay_ms: 0,
    }));
    rig.standin.script(Script::any(Reply::text("Lobby 4 at 20:00, and yes, bring your friend.")));
    let first = rig.say(GENERAL, "ada", "@Clankie is the deadlock lobby up?");
    tokio::time::sleep(Duration::from_millis(400)).await;
    let second = rig.say(GENERAL, "ada", "the one for tonight");
    tokio::time::sleep(Duration::from_millis(600)).await;
    let third = rig.say(GENERAL, "ada", "can I bring a friend?");
    rig.wait_outcomes(GENERAL, &[first, second, third]).await;
    let posts = rig.sandbox.discord.posts(GENERAL);
    assert_eq!(posts.len(), 1, "{posts:?}");
    assert_eq!(posts[0].reply_to, Some(third));
    let outcomes: Vec<_> = [first, second, third].iter().map(|id| rig.outcome(GENERAL, *id).unwrap_or_default()).collect();
    assert_eq!(outcomes, ["replied", "absorbed", "absorbed"]);
    let last = rig.standin.requests().pop().unwrap_or_else(|| panic!("no model request"));
    for text in ["is the deadlock lobby up?", "the one for tonight", "can I bring a friend?"] {
        assert_eq!(last.count(text), 1, "the answer did not hear {text:?}");
    }
}
