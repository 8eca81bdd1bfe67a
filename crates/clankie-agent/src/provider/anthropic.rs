//! A thin streaming client for Anthropic's Messages API, with prompt-cache breakpoints.
//!
//! Anthropic caches only up to a block marked `cache_control`, and a byte changed before a
//! breakpoint misses it. A lane's request is rendered tools → system → messages, and each of
//! those is stable from turn to turn: the tools and the system prompt never change within a
//! lane (what changes, presence and experiences, reaches the lane as messages), and the
//! conversation only grows (stubs are made only at a compaction). So the breakpoints go at the
//! end of the tools, the end of the system prompt, the end of his last message before the newest
//! and the end of the conversation: the next turn reads the whole of this one from the cache and
//! writes only what it adds.

use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::{Value, json};

use super::openai::{classify_status, encode, error_fields, http_client, post_in_parts};
use super::{CachePlan, ChatMessage, ModelError, ModelRequest, StreamItem, THIS_CONVERSATION, Usage};

/// The most `cache_control` blocks one request may carry; Anthropic refuses a fifth.
pub const MAX_BREAKPOINTS: usize = 4;

/// The API version this client speaks.
const API_VERSION: &str = "2023-06-01";

/// How long a cached prefix lives unread (each read refreshes it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CacheTtl {
    /// Anthropic's default; a write costs 1.25 times the input price.
    #[default]
    FiveMinutes,
    /// For lanes quiet longer than five minutes between turns; a write costs twice the input price.
    OneHour,
}

impl CacheTtl {
    fn cache_control(self) -> Value {
        match self {
            CacheTtl::FiveMinutes => json!({ "type": "ephemeral" }),
            CacheTtl::OneHour => json!({ "type": "ephemeral", "ttl": "1h" }),
        }
    }
}

/// Where and as whom to call Anthropic.
#[derive(Clone)]
pub struct AnthropicConfig {
    /// Such as `https://api.anthropic.com/v1`; `/messages` is appended.
    pub base_url: String,
    pub model: String,
    /// Sent as `x-api-key`; never logged.
    pub api_key: Option<String>,
    /// As [`super::OpenAiConfig::response_timeout`].
    pub response_timeout: Duration,
    /// The most tokens one answer may take (the API requires it).
    pub max_tokens: u32,
    pub cache_ttl: CacheTtl,
}

impl std::fmt::Debug for AnthropicConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicConfig")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "***"))
            .field("max_tokens", &self.max_tokens)
            .field("cache_ttl", &self.cache_ttl)
            .finish()
    }
}

/// A message's last content block, where a cache mark goes.
fn last_block(message: &mut Value) -> Option<&mut Value> {
    message["content"].as_array_mut().and_then(|c| c.last_mut())
}

/// The client; cheap to clone.
#[derive(Clone, Debug)]
pub struct AnthropicClient {
    http: reqwest::Client,
    config: AnthropicConfig,
}

impl AnthropicClient {
    /// The model this client asks for.
    pub fn model(&self) -> &str {
        &self.config.model
    }

    /// Builds a client. Connecting is bounded; a streaming answer is not, because the stall watchdog bounds silence.
    pub fn new(config: AnthropicConfig) -> Result<AnthropicClient, ModelError> {
        Ok(AnthropicClient { http: http_client()?, config })
    }

