//! A thin streaming client for OpenAI-compatible chat completions.
//!
//! Thin on purpose: the classification of failures and the retry policy are
//! ours, so the run can tell a quota problem from a dead stream.

use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::{Value, json};

use super::{ChatMessage, ModelError, ModelRequest, StreamItem, Usage};

/// Where and as whom to call the provider.
#[derive(Clone)]
pub struct OpenAiConfig {
    /// Such as `https://api.openai.com/v1`; `/chat/completions` is appended.
    pub base_url: String,
    pub model: String,
    /// Sent as a bearer token; never logged.
    pub api_key: Option<String>,
    /// How long a request whose body is all sent may wait for the response head before it is
    /// given up as transient (`response_timeout`) and retried on a new connection.
    pub response_timeout: Duration,
}

/// [`OpenAiConfig::response_timeout`] when nothing else is said.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(120);

impl std::fmt::Debug for OpenAiConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiConfig")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "***"))
            .field("response_timeout", &self.response_timeout)
            .finish()
    }
}

/// The client; cheap to clone.
#[derive(Clone, Debug)]
pub struct OpenAiClient {
    http: reqwest::Client,
    config: OpenAiConfig,
}

const MAX_ERROR_BODY: usize = 16 * 1024;

/// The size of the parts a request body is uploaded in.
const UPLOAD_PART: usize = 256 * 1024;

/// Gives reqwest (built without a TLS provider of its own) the ring provider.
/// Every crate that builds a reqwest client calls it; installing twice is harmless.
pub fn install_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

impl OpenAiClient {
    /// The model this client asks for.
    pub fn model(&self) -> &str {
        &self.config.model
    }

    /// Builds a client. Connecting is bounded; a streaming answer is not, because the stall watchdog bounds silence.
    pub fn new(config: OpenAiConfig) -> Result<OpenAiClient, ModelError> {
        Ok(OpenAiClient { http: http_client()?, config })
    }

    fn body(&self, request: &ModelRequest) -> Value {
        let mut messages = vec![json!({ "role": "system", "content": request.system })];
        for m in &request.messages {
            messages.push(match m {
                ChatMessage::User { text, images } if images.is_empty() => json!({ "role": "user", "content": text }),
                ChatMessage::User { text, images } => {
                    let mut parts = vec![json!({ "type": "text", "text": text })];
                    parts.extend(images.iter().map(|url| json!({ "type": "image_url", "image_url": { "url": url } })));
                    json!({ "role": "user", "content": parts })
                }
                ChatMessage::Assistant { text, tool_calls } if tool_calls.is_empty() => json!({ "role": "assistant", "content": text }),
                ChatMessage::Assistant { text, tool_calls } => json!({
                    "role": "assistant",
                    "content": if text.is_empty() { Value::Null } else { Value::String(text.clone()) },
                    "tool_calls": tool_calls.iter().map(|c| json!({
                        "id": c.id, "type": "function", "function": { "name": c.name, "arguments": c.arguments }
                    })).collect::<Vec<_>>(),
                }),
                ChatMessage::Tool { call_id, content, .. } => json!({ "role": "tool", "tool_call_id": call_id, "content": content }),
            });
        }
        let mut body = json!({
            "model": self.config.model,
            "messages": messages,
            "stream": true,
            "stream_options": { "include_usage": true },
        });
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|t| json!({ "type": "function", "function": { "name": t.name, "description": t.description, "parameters": t.parameters } }))
                .collect();
        }
        body
    }

    pub(crate) async fn open(
        &self,
        request: &ModelRequest,
        uploaded: super::Uploaded,
    ) -> Result<BoxStream<'static, Result<StreamItem, ModelError>>, ModelError> {
        let url = format!("{}/chat/completions", self.config.base_url.trim_end_matches('/'));
        let body = encode(&self.body(request))?;
        let mut builder = self.http.post(url);
        if let Some(key) = &self.config.api_key {
            builder = builder.bearer_auth(key);
        }
        let response = match post_in_parts(builder, body, uploaded, self.config.response_timeout).await? {
            Ok(response) => response,
            Err(refused) => return Err(classify_status(refused.status, refused.retry_after, &refused.body)),
        };
        let events = response.bytes_stream().eventsource();
        let items = events.flat_map(|event| {
            let items: Vec<Result<StreamItem, ModelError>> = match event {
                Err(e) => vec![Err(ModelError::Transient { code: "stream_dropped", retry_after: None, message: e.to_string() })],
                Ok(event) if event.data.trim() == "[DONE]" => vec![Ok(StreamItem::Done)],
                Ok(event) => parse_chunk(&event.data),
            };
            futures::stream::iter(items)
        });
        Ok(items.boxed())
    }
}

