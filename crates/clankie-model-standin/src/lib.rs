//! A stand-in for an OpenAI-compatible model provider, on loopback.
//!
//! It speaks the real wire protocol (`POST /v1/chat/completions` with
//! `stream: true`, answered as server-sent events) so the real HTTP client is
//! what tests exercise. Each request takes the first queued [`Script`] whose
//! condition matches, or answers `ok` when none does. Every request is
//! recorded, so a test can assert exactly what the model was sent.
//!
//! Scripts are queued in process with [`StandIn::script`] or over HTTP with
//! `POST /control/script`; `GET /control/requests` lists what was recorded;
//! `POST /control/abandon` stops it listening while its open connections hang ([`StandIn::abandon`]);
//! `POST /control/chat_completions` with `{"on": false}` leaves Anthropic's wire the only one
//! that answers ([`StandIn::set_chat_completions`]).
//! It also serves the OpenAI audio routes over the offline speech engines ([`audio`]).

pub mod anthropic;
pub mod audio;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// One scripted answer, used by the first request it matches.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Script {
    /// Only a request whose messages contain this text takes the script.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when_request_contains: Option<String>,
    pub reply: Reply,
}

/// A tool call the stand-in makes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScriptedCall {
    pub name: String,
    pub arguments: Value,
}

/// How the stand-in answers one request.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Reply {
    /// Streams `text` in pieces of `chunk_chars`, `chunk_delay_ms` apart, after `first_delay_ms`.
    Text {
        text: String,
        #[serde(default = "default_chunk")]
        chunk_chars: usize,
        #[serde(default)]
        chunk_delay_ms: u64,
        #[serde(default)]
        first_delay_ms: u64,
        /// Pause after the last piece before the stream finishes.
        #[serde(default)]
        tail_delay_ms: u64,
    },
    /// Streams optional text, then asks for these tool calls.
    ToolCalls {
        calls: Vec<ScriptedCall>,
        #[serde(default)]
        text: String,
    },
    /// Streams `text_before`, then holds the connection open and says nothing more.
    Stall {
        #[serde(default)]
        text_before: String,
    },
    /// Streams `text_before`, then closes the stream without finishing it: a clean end of
    /// the HTTP body that simply lacks the finish and `[DONE]`.
    Drop {
        #[serde(default)]
        text_before: String,
    },
    /// Streams `text_before`, then half of the next event, then aborts the connection in the
    /// middle of the chunked body (no terminating chunk; a reset where the stand-in owns the
    /// listener): the client's body read fails, which `Drop` never makes it do.
    Reset {
        #[serde(default)]
        text_before: String,
    },
    /// 429 with a Retry-After header: a transient rate limit.
    RateLimited { retry_after_secs: u64 },
    /// 429 with `insufficient_quota`: usage exhausted, never worth retrying.
    InsufficientQuota,
    /// An HTTP error status with an OpenAI-style error body.
    Status { status: u16 },
    /// 404 as OpenAI answers a model name it does not serve (a typo in `CLANKIE_MODEL_NAME`),
    /// naming the model the request asked for.
    ModelNotFound,
    /// A finished stream with no text and no tool calls.
    Empty,
    /// Holds the request, saying nothing, until the test opens `gate` ([`StandIn::open_gate`]),
    /// then answers `then`: a run kept in its model call exactly until the test has done what
    /// it must do meanwhile, however busy the machine.
    Gated { gate: String, then: Box<Reply> },
}

fn default_chunk() -> usize {
    4
}

impl Reply {
    /// A text answer streamed in 4-character pieces with no delay.
    pub fn text(text: impl Into<String>) -> Reply {
        Reply::Text { text: text.into(), chunk_chars: 4, chunk_delay_ms: 0, first_delay_ms: 0, tail_delay_ms: 0 }
    }

    /// A single tool call.
    pub fn tool(name: impl Into<String>, arguments: Value) -> Reply {
        Reply::ToolCalls { calls: vec![ScriptedCall { name: name.into(), arguments }], text: String::new() }
    }
}