    /// The request body, breakpoints included where [`ModelRequest::cache`] says the next call
    /// reads them: none on a call made once, none after a part rebuilt for every call.
    pub fn body(&self, request: &ModelRequest) -> Value {
        let mark = match request.cache {
            CachePlan::Once => None,
            CachePlan::Conversation | CachePlan::Through(_) => Some(self.config.cache_ttl.cache_control()),
        };
        let through = match request.cache {
            CachePlan::Through(n) => mark.as_ref().map(|m| (n, m)),
            CachePlan::Conversation | CachePlan::Once => None,
        };
        let mut body = json!({
            "model": self.config.model,
            "max_tokens": self.config.max_tokens,
            "stream": true,
            "messages": messages(&request.messages, through),
        });
        // The part of the system prompt every room shares, then this room's: two blocks, each
        // marked, so a room's first turn reads the shared part another room wrote. The shared
        // mark covers the tools before it, so theirs is left off (four marks at most).
        let split = request.system.rfind(THIS_CONVERSATION).filter(|&at| at > 0);
        if !request.tools.is_empty() {
            let mut tools: Vec<Value> = request
                .tools
                .iter()
                .map(|t| json!({ "name": t.name, "description": t.description, "input_schema": t.parameters }))
                .collect();
            if let (Some(last), Some(mark), None) = (tools.last_mut(), &mark, split) {
                last["cache_control"] = mark.clone();
            }
            body["tools"] = Value::Array(tools);
        }
        if !request.system.is_empty() {
            let parts = match split {
                Some(at) => vec![&request.system[..at], &request.system[at..]],
                None => vec![request.system.as_str()],
            };
            let blocks: Vec<Value> = parts
                .into_iter()
                .map(|text| {
                    let mut block = json!({ "type": "text", "text": text });
                    if let Some(mark) = &mark {
                        block["cache_control"] = mark.clone();
                    }
                    block
                })
                .collect();
            body["system"] = Value::Array(blocks);
        }
        if let (CachePlan::Conversation, Some(mark), Some(messages)) = (request.cache, mark, body["messages"].as_array_mut()) {
            // The fourth mark ends his last message before the newest: the cache looks back only
            // 20 blocks from a mark, and a turn that adds more (a burst of pictures, a round of many
            // tool calls) would otherwise miss what the turn before it wrote.
            let newest = messages.len().saturating_sub(1);
            if let Some(block) = messages[..newest].iter_mut().rev().find(|m| m["role"] == "assistant").and_then(last_block) {
                block["cache_control"] = mark.clone();
            }
            if let Some(block) = messages.last_mut().and_then(last_block) {
                block["cache_control"] = mark;
            }
        }
        body
    }

    pub(crate) async fn open(
        &self,
        request: &ModelRequest,
        uploaded: super::Uploaded,
    ) -> Result<BoxStream<'static, Result<StreamItem, ModelError>>, ModelError> {
        let url = format!("{}/messages", self.config.base_url.trim_end_matches('/'));
        let body = encode(&self.body(request))?;
        let mut builder = self.http.post(url).header("anthropic-version", API_VERSION);
        if let Some(key) = &self.config.api_key {
            builder = builder.header("x-api-key", key);
        }
        let response = match post_in_parts(builder, body, uploaded, self.config.response_timeout).await? {
            Ok(response) => response,
            Err(refused) => return Err(classify(refused.status, refused.retry_after, &refused.body)),
        };
        let mut reader = Reader::default();
        let items = response.bytes_stream().eventsource().flat_map(move |event| {
            let items = match event {
                Err(e) => vec![Err(ModelError::Transient { code: "stream_dropped", retry_after: None, message: e.to_string() })],
                Ok(event) => reader.read(&event.event, &event.data),
            };
            futures::stream::iter(items)
        });
        Ok(items.boxed())
    }
}

