//! Model providers: what a model request is, what comes back, and how
//! failures are classified into transient (retried) and terminal (coded).

mod anthropic;
mod openai;
mod rehearsal;

use std::time::Duration;

use clankie_proto::v1::FailureCode;
use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};

pub use anthropic::{AnthropicClient, AnthropicConfig, CacheTtl, MAX_BREAKPOINTS};
pub use openai::{DEFAULT_RESPONSE_TIMEOUT, OpenAiClient, OpenAiConfig, install_tls_provider};
pub use rehearsal::{REHEARSAL_LABEL, RehearsalModel};

/// A tool as the model sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON schema of the arguments.
    pub parameters: serde_json::Value,
}

/// A tool call the model made; `arguments` is the raw JSON text it streamed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// One message of model context.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum ChatMessage {
    User {
        text: String,
        /// Pictures the model should perceive, as `data:` URLs.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<String>,
    },
    Assistant {
        text: String,
        tool_calls: Vec<ToolCall>,
    },
    Tool {
        call_id: String,
        name: String,
        content: String,
    },
}

impl ChatMessage {
    /// A user message of text alone.
    pub fn user(text: impl Into<String>) -> ChatMessage {
        ChatMessage::User { text: text.into(), images: Vec::new() }
    }

    /// A rough token count (characters / 4), for budgets.
    pub fn token_estimate(&self) -> usize {
        let chars = match self {
            // A picture costs the model a few hundred tokens whatever its size.
            ChatMessage::User { text, images } => text.len() + images.len() * 1_200,
            ChatMessage::Assistant { text, tool_calls } => {
                text.len() + tool_calls.iter().map(|c| c.name.len() + c.arguments.len()).sum::<usize>()
            }
            ChatMessage::Tool { content, .. } => content.len(),
        };
        chars / 4 + 4
    }
}

/// Everything one model call is sent.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelRequest {
    pub system: String,
    pub messages: Vec<ChatMessage>,
    pub tools: Vec<ToolSpec>,
    /// What the next call will send again unchanged: where a provider that caches on request
    /// (Anthropic) marks the prompt.
    pub cache: CachePlan,
}

/// Opens the part of a system prompt that is one room's alone (where he is, who may see it); what
/// comes before it is the same in every room. A provider that caches on request marks the shared
/// part apart, so a room's first turn reads it from another room's.
pub const THIS_CONVERSATION: &str = "\n\nThis conversation: ";

/// Which part of a request the next call repeats byte for byte. A provider that bills a cache
/// write above the plain price (Anthropic, 1.25x) should write only what is read again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CachePlan {
    /// A conversation that only grows (a lane's turns, a run's tool rounds): the next call
    /// repeats all of this one.
    #[default]
    Conversation,
    /// The tools, the system prompt and the first `n` messages come again; what follows is
    /// rebuilt for every call (the voice floor's room block, redrawn at every line heard).
    Through(usize),
    /// A call made once (a compaction's summary): nothing of it is read again.
    Once,
}

/// Tokens one model call used, as the provider counted them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Of `input_tokens`, those the provider served from its prompt cache
    /// (`prompt_tokens_details.cached_tokens`): what a stable prompt prefix saves.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cached_input_tokens: u64,
    /// Of `output_tokens`, those spent reasoning (`completion_tokens_details.reasoning_tokens`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reasoning_tokens: u64,
    /// Of `input_tokens`, those written to the prompt cache at this call (Anthropic's
    /// `cache_creation_input_tokens`, billed above the base price); 0 where the provider
    /// caches on its own.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_input_tokens: u64,
}

/// A count a stored entry leaves out when it is zero, as it reads back.
fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Several calls' usage summed, as one bill.
impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cached_input_tokens += other.cached_input_tokens;
        self.reasoning_tokens += other.reasoning_tokens;
        self.cache_write_input_tokens += other.cache_write_input_tokens;
    }
}

/// A piece of a streamed answer.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamItem {
    Text(String),
    ToolCallDelta {
        index: usize,
        id: Option<String>,
        name: Option<String>,
        arguments: String,
    },
    Finish(String),
    Usage(Usage),
    /// A sign of life that carries nothing (Anthropic's `ping`): it feeds the stall watchdog.
    Alive,
    /// The provider said the stream is complete.
    Done,
}