impl Script {
    /// A script any request takes.
    pub fn any(reply: Reply) -> Script {
        Script { when_request_contains: None, reply }
    }

    /// A script only a request mentioning `needle` takes.
    pub fn when(needle: impl Into<String>, reply: Reply) -> Script {
        Script { when_request_contains: Some(needle.into()), reply }
    }
}

/// A request as the stand-in received it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RecordedRequest {
    /// The whole JSON body.
    pub body: Value,
    /// A rough token count of the prompt (characters / 4): messages, their tool calls and the tool definitions.
    pub token_estimate: u64,
    /// Of `token_estimate`, what a provider's prompt cache would have held: the tool definitions
    /// and the leading messages that repeat, whole and in order, one of the recent requests.
    #[serde(default)]
    pub cached_estimate: u64,
    /// Of `token_estimate`, what the request wrote to the prompt cache (Anthropic's
    /// `cache_creation_input_tokens`; 0 on the OpenAI wire, whose cache writes itself).
    #[serde(default)]
    pub cache_write_estimate: u64,
    /// Whether it carried an `Authorization: Bearer` header (the key itself is not kept).
    #[serde(default)]
    pub bearer_token: bool,
    /// When it arrived, in ms since the Unix epoch.
    #[serde(default)]
    pub at_ms: i64,
}

impl RecordedRequest {
    /// The request's messages.
    pub fn messages(&self) -> &[Value] {
        self.body["messages"].as_array().map(Vec::as_slice).unwrap_or(&[])
    }

    /// All message text, joined; for "was X sent?" assertions.
    pub fn all_text(&self) -> String {
        self.messages().iter().map(message_text).collect::<Vec<_>>().join("\n")
    }

    /// How many times `needle` occurs across the messages.
    pub fn count(&self, needle: &str) -> usize {
        self.all_text().matches(needle).count()
    }
}

fn message_text(m: &Value) -> String {
    match &m["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join("\n"),
        _ => String::new(),
    }
}

#[derive(Default)]
struct Inner {
    scripts: Vec<Script>,
    requests: Vec<RecordedRequest>,
}

/// Shared state of a running stand-in.
#[derive(Clone, Default)]
pub struct Shared {
    inner: Arc<Mutex<Inner>>,
    arrived: Arc<tokio::sync::Notify>,
    /// Set by [`StandIn::abandon`]: the listener is gone and requests are never answered.
    abandoned: Arc<std::sync::atomic::AtomicBool>,
    abandon: Arc<tokio::sync::Notify>,
    unbound: Arc<tokio::sync::Notify>,
    /// The audio routes' scripts and grammar.
    pub audio: audio::AudioShared,
    /// The gates opened so far ([`Reply::Gated`]).
    gates: Arc<tokio::sync::watch::Sender<std::collections::BTreeSet<String>>>,
    /// Anthropic's prompt cache, on its own clock.
    pub prompt_cache: anthropic::PromptCache,
    /// Set by [`StandIn::set_chat_completions`]: `/v1/chat/completions` answers 404 as a route
    /// Anthropic does not serve, so only the Messages wire answers.
    chat_completions_off: Arc<std::sync::atomic::AtomicBool>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn take(&self, request: &RecordedRequest) -> Reply {
        let mut inner = self.lock();
        let text = request.all_text();
        let pos = inner.scripts.iter().position(|s| s.when_request_contains.as_ref().is_none_or(|n| text.contains(n.as_str())));
        match pos {
            Some(i) => inner.scripts.remove(i).reply,
            None => Reply::text("ok"),
        }
    }
}

/// A running stand-in server.
pub struct StandIn {
    addr: SocketAddr,
    shared: Shared,
    task: tokio::task::JoinHandle<()>,
}

impl StandIn {
    /// Serves on a free loopback port.
    pub async fn start() -> std::io::Result<StandIn> {
        StandIn::serve(SocketAddr::from(([127, 0, 0, 1], 0))).await
    }

