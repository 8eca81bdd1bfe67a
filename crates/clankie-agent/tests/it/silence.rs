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