/// A provider failure, classified.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// Worth retrying: rate limit, 5xx, overload, a dropped or unreachable stream.
    #[error("transient provider failure ({code})")]
    Transient { code: &'static str, retry_after: Option<Duration>, message: String },
    /// Quota or usage exhausted; retrying cannot help.
    #[error("provider usage limit reached")]
    UsageLimit { message: String },
    /// Any other failure the provider will not get over by itself.
    #[error("provider failed ({code})")]
    Terminal { code: &'static str, message: String },
}

impl ModelError {
    /// The failure code a run that ends on this error reports.
    pub fn failure_code(&self) -> FailureCode {
        match self {
            ModelError::UsageLimit { .. } => FailureCode::CaptainUsageLimitReached,
            ModelError::Transient { .. } | ModelError::Terminal { .. } => FailureCode::CaptainModelFailed,
        }
    }

    /// The provider's own words, for the session tree only.
    pub fn provider_message(&self) -> &str {
        match self {
            ModelError::Transient { message, .. } | ModelError::UsageLimit { message } | ModelError::Terminal { message, .. } => message,
        }
    }

    /// A short machine code, safe for logs and receipts.
    pub fn code(&self) -> &'static str {
        match self {
            ModelError::Transient { code, .. } | ModelError::Terminal { code, .. } => code,
            ModelError::UsageLimit { .. } => "usage_limit",
        }
    }
}

/// The answer of one model call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AssistantTurn {
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    pub stop_reason: String,
    pub usage: Usage,
}

/// What one model answer may make the client hold: a hostile or broken stream cannot
/// make it allocate without limit, and a step cannot fan out into unbounded tool work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamBounds {
    /// Tool calls one step may run; the rest are answered with a tool error.
    pub tool_calls_per_step: usize,
    /// Largest arguments of one tool call; a larger call is answered with a tool error.
    pub tool_args_max_bytes: usize,
    /// Largest answer (text, tool names and arguments) one call may stream.
    pub stream_max_bytes: usize,
}

impl Default for StreamBounds {
    fn default() -> Self {
        StreamBounds { tool_calls_per_step: 8, tool_args_max_bytes: 16 * 1024, stream_max_bytes: 1 << 20 }
    }
}

impl StreamBounds {
    /// A tool-call index at or past this is not a real call: the stream is refused.
    pub fn max_tool_call_index(&self) -> usize {
        self.tool_calls_per_step.saturating_mul(4).max(16)
    }
}

/// Builds an [`AssistantTurn`] from stream items, within [`StreamBounds`].
#[derive(Debug, Default)]
pub(crate) struct Accumulator {
    bounds: StreamBounds,
    turn: AssistantTurn,
    calls: Vec<ToolCall>,
    bytes: usize,
    finished: bool,
    done: bool,
}

impl Accumulator {
    pub(crate) fn new(bounds: StreamBounds) -> Accumulator {
        Accumulator { bounds, ..Accumulator::default() }
    }

    /// Takes one item; an item past a bound refuses the whole stream.
    pub(crate) fn push(&mut self, item: StreamItem) -> Result<(), ModelError> {
        let size = match &item {
            StreamItem::Text(t) => t.len(),
            StreamItem::ToolCallDelta { id, name, arguments, .. } => {
                id.as_ref().map_or(0, String::len) + name.as_ref().map_or(0, String::len) + arguments.len()
            }
            _ => 0,
        };
        self.bytes = self.bytes.saturating_add(size);
        if self.bytes > self.bounds.stream_max_bytes {
            return Err(ModelError::Terminal {
                code: "stream_too_large",
                message: format!("the answer passed {} bytes", self.bounds.stream_max_bytes),
            });
        }
        match item {
            StreamItem::Text(t) => self.turn.text.push_str(&t),
            StreamItem::ToolCallDelta { index, id, name, arguments } => {
                if index >= self.bounds.max_tool_call_index() {
                    return Err(ModelError::Terminal {
                        code: "tool_call_index_out_of_bounds",
                        message: format!("tool call index {index} is past {}", self.bounds.max_tool_call_index()),
                    });
                }
                while self.calls.len() <= index {
                    self.calls.push(ToolCall { id: String::new(), name: String::new(), arguments: String::new() });
                }
                let call = &mut self.calls[index];
                if let Some(id) = id {
                    call.id = id;
                }
                if let Some(name) = name {
                    call.name.push_str(&name);
                }
                call.arguments.push_str(&arguments);
            }
            StreamItem::Finish(reason) => {
                self.finished = true;
                self.turn.stop_reason = reason;
            }
            StreamItem::Usage(u) => self.turn.usage = u,
            StreamItem::Alive => {}
            StreamItem::Done => self.done = true,
        }
        Ok(())
    }

