use std::sync::Arc;

use clankie_agent::{AgentEvent, RunReply, Tool, ToolContext, ToolError, provider::ToolSpec};
use clankie_model_standin::{Reply, Script};
use futures::future::BoxFuture;
use tokio::sync::{Notify, mpsc};

use super::{Rig, arc, drain, fast, user};

/// A tool that reports when it starts and finishes only when released.
struct Gate {
    started: mpsc::UnboundedSender<()>,
    release: Arc<Notify>,
}

impl Tool for Gate {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "look_up_bracket".into(),
            description: "Looks a bracket up.".into(),
            parameters: serde_json::json!({"type": "object"}),
        }
    }

    fn execute<'a>(&'a self, _args: serde_json::Value, ctx: ToolContext) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let _ = self.started.send(());
            ctx.progress();
            self.release.notified().await;
            Ok("bracket: lobby 4 starts at 20:00".into())
        })
    }
}

#[tokio::test]
async fn a_steer_during_a_tool_batch_waits_for_the_batch_and_joins_the_next_call() {
    let rig = Rig::new().await;
    rig.standin.script(Script::any(Reply::tool("look_up_bracket", serde_json::json!({"q": "deadlock"}))));
    rig.standin.script(Script::any(Reply::text("Lobby 4 at 20:00, and yes, bring a friend.")));
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let release = Arc::new(Notify::new());
    let agent = rig.agent(fast()).with_tool(arc(Gate { started: started_tx, release: release.clone() }));
    let run = agent.start(rig.session().await, "You are Clankie.".into(), vec![user("1", "is the deadlock lobby up?")]);

    started.recv().await.unwrap();
    run.steerer().steer(user("2", "can I bring a friend?")).unwrap();
    // The tool is still running: the steer must not have reached the model yet.
    assert_eq!(rig.standin.requests().len(), 1);
    release.notify_one();

    let (events, result) = drain(run).await;
    assert_eq!(result.outcome.unwrap(), RunReply::Words("Lobby 4 at 20:00, and yes, bring a friend.".into()));
    let requests = rig.standin.requests();
    assert_eq!(requests.len(), 2, "one run, two model calls");
    assert_eq!(requests[0].count("can I bring a friend?"), 0);
    assert_eq!(requests[1].count("can I bring a friend?"), 1);
    assert_eq!(requests[1].count("bracket: lobby 4"), 1, "the tool result is in the next call");
    assert_eq!(result.stats.steered, vec!["2".to_owned()]);
    let order: Vec<_> = events
        .iter()
        .filter_map(|(_, e)| match e {
            AgentEvent::ToolEnd { is_error, .. } => Some(format!("tool_end:{is_error}")),
            AgentEvent::SteerDelivered { delivery_id } => Some(format!("steer:{delivery_id}")),
            _ => None,
        })
        .collect();
    assert_eq!(order, ["tool_end:false", "steer:2"], "the batch completed before the steer was delivered");
}

#[tokio::test]
async fn a_steer_after_the_last_token_gets_one_more_call_and_one_reply() {
    let rig = Rig::new().await;
    rig.standin.script(Script::any(Reply::Text {
        text: "Lobby is up.".into(),
        chunk_chars: 64,
        chunk_delay_ms: 0,
        first_delay_ms: 0,
        tail_delay_ms: 300,
    }));
    rig.standin.script(Script::any(Reply::text("Lobby is up, and 20:00 works.")));
    let mut run = rig.agent(fast()).start(rig.session().await, "sys".into(), vec![user("1", "lobby?")]);
    let steerer = run.steerer();
    // The whole answer has streamed once WordsComing is seen; the stream has not finished yet.
    while let Some(e) = run.next_event().await {
        if e == AgentEvent::WordsComing {
            steerer.steer(user("2", "does 20:00 work?")).unwrap();
            break;
        }
    }
    let (_, result) = drain(run).await;
    assert_eq!(result.outcome.unwrap(), RunReply::Words("Lobby is up, and 20:00 works.".into()));
    let requests = rig.standin.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[1].count("does 20:00 work?"), 1);
    assert_eq!(result.stats.steered, vec!["2".to_owned()]);
    assert!(result.undelivered.is_empty());
}

