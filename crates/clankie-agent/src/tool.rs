//! The tool trait: a name, a schema, and an execution that can report progress and be cancelled.

use futures::future::BoxFuture;
use tokio::sync::watch;

use crate::provider::ToolSpec;
use crate::{AgentEvent, EventSink};

/// Why a tool call failed. The message goes back to the model as the tool's result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    /// The call itself was wrong: bad arguments, over a limit, not allowed here.
    #[error("{0}")]
    Invalid(String),
    /// The call was fine but the work failed (a page unreachable, say).
    #[error("{0}")]
    Failed(String),
    /// The run was aborted while the tool worked.
    #[error("cancelled")]
    Cancelled,
}

/// What a tool gets besides its arguments.
#[derive(Clone)]
pub struct ToolContext {
    /// The model's id for this call.
    pub call_id: String,
    sink: EventSink,
    cancel: watch::Receiver<bool>,
}

impl ToolContext {
    pub(crate) fn new(call_id: String, sink: EventSink, cancel: watch::Receiver<bool>) -> ToolContext {
        ToolContext { call_id, sink, cancel }
    }

    /// Reports that work is going on. Each report is a sign of life for the stall watchdog.
    pub fn progress(&self) {
        self.sink.emit(AgentEvent::ToolProgress { call_id: self.call_id.clone() });
    }

    /// Resolves when the run is aborted; select on it around long work.
    pub async fn cancelled(&self) {
        let mut rx = self.cancel.clone();
        let _ = rx.wait_for(|c| *c).await;
    }
}

/// A capability the model may call.
pub trait Tool: Send + Sync + 'static {
    /// The name, description and argument schema the model is shown.
    fn spec(&self) -> ToolSpec;

    /// What a call is doing, in a few words for the room ("browsing example.com"); the
    /// tool's name when `None`.
    fn activity(&self, _arguments: &serde_json::Value) -> Option<String> {
        None
    }

    /// Runs one call. An `Err` is returned to the model as an error result; the run goes on.
    fn execute<'a>(&'a self, arguments: serde_json::Value, ctx: ToolContext) -> BoxFuture<'a, Result<String, ToolError>>;
}
