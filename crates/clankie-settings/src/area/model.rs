//! The model provider, the stall watchdog and the offline rehearsal model.
use crate::setting::{Area, Kind, Service::*, Setting, Unit};

/// The `[model]` section.
pub(crate) const SETTINGS: &[Setting] = &[
    Setting::new(Area::Model, "CLANKIE_MODEL_BASE_URL", Kind::Url, "unset: the offline rehearsal model", "OpenAI-compatible endpoint, e.g. `https://api.openai.com/v1`. Unset runs the labelled rehearsal model, in the sandbox only: against Discord itself (`CLANKIE_DISCORD_API` unset) the captain and the voice floor refuse to start without it.", &[Captain, Run, Cli]).credentials().must_set(),
    Setting::new(Area::Model, "CLANKIE_MODEL_NAME", Kind::Text, "gpt-4o-mini", "Model name sent to the endpoint.", &[Captain, Run, Cli]),
    Setting::new(Area::Model, "CLANKIE_MODEL_API_KEY", Kind::Text, "unset", "Bearer token for the endpoint (`x-api-key` for Anthropic). Never logged.", &[Captain, Run, Cli]).secret().must_set(),
    Setting::new(
        Area::Model,
        "CLANKIE_MODEL_PROVIDER",
        Kind::Choice(&["openai", "anthropic"]),
        "anthropic when CLANKIE_MODEL_BASE_URL is Anthropic's, else openai",
        "The wire the endpoint speaks: OpenAI's Chat Completions (OpenAI, llama.cpp, OpenRouter...) or Anthropic's Messages API, which caches the prompt only up to the breakpoints Clankie marks.",
        &[Captain, VoiceFloor, Console, Run, Cli],
    ),
    Setting::new(Area::Model, "CLANKIE_MODEL_MAX_TOKENS", Kind::Count, "4096", "The most tokens one answer may take (Anthropic requires a bound; the OpenAI wire leaves it to the provider).", &[Captain, VoiceFloor, Console, Run]),
    Setting::new(
        Area::Model,
        "CLANKIE_MODEL_CACHE_TTL",
        Kind::Choice(&["5m", "1h"]),
        "5m",
        "How long Anthropic keeps a lane's cached prompt unread: `5m` (a write costs 1.25x the input price) or `1h` (2x) for rooms quiet longer between turns.",
        &[Captain, VoiceFloor, Console, Run],
    ),
    Setting::new(Area::Model, "CLANKIE_MODEL_MAX_RETRIES", Kind::Count, "4", "Retries of a transient provider failure (rate limit, 5xx, dropped stream) before the turn fails.", &[Captain, Run]),
    Setting::new(Area::Model, "CLANKIE_MODEL_RESPONSE_TIMEOUT_MS", Kind::Duration(Unit::Millis), "120000", "A model request fully sent and unanswered this long (no response head) is retried on a new connection; at most half of `CLANKIE_STALL_SILENCE_MS`.", &[Captain, Run]),
    Setting::new(Area::Model, "CLANKIE_STALL_SILENCE_MS", Kind::Duration(Unit::Millis), "300000", "A run with no sign of life this long is aborted as `captain_turn_stalled`. Nothing caps a run's length.", &[Gateway, Captain, Run]),
    Setting::new(Area::Model, "CLANKIE_STALL_TICK_MS", Kind::Duration(Unit::Millis), "5000", "How often the stall watchdog re-reads the boot clock.", &[Captain, Run]),
    Setting::new(Area::Model, "CLANKIE_CONTEXT_BUDGET_TOKENS", Kind::Count, "60000", "Estimated context size past which a session is compacted.", &[Captain, Run]),
    Setting::new(Area::Model, "CLANKIE_REHEARSAL_THINK_MS", Kind::Duration(Unit::Millis), "1500", "Rehearsal model: silence before its first token.", &[Captain, Run]),
    Setting::new(Area::Model, "CLANKIE_REHEARSAL_TOKEN_MS", Kind::Duration(Unit::Millis), "60", "Rehearsal model: gap between tokens.", &[Captain, Run]),
    Setting::new(Area::Model, "CLANKIE_TOOL_CALLS_PER_STEP", Kind::Count, "8", "Tool calls one model step may make; the rest get a tool error.", &[Captain, Run]),
    Setting::new(Area::Model, "CLANKIE_TOOL_ARGS_MAX_BYTES", Kind::Size(Unit::Bytes), "16384", "Largest arguments of one tool call; a larger call gets a tool error and does not run.", &[Captain, Run]),
    Setting::new(Area::Model, "CLANKIE_MODEL_STREAM_MAX_BYTES", Kind::Size(Unit::Bytes), "1048576", "Largest streamed model answer; past it the call fails as `model_failed` instead of growing without bound.", &[Captain, Run]),
];