/// The conversation as Messages API turns: a user turn of text and pictures, an assistant turn
/// of text and `tool_use` blocks, tool results as `tool_result` blocks of the next user turn.
/// Turns of the same role are joined, as the API wants them alternating. Anthropic refuses an
/// empty text block, so none is sent: a turn with nothing in it (an answer the model ended
/// without a word, say) is left out, and the turns around it join.
/// The turns, with `through`'s mark (if any) on the last block of its `n`-th message: the end of
/// what the next call repeats.
fn messages(history: &[ChatMessage], through: Option<(usize, &Value)>) -> Vec<Value> {
    let mut out: Vec<(&str, Vec<Value>)> = Vec::new();
    for (i, m) in history.iter().enumerate() {
        let (role, mut blocks) = match m {
            ChatMessage::User { text, images } => {
                let mut blocks: Vec<Value> = images.iter().filter_map(|url| image_block(url)).collect();
                if !text.trim().is_empty() {
                    blocks.push(json!({ "type": "text", "text": text }));
                }
                ("user", blocks)
            }
            ChatMessage::Assistant { text, tool_calls } => {
                let mut blocks = Vec::new();
                if !text.trim().is_empty() {
                    blocks.push(json!({ "type": "text", "text": text }));
                }
                for c in tool_calls {
                    // Arguments are kept as the model streamed them; a call whose arguments were not
                    // JSON was answered with a tool error, and goes back with an empty input.
                    let input = serde_json::from_str::<Value>(&c.arguments).ok().filter(Value::is_object).unwrap_or_else(|| json!({}));
                    blocks.push(json!({ "type": "tool_use", "id": c.id, "name": c.name, "input": input }));
                }
                ("assistant", blocks)
            }
            ChatMessage::Tool { call_id, content, .. } => {
                ("user", vec![json!({ "type": "tool_result", "tool_use_id": call_id, "content": content })])
            }
        };
        if let (Some((n, mark)), Some(last)) = (through, blocks.last_mut())
            && i + 1 == n
        {
            last["cache_control"] = mark.clone();
        }
        match out.last_mut() {
            _ if blocks.is_empty() => {}
            Some((last, existing)) if *last == role => existing.extend(blocks),
            _ => out.push((role, blocks)),
        }
    }
    made_valid(out).into_iter().map(|(role, content)| json!({ "role": role, "content": content })).collect()
}