/// A provider's HTTP client: connecting is bounded; a streaming answer is not, because the
/// stall watchdog bounds silence.
pub(super) fn http_client() -> Result<reqwest::Client, ModelError> {
    install_tls_provider();
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| ModelError::Terminal { code: "client_build_failed", message: e.to_string() })
}

/// A request body as the bytes that go out.
pub(super) fn encode(body: &Value) -> Result<Vec<u8>, ModelError> {
    serde_json::to_vec(body).map_err(|e| ModelError::Terminal { code: "request_unencodable", message: e.to_string() })
}

/// An HTTP error answer: its status, its `Retry-After` and (bounded) its body.
pub(super) struct Refusal {
    pub status: u16,
    pub retry_after: Option<Duration>,
    pub body: String,
}

/// Posts `body` as JSON in parts, each reported to `uploaded` as the connection takes it, so
/// the stall watchdog sees a many-megabyte upload move instead of one long silence; the
/// response head is waited for within `timeout` of the last part taken. A success is the
/// response to stream; an error status comes back as a [`Refusal`] for the provider to classify.
pub(super) async fn post_in_parts(
    builder: reqwest::RequestBuilder,
    body: Vec<u8>,
    uploaded: super::Uploaded,
    timeout: Duration,
) -> Result<Result<reqwest::Response, Refusal>, ModelError> {
    let length = body.len();
    let parts: Vec<Vec<u8>> = body.chunks(UPLOAD_PART).map(<[u8]>::to_vec).collect();
    let last_part = std::sync::Arc::new(std::sync::Mutex::new(tokio::time::Instant::now()));
    let taken = last_part.clone();
    let parts = futures::stream::iter(parts).map(move |part| {
        *taken.lock().unwrap_or_else(|p| p.into_inner()) = tokio::time::Instant::now();
        uploaded(part.len());
        Ok::<_, std::io::Error>(part)
    });
    let builder = builder
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header(reqwest::header::CONTENT_LENGTH, length)
        .body(reqwest::Body::wrap_stream(parts));
    let response = answered_within(builder.send(), &last_part, timeout).await?.map_err(|e| ModelError::Transient {
        code: "connect_failed",
        retry_after: None,
        message: e.to_string(),
    })?;
    let status = response.status();
    if status.is_success() {
        return Ok(Ok(response));
    }
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    let mut body = response.text().await.unwrap_or_default();
    // At a character's edge: a provider's message may be in any script.
    let mut cut = body.len().min(MAX_ERROR_BODY);
    while !body.is_char_boundary(cut) {
        cut -= 1;
    }
    body.truncate(cut);
    Ok(Err(Refusal { status: status.as_u16(), retry_after, body }))
}

/// Waits for `send` while its body is still moving or its response head is due: past `timeout`
/// since the last part was taken, the request is dropped (and its connection with it, never
/// back to the pool), so the retry goes out on a new one. A pooled connection to a server that
/// was stopped while its process lives on stays open and never answers; without this bound the
/// run sat silent until the stall watchdog ended it.
async fn answered_within<T>(
    send: impl std::future::Future<Output = T>,
    last_part: &std::sync::Mutex<tokio::time::Instant>,
    timeout: Duration,
) -> Result<T, ModelError> {
    let mut send = std::pin::pin!(send);
    loop {
        let due = *last_part.lock().unwrap_or_else(|p| p.into_inner()) + timeout;
        tokio::select! {
            sent = &mut send => return Ok(sent),
            () = tokio::time::sleep_until(due) => {
                let last = *last_part.lock().unwrap_or_else(|p| p.into_inner());
                if last + timeout <= tokio::time::Instant::now() {
                    return Err(ModelError::Transient {
                        code: "response_timeout",
                        retry_after: None,
                        message: format!("no response within {} ms of the request", timeout.as_millis()),
                    });
                }
            }
        }
    }
}

pub(super) fn error_fields(body: &str) -> (String, String, String) {
    let v: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let e = &v["error"];
    let text = |k: &str| e[k].as_str().unwrap_or_default().to_owned();
    let message = if e.is_null() { body.to_owned() } else { text("message") };
    (text("type"), text("code"), message)
}

fn is_quota(kind: &str, code: &str) -> bool {
    [kind, code].iter().any(|s| matches!(*s, "insufficient_quota" | "usage_limit_reached" | "billing_hard_limit_reached"))
}

