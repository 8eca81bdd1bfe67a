//! Anthropic's Messages API: `POST /v1/messages` recorded with what it did to the prompt cache
//! (`cache`), answered with Anthropic's error bodies or its server-sent events.

pub(crate) mod cache;
mod structure;

use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Value, json};

pub use cache::{CacheUse, DEFAULT_MIN_CACHE_TOKENS, LOOKBACK_BLOCKS, PromptCache, Writes, use_cache};

use crate::recorded::{RecordedRequest, now_ms};
use crate::script::{Reply, ScriptedCall};
use crate::shared::{Shared, admit};
use crate::sse::{pieces, sse_response};

/// `POST /control/clock` `{"advance_ms": n}`: [`PromptCache::advance`] for a stand-in in a process of its own.
pub(crate) async fn advance_clock(State(shared): State<Shared>, axum::Json(body): axum::Json<Value>) -> StatusCode {
    shared.prompt_cache.advance(Duration::from_millis(body["advance_ms"].as_u64().unwrap_or(0)));
    StatusCode::NO_CONTENT
}

fn error(status: StatusCode, kind: &str, message: &str) -> Response {
    (status, axum::Json(json!({ "type": "error", "error": { "type": kind, "message": message } }))).into_response()
}

/// The error type Anthropic gives a status.
fn kind_of(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        500..=599 => "api_error",
        _ => "invalid_request_error",
    }
}

/// `POST /v1/messages`.
pub(crate) async fn messages(State(shared): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return error(StatusCode::BAD_REQUEST, "invalid_request_error", "The request body is not valid JSON.");
    };
    if headers.get("anthropic-version").is_none() {
        return error(StatusCode::BAD_REQUEST, "invalid_request_error", "anthropic-version: header is required");
    }
    if !body["max_tokens"].is_u64() {
        return error(StatusCode::BAD_REQUEST, "invalid_request_error", "max_tokens: Field required");
    }
    if let Err(message) = structure::check(&body) {
        return error(StatusCode::BAD_REQUEST, "invalid_request_error", &message);
    }
    let (used, writes) = match cache::plan(&shared.prompt_cache, &body) {
        Ok(planned) => planned,
        Err(message) => return error(StatusCode::BAD_REQUEST, "invalid_request_error", &message),
    };
    let bearer_token = headers.get("x-api-key").and_then(|v| v.to_str().ok()).is_some_and(|v| !v.is_empty());
    let request = RecordedRequest {
        token_estimate: used.input_tokens + used.cache_creation_input_tokens + used.cache_read_input_tokens,
        cached_estimate: used.cache_read_input_tokens,
        cache_write_estimate: used.cache_creation_input_tokens,
        body,
        bearer_token,
        at_ms: now_ms(),
    };
    let Some(reply) = admit(&shared, &request).await else { return std::future::pending().await };
    let model = request.body["model"].as_str().unwrap_or_default().to_owned();
    // Anthropic caches what it served: a refused request reads and writes nothing.
    if !matches!(reply, Reply::RateLimited { .. } | Reply::InsufficientQuota | Reply::ModelNotFound | Reply::Status { .. }) {
        shared.prompt_cache.commit(writes);
    }
    match reply {
        Reply::RateLimited { retry_after_secs } => {
            let mut resp =
                error(StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", "Number of request tokens has exceeded your rate limit.");
            if let Ok(v) = retry_after_secs.to_string().parse() {
                resp.headers_mut().insert(header::RETRY_AFTER, v);
            }
            resp
        }
        Reply::InsufficientQuota => error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits.",
        ),
        Reply::ModelNotFound => error(StatusCode::NOT_FOUND, "not_found_error", &format!("model: {model}")),
        Reply::Status { status } => {
            let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let message = match status {
                529 => "Overloaded",
                401 => "invalid x-api-key",
                _ => "The request could not be served.",
            };
            error(code, kind_of(status), message)
        }
        reply => stream(reply, model, used),
    }
}

fn event(kind: &str, data: Value) -> Bytes {
    Bytes::from(format!("event: {kind}\ndata: {data}\n\n"))
}

/// The sending half of a streamed answer.
type Events = tokio::sync::mpsc::Sender<std::io::Result<Bytes>>;

/// Sends one event down the stream; false once the client has gone.
async fn send(tx: &Events, b: Bytes) -> bool {
    tx.send(Ok(b)).await.is_ok()
}

