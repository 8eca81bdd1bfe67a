//! The runtime and its model as the settings describe them, for every service that runs one.

use clankie_settings::Settings;

use crate::compaction;
use crate::ctx::{AgentConfig, RetryPolicy};
use crate::provider::{
    AnthropicClient, AnthropicConfig, CacheTtl, Model, ModelError, OpenAiClient, OpenAiConfig, RehearsalModel, StreamBounds,
};
use crate::watchdog::StallPolicy;

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