/// Classifies an HTTP error answer.
pub(crate) fn classify_status(status: u16, retry_after: Option<Duration>, body: &str) -> ModelError {
    let (kind, code, message) = error_fields(body);
    match status {
        402 => ModelError::UsageLimit { message },
        429 if is_quota(&kind, &code) => ModelError::UsageLimit { message },
        429 => ModelError::Transient { code: "rate_limited", retry_after, message },
        408 => ModelError::Transient { code: "timeout", retry_after, message },
        529 => ModelError::Transient { code: "overloaded", retry_after, message },
        500..=599 => ModelError::Transient { code: "server_error", retry_after, message },
        401 | 403 => ModelError::Terminal { code: "unauthorized", message },
        _ => ModelError::Terminal { code: "rejected", message },
    }
}

fn parse_chunk(data: &str) -> Vec<Result<StreamItem, ModelError>> {
    let Ok(v) = serde_json::from_str::<Value>(data) else {
        return vec![Err(ModelError::Terminal { code: "malformed_stream", message: "a stream event was not JSON".into() })];
    };
    if !v["error"].is_null() {
        let (kind, code, message) = error_fields(data);
        let err = if is_quota(&kind, &code) {
            ModelError::UsageLimit { message }
        } else if kind.contains("overloaded") || code.contains("overloaded") || kind == "server_error" {
            ModelError::Transient { code: "overloaded", retry_after: None, message }
        } else {
            ModelError::Terminal { code: "stream_error", message }
        };
        return vec![Err(err)];
    }
    let mut items = Vec::new();
    if let Some(choice) = v["choices"].get(0) {
        let delta = &choice["delta"];
        if let Some(text) = delta["content"].as_str().filter(|t| !t.is_empty()) {
            items.push(Ok(StreamItem::Text(text.to_owned())));
        }
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            items.push(Ok(StreamItem::ToolCallDelta {
                index: call["index"].as_u64().unwrap_or(0) as usize,
                id: call["id"].as_str().map(str::to_owned),
                name: call["function"]["name"].as_str().filter(|n| !n.is_empty()).map(str::to_owned),
                arguments: call["function"]["arguments"].as_str().unwrap_or_default().to_owned(),
            }));
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            items.push(Ok(StreamItem::Finish(reason.to_owned())));
        }
    }
    if let Some(usage) = v.get("usage").filter(|u| u.is_object()) {
        items.push(Ok(StreamItem::Usage(Usage {
            input_tokens: usage["prompt_tokens"].as_u64().unwrap_or(0),
            output_tokens: usage["completion_tokens"].as_u64().unwrap_or(0),
            cached_input_tokens: usage["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap_or(0),
            reasoning_tokens: usage["completion_tokens_details"]["reasoning_tokens"].as_u64().unwrap_or(0),
            cache_write_input_tokens: 0,
        })));
    }
    items
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quota_is_not_a_rate_limit() {
        let quota = r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}"#;
        assert!(matches!(classify_status(429, None, quota), ModelError::UsageLimit { .. }));
        let rate = r#"{"error":{"message":"slow down","type":"requests","code":"rate_limit_exceeded"}}"#;
        match classify_status(429, Some(Duration::from_secs(2)), rate) {
            ModelError::Transient { code: "rate_limited", retry_after, .. } => assert_eq!(retry_after, Some(Duration::from_secs(2))),
            other => panic!("{other:?}"),
        }
        assert!(matches!(classify_status(503, None, "busy"), ModelError::Transient { code: "server_error", .. }));
        assert!(matches!(classify_status(400, None, "{}"), ModelError::Terminal { .. }));
    }

    #[test]
    fn chunks_yield_text_tool_deltas_finish_and_usage() {
        let items = parse_chunk(
            r#"{"choices":[{"index":0,"delta":{"content":"hi","tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":"{"}}]},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":2}}"#,
        );
        assert_eq!(items.len(), 4);
        assert_eq!(items[0], Ok(StreamItem::Text("hi".into())));
        assert_eq!(items[3], Ok(StreamItem::Usage(Usage { input_tokens: 10, output_tokens: 2, ..Usage::default() })));
    }

    /// llama.cpp's and OpenAI's usage chunk: cached and reasoning tokens sit in the details objects.
    #[test]
    fn usage_reads_cached_and_reasoning_tokens_from_the_details() {
        let items = parse_chunk(
            r#"{"choices":[],"usage":{"completion_tokens":20,"prompt_tokens":60,"prompt_tokens_details":{"cached_tokens":41},"completion_tokens_details":{"reasoning_tokens":5}}}"#,
        );
        assert_eq!(
            items,
            vec![Ok(StreamItem::Usage(Usage {
                input_tokens: 60,
                output_tokens: 20,
                cached_input_tokens: 41,
                reasoning_tokens: 5,
                cache_write_input_tokens: 0
            }))]
        );
    }
}
