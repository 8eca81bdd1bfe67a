//! Anthropic's Messages API, as Anthropic keeps its rules: `POST /v1/messages` answered with
//! its server-sent events and error bodies, and a prompt cache that serves a prefix only up to
//! a block the request marks with `cache_control`, matched byte for byte, never below the
//! minimum cacheable length, for its TTL on a clock a test moves ([`PromptCache::advance`]).
//!
//! The prompt is rendered tools → system → messages, one block at a time. At each breakpoint
//! the cache looks back up to [`LOOKBACK_BLOCKS`] block edges for a prefix it holds; the
//! furthest found is read, what lies between it and the last breakpoint is written (when that
//! prefix is long enough to cache), and the rest is plain input. More than four breakpoints,
//! or a one-hour breakpoint after a five-minute one, is refused with Anthropic's 400.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Value, json};

use crate::{RecordedRequest, Reply, Shared, admit, now_ms, pieces, sse_response};

/// How many block edges back from a breakpoint the cache looks for a prefix it holds.
pub const LOOKBACK_BLOCKS: usize = 20;

/// The shortest prefix cached unless set: Sonnet-class models' 1,024 tokens.
pub const DEFAULT_MIN_CACHE_TOKENS: u64 = 1024;

/// The most breakpoints one request may carry.
const MAX_BREAKPOINTS: usize = 4;

/// The stand-in's prompt cache and its clock.
#[derive(Clone)]
pub struct PromptCache {
    inner: Arc<Mutex<Cache>>,
}

struct Cache {
    /// Prefix digest → when it expires on the stand-in's clock.
    entries: HashMap<u64, Duration>,
    min_tokens: u64,
    /// How far a test has moved the clock past real time.
    advanced: Duration,
    started: std::time::Instant,
}

impl Default for PromptCache {
    fn default() -> Self {
        PromptCache {
            inner: Arc::new(Mutex::new(Cache {
                entries: HashMap::new(),
                min_tokens: DEFAULT_MIN_CACHE_TOKENS,
                advanced: Duration::ZERO,
                started: std::time::Instant::now(),
            })),
        }
    }
}

impl PromptCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Moves the cache's clock forward: entries past their TTL are gone.
    pub fn advance(&self, by: Duration) {
        let mut cache = self.lock();
        cache.advanced = cache.advanced.saturating_add(by);
    }

    /// Sets the shortest prefix, in tokens, that is cached.
    pub fn set_min_tokens(&self, tokens: u64) {
        self.lock().min_tokens = tokens;
    }
}

impl Cache {
    fn now(&self) -> Duration {
        self.started.elapsed().saturating_add(self.advanced)
    }
}

/// What one request did to the cache, in tokens, as Anthropic reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheUse {
    /// Input after the last breakpoint, or not cacheable.
    pub input_tokens: u64,
    pub cache_creation_input_tokens: u64,
    pub cache_read_input_tokens: u64,
}

/// One block of the rendered prompt.
struct Block {
    digest_part: String,
    tokens: u64,
    ttl: Option<Duration>,
}

/// The prompt as Anthropic renders it for caching, tools → system → messages; a block's
/// `cache_control` marks a breakpoint and is not part of what is matched.
fn blocks(body: &Value) -> Result<Vec<Block>, String> {
    let mut out = Vec::new();
    let mut push = |section: &str, block: &Value| -> Result<(), String> {
        let ttl = match block.get("cache_control") {
            None => None,
            Some(c) => match c["ttl"].as_str() {
                None | Some("5m") => Some(Duration::from_secs(300)),
                Some("1h") => Some(Duration::from_secs(3600)),
                Some(other) => return Err(format!("cache_control.ttl: Input should be '5m' or '1h', not '{other}'")),
            },
        };
        if block["type"] == "text" && block["text"].as_str().is_none_or(|t| t.trim().is_empty()) {
            return Err(format!("{section}: text content blocks must be non-empty"));
        }
        let mut bare = block.clone();
        if let Some(o) = bare.as_object_mut() {
            o.remove("cache_control");
        }
        let text = bare.to_string();
        let tokens = (text.chars().count() as u64).div_ceil(4).max(1);
        out.push(Block { digest_part: format!("{section}\u{1f}{text}"), tokens, ttl });
        Ok(())
    };
    for tool in body["tools"].as_array().into_iter().flatten() {
        push("tool", tool)?;
    }
    match &body["system"] {
        Value::String(text) => push("system", &json!({ "type": "text", "text": text }))?,
        Value::Array(parts) => {
            for part in parts {
                push("system", part)?;
            }
        }
        _ => {}
    }
    for message in body["messages"].as_array().into_iter().flatten() {
        let role = message["role"].as_str().unwrap_or_default();
        match &message["content"] {
            Value::String(text) => push(role, &json!({ "type": "text", "text": text }))?,
            Value::Array(parts) => {
                for part in parts {
                    push(role, part)?;
                }
            }
            _ => return Err("messages: each message needs content".into()),
        }
    }
    Ok(out)
}