    /// The finished turn, or a dropped-stream error when the provider never finished it.
    pub(crate) fn finish(mut self) -> Result<AssistantTurn, ModelError> {
        if !self.finished && !self.done {
            return Err(ModelError::Transient {
                code: "stream_dropped",
                retry_after: None,
                message: "the stream ended before the provider finished the answer".into(),
            });
        }
        for (i, call) in self.calls.iter_mut().enumerate() {
            if call.id.is_empty() {
                call.id = format!("call_{i}");
            }
        }
        self.turn.tool_calls = self.calls;
        Ok(self.turn)
    }
}

/// The model a run talks to.
#[derive(Clone)]
pub enum Model {
    /// An OpenAI-compatible chat-completions endpoint.
    OpenAi(OpenAiClient),
    /// Anthropic's Messages API, with prompt-cache breakpoints where the prefix is stable.
    Anthropic(AnthropicClient),
    /// The offline rehearsal model: deterministic, labelled, no network.
    Rehearsal(RehearsalModel),
}

/// Told the size of each part of a request as the provider's connection takes it.
pub type Uploaded = std::sync::Arc<dyn Fn(usize) + Send + Sync>;

impl Model {
    /// Starts one streamed model call; `uploaded` hears the request's upload move.
    pub async fn open(
        &self,
        request: &ModelRequest,
        uploaded: Uploaded,
    ) -> Result<BoxStream<'static, Result<StreamItem, ModelError>>, ModelError> {
        match self {
            Model::OpenAi(client) => client.open(request, uploaded).await,
            Model::Anthropic(client) => client.open(request, uploaded).await,
            Model::Rehearsal(model) => Ok(model.open(request)),
        }
    }

    /// The provider as the GenAI conventions name it (`gen_ai.provider.name`).
    pub fn provider_name(&self) -> &'static str {
        match self {
            Model::OpenAi(_) => "openai",
            Model::Anthropic(_) => "anthropic",
            Model::Rehearsal(_) => "rehearsal",
        }
    }

    /// The model asked for, as configured.
    pub fn model_name(&self) -> &str {
        match self {
            Model::OpenAi(client) => client.model(),
            Model::Anthropic(client) => client.model(),
            Model::Rehearsal(_) => "rehearsal",
        }
    }

    /// Whether this is the rehearsal model, which must be labelled wherever it shows.
    pub fn is_rehearsal(&self) -> bool {
        matches!(self, Model::Rehearsal(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_calls_are_assembled_from_deltas() {
        let mut acc = Accumulator::default();
        acc.push(StreamItem::ToolCallDelta { index: 0, id: Some("c0".into()), name: Some("read_page".into()), arguments: String::new() })
            .unwrap();
        acc.push(StreamItem::ToolCallDelta { index: 0, id: None, name: None, arguments: "{\"url\":".into() }).unwrap();
        acc.push(StreamItem::ToolCallDelta { index: 1, id: None, name: Some("send_text_update".into()), arguments: "{}".into() }).unwrap();
        acc.push(StreamItem::ToolCallDelta { index: 0, id: None, name: None, arguments: "\"x\"}".into() }).unwrap();
        acc.push(StreamItem::Finish("tool_calls".into())).unwrap();
        let turn = acc.finish().unwrap();
        assert_eq!(turn.tool_calls.len(), 2);
        assert_eq!(turn.tool_calls[0].arguments, "{\"url\":\"x\"}");
        assert_eq!(turn.tool_calls[1].id, "call_1");
    }

    #[test]
    fn a_huge_tool_call_index_or_an_endless_stream_is_refused_before_it_allocates() {
        let mut acc = Accumulator::default();
        let huge = StreamItem::ToolCallDelta { index: usize::MAX / 2, id: None, name: None, arguments: String::new() };
        assert!(matches!(acc.push(huge), Err(ModelError::Terminal { code: "tool_call_index_out_of_bounds", .. })));
        assert!(acc.calls.is_empty());
        let mut acc = Accumulator::new(StreamBounds { stream_max_bytes: 10, ..StreamBounds::default() });
        acc.push(StreamItem::Text("0123456789".into())).unwrap();
        assert!(matches!(acc.push(StreamItem::Text("x".into())), Err(ModelError::Terminal { code: "stream_too_large", .. })));
    }

    #[test]
    fn a_stream_that_never_finishes_is_a_dropped_stream() {
        let mut acc = Accumulator::default();
        acc.push(StreamItem::Text("half an ans".into())).unwrap();
        assert!(matches!(acc.finish(), Err(ModelError::Transient { code: "stream_dropped", .. })));
    }
}
