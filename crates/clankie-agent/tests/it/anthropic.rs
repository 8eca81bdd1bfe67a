//! `anthropic_`: the agent through the real Anthropic client against the stand-in that keeps
//! Anthropic's wire and cache rules.

use std::sync::Arc;

use clankie_agent::provider::ToolSpec;
use clankie_agent::{AnthropicClient, AnthropicConfig, CacheTtl, Model, RunReply, Tool, ToolContext, ToolError};
use clankie_model_standin::{Reply, Script, ScriptedCall};
use clankie_proto::v1::FailureCode;
use futures::future::BoxFuture;
use serde_json::json;

use super::{Rig, drain, fast, user};

fn claude(rig: &Rig, key: Option<&str>) -> Model {
    Model::Anthropic(
        AnthropicClient::new(AnthropicConfig {
            base_url: rig.standin.base_url(),
            model: "claude-standin".into(),
            api_key: key.map(str::to_owned),
            response_timeout: clankie_agent::DEFAULT_RESPONSE_TIMEOUT,
            max_tokens: 1024,
            cache_ttl: CacheTtl::FiveMinutes,
        })
        .unwrap(),
    )
}

/// A character sheet of about 1,500 tokens, as a real persona runs.
fn persona(name: &str) -> String {
    format!("You are {name}, a friendly robot who remembers the room and answers briefly. ").repeat(80)
}

struct ReadPage;

impl Tool for ReadPage {
    fn spec(&self) -> ToolSpec {
        ToolSpec { name: "read_page".into(), description: "Reads a web page.".into(), parameters: json!({"type": "object"}) }
    }

    fn execute<'a>(&'a self, args: serde_json::Value, _ctx: ToolContext) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move { Ok(format!("the page at {} says: cats sleep 16 hours a day", args["url"].as_str().unwrap_or_default())) })
    }
}

#[tokio::test]
async fn anthropic_a_conversation_reads_its_prompt_from_the_cache_from_the_second_turn_and_a_persona_change_costs_one_turn() {
    let rig = Rig::new().await;
    let agent = clankie_agent::Agent::new(claude(&rig, Some("sk-ant-test")), fast());
    let mut session = rig.session().await;
    let mut shares = vec![];
    for turn in 0..6 {
        // The persona changes once, before the fifth turn.
        let system = if turn < 4 { persona("Clankie") } else { persona("Clanky") };
        rig.standin.script(Script::any(Reply::text(format!("answer number {turn}, which says a little more than a word"))));
        let run = agent.start(session, system, vec![user(&format!("{turn}"), &format!("<message from=\"ada\">question {turn}</message>"))]);
        let (_, result) = drain(run).await;
        assert!(matches!(result.outcome.as_ref().unwrap(), RunReply::Words(_)));
        session = result.session;
        let request = rig.standin.requests().pop().unwrap();
        shares.push(request.cached_estimate as f64 / request.token_estimate as f64);
        assert_eq!(result.stats.cached_input_tokens, request.cached_estimate, "the run counts what the provider reported");
        assert_eq!(result.stats.cache_write_input_tokens, request.cache_write_estimate);
        assert!(request.bearer_token, "the key went as x-api-key");
    }
    println!("anthropic: cached share per turn {:?}", shares.iter().map(|s| format!("{s:.3}")).collect::<Vec<_>>());
    assert_eq!(shares[0], 0.0, "the first turn has nothing to read");
    for (turn, share) in shares.iter().enumerate().filter(|(t, _)| *t != 0 && *t != 4) {
        assert!(*share >= 0.85, "turn {turn} read only {share:.3} of its input from the cache");
    }
    assert!(shares[4] < 0.5, "a persona change is a new prefix: {:.3}", shares[4]);
    // Breakpoints at the tools, the system prompt, his last message before the newest and the
    // conversation's end: never past Anthropic's 4.
    for r in rig.standin.requests() {
        let his = r.body["messages"].as_array().unwrap().iter().rev().skip(1).any(|m| m["role"] == "assistant");
        let marks = r.body.to_string().matches("\"cache_control\"").count();
        assert_eq!(marks, 2 + usize::from(his), "no tools here: the system prompt, his last message once there is one, and the end");
    }
}

