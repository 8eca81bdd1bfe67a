//! What the stand-in was sent: every request as it arrived, so a test can assert exactly what
//! the model saw, on either wire.

use serde::{Deserialize, Serialize};
use serde_json::Value;

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

    /// The last message's text: what a model answers, where the rest is what it was shown.
    pub fn last_text(&self) -> String {
        self.messages().last().map(message_text).unwrap_or_default()
    }

    /// How many times `needle` occurs across the messages.
    pub fn count(&self, needle: &str) -> usize {
        self.all_text().matches(needle).count()
    }
}

/// A message's text, its parts joined: what the scripts match and the token estimate counts.
pub(crate) fn message_text(m: &Value) -> String {
    match &m["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join("\n"),
        _ => String::new(),
    }
}

/// Now, in ms since the Unix epoch: when a request arrived ([`RecordedRequest::at_ms`]).
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}
