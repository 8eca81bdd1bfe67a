//! `anthropic_` through the real captain on Claude's wire: the Anthropic client against the
//! stand-in that keeps Anthropic's events, errors and cache rules.

use clankie_model_standin::{Reply, Script};
use clankie_proto::v1;
use clankie_testkit::pages::{Answer, TestPages};

use super::{Rig, kind};

/// The provider's settings for a captain on Claude's wire, with a short stall bound.
fn claude() -> Vec<(&'static str, String)> {
    vec![("CLANKIE_MODEL_PROVIDER", "anthropic".into()), ("CLANKIE_STALL_SILENCE_MS", "800".into())]
}

#[tokio::test]
async fn anthropic_a_read_page_round_trip_goes_as_tool_use_and_tool_result_blocks_and_the_answer_posts() {
    let rig = Rig::new().await;
    let page = TestPages::start("127.0.0.1", vec![("/lobby", Answer::html("<p>The lobby opens at eight tonight.</p>"))]).await.unwrap();
    let mut settings = claude();
    settings.push(("CLANKIE_EGRESS_ALLOW", page.addr().to_string()));
    let (_captain, _task) = rig.captain_with("captain-a", &settings).await;
    rig.standin.script(Script::any(Reply::tool("read_page", serde_json::json!({ "url": page.url("/lobby") }))));
    rig.standin.script(Script::any(Reply::text("It opens at eight.")));
    let id = rig.say("ada", "@Clankie when does the lobby open?", true).await;
    rig.wait_outcomes(&[id]).await;
    assert_eq!(kind(&rig.outcome_of(id)[0]), v1::OutcomeKind::Replied);
    assert_eq!(page.hits("/lobby"), 1, "the tool read the page");
    assert!(rig.replies().iter().any(|r| r.text == "It opens at eight."));
    let requests = rig.standin.requests();
    assert_eq!(requests.len(), 2);
    let turns = requests[1].body["messages"].as_array().unwrap().clone();
    let used = turns
        .iter()
        .flat_map(|t| t["content"].as_array().cloned().unwrap_or_default())
        .find(|b| b["type"] == "tool_use")
        .expect("the call went back as a tool_use block");
    let result = turns
        .iter()
        .flat_map(|t| t["content"].as_array().cloned().unwrap_or_default())
        .find(|b| b["type"] == "tool_result")
        .expect("the page went back as a tool_result block");
    assert_eq!(result["tool_use_id"], used["id"]);
    assert!(result["content"].as_str().unwrap().contains("opens at eight tonight"), "{result}");
    assert!(
        requests.iter().all(|r| r.body["max_tokens"].is_u64() && r.body.get("stream_options").is_none()),
        "every call spoke Claude's wire"
    );
}

/// A page read in one turn stays in the conversation whole until a compaction, so the next
/// turn's request repeats the last one byte for byte and reads all of it from the cache.
#[tokio::test]
async fn anthropic_a_read_page_round_trip_in_one_turn_is_read_whole_from_the_cache_by_the_next() {
    let rig = Rig::new().await;
    let long = format!("<p>The lobby opens at eight tonight.</p>{}", "<p>Bring your own snacks; pretzels preferred.</p>".repeat(60));
    let page = TestPages::start("127.0.0.1", vec![("/lobby", Answer::html(&long))]).await.unwrap();
    let mut settings = claude();
    settings.push(("CLANKIE_EGRESS_ALLOW", page.addr().to_string()));
    let (_captain, _task) = rig.captain_with("captain-a", &settings).await;
    rig.standin.script(Script::any(Reply::tool("read_page", serde_json::json!({ "url": page.url("/lobby") }))));
    rig.standin.script(Script::any(Reply::text("It opens at eight.")));
    rig.standin.script(Script::any(Reply::text("Any time.")));
    let asked = rig.say("ada", "@Clankie when does the lobby open?", true).await;
    rig.wait_outcomes(&[asked]).await;
    let thanked = rig.say("ada", "@Clankie thanks", true).await;
    rig.wait_outcomes(&[thanked]).await;
    assert_eq!(kind(&rig.outcome_of(thanked)[0]), v1::OutcomeKind::Replied);
    let requests = rig.standin.requests();
    assert_eq!(requests.len(), 3, "the read, the answer, the thanks");
    let result = |r: &clankie_model_standin::RecordedRequest| r.body.to_string().matches("Bring your own snacks").count();
    assert!(result(&requests[1]) >= 60, "the run that read the page saw it whole");
    assert_eq!(result(&requests[2]), result(&requests[1]), "the next turn still shows the page as it was");
    let (before, after) = (&requests[1], &requests[2]);
    println!(
        "anthropic: turn 1's last prompt {} tokens; turn 2 read {} from the cache, wrote {}, of {}",
        before.token_estimate, after.cached_estimate, after.cache_write_estimate, after.token_estimate
    );
    assert!(
        after.cached_estimate >= before.token_estimate,
        "turn 2 read {} tokens from the cache, less than turn 1's whole prompt of {}",
        after.cached_estimate,
        before.token_estimate
    );
}

#[tokio::test]
async fn anthropic_silence_split_across_deltas_a_stall_a_529_then_success_and_a_401_each_settle_as_they_should() {
    let rig = Rig::new().await;
    let (_captain, _task) = rig.captain_with("captain-a", &claude()).await;
    let cases: [(Vec<Reply>, v1::OutcomeKind, Option<v1::FailureCode>, usize); 4] = [
        (
            vec![Reply::Text { text: "[[stay-silent]]".into(), chunk_chars: 3, chunk_delay_ms: 5, first_delay_ms: 0, tail_delay_ms: 0 }],
            v1::OutcomeKind::Silent,
            None,
            1,
        ),
        (vec![Reply::Stall { text_before: String::new() }], v1::OutcomeKind::Failed, Some(v1::FailureCode::CaptainTurnStalled), 1),
        (vec![Reply::Status { status: 529 }, Reply::text("Back again.")], v1::OutcomeKind::Replied, None, 2),
        (vec![Reply::Status { status: 401 }], v1::OutcomeKind::Failed, Some(v1::FailureCode::CaptainModelFailed), 1),
    ];
    for (n, (replies, outcome, code, calls)) in cases.into_iter().enumerate() {
        for r in replies {
            rig.standin.script(Script::any(r));
        }
        let before = rig.standin.requests().len();
        let id = rig.say("ada", &format!("@Clankie case {n}"), true).await;
        rig.wait_outcomes(&[id]).await;
        let settled = &rig.outcome_of(id)[0];
        assert_eq!(kind(settled), outcome, "case {n}");
        assert_eq!(code.map(|c| c as i32).unwrap_or(0), settled.failure_code, "case {n}");
        assert_eq!(rig.standin.requests().len() - before, calls, "case {n}: model calls");
        rig.standin.clear_scripts();
    }
    let replies: Vec<String> = rig.replies().into_iter().map(|r| r.text).collect();
    assert_eq!(replies, ["Back again."], "only the retried turn posted; the silent one never did");
}
