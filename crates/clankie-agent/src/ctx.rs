//! What a run carries through its stages: the agent's configuration, the run's counters,
//! and the handles every stage reaches (model, tools, events, steers, cancel).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::compaction::CompactionPolicy;
use crate::provider::{Model, StreamBounds};
use crate::steer::Steerer;
use crate::watchdog::StallPolicy;
use crate::{EventSink, Tool};

/// Bounded retries of transient provider failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// The first backoff; it doubles each retry.
    pub base_delay: Duration,
    /// No backoff, nor honoured Retry-After, waits longer than this.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy { max_retries: 4, base_delay: Duration::from_millis(500), max_delay: Duration::from_secs(30) }
    }
}

/// How runs behave; every duration is configuration so tests can compress it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AgentConfig {
    pub stall: StallPolicy,
    pub retry: RetryPolicy,
    pub compaction: CompactionPolicy,
    pub bounds: StreamBounds,
}

/// Content-free counts of one run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunStats {
    /// Model calls, counting retries once and compaction calls.
    pub model_calls: u32,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Of `input_tokens`, those the provider read from its prompt cache.
    pub cached_input_tokens: u64,
    /// Of `input_tokens`, those written to the prompt cache (Anthropic bills them above the input price).
    pub cache_write_input_tokens: u64,
    /// Of `output_tokens`, those the provider said were spent reasoning.
    pub reasoning_tokens: u64,
    /// Delivery ids of the steered messages that entered the session.
    pub steered: Vec<String>,
    /// Whether the silence gate ever said words were coming.
    pub words_came: bool,
}

/// What every stage of one run reaches: the model, its tools and configuration, where its
/// events go, its steers, its system prompt and whether it was cancelled.
pub(crate) struct RunCtx {
    pub(crate) model: Model,
    pub(crate) tools: Vec<Arc<dyn Tool>>,
    pub(crate) config: AgentConfig,
    pub(crate) sink: EventSink,
    pub(crate) steerer: Steerer,
    pub(crate) system: String,
    pub(crate) cancel: watch::Receiver<bool>,
}