/// The cache looks back only 20 blocks from a mark: a round of many tool calls adds more than
/// that, and the mark at the end of his last message is what still finds the turn before it.
#[tokio::test]
async fn anthropic_a_round_of_many_tool_calls_still_reads_the_call_before_it_from_the_cache() {
    let rig = Rig::new().await;
    let agent = clankie_agent::Agent::new(claude(&rig, Some("k")), fast()).with_tool(Arc::new(ReadPage));
    let calls: Vec<ScriptedCall> = (0..12)
        .map(|n| ScriptedCall { name: "read_page".into(), arguments: json!({ "url": format!("https://example.com/{n}") }) })
        .collect();
    rig.standin.script(Script::any(Reply::ToolCalls { calls, text: String::new() }));
    rig.standin.script(Script::any(Reply::text("Twelve pages, all about cats.")));
    let (_, result) = drain(agent.start(rig.session().await, persona("Clankie"), vec![user("1", "read these twelve pages")])).await;
    assert_eq!(result.outcome.unwrap(), RunReply::Words("Twelve pages, all about cats.".into()));
    let requests = rig.standin.requests();
    assert_eq!(requests.len(), 2);
    let blocks: usize = requests[1].messages().iter().skip(1).filter_map(|m| m["content"].as_array()).map(Vec::len).sum();
    assert!(blocks > 20, "the round adds {blocks} blocks, past the cache's lookback");
    println!(
        "anthropic: the first call {} tokens; after a round of {blocks} blocks the next read {} from the cache",
        requests[0].token_estimate, requests[1].cached_estimate
    );
    assert!(
        requests[1].cached_estimate >= requests[0].token_estimate,
        "the call after the round read {} tokens from the cache, less than the {} of the call before it",
        requests[1].cached_estimate,
        requests[0].token_estimate
    );
}

#[tokio::test]
async fn anthropic_a_tool_call_and_a_picture_go_round_trip_as_blocks() {
    let rig = Rig::new().await;
    let agent = clankie_agent::Agent::new(claude(&rig, Some("k")), fast()).with_tool(Arc::new(ReadPage));
    rig.standin.script(Script::any(Reply::ToolCalls {
        calls: vec![ScriptedCall { name: "read_page".into(), arguments: json!({ "url": "https://example.com/cats" }) }],
        text: "Let me look.".into(),
    }));
    rig.standin.script(Script::any(Reply::text("Cats sleep a lot.")));
    let mut asked = user("1", "what does this page say?");
    asked.images = vec!["data:image/png;base64,iVBORw0KGgo=".into()];
    let (_, result) = drain(agent.start(rig.session().await, "sys".into(), vec![asked])).await;
    assert_eq!(result.outcome.unwrap(), RunReply::Words("Cats sleep a lot.".into()));
    let requests = rig.standin.requests();
    assert_eq!(requests.len(), 2);
    let body = &requests[1].body;
    let turns = body["messages"].as_array().unwrap();
    let picture = &turns[0]["content"][0];
    assert_eq!((picture["type"].as_str(), picture["source"]["media_type"].as_str()), (Some("image"), Some("image/png")));
    let used = turns[1]["content"].as_array().unwrap().iter().find(|b| b["type"] == "tool_use").expect("the call went back").clone();
    assert_eq!((used["name"].as_str(), used["input"]["url"].as_str()), (Some("read_page"), Some("https://example.com/cats")));
    let answered = &turns[2]["content"][0];
    assert_eq!(answered["type"], "tool_result");
    assert_eq!(answered["tool_use_id"], used["id"]);
    assert!(answered["content"].as_str().unwrap().contains("16 hours"));
    assert_eq!(body["tools"][0]["input_schema"]["type"], "object");
}

#[tokio::test]
async fn anthropic_stay_silent_split_across_deltas_is_silent() {
    let rig = Rig::new().await;
    let agent = clankie_agent::Agent::new(claude(&rig, Some("k")), fast());
    rig.standin.script(Script::any(Reply::Text {
        text: "[[stay-silent]]".into(),
        chunk_chars: 3,
        chunk_delay_ms: 5,
        first_delay_ms: 0,
        tail_delay_ms: 0,
    }));
    let (events, result) = drain(agent.start(rig.session().await, "sys".into(), vec![user("1", "hi")])).await;
    assert_eq!(result.outcome.unwrap(), RunReply::Silent);
    assert!(events.iter().all(|(_, e)| *e != clankie_agent::AgentEvent::WordsComing), "no words ever came");
}

