//! What a test scripts: the [`Reply`] the stand-in gives the first request a [`Script`] matches,
//! kept apart from the wires that play it so OpenAI's and Anthropic's streams answer the same scripts.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One scripted answer, used by the first request it matches.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Script {
    /// Only a request whose messages contain this text takes the script.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when_request_contains: Option<String>,
    /// Only a request whose last message contains this text takes the script.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when_last_message_contains: Option<String>,
    /// What that request is answered.
    pub reply: Reply,
}

/// A tool call the stand-in makes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScriptedCall {
    /// The tool asked for.
    pub name: String,
    /// Its arguments, streamed in pieces as real providers send them.
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
        Script { when_request_contains: None, when_last_message_contains: None, reply }
    }

    /// A script only a request mentioning `needle` takes.
    pub fn when(needle: impl Into<String>, reply: Reply) -> Script {
        Script { when_request_contains: Some(needle.into()), when_last_message_contains: None, reply }
    }

    /// A script only a request whose last message mentions `needle` takes: what a model is
    /// asked now, not what it was shown before.
    pub fn when_last(needle: impl Into<String>, reply: Reply) -> Script {
        Script { when_request_contains: None, when_last_message_contains: Some(needle.into()), reply }
    }
}