    /// Serves on the given address.
    pub async fn serve(addr: SocketAddr) -> std::io::Result<StandIn> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shared = Shared::default();
        let app = router(shared.clone());
        let listener = Abandonable { listener: Some(listener), addr, shared: shared.clone() };
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!(error = %e, "model stand-in stopped");
            }
        });
        Ok(StandIn { addr, shared, task })
    }

    /// Stops listening the way a server stopped inside a process that lives on does: the
    /// port is free for a new server, but the keep-alive connections it accepted stay open,
    /// and a request arriving on one is recorded and never answered (what served it is gone).
    pub async fn abandon(&self) {
        abandon(&self.shared).await;
    }

    /// The base URL to configure as the provider (`http://127.0.0.1:<port>/v1`).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Anthropic's prompt cache: its clock and its minimum cacheable length.
    pub fn prompt_cache(&self) -> &anthropic::PromptCache {
        &self.shared.prompt_cache
    }

    /// The audio routes: scripted failures, the transcription grammar, counts.
    pub fn audio(&self) -> &audio::AudioShared {
        &self.shared.audio
    }

    /// Opens `gate`: a [`Reply::Gated`] waiting on it (or arriving later) answers.
    pub fn open_gate(&self, gate: &str) {
        self.shared.gates.send_modify(|open| {
            open.insert(gate.to_owned());
        });
    }

    /// Serves OpenAI's `/v1/chat/completions` (`true`, as it starts) or answers it 404 as
    /// Anthropic's API does, leaving `/v1/messages` the only model wire that answers.
    pub fn set_chat_completions(&self, on: bool) {
        self.shared.chat_completions_off.store(!on, std::sync::atomic::Ordering::SeqCst);
    }

    /// Queues a script.
    pub fn script(&self, script: Script) {
        self.shared.lock().scripts.push(script);
    }

    /// Drops the scripts no request took, so a test that queued one for a call that may or
    /// may not come (a steer's second call) answers what comes next with what it scripts
    /// next; returns how many there were.
    pub fn clear_scripts(&self) -> usize {
        std::mem::take(&mut self.shared.lock().scripts).len()
    }

    /// Forgets the requests recorded so far (a long bench would otherwise count their bodies
    /// as the memory of whatever it measures); returns how many there were.
    pub fn forget_requests(&self) -> usize {
        std::mem::take(&mut self.shared.lock().requests).len()
    }

    /// Every request recorded so far.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.clone()
    }

    /// Waits until at least `n` requests have arrived, or the timeout passes.
    pub async fn wait_for_requests(&self, n: usize, timeout: Duration) -> Vec<RecordedRequest> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.shared.arrived.notified();
            let got = self.requests();
            if got.len() >= n || tokio::time::Instant::now() >= deadline {
                return got;
            }
            let _ = tokio::time::timeout_at(deadline, notified).await;
        }
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The stand-in's routes over `shared`, for embedding in another server.
pub fn router(shared: Shared) -> Router {
    let audio = audio::routes(shared.audio.clone());
    Router::new()
        .route("/v1/chat/completions", post(completions))
        .route("/v1/messages", post(anthropic::messages))
        .route("/control/clock", post(anthropic::advance_clock))
        .route("/control/script", post(add_script))
        .route("/control/requests", get(list_requests).delete(clear_requests))
        .route("/control/abandon", post(abandon_route))
        .route("/control/chat_completions", post(chat_completions_route))
        // A request carrying a 25 MB picture as base64 is about 34 MB, as a provider takes it.
        .layer(axum::extract::DefaultBodyLimit::max(64 * 1024 * 1024))
        .with_state(shared)
        .merge(audio)
}

#[derive(Deserialize)]
struct Switch {
    on: bool,
}

/// `POST /control/chat_completions`: [`StandIn::set_chat_completions`] for a stand-in in a process of its own.
async fn chat_completions_route(State(shared): State<Shared>, axum::Json(switch): axum::Json<Switch>) -> StatusCode {
    shared.chat_completions_off.store(!switch.on, std::sync::atomic::Ordering::SeqCst);
    StatusCode::NO_CONTENT
}