#[tokio::test]
async fn anthropic_a_stalled_stream_fails_on_silence_a_529_is_retried_and_a_401_is_not() {
    let rig = Rig::new().await;
    let agent = clankie_agent::Agent::new(claude(&rig, Some("k")), fast());
    rig.standin.script(Script::any(Reply::Stall { text_before: String::new() }));
    let (_, stalled) = drain(agent.start(rig.session().await, "sys".into(), vec![user("1", "hi")])).await;
    assert_eq!(stalled.outcome.unwrap(), RunReply::Failed(FailureCode::CaptainTurnStalled));

    rig.standin.script(Script::any(Reply::Status { status: 529 }));
    rig.standin.script(Script::any(Reply::text("back again")));
    let before = rig.standin.requests().len();
    let (events, overloaded) = drain(agent.start(stalled.session, "sys".into(), vec![user("2", "hi")])).await;
    assert_eq!(overloaded.outcome.unwrap(), RunReply::Words("back again".into()));
    assert_eq!(rig.standin.requests().len() - before, 2);
    assert!(events.iter().any(|(_, e)| matches!(e, clankie_agent::AgentEvent::RetryStart { code: "overloaded", .. })));

    rig.standin.script(Script::any(Reply::Status { status: 401 }));
    let before = rig.standin.requests().len();
    let (events, refused) = drain(agent.start(overloaded.session, "sys".into(), vec![user("3", "hi")])).await;
    assert_eq!(refused.outcome.unwrap(), RunReply::Failed(FailureCode::CaptainModelFailed));
    assert_eq!(rig.standin.requests().len() - before, 1, "an unauthorized key is not retried");
    assert!(!events.iter().any(|(_, e)| matches!(e, clankie_agent::AgentEvent::RetryStart { .. })));
    let kept =
        refused.session.entries().iter().any(
            |e| matches!(&e.body, clankie_agent::EntryBody::Assistant { provider_error: Some(m), .. } if m.contains("invalid x-api-key")),
        );
    assert!(kept, "the provider's message is kept in the session tree");
}

#[tokio::test]
async fn anthropic_five_breakpoints_are_refused_by_the_stand_in_with_anthropics_400() {
    let rig = Rig::new().await;
    let block = |text: &str| json!({ "type": "text", "text": text, "cache_control": { "type": "ephemeral" } });
    let body = json!({
        "model": "claude-standin", "max_tokens": 64, "stream": true,
        "system": [block("a"), block("b")],
        "messages": [{ "role": "user", "content": [block("c"), block("d"), block("e")] }],
    });
    clankie_agent::provider::install_tls_provider();
    let answer = reqwest::Client::new()
        .post(format!("{}/messages", rig.standin.base_url()))
        .header("x-api-key", "k")
        .header("anthropic-version", "2023-06-01")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 400);
    let error: serde_json::Value = answer.json().await.unwrap();
    assert_eq!(error["type"], "error");
    assert_eq!(error["error"]["type"], "invalid_request_error");
    assert_eq!(error["error"]["message"], "A maximum of 4 blocks with cache_control may be provided. Found 5.");
    assert!(rig.standin.requests().is_empty(), "a refused request is not served");
}

/// A compaction's summary call is made once: the next one summarises a different transcript, so
/// a cache write of it (1.25x the input price) would never be read. It goes with no breakpoints.
#[tokio::test]
async fn anthropic_a_compactions_summary_call_writes_nothing_to_the_cache() {
    let rig = Rig::new().await;
    let mut config = fast();
    config.compaction = clankie_agent::compaction::CompactionPolicy { budget_tokens: 1_000, keep_recent_tokens: 100 };
    let agent = clankie_agent::Agent::new(claude(&rig, Some("k")), config);
    for reply in ["Noted.", "SUMMARY: ada left a long note.", "You're welcome."] {
        rig.standin.script(Script::any(Reply::text(reply)));
    }
    // A note of some 1,500 tokens: past the budget, and past the cache's 1,024-token minimum, so
    // a marked summary call would be written.
    let mut session = rig.session().await;
    for (n, text) in [&"a long note about the bracket ".repeat(200), "thanks"].into_iter().enumerate() {
        let (_, result) = drain(agent.start(session, "sys".into(), vec![user(&n.to_string(), text)])).await;
        result.outcome.unwrap();
        session = result.session;
    }
    let requests = rig.standin.requests();
    assert_eq!(requests.len(), 3, "two turns and one compaction");
    let summary = &requests[1];
    assert!(summary.body.to_string().contains("Summarise"), "the second call is the compaction");
    println!("anthropic: the summary call sent {} tokens and wrote {} to the cache", summary.token_estimate, summary.cache_write_estimate);
    assert!(summary.token_estimate > 1_024, "the transcript is past the cache's minimum");
    assert_eq!(summary.body.to_string().matches("\"cache_control\"").count(), 0, "no breakpoints");
    assert_eq!(summary.cache_write_estimate, 0, "nothing written to the cache");
}
