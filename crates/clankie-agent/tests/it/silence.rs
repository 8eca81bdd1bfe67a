use clankie_agent::{AgentEvent, RunReply};
use clankie_model_standin::{Reply, Script};

use super::{Rig, drain, fast, user};

fn pieces(text: &str, size: usize) -> Reply {
    Reply::Text { text: text.into(), chunk_chars: size, chunk_delay_ms: 5, first_delay_ms: 0, tail_delay_ms: 0 }
}

#[tokio::test]
async fn the_token_in_small_pieces_never_yields_a_words_event() {
    let rig = Rig::new().await;
    rig.standin.script(Script::any(pieces("  [[stay-silent]] \n", 1)));
    let run = rig.agent(fast()).start(rig.session().await, "sys".into(), vec![user("1", "ok whatever")]);
    let (events, result) = drain(run).await;
    assert_eq!(result.outcome.unwrap(), RunReply::Silent);
    assert!(events.iter().all(|(_, e)| *e != AgentEvent::WordsComing), "a words event leaked");
    assert!(events.iter().filter(|(_, e)| matches!(e, AgentEvent::TextDelta { .. })).count() > 10, "it did stream");
    assert!(!result.stats.words_came);
}

#[tokio::test]
async fn a_near_miss_is_words() {
    let rig = Rig::new().await;
    rig.standin.script(Script::any(pieces("[[stay with me, I'm nearly there", 2)));
    let run = rig.agent(fast()).start(rig.session().await, "sys".into(), vec![user("1", "you there?")]);
    let (events, result) = drain(run).await;
    assert_eq!(result.outcome.unwrap(), RunReply::Words("[[stay with me, I'm nearly there".into()));
    assert_eq!(events.iter().filter(|(_, e)| *e == AgentEvent::WordsComing).count(), 1);
}

#[tokio::test]
async fn the_token_with_words_after_it_goes_out_without_the_token() {
    let rig = Rig::new().await;
    rig.standin.script(Script::any(pieces("[[stay-silent]] actually, hi!", 3)));
    let run = rig.agent(fast()).start(rig.session().await, "sys".into(), vec![user("1", "hello")]);
    let (_, result) = drain(run).await;
    assert_eq!(result.outcome.unwrap(), RunReply::Words("actually, hi!".into()));
}

/// The day bench's model answers what it is asked now and stays silent for chatter: a stand-in
/// script for the last message is not taken by a request whose earlier messages match it.
#[tokio::test]
async fn a_script_for_the_last_message_answers_what_is_asked_now_not_what_was_shown_before() {
    let rig = Rig::new().await;
    for _ in 0..2 {
        rig.standin.script(Script::when_last("Clankie", pieces("hello", 5)));
    }
    rig.standin.script(Script::any(pieces("[[stay-silent]]", 5)));
    let agent = rig.agent(fast());
    let (_, first) = drain(agent.start(rig.session().await, "sys".into(), vec![user("1", "Clankie, are you there?")])).await;
    assert_eq!(first.outcome.unwrap(), RunReply::Words("hello".into()));
    let (_, second) = drain(agent.start(first.session, "sys".into(), vec![user("2", "chatter about the raid")])).await;
    assert_eq!(second.outcome.unwrap(), RunReply::Silent, "the earlier mention was shown, not asked");
    assert!(rig.standin.requests()[1].all_text().contains("Clankie"));
    let (_, third) = drain(agent.start(second.session, "sys".into(), vec![user("3", "Clankie again")])).await;
    assert_eq!(third.outcome.unwrap(), RunReply::Words("hello".into()));
}