/// Streams `reply` as Anthropic does: `message_start` with the cache's usage, a ping, the
/// content blocks, then `message_delta` with the stop reason and `message_stop`.
fn stream(reply: Reply, model: String, used: CacheUse) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(16);
    tokio::spawn(async move {
        let start = json!({
            "type": "message_start",
            "message": {
                "id": "msg_standin", "type": "message", "role": "assistant", "model": model, "content": [],
                "stop_reason": null, "stop_sequence": null,
                "usage": {
                    "input_tokens": used.input_tokens,
                    "cache_creation_input_tokens": used.cache_creation_input_tokens,
                    "cache_read_input_tokens": used.cache_read_input_tokens,
                    "output_tokens": 1,
                },
            },
        });
        if !send(&tx, event("message_start", start)).await {
            return;
        }
        send(&tx, event("ping", json!({ "type": "ping" }))).await;
        let mut out_chars = 0usize;
        let Some(stop_reason) = content(reply, &tx, &mut out_chars).await else { return };
        let delta = json!({
            "type": "message_delta",
            "delta": { "stop_reason": stop_reason, "stop_sequence": null },
            "usage": { "output_tokens": (out_chars as u64).div_ceil(4).max(1) },
        });
        send(&tx, event("message_delta", delta)).await;
        send(&tx, event("message_stop", json!({ "type": "message_stop" }))).await;
    });
    sse_response(rx)
}

fn text_block(index: usize) -> Bytes {
    event("content_block_start", json!({ "type": "content_block_start", "index": index, "content_block": { "type": "text", "text": "" } }))
}

fn text_delta(index: usize, text: &str) -> Bytes {
    event("content_block_delta", json!({ "type": "content_block_delta", "index": index, "delta": { "type": "text_delta", "text": text } }))
}

fn stop_block(index: usize) -> Bytes {
    event("content_block_stop", json!({ "type": "content_block_stop", "index": index }))
}

/// The reply's content blocks, counting the characters sent into `out_chars`; the stop
/// reason, or `None` when the stream ends without one (stalled, dropped, reset, or the
/// client gone).
async fn content(reply: Reply, tx: &Events, out_chars: &mut usize) -> Option<&'static str> {
    match reply {
        Reply::Text { text, chunk_chars, chunk_delay_ms, first_delay_ms, tail_delay_ms } => {
            tokio::time::sleep(Duration::from_millis(first_delay_ms)).await;
            send(tx, text_block(0)).await;
            for (i, piece) in pieces(&text, chunk_chars).into_iter().enumerate() {
                if i > 0 && chunk_delay_ms > 0 {
                    tokio::time::sleep(Duration::from_millis(chunk_delay_ms)).await;
                }
                *out_chars += piece.len();
                if !send(tx, text_delta(0, &piece)).await {
                    return None;
                }
            }
            send(tx, stop_block(0)).await;
            tokio::time::sleep(Duration::from_millis(tail_delay_ms)).await;
            Some("end_turn")
        }
        Reply::ToolCalls { calls, text } => {
            tool_calls(&calls, &text, tx, out_chars).await;
            Some("tool_use")
        }
        Reply::Stall { text_before } => {
            if !text_before.is_empty() {
                send(tx, text_block(0)).await;
                send(tx, text_delta(0, &text_before)).await;
            }
            tx.closed().await;
            None
        }
        Reply::Drop { text_before } => {
            if !text_before.is_empty() {
                send(tx, text_block(0)).await;
                send(tx, text_delta(0, &text_before)).await;
            }
            None
        }
        Reply::Reset { text_before } => {
            if !text_before.is_empty() {
                send(tx, text_block(0)).await;
                send(tx, text_delta(0, &text_before)).await;
            }
            let whole = text_delta(0, "and the rest of it");
            send(tx, whole.slice(..whole.len() / 2)).await;
            let _ = tx.send(Err(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "stand-in reset"))).await;
            None
        }
        Reply::Empty => Some("end_turn"),
        Reply::RateLimited { .. } | Reply::InsufficientQuota | Reply::Status { .. } | Reply::ModelNotFound | Reply::Gated { .. } => None,
    }
}

/// Optional text as a block of its own, then each call as a `tool_use` block whose input
/// arrives in pieces.
async fn tool_calls(calls: &[ScriptedCall], text: &str, tx: &Events, out_chars: &mut usize) {
    let mut index = 0;
    if !text.is_empty() {
        *out_chars += text.len();
        send(tx, text_block(0)).await;
        send(tx, text_delta(0, text)).await;
        send(tx, stop_block(0)).await;
        index = 1;
    }
    for (i, call) in calls.iter().enumerate() {
        let args = call.arguments.to_string();
        *out_chars += args.len();
        let head = json!({ "type": "content_block_start", "index": index, "content_block": { "type": "tool_use", "id": format!("toolu_standin_{i}"), "name": call.name, "input": {} } });
        send(tx, event("content_block_start", head)).await;
        for piece in pieces(&args, 7) {
            let delta =
                json!({ "type": "content_block_delta", "index": index, "delta": { "type": "input_json_delta", "partial_json": piece } });
            send(tx, event("content_block_delta", delta)).await;
        }
        send(tx, stop_block(index)).await;
        index += 1;
    }
}