/// Applies one request to the cache: reads the furthest prefix it holds within reach of a
/// breakpoint, writes up to the last breakpoint, and says what was read, written and left.
pub fn use_cache(cache: &PromptCache, body: &Value) -> Result<CacheUse, String> {
    let (used, writes) = plan(cache, body)?;
    cache.commit(writes);
    Ok(used)
}

/// The prefixes a served request leaves in the cache, each with when it expires.
pub struct Writes(Vec<(u64, Duration)>);

impl PromptCache {
    /// Stores what a request served wrote and refreshed; a refused one leaves the cache as it was.
    pub fn commit(&self, writes: Writes) {
        self.lock().entries.extend(writes.0);
    }
}

/// What `body` would read and write, without touching the cache.
fn plan(cache: &PromptCache, body: &Value) -> Result<(CacheUse, Writes), String> {
    let blocks = blocks(body)?;
    let breakpoints: Vec<usize> = blocks.iter().enumerate().filter(|(_, b)| b.ttl.is_some()).map(|(i, _)| i).collect();
    if breakpoints.len() > MAX_BREAKPOINTS {
        return Err(format!("A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {}.", breakpoints.len()));
    }
    let ttls: Vec<Duration> = blocks.iter().filter_map(|b| b.ttl).collect();
    if ttls.windows(2).any(|w| w[1] > w[0]) {
        return Err("a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block".into());
    }
    let mut digests = Vec::with_capacity(blocks.len());
    let mut tokens_to = Vec::with_capacity(blocks.len());
    let (mut hasher, mut tokens) = (std::collections::hash_map::DefaultHasher::new(), 0u64);
    for b in &blocks {
        b.digest_part.hash(&mut hasher);
        digests.push(hasher.finish());
        tokens += b.tokens;
        tokens_to.push(tokens);
    }
    let total = tokens;
    let mut cache = cache.lock();
    let now = cache.now();
    let mut writes = Vec::new();
    cache.entries.retain(|_, expires| *expires > now);
    let read_at = breakpoints
        .iter()
        .flat_map(|&b| (b.saturating_sub(LOOKBACK_BLOCKS - 1)..=b).rev().find(|&k| cache.entries.contains_key(&digests[k])))
        .max();
    let read = read_at.map_or(0, |k| tokens_to[k]);
    let mut written = 0;
    if let Some(&last) = breakpoints.last()
        && tokens_to[last] >= cache.min_tokens
    {
        written = tokens_to[last].saturating_sub(read);
        let min = cache.min_tokens;
        for &b in breakpoints.iter().filter(|&&b| tokens_to[b] >= min) {
            let ttl = blocks[b].ttl.unwrap_or(Duration::from_secs(300));
            writes.push((digests[b], now.saturating_add(ttl)));
        }
    }
    if let Some(k) = read_at {
        // A read refreshes the prefix it read.
        let ttl = breakpoints.iter().find(|&&b| b >= k).and_then(|&b| blocks[b].ttl).unwrap_or(Duration::from_secs(300));
        writes.push((digests[k], now.saturating_add(ttl)));
    }
    let used = CacheUse { input_tokens: total - read - written, cache_creation_input_tokens: written, cache_read_input_tokens: read };
    Ok((used, Writes(writes)))
}

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
    let (used, writes) = match plan(&shared.prompt_cache, &body) {
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

fn stream(reply: Reply, model: String, used: CacheUse) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(16);
    tokio::spawn(async move {
        let send = |b: Bytes| {
            let tx = tx.clone();
            async move { tx.send(Ok(b)).await.is_ok() }
        };
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
        if !send(event("message_start", start)).await {
            return;
        }
        send(event("ping", json!({ "type": "ping" }))).await;
        let text_block = |index: usize| {
            event(
                "content_block_start",
                json!({ "type": "content_block_start", "index": index, "content_block": { "type": "text", "text": "" } }),
            )
        };
        let text_delta = |index: usize, text: &str| {
            event(
                "content_block_delta",
                json!({ "type": "content_block_delta", "index": index, "delta": { "type": "text_delta", "text": text } }),
            )
        };
        let stop_block = |index: usize| event("content_block_stop", json!({ "type": "content_block_stop", "index": index }));
        let mut out_chars = 0usize;
        let stop_reason = match reply {
            Reply::Text { text, chunk_chars, chunk_delay_ms, first_delay_ms, tail_delay_ms } => {
                tokio::time::sleep(Duration::from_millis(first_delay_ms)).await;
                send(text_block(0)).await;
                for (i, piece) in pieces(&text, chunk_chars).into_iter().enumerate() {
                    if i > 0 && chunk_delay_ms > 0 {
                        tokio::time::sleep(Duration::from_millis(chunk_delay_ms)).await;
                    }
                    out_chars += piece.len();
                    if !send(text_delta(0, &piece)).await {
                        return;
                    }
                }
                send(stop_block(0)).await;
                tokio::time::sleep(Duration::from_millis(tail_delay_ms)).await;
                Some("end_turn")
            }
            Reply::ToolCalls { calls, text } => {
                let mut index = 0;
                if !text.is_empty() {
                    out_chars += text.len();
                    send(text_block(0)).await;
                    send(text_delta(0, &text)).await;
                    send(stop_block(0)).await;
                    index = 1;
                }
                for (i, call) in calls.iter().enumerate() {
                    let args = call.arguments.to_string();
                    out_chars += args.len();
                    let head = json!({ "type": "content_block_start", "index": index, "content_block": { "type": "tool_use", "id": format!("toolu_standin_{i}"), "name": call.name, "input": {} } });
                    send(event("content_block_start", head)).await;
                    for piece in pieces(&args, 7) {
                        let delta = json!({ "type": "content_block_delta", "index": index, "delta": { "type": "input_json_delta", "partial_json": piece } });
                        send(event("content_block_delta", delta)).await;
                    }
                    send(stop_block(index)).await;
                    index += 1;
                }
                Some("tool_use")
            }
            Reply::Stall { text_before } => {
                if !text_before.is_empty() {
                    send(text_block(0)).await;
                    send(text_delta(0, &text_before)).await;
                }
                tx.closed().await;
                return;
            }
            Reply::Drop { text_before } => {
                if !text_before.is_empty() {
                    send(text_block(0)).await;
                    send(text_delta(0, &text_before)).await;
                }
                None
            }
            Reply::Reset { text_before } => {
                if !text_before.is_empty() {
                    send(text_block(0)).await;
                    send(text_delta(0, &text_before)).await;
                }
                let whole = text_delta(0, "and the rest of it");
                send(whole.slice(..whole.len() / 2)).await;
                let _ = tx.send(Err(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "stand-in reset"))).await;
                return;
            }
            Reply::Empty => Some("end_turn"),
            Reply::RateLimited { .. } | Reply::InsufficientQuota | Reply::Status { .. } | Reply::ModelNotFound | Reply::Gated { .. } => {
                None
            }
        };
        let Some(stop_reason) = stop_reason else { return };
        let delta = json!({
            "type": "message_delta",
            "delta": { "stop_reason": stop_reason, "stop_sequence": null },
            "usage": { "output_tokens": (out_chars as u64).div_ceil(4).max(1) },
        });
        send(event("message_delta", delta)).await;
        send(event("message_stop", json!({ "type": "message_stop" }))).await;
    });
    sse_response(rx)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request of a long system prompt (about 1,500 tokens) and `turns`, the last marked.
    fn request(system: &str, turns: &[&str]) -> Value {
        let mut messages: Vec<Value> = turns
            .iter()
            .enumerate()
            .map(|(i, t)| json!({ "role": if i % 2 == 0 { "user" } else { "assistant" }, "content": [{ "type": "text", "text": t }] }))
            .collect();
        if let Some(last) = messages.last_mut() {
            last["content"][0]["cache_control"] = json!({ "type": "ephemeral" });
        }
        json!({
            "model": "claude-standin", "max_tokens": 1024,
            "system": [{ "type": "text", "text": system, "cache_control": { "type": "ephemeral" } }],
            "messages": messages,
        })
    }

    fn persona() -> String {
        "He is Clankie, a friendly robot who remembers the room. ".repeat(100)
    }

    #[test]
    fn anthropic_the_stand_ins_cache_serves_a_prefix_only_when_it_matches_byte_for_byte_up_to_a_breakpoint() {
        let cache = PromptCache::default();
        let first = use_cache(&cache, &request(&persona(), &["hello there"])).unwrap();
        assert_eq!((first.cache_read_input_tokens, first.input_tokens), (0, 0), "{first:?}");
        assert!(first.cache_creation_input_tokens > 1024, "{first:?}");
        // The same conversation, grown: everything before the new turns is read.
        let second = use_cache(&cache, &request(&persona(), &["hello there", "hi!", "how are you?"])).unwrap();
        assert_eq!(second.cache_read_input_tokens, first.cache_creation_input_tokens, "{second:?}");
        assert!(second.cache_creation_input_tokens > 0 && second.cache_creation_input_tokens < 20, "{second:?}");
        // One byte changed before the system breakpoint: nothing is read.
        let mut changed = persona();
        changed.replace_range(10..11, "X");
        let third = use_cache(&cache, &request(&changed, &["hello there", "hi!", "how are you?"])).unwrap();
        assert_eq!(third.cache_read_input_tokens, 0, "{third:?}");
        // One byte changed in a message after the system breakpoint: the system prompt is still read.
        let fourth = use_cache(&cache, &request(&persona(), &["hello therE", "hi!", "how are you?"])).unwrap();
        let system_tokens = use_cache(&PromptCache::default(), &request(&persona(), &[])).unwrap().cache_creation_input_tokens;
        assert!(system_tokens > 1024);
        assert_eq!(fourth.cache_read_input_tokens, system_tokens, "{fourth:?}");
        assert!(fourth.cache_read_input_tokens < second.cache_read_input_tokens, "{fourth:?}");
    }

    #[test]
    fn anthropic_the_stand_ins_cache_writes_again_after_the_ttl_and_caches_nothing_under_the_minimum() {
        let cache = PromptCache::default();
        let body = request(&persona(), &["hello"]);
        let written = use_cache(&cache, &body).unwrap().cache_creation_input_tokens;
        cache.advance(Duration::from_secs(299));
        assert_eq!(use_cache(&cache, &body).unwrap().cache_read_input_tokens, written, "read within the TTL");
        // The read refreshed it: 299 s later it is still there; 301 s after that it is gone.
        cache.advance(Duration::from_secs(299));
        assert_eq!(use_cache(&cache, &body).unwrap().cache_read_input_tokens, written);
        cache.advance(Duration::from_secs(301));
        let again = use_cache(&cache, &body).unwrap();
        assert_eq!((again.cache_read_input_tokens, again.cache_creation_input_tokens), (0, written), "past the TTL it is a write again");
        let short = request("A short persona.", &["hello"]);
        let used = use_cache(&cache, &short).unwrap();
        assert_eq!((used.cache_read_input_tokens, used.cache_creation_input_tokens), (0, 0), "{used:?}");
        assert_eq!(use_cache(&cache, &short).unwrap().cache_read_input_tokens, 0, "a prefix under 1,024 tokens is never cached");
    }

    #[test]
    fn anthropic_the_stand_in_refuses_five_breakpoints_and_a_long_ttl_after_a_short_one() {
        let cache = PromptCache::default();
        let mut body = request(&persona(), &["a", "b", "c", "d"]);
        for m in body["messages"].as_array_mut().unwrap() {
            m["content"][0]["cache_control"] = json!({ "type": "ephemeral" });
        }
        let refused = use_cache(&cache, &body).unwrap_err();
        assert_eq!(refused, "A maximum of 4 blocks with cache_control may be provided. Found 5.");
        let mut body = request(&persona(), &["a"]);
        body["messages"][0]["content"][0]["cache_control"] = json!({ "type": "ephemeral", "ttl": "1h" });
        assert!(use_cache(&cache, &body).unwrap_err().contains("must not come after"));
    }
}
