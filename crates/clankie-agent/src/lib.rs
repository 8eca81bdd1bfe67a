//! The agent runtime, with no Discord knowledge.
//!
//! An [`Agent`] runs a [`Model`] with [`Tool`]s over a persisted [`Session`].
//! A [`Run`] goes model call → tool batch → steered messages → model call …
//! until the model stops with nothing queued; [`Steerer::steer`] queues a
//! message that arrives meanwhile. Every run emits [`AgentEvent`]s and runs
//! under the stall watchdog: only silence ends a run early, never duration.
//! The [`SilenceGate`] says the moment a streamed reply can no longer be
//! [`SILENT_TOKEN`].

mod clock;
pub mod compaction;
mod events;
pub mod provider;
mod run;
mod session;
pub mod silence;
mod tool;
pub mod watchdog;

pub use clock::{BootClock, Clock, SuspendableClock, SystemWallClock, WallClock};
pub use events::{AgentEvent, EventSink};
pub use provider::{
    AnthropicClient, AnthropicConfig, CacheTtl, DEFAULT_RESPONSE_TIMEOUT, Model, ModelError, OpenAiClient, OpenAiConfig, RehearsalModel,
    StreamBounds,
};
pub use run::{Agent, AgentConfig, RetryPolicy, Run, RunReply, RunResult, RunStats, Steerer, complete, complete_streaming};
pub use session::{COMPACTION_KIND, EntryBody, FORGOTTEN_ASKER_NOTE, Session, SessionEntry, UserMessage, WITHDRAWN_KIND};
pub use silence::{SILENT_TOKEN, SilenceGate};
pub use tool::{Tool, ToolContext, ToolError};
pub use watchdog::StallPolicy;

use clankie_settings::Settings;

/// Why the runtime could not go on.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Store(#[from] clankie_store::StoreError),
    #[error("session: {0}")]
    Session(String),
    #[error(transparent)]
    Model(#[from] ModelError),
}

/// The runtime's configuration from settings.
pub fn config_from_settings(settings: &Settings) -> AgentConfig {
    AgentConfig {
        stall: StallPolicy { silence: settings.stall_silence, tick: settings.stall_tick },
        retry: RetryPolicy { max_retries: settings.model_max_retries, ..RetryPolicy::default() },
        compaction: compaction::CompactionPolicy {
            budget_tokens: settings.context_budget_tokens,
            keep_recent_tokens: settings.context_budget_tokens / 5,
        },
        bounds: StreamBounds {
            tool_calls_per_step: settings.tool_calls_per_step,
            tool_args_max_bytes: settings.tool_args_max_bytes,
            stream_max_bytes: settings.model_stream_max_bytes,
        },
    }
}

/// The configured model: the OpenAI-compatible endpoint when a base URL is set,
/// otherwise the offline rehearsal model.
pub fn model_from_settings(settings: &Settings) -> Result<Model, ModelError> {
    match &settings.model_base_url {
        Some(base_url) if settings.model_provider == clankie_settings::ModelProvider::Anthropic => {
            Ok(Model::Anthropic(AnthropicClient::new(AnthropicConfig {
                base_url: base_url.clone(),
                model: settings.model_name.clone(),
                api_key: settings.model_api_key.clone(),
                response_timeout: settings.model_response_timeout,
                max_tokens: settings.model_max_tokens,
                cache_ttl: if settings.model_cache_ttl >= std::time::Duration::from_secs(3600) {
                    CacheTtl::OneHour
                } else {
                    CacheTtl::FiveMinutes
                },
            })?))
        }
        Some(base_url) => Ok(Model::OpenAi(OpenAiClient::new(OpenAiConfig {
            base_url: base_url.clone(),
            model: settings.model_name.clone(),
            api_key: settings.model_api_key.clone(),
            response_timeout: settings.model_response_timeout,
        })?)),
        None => Ok(Model::Rehearsal(RehearsalModel { think_delay: settings.rehearsal_think, token_delay: settings.rehearsal_token })),
    }
}