/// The turns as Anthropic takes them whatever a deletion, a forget or a stub left of the
/// history: the first turn the user's, every `tool_use` answered by a `tool_result` at the
/// start of the next turn (one said to be gone where its result is no longer kept), and a
/// result whose call is no longer kept said in words. The same history always comes out the
/// same, so the cached prefix holds.
fn made_valid(mut turns: Vec<(&'static str, Vec<Value>)>) -> Vec<(&'static str, Vec<Value>)> {
    if turns.first().is_some_and(|(role, _)| *role == "assistant") {
        turns.insert(0, ("user", vec![json!({ "type": "text", "text": "[the conversation's start is no longer kept]" })]));
    }
    for i in 0..turns.len() {
        let asked: Vec<String> = if i == 0 {
            Vec::new()
        } else {
            turns[i - 1].1.iter().filter(|b| b["type"] == "tool_use").filter_map(|b| b["id"].as_str().map(str::to_owned)).collect()
        };
        if turns[i].0 != "user" {
            continue;
        }
        let blocks = std::mem::take(&mut turns[i].1);
        let (mut results, mut rest): (Vec<Value>, Vec<Value>) = blocks.into_iter().partition(|b| b["type"] == "tool_result");
        // A result whose call is gone goes in words; a call whose result is gone is answered so.
        results.retain(|r| {
            let answers = r["tool_use_id"].as_str().is_some_and(|id| asked.iter().any(|a| a == id));
            if !answers {
                let said = r["content"].as_str().unwrap_or_default();
                rest.insert(0, json!({ "type": "text", "text": format!("[a tool's result, its call no longer kept] {said}") }));
            }
            answers
        });
        let unanswered: Vec<&String> = asked.iter().filter(|id| !results.iter().any(|r| r["tool_use_id"] == id.as_str())).collect();
        for id in unanswered {
            results.push(json!({ "type": "tool_result", "tool_use_id": id, "content": "[this result is no longer kept]" }));
        }
        results.extend(rest);
        turns[i].1 = results;
    }
    turns
}

/// The largest picture Anthropic takes in one image block.
const MAX_IMAGE_BYTES: usize = 5 * 1024 * 1024;

/// A `data:` URL as an image block; anything else is left out (it never reaches a request).
/// The media type is the one the bytes say, not the uploader's label, which Anthropic would
/// refuse when they differ; a picture past Anthropic's 5 MB, or of a kind it does not read,
/// is said in words instead of failing the whole turn.
fn image_block(url: &str) -> Option<Value> {
    let (head, data) = url.strip_prefix("data:")?.split_once(',')?;
    let labelled = head.strip_suffix(";base64")?;
    let bytes = data.len() / 4 * 3;
    let sniffed = {
        use base64::Engine as _;
        let start = &data[..data.len().min(16) / 4 * 4];
        let magic = base64::engine::general_purpose::STANDARD.decode(start).unwrap_or_default();
        match magic.as_slice() {
            [0x89, b'P', b'N', b'G', ..] => Some("image/png"),
            [0xFF, 0xD8, 0xFF, ..] => Some("image/jpeg"),
            [b'G', b'I', b'F', b'8', ..] => Some("image/gif"),
            [b'R', b'I', b'F', b'F', _, _, _, _, b'W', b'E', b'B', b'P', ..] => Some("image/webp"),
            _ => None,
        }
    };
    // Bytes that begin as no picture Anthropic reads would have the whole request refused
    // ("Could not process image"), whatever their label says: they go in words.
    match sniffed {
        Some(media_type) if bytes <= MAX_IMAGE_BYTES => {
            Some(json!({ "type": "image", "source": { "type": "base64", "media_type": media_type, "data": data } }))
        }
        Some(_) => Some(
            json!({ "type": "text", "text": format!("[a picture of {} MB, past the 5 MB this model can look at]", bytes.div_ceil(1024 * 1024)) }),
        ),
        None => Some(json!({ "type": "text", "text": format!("[a picture of a kind this model cannot look at ({labelled})]") })),
    }
}

/// Classifies an HTTP error answer the way the OpenAI client does, with Anthropic's own:
/// 529 `overloaded_error` is retried, 413 `request_too_large` is said as such.
pub(crate) fn classify(status: u16, retry_after: Option<Duration>, body: &str) -> ModelError {
    let (kind, _, message) = error_fields(body);
    match status {
        413 => ModelError::Terminal { code: "request_too_large", message },
        // Anthropic says an empty balance with a 400 (or, lately, a billing error): no retry helps.
        _ if kind == "billing_error" || message.contains("credit balance") => ModelError::UsageLimit { message },
        _ => classify_status(status, retry_after, body),
    }
}

/// Reads the Messages API's stream events into stream items, keeping what spans events:
/// which content block is which tool call, and the input usage `message_start` reported.
#[derive(Default)]
struct Reader {
    /// Content-block index → tool-call index, for `tool_use` blocks.
    calls: std::collections::BTreeMap<u64, usize>,
    usage: Usage,
    stop_reason: Option<String>,
}

impl Reader {
    fn read(&mut self, event: &str, data: &str) -> Vec<Result<StreamItem, ModelError>> {
        let Ok(v) = serde_json::from_str::<Value>(data) else {
            return vec![Err(ModelError::Terminal { code: "malformed_stream", message: "a stream event was not JSON".into() })];
        };
        let kind = if event.is_empty() || event == "message" { v["type"].as_str().unwrap_or_default() } else { event };
        match kind {
            "ping" => vec![Ok(StreamItem::Alive)],
            "message_start" => {
                let u = &v["message"]["usage"];
                let read = u["cache_read_input_tokens"].as_u64().unwrap_or(0);
                let written = u["cache_creation_input_tokens"].as_u64().unwrap_or(0);
                // Anthropic's input_tokens are only those after the last cache breakpoint;
                // ours count every input token, of which the cached are a part, as OpenAI's do.
                self.usage.input_tokens = u["input_tokens"].as_u64().unwrap_or(0) + read + written;
                self.usage.cached_input_tokens = read;
                self.usage.cache_write_input_tokens = written;
                self.usage.output_tokens = u["output_tokens"].as_u64().unwrap_or(0);
                // Billed from here on: a stream that drops later is still on the invoice.
                vec![Ok(StreamItem::Alive), Ok(StreamItem::Usage(self.usage))]
            }
            "content_block_start" => {
                let block = &v["content_block"];
                match block["type"].as_str() {
                    Some("tool_use") => {
                        let index = self.calls.len();
                        self.calls.insert(v["index"].as_u64().unwrap_or(0), index);
                        vec![Ok(StreamItem::ToolCallDelta {
                            index,
                            id: block["id"].as_str().map(str::to_owned),
                            name: block["name"].as_str().map(str::to_owned),
                            arguments: String::new(),
                        })]
                    }
                    Some("text") => match block["text"].as_str().filter(|t| !t.is_empty()) {
                        Some(text) => vec![Ok(StreamItem::Text(text.to_owned()))],
                        None => vec![Ok(StreamItem::Alive)],
                    },
                    _ => vec![Ok(StreamItem::Alive)],
                }
            }
            "content_block_delta" => {
                let delta = &v["delta"];
                match delta["type"].as_str() {
                    Some("text_delta") => vec![Ok(StreamItem::Text(delta["text"].as_str().unwrap_or_default().to_owned()))],
                    Some("input_json_delta") => {
                        let Some(&index) = self.calls.get(&v["index"].as_u64().unwrap_or(0)) else {
                            return vec![Err(ModelError::Terminal {
                                code: "malformed_stream",
                                message: "tool input for a block that is no tool call".into(),
                            })];
                        };
                        let arguments = delta["partial_json"].as_str().unwrap_or_default().to_owned();
                        vec![Ok(StreamItem::ToolCallDelta { index, id: None, name: None, arguments })]
                    }
                    // Thinking and its signature are the model's own; they are alive, not words.
                    _ => vec![Ok(StreamItem::Alive)],
                }
            }
            "content_block_stop" => vec![Ok(StreamItem::Alive)],
            "message_delta" => {
                if let Some(out) = v["usage"]["output_tokens"].as_u64() {
                    self.usage.output_tokens = out;
                }
                self.stop_reason = v["delta"]["stop_reason"].as_str().map(str::to_owned);
                vec![Ok(StreamItem::Alive)]
            }
            "message_stop" => {
                let reason = match self.stop_reason.take().as_deref() {
                    Some("tool_use") => "tool_calls".to_owned(),
                    Some("end_turn") | None => "stop".to_owned(),
                    Some(other) => other.to_owned(),
                };
                vec![Ok(StreamItem::Finish(reason)), Ok(StreamItem::Usage(self.usage)), Ok(StreamItem::Done)]
            }
            "error" => {
                let (kind, _, message) = error_fields(data);
                let err = match kind.as_str() {
                    "overloaded_error" | "api_error" => ModelError::Transient { code: "overloaded", retry_after: None, message },
                    "rate_limit_error" => ModelError::Transient { code: "rate_limited", retry_after: None, message },
                    _ => ModelError::Terminal { code: "stream_error", message },
                };
                vec![Err(err)]
            }
            _ => vec![Ok(StreamItem::Alive)],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::{ToolCall, ToolSpec};

    fn client(ttl: CacheTtl) -> AnthropicClient {
        AnthropicClient::new(AnthropicConfig {
            base_url: "http://127.0.0.1:1/v1".into(),
            model: "claude-test".into(),
            api_key: None,
            response_timeout: Duration::from_secs(1),
            max_tokens: 1024,
            cache_ttl: ttl,
        })
        .unwrap()
    }

    #[test]
    fn anthropic_breakpoints_end_the_tools_the_system_prompt_his_last_message_and_the_conversation() {
        let request = ModelRequest {
            system: "You are Clankie.".into(),
            messages: vec![
                ChatMessage::user("hi"),
                ChatMessage::Assistant {
                    text: "let me look".into(),
                    tool_calls: vec![ToolCall { id: "c1".into(), name: "read_page".into(), arguments: "{\"url\":\"x\"}".into() }],
                },
                ChatMessage::Tool { call_id: "c1".into(), name: "read_page".into(), content: "page".into() },
                ChatMessage::User {
                    text: "and this?".into(),
                    images: vec!["data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAAB".into()],
                },
            ],
            tools: vec![
                ToolSpec { name: "read_page".into(), description: "d".into(), parameters: json!({"type": "object"}) },
                ToolSpec { name: "send_text_update".into(), description: "d".into(), parameters: json!({"type": "object"}) },
            ],
            cache: CachePlan::Conversation,
        };
        let body = client(CacheTtl::OneHour).body(&request);
        let marks = body.to_string().matches("\"cache_control\"").count();
        assert_eq!(marks, 4, "{body}");
        assert!(body["tools"][1]["cache_control"]["ttl"] == "1h" && body["tools"][0].get("cache_control").is_none());
        assert_eq!(body["system"][0]["cache_control"]["type"], "ephemeral");
        let turns = body["messages"].as_array().unwrap();
        // The tool result and the next words are one user turn: roles alternate.
        assert_eq!(turns.iter().map(|t| t["role"].as_str().unwrap()).collect::<Vec<_>>(), ["user", "assistant", "user"]);
        assert_eq!(turns[1]["content"][1]["input"]["url"], "x");
        assert!(turns[1]["content"][1]["cache_control"]["ttl"] == "1h" && turns[1]["content"][0].get("cache_control").is_none());
        let last = turns[2]["content"].as_array().unwrap();
        assert_eq!(last[0]["type"], "tool_result");
        assert_eq!(last[1]["source"]["media_type"], "image/png");
        assert!(last[2]["cache_control"].is_object() && last[1].get("cache_control").is_none());
    }

    #[test]
    fn anthropic_the_system_prompts_shared_part_is_marked_apart_from_this_rooms() {
        let system = format!("You are Clankie, one character.{THIS_CONVERSATION}you are in the guild text channel 10.");
        let request = ModelRequest {
            system,
            messages: vec![ChatMessage::user("hi")],
            tools: vec![ToolSpec { name: "read_page".into(), description: "d".into(), parameters: json!({"type": "object"}) }],
            cache: CachePlan::Conversation,
        };
        let body = client(CacheTtl::FiveMinutes).body(&request);
        let blocks = body["system"].as_array().unwrap();
        assert_eq!(blocks.len(), 2, "{body}");
        assert_eq!(blocks[0]["text"], "You are Clankie, one character.");
        assert!(blocks[1]["text"].as_str().unwrap().starts_with(THIS_CONVERSATION));
        assert!(blocks.iter().all(|b| b["cache_control"].is_object()), "{body}");
        assert!(body["tools"][0].get("cache_control").is_none(), "the shared mark covers the tools");
        assert_eq!(body.to_string().matches("\"cache_control\"").count(), 3, "{body}");
    }

    #[test]
    fn anthropic_a_call_made_once_carries_no_breakpoints() {
        let request = ModelRequest {
            system: "Summarise.".into(),
            messages: vec![ChatMessage::user("ada: hi\nyou: hello")],
            tools: vec![],
            cache: CachePlan::Once,
        };
        let body = client(CacheTtl::FiveMinutes).body(&request);
        assert_eq!(body.to_string().matches("\"cache_control\"").count(), 0, "{body}");
    }

    #[test]
    fn anthropic_a_prefix_through_a_message_is_marked_there_and_not_after_it() {
        let tools = vec![ToolSpec { name: "ask".into(), description: "d".into(), parameters: json!({"type": "object"}) }];
        let request = ModelRequest {
            system: "You speak aloud.".into(),
            messages: vec![ChatMessage::user("<self_context>…</self_context>"), ChatMessage::user("<room>ada: who is winning?</room>")],
            tools,
            cache: CachePlan::Through(1),
        };
        let body = client(CacheTtl::FiveMinutes).body(&request);
        assert_eq!(body.to_string().matches("\"cache_control\"").count(), 3, "{body}");
        // Both user messages are one turn; the mark ends the first, which the next call repeats.
        let blocks = body["messages"][0]["content"].as_array().unwrap();
        assert!(blocks[0]["cache_control"].is_object() && blocks[1].get("cache_control").is_none(), "{body}");
    }

    #[test]
    fn anthropic_stream_events_become_text_tool_calls_usage_and_signs_of_life() {
        let mut r = Reader::default();
        let mut items = Vec::new();
        for (event, data) in [
            (
                "message_start",
                r#"{"type":"message_start","message":{"usage":{"input_tokens":10,"cache_creation_input_tokens":5,"cache_read_input_tokens":900,"output_tokens":1}}}"#,
            ),
            ("ping", r#"{"type":"ping"}"#),
            ("content_block_start", r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#),
            ("content_block_delta", r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hel"}}"#),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"read_page","input":{}}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"url\":"}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\"x\"}"}}"#,
            ),
            ("message_delta", r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":7}}"#),
            ("message_stop", r#"{"type":"message_stop"}"#),
        ] {
            items.extend(r.read(event, data).into_iter().map(Result::unwrap));
        }
        assert!(items.contains(&StreamItem::Text("hel".into())));
        assert!(items.contains(&StreamItem::ToolCallDelta {
            index: 0,
            id: Some("toolu_1".into()),
            name: Some("read_page".into()),
            arguments: String::new()
        }));
        // The tool input's JSON pieces, in order, on the tool call's index, joined to its input.
        let pieces: Vec<&str> = items
            .iter()
            .filter_map(|i| match i {
                StreamItem::ToolCallDelta { index: 0, id: None, name: None, arguments } => Some(arguments.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(pieces, ["{\"url\":", "\"x\"}"], "{items:?}");
        let input: serde_json::Value = serde_json::from_str(&pieces.concat()).unwrap();
        assert_eq!(input, serde_json::json!({ "url": "x" }));
        assert!(items.contains(&StreamItem::Finish("tool_calls".into())));
        let usage =
            Usage { input_tokens: 915, output_tokens: 7, cached_input_tokens: 900, reasoning_tokens: 0, cache_write_input_tokens: 5 };
        assert!(items.contains(&StreamItem::Usage(usage)), "{items:?}");
        assert_eq!(items.iter().filter(|i| **i == StreamItem::Alive).count(), 4, "{items:?}");
        let err = r.read("error", r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#);
        assert!(matches!(&err[0], Err(ModelError::Transient { code: "overloaded", .. })));
    }

    #[test]
    fn anthropic_an_empty_answer_is_left_out_never_sent_as_an_empty_block() {
        let request = ModelRequest {
            system: "s".into(),
            messages: vec![
                ChatMessage::user("hi"),
                ChatMessage::Assistant { text: String::new(), tool_calls: vec![] },
                ChatMessage::user("   "),
                ChatMessage::user("anyone?"),
            ],
            tools: vec![],
            cache: CachePlan::Conversation,
        };
        let body = client(CacheTtl::FiveMinutes).body(&request);
        let turns = body["messages"].as_array().unwrap();
        assert_eq!(turns.len(), 1, "{body}");
        let blocks = turns[0]["content"].as_array().unwrap();
        assert_eq!(blocks.len(), 2, "{body}");
        assert!(blocks.iter().all(|b| !b["text"].as_str().unwrap().trim().is_empty()));
        assert!(blocks[1]["cache_control"].is_object(), "the mark is on the last, non-empty block");
    }

    #[test]
    fn anthropic_a_history_left_odd_by_a_deletion_or_a_forget_goes_as_anthropic_takes_it() {
        use crate::provider::ToolCall;
        let call = |id: &str| ToolCall { id: id.into(), name: "read_page".into(), arguments: "{}".into() };
        let history = vec![
            // The first user message deleted: the history starts with his answer.
            ChatMessage::Assistant { text: "Lobby 4.".into(), tool_calls: vec![] },
            ChatMessage::User { text: "and the map?".into(), images: vec![] },
            // A call whose result was forgotten, and words that came before a later result.
            ChatMessage::Assistant { text: String::new(), tool_calls: vec![call("t1"), call("t2")] },
            ChatMessage::User { text: "quick please".into(), images: vec![] },
            ChatMessage::Tool { call_id: "t2".into(), content: "the map page".into(), name: "read_page".into() },
            // A result whose call is no longer kept.
            ChatMessage::Tool { call_id: "t9".into(), content: "an old page".into(), name: "read_page".into() },
        ];
        let turns = messages(&history, None);
        let roles: Vec<&str> = turns.iter().map(|t| t["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["user", "assistant", "user", "assistant", "user"], "{turns:#?}");
        let last = turns[4]["content"].as_array().unwrap();
        let kinds: Vec<&str> = last.iter().map(|b| b["type"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["tool_result", "tool_result", "text", "text"], "results first, each call answered: {last:#?}");
        let answered: Vec<&str> = last.iter().filter_map(|b| b["tool_use_id"].as_str()).collect();
        assert_eq!(answered, ["t2", "t1"]);
        assert!(last[2]["text"].as_str().unwrap().contains("an old page"), "the orphan result is said in words");
        assert_eq!(messages(&history, None), turns, "the same history comes out the same, so the cache holds");
    }

    #[test]
    fn anthropic_a_picture_goes_as_its_bytes_say_and_one_past_5_mb_is_said_in_words() {
        // A JPEG labelled PNG by its uploader.
        let jpeg = "data:image/png;base64,/9j/4AAQSkZJRgABAQ==";
        assert_eq!(image_block(jpeg).unwrap()["source"]["media_type"], "image/jpeg");
        // Bytes that are no picture at all, labelled PNG: said in words, never an image block.
        let not_a_picture = image_block("data:image/png;base64,cGl4ZWxz").unwrap();
        assert_eq!(not_a_picture["type"], "text", "{not_a_picture}");
        let huge = format!("data:image/png;base64,iVBORw0KGgo{}", "A".repeat(8 * 1024 * 1024));
        let said = image_block(&huge).unwrap();
        assert_eq!(said["type"], "text");
        assert!(said["text"].as_str().unwrap().contains("past the 5 MB"), "{said}");
    }

    #[test]
    fn anthropic_failures_are_classified() {
        let body = |kind: &str| format!(r#"{{"type":"error","error":{{"type":"{kind}","message":"m"}}}}"#);
        assert!(matches!(classify(529, None, &body("overloaded_error")), ModelError::Transient { code: "overloaded", .. }));
        assert!(matches!(
            classify(429, Some(Duration::from_secs(3)), &body("rate_limit_error")),
            ModelError::Transient { code: "rate_limited", retry_after: Some(_), .. }
        ));
        assert!(matches!(classify(401, None, &body("authentication_error")), ModelError::Terminal { code: "unauthorized", .. }));
        assert!(matches!(classify(413, None, &body("request_too_large")), ModelError::Terminal { code: "request_too_large", .. }));
        assert!(matches!(classify(400, None, &body("invalid_request_error")), ModelError::Terminal { code: "rejected", .. }));
        assert_eq!(classify(400, None, &body("invalid_request_error")).provider_message(), "m");
        let broke = r#"{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the Anthropic API."}}"#;
        assert!(matches!(classify(400, None, broke), ModelError::UsageLimit { .. }), "an empty balance is a usage limit");
    }
}
