//! OpenAI's chat completions wire: `POST /v1/chat/completions` recorded with a token estimate
//! and its prompt-cache share, answered with the scripted error or a server-sent-events stream.

use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Value, json};

use crate::recorded::{RecordedRequest, message_text};
use crate::script::Reply;
use crate::shared::{Shared, admit};
use crate::sse::{pieces, sse_response};

/// What Anthropic's API answers a route it does not have.
fn not_served() -> Response {
    let body = json!({ "type": "error", "error": { "type": "not_found_error", "message": "Not Found" } });
    (StatusCode::NOT_FOUND, axum::Json(body)).into_response()
}

fn error_body(status: StatusCode, kind: &str, code: &str, message: &str) -> Response {
    let body = json!({ "error": { "message": message, "type": kind, "code": code } });
    (status, axum::Json(body)).into_response()
}

/// `POST /v1/chat/completions`.
pub(crate) async fn completions(State(shared): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    if shared.chat_completions_off.load(std::sync::atomic::Ordering::SeqCst) {
        return not_served();
    }
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return error_body(StatusCode::BAD_REQUEST, "invalid_request_error", "invalid_json", "body is not JSON");
    };
    // Like a provider, count everything the prompt carries: text, earlier tool calls, tool definitions.
    let message_chars = |m: &Value| message_text(m).len() + m.get("tool_calls").map_or(0, |c| c.to_string().len());
    let tool_chars = body.get("tools").map_or(0, |t| t.to_string().len());
    let chars: usize = body["messages"].as_array().map_or(0, |m| m.iter().map(message_chars).sum()) + tool_chars;
    let cached_chars = {
        let messages = body["messages"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        let inner = shared.lock();
        inner
            .requests
            .iter()
            .rev()
            .take(PROMPT_CACHE_REQUESTS)
            .filter(|r| r.body.get("tools") == body.get("tools"))
            .map(|r| {
                tool_chars + messages.iter().zip(r.messages()).take_while(|(a, b)| a == b).map(|(m, _)| message_chars(m)).sum::<usize>()
            })
            .max()
            .unwrap_or(0)
    };
    let bearer_token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("Bearer ") && v.len() > "Bearer ".len());
    let at_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0);
    let request = RecordedRequest {
        body,
        token_estimate: (chars / 4) as u64,
        cached_estimate: (cached_chars / 4) as u64,
        cache_write_estimate: 0,
        bearer_token,
        at_ms,
    };
    let Some(reply) = admit(&shared, &request).await else { return std::future::pending().await };

    match reply {
        Reply::RateLimited { retry_after_secs } => {
            let mut resp = error_body(StatusCode::TOO_MANY_REQUESTS, "requests", "rate_limit_exceeded", "Rate limit reached; slow down.");
            if let Ok(v) = retry_after_secs.to_string().parse() {
                resp.headers_mut().insert(header::RETRY_AFTER, v);
            }
            resp
        }
        Reply::InsufficientQuota => error_body(
            StatusCode::TOO_MANY_REQUESTS,
            "insufficient_quota",
            "insufficient_quota",
            "You exceeded your current quota, please check your plan and billing details.",
        ),
        Reply::ModelNotFound => {
            let model = request.body.get("model").and_then(Value::as_str).unwrap_or_default();
            let message = format!("The model `{model}` does not exist or you do not have access to it.");
            error_body(StatusCode::NOT_FOUND, "invalid_request_error", "model_not_found", &message)
        }
        Reply::Status { status } => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            error_body(status, "server_error", "server_error", "The server had an error while processing your request.")
        }
        reply => stream_reply(reply, request.token_estimate, request.cached_estimate),
    }
}

fn chunk(delta: Value, finish: Option<&str>) -> Bytes {
    let event = json!({
        "id": "chatcmpl-standin",
        "object": "chat.completion.chunk",
        "model": "standin",
        "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }],
    });
    Bytes::from(format!("data: {event}\n\n"))
}

/// How many of the latest requests the stand-in's prompt cache remembers.
const PROMPT_CACHE_REQUESTS: usize = 64;

fn stream_reply(reply: Reply, prompt_tokens: u64, cached_tokens: u64) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(16);
    tokio::spawn(async move {
        let send = |b: Bytes| {
            let tx = tx.clone();
            async move { tx.send(Ok(b)).await.is_ok() }
        };
        let mut completion_chars = 0usize;
        let finish = match reply {
            Reply::Text { text, chunk_chars, chunk_delay_ms, first_delay_ms, tail_delay_ms } => {
                tokio::time::sleep(Duration::from_millis(first_delay_ms)).await;
                for (i, piece) in pieces(&text, chunk_chars).into_iter().enumerate() {
                    if i > 0 && chunk_delay_ms > 0 {
                        tokio::time::sleep(Duration::from_millis(chunk_delay_ms)).await;
                    }
                    completion_chars += piece.len();
                    if !send(chunk(json!({ "content": piece }), None)).await {
                        return;
                    }
                }
                tokio::time::sleep(Duration::from_millis(tail_delay_ms)).await;
                Some("stop")
            }
            Reply::ToolCalls { calls, text } => {
                if !text.is_empty() {
                    completion_chars += text.len();
                    send(chunk(json!({ "content": text }), None)).await;
                }
                for (i, call) in calls.iter().enumerate() {
                    let args = call.arguments.to_string();
                    completion_chars += args.len();
                    let head = json!({ "tool_calls": [{ "index": i, "id": format!("call_{i}"), "type": "function", "function": { "name": call.name, "arguments": "" } }] });
                    send(chunk(head, None)).await;
                    // Arguments arrive in pieces, as real providers send them.
                    for piece in pieces(&args, 7) {
                        send(chunk(json!({ "tool_calls": [{ "index": i, "function": { "arguments": piece } }] }), None)).await;
                    }
                }
                Some("tool_calls")
            }
            Reply::Stall { text_before } => {
                if !text_before.is_empty() {
                    send(chunk(json!({ "content": text_before }), None)).await;
                }
                // Hold the connection open without a byte until the client goes away.
                tx.closed().await;
                return;
            }
            Reply::Drop { text_before } => {
                if !text_before.is_empty() {
                    send(chunk(json!({ "content": text_before }), None)).await;
                }
                None
            }
            Reply::Reset { text_before } => {
                if !text_before.is_empty() {
                    send(chunk(json!({ "content": text_before }), None)).await;
                }
                let whole = chunk(json!({ "content": "and the rest of it" }), None);
                send(whole.slice(..whole.len() / 2)).await;
                // A body error makes hyper abort the connection instead of ending the body.
                let _ = tx.send(Err(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "stand-in reset"))).await;
                return;
            }
            Reply::Empty => Some("stop"),
            Reply::RateLimited { .. } | Reply::InsufficientQuota | Reply::Status { .. } | Reply::ModelNotFound | Reply::Gated { .. } => {
                None
            }
        };
        let Some(finish) = finish else { return };
        send(chunk(json!({}), Some(finish))).await;
        let usage = json!({
            "id": "chatcmpl-standin", "object": "chat.completion.chunk", "model": "standin", "choices": [],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": (completion_chars / 4) as u64,
                "prompt_tokens_details": { "cached_tokens": cached_tokens },
            },
        });
        send(Bytes::from(format!("data: {usage}\n\n"))).await;
        send(Bytes::from_static(b"data: [DONE]\n\n")).await;
    });
    sse_response(rx)
}
