//! 2026-08-18: three messages 4 s and 6 s apart got two answers. Now a burst gets one.

use std::time::Duration;

use clankie_model_standin::{Reply, Script};
use clankie_proto::{Family, v1};
use clankie_sandbox::rig::{GENERAL, Rig, until};

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

/// When Discord shows the asker still typing, the lane's first model call waits for the
/// rest of the burst: one call hears all three messages, and nothing is written twice.
#[tokio::test]
async fn a_burst_the_asker_is_still_typing_is_answered_in_one_model_call() {
    let rig = Rig::new().await;
    rig.standin.script(Script::any(Reply::text("Lobby 4 at 20:00, and yes, bring your friend.")));
    let first = rig.say(GENERAL, "ada", "@Clankie is the deadlock lobby up?");
    rig.sandbox.discord.user_typing(GENERAL, "ada");
    tokio::time::sleep(Duration::from_millis(400)).await;
    let second = rig.say(GENERAL, "ada", "the one for tonight");
    rig.sandbox.discord.user_typing(GENERAL, "ada");
    tokio::time::sleep(Duration::from_millis(600)).await;
    let third = rig.say(GENERAL, "ada", "can I bring a friend?");
    rig.wait_outcomes(GENERAL, &[first, second, third]).await;

    let requests = rig.standin.requests();
    assert_eq!(requests.len(), 1, "one model call for the burst");
    for text in ["is the deadlock lobby up?", "the one for tonight", "can I bring a friend?"] {
        assert_eq!(requests[0].count(text), 1, "the call did not hear {text:?}");
    }
    let posts = rig.sandbox.discord.posts(GENERAL);
    assert_eq!(posts.len(), 1, "{posts:?}");
    let outcomes: Vec<_> = [first, second, third].iter().map(|id| rig.outcome(GENERAL, *id).unwrap_or_default()).collect();
    assert_eq!(outcomes, ["replied", "absorbed", "absorbed"]);
}

/// Typing that never becomes a message holds the answer only as long as configured.
#[tokio::test]
async fn a_typist_who_never_sends_delays_the_answer_by_the_hold_at_most() {
    const HOLD_MS: i64 = 700;
    let rig = Rig::with(&[("CLANKIE_TYPING_HOLD_MS", "700")]).await;
    let bus = rig.bus().await;
    let receipts = clankie_testkit::record::<v1::Receipt>(&bus, Family::Receipt).await;
    let first = rig.say(GENERAL, "ada", "@Clankie is the deadlock lobby up?");
    rig.sandbox.discord.user_typing(GENERAL, "ada");
    rig.wait_outcomes(GENERAL, &[first]).await;
    let requests = rig.standin.requests();
    assert_eq!(requests.len(), 1);
    // The hold's own measure, on the run's clock: the configured hold and one clock tick more.
    until("the turn receipt", Duration::from_secs(10), || {
        receipts.all().iter().any(|r| r.kind == "captain.turn" && r.delivery_id == first.to_string())
    })
    .await;
    let turn = receipts.all().into_iter().find(|r| r.kind == "captain.turn" && r.delivery_id == first.to_string()).unwrap();
    let held = turn.counts["typing_hold_ms"];
    assert!((HOLD_MS..HOLD_MS + 150).contains(&held), "the hold lasted {held} ms for a {HOLD_MS} ms setting");
    // End to end: at least the hold, and not much more than the hold plus the way in.
    let sent_at = rig.sandbox.discord.messages(GENERAL).iter().find(|m| m.id == first).map(|m| m.at_ms).unwrap_or_default();
    let waited = requests[0].at_ms - sent_at;
    assert!((HOLD_MS..HOLD_MS + 1_500).contains(&waited), "the first call came {waited} ms after the message");
}