/// What Anthropic's API answers a route it does not have.
fn not_served() -> Response {
    let body = json!({ "type": "error", "error": { "type": "not_found_error", "message": "Not Found" } });
    (StatusCode::NOT_FOUND, axum::Json(body)).into_response()
}

async fn add_script(State(shared): State<Shared>, axum::Json(script): axum::Json<Script>) -> StatusCode {
    shared.lock().scripts.push(script);
    StatusCode::NO_CONTENT
}

/// Marks the stand-in abandoned and returns once its listener is closed.
async fn abandon(shared: &Shared) {
    shared.abandoned.store(true, std::sync::atomic::Ordering::SeqCst);
    shared.abandon.notify_one();
    shared.unbound.notified().await;
}

/// `POST /control/abandon`: [`StandIn::abandon`] for a stand-in in a process of its own.
async fn abandon_route(State(shared): State<Shared>) -> StatusCode {
    abandon(&shared).await;
    StatusCode::NO_CONTENT
}

/// The stand-in's listener. Abandoning it closes the socket but keeps axum's server running,
/// so the connections it accepted are never told to shut down: they stay open, as those of
/// a server stopped inside a process that lives on do.
struct Abandonable {
    listener: Option<tokio::net::TcpListener>,
    addr: SocketAddr,
    shared: Shared,
}

impl axum::serve::Listener for Abandonable {
    type Io = tokio::net::TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Some(listener) = &self.listener else { return std::future::pending().await };
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((tcp, peer)) => {
                        // Linger zero: an aborted connection (`Reply::Reset`) goes out as a TCP reset, not a FIN.
                        // (tokio deprecates SO_LINGER because a non-zero linger blocks on drop; zero never does.)
                        #[allow(deprecated)]
                        let _ = tcp.set_linger(Some(Duration::ZERO));
                        return (tcp, peer);
                    }
                    // Out of file descriptors and the like: try again shortly, as axum's own listener does.
                    Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                },
                () = self.shared.abandon.notified() => {
                    self.listener = None;
                    self.shared.unbound.notify_one();
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.addr)
    }
}

async fn list_requests(State(shared): State<Shared>) -> axum::Json<Vec<RecordedRequest>> {
    axum::Json(shared.lock().requests.clone())
}

async fn clear_requests(State(shared): State<Shared>) -> StatusCode {
    shared.lock().requests.clear();
    StatusCode::NO_CONTENT
}

fn error_body(status: StatusCode, kind: &str, code: &str, message: &str) -> Response {
    let body = json!({ "error": { "message": message, "type": kind, "code": code } });
    (status, axum::Json(body)).into_response()
}

async fn completions(State(shared): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
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

/// Records `request` and takes its script, waiting out a gate; `None` when the stand-in was
/// abandoned, and the request must never be answered.
async fn admit(shared: &Shared, request: &RecordedRequest) -> Option<Reply> {
    let abandoned = shared.abandoned.load(std::sync::atomic::Ordering::SeqCst);
    let reply = if abandoned { Reply::Empty } else { shared.take(request) };
    shared.lock().requests.push(request.clone());
    shared.arrived.notify_waiters();
    if abandoned {
        return None;
    }
    Some(match reply {
        Reply::Gated { gate, then } => {
            let _ = shared.gates.subscribe().wait_for(|open| open.contains(&gate)).await;
            *then
        }
        reply => reply,
    })
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
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

fn pieces(text: &str, size: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(size.max(1)).map(|c| c.iter().collect()).collect()
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

/// A server-sent-events answer whose body is what `rx` yields.
fn sse_response(rx: tokio::sync::mpsc::Receiver<std::io::Result<Bytes>>) -> Response {
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(tokio_stream_from(rx)))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

fn tokio_stream_from(mut rx: tokio::sync::mpsc::Receiver<std::io::Result<Bytes>>) -> impl futures::Stream<Item = std::io::Result<Bytes>> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}
