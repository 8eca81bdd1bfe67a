//! The event stream every run emits. The captain, the stall watchdog and the
//! typing decision all read it; it carries no model text.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::mpsc;

use crate::Clock;

/// Something that happened in a run. Any event is a sign of life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentEvent {
    RunStart,
    /// The run is over; the outcome comes from the run's join handle.
    RunEnd,
    /// A model call begins (`n` counts from 1 within the run).
    TurnStart {
        n: u32,
    },
    TurnEnd {
        n: u32,
    },
    /// The provider's connection took another part of the request: a big request (a picture
    /// of many megabytes) is alive while its upload moves.
    RequestSent {
        bytes: usize,
    },
    /// Streamed text arrived; only its size, never its words.
    TextDelta {
        chars: usize,
    },
    /// The provider said it is still working and sent nothing else (a keep-alive event).
    ProviderAlive,
    /// The silence gate decided this model call is writing words, not `[[stay-silent]]`.
    WordsComing,
    ToolStart {
        call_id: String,
        name: String,
        /// What the tool says it is doing, when it says.
        activity: Option<String>,
    },
    ToolProgress {
        call_id: String,
    },
    ToolEnd {
        call_id: String,
        name: String,
        is_error: bool,
    },
    /// A transient provider failure is being retried after `delay_ms`.
    RetryStart {
        attempt: u32,
        delay_ms: u64,
        code: &'static str,
    },
    RetryEnd {
        attempt: u32,
    },
    CompactionStart,
    CompactionEnd,
    /// A steered message entered the session at a turn boundary.
    SteerDelivered {
        delivery_id: String,
    },
}

/// Sends events and stamps the moment of the last one, for the watchdog.
#[derive(Clone)]
pub struct EventSink {
    tx: mpsc::UnboundedSender<AgentEvent>,
    last_nanos: Arc<AtomicU64>,
    clock: Arc<dyn Clock>,
}

impl EventSink {
    pub(crate) fn new(clock: Arc<dyn Clock>) -> (EventSink, mpsc::UnboundedReceiver<AgentEvent>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let sink = EventSink { tx, last_nanos: Arc::new(AtomicU64::new(clock.now().as_nanos() as u64)), clock };
        (sink, rx)
    }

    /// Emits an event and records it as the latest sign of life.
    pub fn emit(&self, event: AgentEvent) {
        self.last_nanos.store(self.clock.now().as_nanos() as u64, Ordering::SeqCst);
        // A run outlives a consumer that stopped listening; that is not an error.
        let _ = self.tx.send(event);
    }

    pub(crate) fn last_activity(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.last_nanos.load(Ordering::SeqCst))
    }

    pub(crate) fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }
}
