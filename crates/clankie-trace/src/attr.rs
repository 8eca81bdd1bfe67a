//! Span attribute names, as the OpenTelemetry semantic conventions spell them. Ours, not the
//! semconv crate's, which marks the GenAI ones as moved. The content attributes
//! (`gen_ai.input.messages`, `gen_ai.output.messages`, tool arguments and results) are left out
//! on purpose: Clankie never exports words.

/// `nats`, for [`MESSAGING_SYSTEM`].
pub const NATS: &str = "nats";
pub const MESSAGING_SYSTEM: &str = "messaging.system";
pub const MESSAGING_DESTINATION: &str = "messaging.destination.name";
/// `send` on a publish, `process` on a consume.
pub const MESSAGING_OPERATION: &str = "messaging.operation.type";
pub const MESSAGING_MESSAGE_ID: &str = "messaging.message.id";
pub const MESSAGING_CONSUMER_GROUP: &str = "messaging.consumer.group.name";
pub const MESSAGING_DELIVERY_COUNT: &str = "messaging.message.delivery_count";

pub const GEN_AI_OPERATION: &str = "gen_ai.operation.name";
pub const GEN_AI_PROVIDER: &str = "gen_ai.provider.name";
pub const GEN_AI_REQUEST_MODEL: &str = "gen_ai.request.model";
pub const GEN_AI_RESPONSE_MODEL: &str = "gen_ai.response.model";
pub const GEN_AI_FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
pub const GEN_AI_INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
pub const GEN_AI_OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
pub const GEN_AI_CACHE_READ_TOKENS: &str = "gen_ai.usage.cache_read.input_tokens";
pub const GEN_AI_CACHE_WRITE_TOKENS: &str = "gen_ai.usage.cache_creation.input_tokens";
pub const GEN_AI_REASONING_TOKENS: &str = "gen_ai.usage.reasoning.output_tokens";
pub const GEN_AI_CONVERSATION: &str = "gen_ai.conversation.id";
pub const GEN_AI_TOOL_NAME: &str = "gen_ai.tool.name";
pub const GEN_AI_TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
/// Milliseconds from the request to the first chunk of the answer (ours: the conventions name it only as a metric).
pub const GEN_AI_FIRST_CHUNK_MS: &str = "gen_ai.response.time_to_first_chunk_ms";
