use std::sync::{Arc, Mutex};
use std::time::Duration;

use clankie_agent::provider::{REHEARSAL_LABEL, ToolSpec};
use clankie_agent::{Agent, AgentEvent, Model, RehearsalModel, RunReply, Tool, ToolContext, ToolError};
use futures::future::BoxFuture;

use super::{Rig, drain, fast, user};

#[derive(Default, Clone)]
struct Updates(Arc<Mutex<Vec<String>>>);

impl Tool for Updates {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "send_text_update".into(),
            description: "Posts a short progress note.".into(),
            parameters: serde_json::json!({"type": "object"}),
        }
    }

    fn execute<'a>(&'a self, args: serde_json::Value, _ctx: ToolContext) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            self.0.lock().unwrap().push(args["text"].as_str().unwrap_or_default().to_owned());
            Ok("posted".into())
        })
    }
}

fn rehearsal() -> Model {
    Model::Rehearsal(RehearsalModel { think_delay: Duration::from_millis(5), token_delay: Duration::from_millis(1) })
}

#[tokio::test]
async fn the_rehearsal_model_answers_declines_and_posts_an_update_all_labelled() {
    let rig = Rig::new().await;
    let updates = Updates::default();
    let agent = Agent::new(rehearsal(), fast()).with_tool(Arc::new(updates.clone()));

    let run = agent.start(
        rig.session().await,
        "sys".into(),
        vec![user("1", "<message from=\"ada\">hello</message>"), user("2", "<message from=\"ada\">anyone?</message>")],
    );
    let (events, first) = drain(run).await;
    match first.outcome.unwrap() {
        RunReply::Words(t) => assert!(t.starts_with(REHEARSAL_LABEL) && t.contains("2 messages"), "{t}"),
        other => panic!("{other:?}"),
    }
    assert!(events.iter().any(|(_, e)| *e == AgentEvent::WordsComing));

    let run = agent.start(first.session, "sys".into(), vec![user("3", "please stay silent")]);
    let (events, second) = drain(run).await;
    assert_eq!(second.outcome.unwrap(), RunReply::Silent);
    assert!(events.iter().all(|(_, e)| *e != AgentEvent::WordsComing));

    let run = agent.start(second.session, "sys".into(), vec![user("4", "look up something slow")]);
    let (_, third) = drain(run).await;
    assert!(matches!(third.outcome.unwrap(), RunReply::Words(t) if t.starts_with(REHEARSAL_LABEL)));
    let posted = updates.0.lock().unwrap().clone();
    assert_eq!(posted.len(), 1, "exactly one progress note");
    assert!(posted[0].starts_with(REHEARSAL_LABEL));
}
