use clankie_agent::{AgentEvent, EntryBody, RunReply};
use clankie_model_standin::{Reply, Script};
use clankie_proto::v1::FailureCode;

use super::{Rig, drain, fast, user};

async fn run_with(rig: &Rig, replies: Vec<Reply>) -> (Vec<AgentEvent>, clankie_agent::RunResult) {
    for r in replies {
        rig.standin.script(Script::any(r));
    }
    let run = rig.agent(fast()).start(rig.session().await, "sys".into(), vec![user("1", "hi")]);
    let (events, result) = drain(run).await;
    (events.into_iter().map(|(_, e)| e).collect(), result)
}

#[tokio::test]
async fn insufficient_quota_is_a_usage_limit_and_is_not_retried() {
    let rig = Rig::new().await;
    let (events, result) = run_with(&rig, vec![Reply::InsufficientQuota]).await;
    assert_eq!(result.outcome.unwrap(), RunReply::Failed(FailureCode::CaptainUsageLimitReached));
    assert_eq!(rig.standin.requests().len(), 1);
    assert!(!events.iter().any(|e| matches!(e, AgentEvent::RetryStart { .. })));
    // The provider's words stay in the session tree.
    let kept = result
        .session
        .entries()
        .iter()
        .any(|e| matches!(&e.body, EntryBody::Assistant { provider_error: Some(m), .. } if m.contains("exceeded your current quota")));
    assert!(kept, "provider message not kept in the session");
    assert!(
        result.session.context().iter().all(|m| !format!("{m:?}").contains("exceeded your current quota")),
        "an error is not model context"
    );
}

#[tokio::test]
async fn a_rate_limit_is_retried_and_the_run_succeeds() {
    let rig = Rig::new().await;
    let (events, result) = run_with(&rig, vec![Reply::RateLimited { retry_after_secs: 0 }, Reply::text("here now")]).await;
    assert_eq!(result.outcome.unwrap(), RunReply::Words("here now".into()));
    assert_eq!(rig.standin.requests().len(), 2);
    assert!(events.contains(&AgentEvent::RetryStart { attempt: 1, delay_ms: 0, code: "rate_limited" }));
    assert!(events.contains(&AgentEvent::RetryEnd { attempt: 1 }));
}

#[tokio::test]
async fn server_errors_past_the_retry_bound_are_a_model_failure() {
    let rig = Rig::new().await;
    let (events, result) = run_with(&rig, vec![Reply::Status { status: 500 }; 3]).await;
    assert_eq!(result.outcome.unwrap(), RunReply::Failed(FailureCode::CaptainModelFailed));
    assert_eq!(rig.standin.requests().len(), 3, "first attempt and two bounded retries");
    assert_eq!(events.iter().filter(|e| matches!(e, AgentEvent::RetryStart { .. })).count(), 2);
}

#[tokio::test]
async fn a_dropped_stream_is_retried() {
    // A body that ends cleanly but unfinished, and a connection reset in the middle of a chunk:
    // the first reaches the end of the stream, the second the client's body-error path.
    for dropped in [Reply::Drop { text_before: "half".into() }, Reply::Reset { text_before: "half".into() }] {
        let rig = Rig::new().await;
        let (events, result) = run_with(&rig, vec![dropped.clone(), Reply::text("whole answer")]).await;
        assert_eq!(result.outcome.unwrap(), RunReply::Words("whole answer".into()), "{dropped:?}");
        assert_eq!(rig.standin.requests().len(), 2, "{dropped:?}");
        assert_eq!(events.iter().filter(|e| matches!(e, AgentEvent::RetryStart { .. })).count(), 1, "{dropped:?}");
    }
}

#[tokio::test]
async fn a_rejected_request_is_a_model_failure_without_retry() {
    let rig = Rig::new().await;
    let (_, result) = run_with(&rig, vec![Reply::Status { status: 400 }]).await;
    assert_eq!(result.outcome.unwrap(), RunReply::Failed(FailureCode::CaptainModelFailed));
    assert_eq!(rig.standin.requests().len(), 1);
}

#[tokio::test]
async fn an_empty_answer_is_a_missing_response() {
    let rig = Rig::new().await;
    let (_, result) = run_with(&rig, vec![Reply::Empty]).await;
    assert_eq!(result.outcome.unwrap(), RunReply::Failed(FailureCode::CaptainResponseMissing));
}

#[tokio::test]
async fn the_api_key_is_sent_as_a_bearer_token_and_the_request_is_streamed() {
    let rig = Rig::new().await;
    let (_, result) = run_with(&rig, vec![Reply::text("hi")]).await;
    result.outcome.unwrap();
    let request = &rig.standin.requests()[0];
    assert!(request.bearer_token);
    let body = &request.body;
    assert_eq!(body["stream"], true);
    assert_eq!(body["messages"][0]["role"], "system");
    assert_eq!(body["messages"][1]["content"], "hi");
}