#[tokio::test]
async fn a_steer_into_a_finished_run_is_handed_back() {
    let rig = Rig::new().await;
    let run = rig.agent(fast()).start(rig.session().await, "sys".into(), vec![user("1", "hi")]);
    let steerer = run.steerer();
    let (_, result) = drain(run).await;
    assert_eq!(result.outcome.unwrap(), RunReply::Words("ok".into()));
    let back = steerer.steer(user("2", "late")).unwrap_err();
    assert_eq!(back.delivery_id, "2");
    assert!(!steerer.is_open());
}

#[tokio::test]
async fn a_steer_arriving_mid_compaction_is_answered() {
    let rig = Rig::new().await;
    let mut config = fast();
    config.compaction = clankie_agent::compaction::CompactionPolicy { budget_tokens: 60, keep_recent_tokens: 10 };
    // Some history to compact.
    let mut session = rig.session().await;
    for i in 0..6 {
        session
            .append(clankie_agent::EntryBody::User {
                author: "ada".into(),
                delivery_id: format!("h{i}"),
                text: format!("older message number {i} with some words in it"),
                images: vec![],
                lines: vec![],
            })
            .await
            .unwrap();
        session
            .append(clankie_agent::EntryBody::Assistant {
                text: format!("older answer {i}"),
                tool_calls: vec![],
                stop_reason: "stop".into(),
                usage: Default::default(),
                provider_error: None,
                forgotten_asker: false,
            })
            .await
            .unwrap();
    }
    rig.standin.script(Script::when(
        "compacting your own conversation history",
        Reply::Text {
            text: "Ada asked six things; all answered.".into(),
            chunk_chars: 8,
            chunk_delay_ms: 0,
            first_delay_ms: 300,
            tail_delay_ms: 0,
        },
    ));
    rig.standin.script(Script::any(Reply::text("Both answered: yes, and lobby 4.")));
    let mut run = rig.agent(config).start(session, "sys".into(), vec![user("7", "newest question")]);
    let steerer = run.steerer();
    while let Some(e) = run.next_event().await {
        if e == AgentEvent::CompactionStart {
            steerer.steer(user("8", "arrived during compaction")).unwrap();
            break;
        }
    }
    let (events, result) = drain(run).await;
    assert_eq!(result.outcome.unwrap(), RunReply::Words("Both answered: yes, and lobby 4.".into()));
    assert!(events.iter().any(|(_, e)| *e == AgentEvent::CompactionEnd));
    let requests = rig.standin.requests();
    assert_eq!(requests.len(), 2, "summary call, then one answer");
    let answer = &requests[1];
    assert_eq!(answer.count("arrived during compaction"), 1);
    assert_eq!(answer.count("Ada asked six things"), 1, "the summary stands in for the old turns");
    assert_eq!(answer.count("older message number 0"), 0);
    assert_eq!(result.stats.steered, vec!["8".to_owned()]);
    // The compaction never separated a tool call from its result, and the kept part begins at a user message.
    let entries = result.session.entries();
    let first_kept = entries.iter().rev().find_map(|e| match &e.body {
        clankie_agent::EntryBody::Compaction { first_kept_id, .. } => Some(first_kept_id.clone()),
        _ => None,
    });
    let first_kept = entries.iter().find(|e| Some(&e.id) == first_kept.as_ref()).expect("a compaction entry");
    assert!(matches!(first_kept.body, clankie_agent::EntryBody::User { .. }));

    // cache_budget: reopened from the store, the session reads from its compaction on, and
    // gives the model the same context as the live one.
    let reloaded = clankie_agent::Session::open(rig.store.clone(), result.session.lease().clone(), result.session.tree()).await.unwrap();
    assert_eq!(reloaded.context(), result.session.context());
    assert!(reloaded.entries().len() < entries.len(), "the whole tree was read: {} entries", reloaded.entries().len());
    assert!(
        !reloaded.entries().iter().any(|e| matches!(&e.body, clankie_agent::EntryBody::User { text, .. } if text.contains("number 0")))
    );

    // cache_budget: the warm copy lets go of what the summary replaced and is then the fresh
    // open, entry for entry, with the same context and fewer bytes.
    let mut warm = result.session;
    let (held, context) = (warm.approx_bytes(), warm.context());
    warm.let_go_of_summarised();
    let ids = |s: &clankie_agent::Session| s.entries().iter().map(|e| e.id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&warm), ids(&reloaded), "the warm copy is not what a fresh open reads");
    assert_eq!(warm.context(), context, "letting go changed what the model sees");
    println!("cache_budget: the warm copy held {held} bytes, {} after letting go of the summarised turns", warm.approx_bytes());
    assert!(warm.approx_bytes() < held);
}
