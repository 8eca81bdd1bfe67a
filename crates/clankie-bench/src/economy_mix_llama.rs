//! The economy mix on llama.cpp (`CLANKIE_BENCH_MODEL=llama`): the requests the stack sent the
//! OpenAI-compatible stand-in over the mix, replayed in the order they arrived to llama.cpp's own
//! server, which reports what its prompt cache served.
//!
//! The stack itself cannot be run against it for this mix: its 135M model has no tool-call
//! template (it never calls `read_page`) and no vision (it refuses a picture), so the scripted
//! requests are replayed instead, byte for byte but for two changes: each picture becomes a
//! short text placeholder, and each answer is bounded to one token (the next request carries the
//! stand-in's scripted answer, not the model's, so what llama.cpp generated is never reused:
//! the cached share reads a little lower than a lane answered by the server itself).

use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use clankie_store::{Prices, Tokens};

use crate::economy::per_1000_messages;
use crate::mix_bill::{Mix, print_goals};

/// `economy_mix_*_llama`: both replays' requests, each on a server of its own (one slot, as
/// `clankie llama` runs it), priced like the stand-ins' and with the same goals.
pub(crate) async fn report(prices: &Prices, oneshot: &Mix, durable: &Mix, messages: usize) -> Result<()> {
    let mut usd = Vec::new();
    let mut durable_billed = Tokens::default();
    for (mode, mix) in [("oneshot", oneshot), ("durable", durable)] {
        let server = tokio::task::spawn_blocking(|| {
            clankie_stack::LlamaServer::start(&clankie_stack::LlamaOptions::default(), &mut |m| eprintln!("economy-mix: {m}"))
        })
        .await?
        .context("starting the llama.cpp server")?;
        let before = server.metrics()?;
        let mut by_source: Vec<(&'static str, Tokens)> = Vec::new();
        let mut refused = 0usize;
        for (n, (source, request)) in mix.requests.iter().enumerate() {
            let (prompt, cached) = match ask(server.port(), &for_llama(&request.body)).await {
                Ok(counts) => counts,
                Err(e) => {
                    refused += 1;
                    eprintln!("economy-mix ({mode}, llama): request {n} {source} was refused: {e:#}");
                    continue;
                }
            };
            eprintln!("economy-mix ({mode}, llama): request {n} {source}: {prompt} tokens, read {cached}");
            let entry = match by_source.iter().position(|(s, _)| s == source) {
                Some(i) => &mut by_source[i].1,
                None => {
                    by_source.push((source, Tokens::default()));
                    &mut by_source.last_mut().context("a source just added")?.1
                }
            };
            entry.input += prompt as i64;
            entry.cached += cached as i64;
        }
        let after = server.metrics()?;
        // The answers are the stand-in replay's, scripted: their output is what it billed.
        let mut billed = Tokens { output: mix.billed().output, ..Tokens::default() };
        for (_, b) in &by_source {
            billed += *b;
        }
        let per_1000 = per_1000_messages(&billed, prices, messages);
        println!("economy_mix_tokens_billed_{mode}_llama: {billed:?}");
        println!("economy_mix_cached_share_{mode}_llama: {:.3}", billed.cached_share());
        // llama.cpp bills nothing for what it keeps: no cache writes, whatever is printed.
        println!("economy_mix_cache_write_share_of_spend_{mode}_llama: {:.3}", billed.cache_write_share_of_spend(prices));
        println!("economy_mix_usd_per_1000_messages_{mode}_llama: {per_1000:.4}");
        let shares: Vec<String> = by_source.iter().map(|(s, b)| format!("{s}={:.3}", b.cached_share())).collect();
        println!("economy_mix_cached_share_by_source_{mode}_llama: {}", shares.join(" "));
        println!(
            "economy_mix_server_counts_{mode}_llama: evaluated {:.0}, cached {:.0}, prompt seconds {:.1}, refused requests {refused}",
            after.prompt_tokens_evaluated - before.prompt_tokens_evaluated,
            after.prompt_tokens_cached - before.prompt_tokens_cached,
            after.prompt_seconds - before.prompt_seconds
        );
        usd.push(per_1000);
        if mode == "durable" {
            durable_billed = billed;
        }
    }
    let ratio = usd.get(1).copied().unwrap_or(0.0) / usd.first().copied().unwrap_or(0.0).max(f64::MIN_POSITIVE);
    print_goals(prices, "llama", durable_billed, ratio, true);
    Ok(())
}

/// The recorded body as llama.cpp takes it: not streamed, one token of answer, each picture a
/// text placeholder (the model has no vision).
fn for_llama(body: &Value) -> Value {
    let mut body = body.clone();
    if let Some(o) = body.as_object_mut() {
        o.remove("stream_options");
        o.insert("stream".into(), Value::Bool(false));
        o.insert("max_tokens".into(), Value::from(1));
    }
    for message in body["messages"].as_array_mut().into_iter().flatten() {
        for part in message["content"].as_array_mut().into_iter().flatten() {
            if part["type"] == "image_url" {
                *part = serde_json::json!({ "type": "text", "text": "[a picture]" });
            }
        }
    }
    body
}

/// Sends one chat completion and returns its prompt tokens and how many of them were cached.
async fn ask(port: u16, body: &Value) -> Result<(u64, u64)> {
    let answer = tokio::time::timeout(Duration::from_secs(300), post(port, "/v1/chat/completions", body))
        .await
        .context("llama.cpp took five minutes over one request")??;
    let usage = &answer["usage"];
    let timings = &answer["timings"];
    // llama.cpp's timings split the prompt into what it evaluated and what its cache served.
    if let (Some(evaluated), Some(cached)) = (timings["prompt_n"].as_u64(), timings["cache_n"].as_u64()) {
        return Ok((evaluated + cached, cached));
    }
    let prompt = usage["prompt_tokens"].as_u64().with_context(|| format!("no prompt tokens in {answer}"))?;
    Ok((prompt, usage["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap_or(0)))
}

/// A JSON POST over a connection of its own (HTTP/1.1, closed after the answer), its answer's body as JSON.
async fn post(port: u16, path: &str, body: &Value) -> Result<Value> {
    let payload = body.to_string();
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.context("connecting to llama.cpp")?;
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        payload.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(payload.as_bytes()).await?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.context("reading llama.cpp's answer")?;
    let at = raw.windows(4).position(|w| w == b"\r\n\r\n").context("an answer with no HTTP head")?;
    let head = String::from_utf8_lossy(&raw[..at]).to_ascii_lowercase();
    let rest = &raw[at + 4..];
    let status = head.split(' ').nth(1).unwrap_or_default().to_owned();
    let body = if head.contains("transfer-encoding: chunked") { dechunk(rest) } else { rest.to_vec() };
    let shown = || String::from_utf8_lossy(&body).chars().take(300).collect::<String>();
    anyhow::ensure!(status == "200", "HTTP {status}: {}", shown());
    serde_json::from_slice(&body).with_context(|| format!("an answer that is not JSON: {}", shown()))
}

/// A chunked body's data, its chunk sizes dropped.
fn dechunk(mut rest: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") {
        let size = String::from_utf8_lossy(&rest[..eol]).trim().to_owned();
        let Ok(n) = usize::from_str_radix(&size, 16) else { break };
        let after = &rest[eol + 2..];
        if n == 0 || after.len() < n {
            break;
        }
        out.extend_from_slice(&after[..n]);
        rest = after[n..].strip_prefix(b"\r\n").unwrap_or(&after[n..]);
    }
    out
}
