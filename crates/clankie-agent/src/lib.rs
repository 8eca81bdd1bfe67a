//! The agent runtime, with no Discord knowledge.
//!
//! An [`Agent`] runs a [`Model`] with [`Tool`]s over a persisted [`Session`].
//! A [`Run`] goes model call → tool batch → steered messages → model call …
//! until the model stops with nothing queued; [`Steerer::steer`] queues a
//! message that arrives meanwhile. Every run emits [`AgentEvent`]s and runs
//! under the stall watchdog: only silence ends a run early, never duration.
//! The [`SilenceGate`] says the moment a streamed reply can no longer be
//! [`SILENT_TOKEN`].

mod call;
mod clock;
pub mod compaction;
mod ctx;
mod error;
mod events;
mod from_settings;
pub mod provider;
mod run;
mod session;
pub mod silence;
mod steer;
mod tool;
mod tool_batch;
pub mod watchdog;

pub use call::{complete, complete_streaming};
pub use clock::{BootClock, Clock, SuspendableClock, SystemWallClock, WallClock};
pub use ctx::{AgentConfig, RetryPolicy, RunStats};
pub use error::AgentError;
pub use events::{AgentEvent, EventSink};
pub use from_settings::{config_from_settings, model_from_settings};
pub use provider::{
    AnthropicClient, AnthropicConfig, CachePlan, CacheTtl, DEFAULT_RESPONSE_TIMEOUT, Model, ModelError, OpenAiClient, OpenAiConfig,
    RehearsalModel, StreamBounds,
};
pub use run::{Agent, Run, RunReply, RunResult};
pub use session::{COMPACTION_KIND, EntryBody, FORGOTTEN_ASKER_NOTE, Session, SessionEntry, UserMessage, WITHDRAWN_KIND};
pub use silence::{SILENT_TOKEN, SilenceGate};
pub use steer::Steerer;
pub use tool::{Tool, ToolContext, ToolError};
pub use watchdog::StallPolicy;
