//! Steering: messages queued into a live run, taken in between its model calls, and
//! handed back undelivered when the run ends first.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use crate::session::UserMessage;

#[derive(Default)]
struct Queue {
    closed: bool,
    pending: VecDeque<UserMessage>,
}

/// Queues messages into a live run. Cheap to clone.
#[derive(Clone, Default)]
pub struct Steerer {
    queue: Arc<Mutex<Queue>>,
}

impl Steerer {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `message` for delivery at the run's next turn boundary. When the
    /// run has already ended the message is handed back, so it is never lost.
    pub fn steer(&self, message: UserMessage) -> Result<(), UserMessage> {
        let mut q = self.lock();
        if q.closed {
            return Err(message);
        }
        q.pending.push_back(message);
        Ok(())
    }

    /// Takes back a queued message of `delivery_id` the run has not yet read (its author
    /// deleted it). False when there is none: it was read already, or never queued.
    pub fn withdraw(&self, delivery_id: &str) -> bool {
        let mut q = self.lock();
        let before = q.pending.len();
        q.pending.retain(|m| m.delivery_id != delivery_id);
        q.pending.len() < before
    }

    /// Whether the run still takes steers.
    pub fn is_open(&self) -> bool {
        !self.lock().closed
    }

    pub(crate) fn drain(&self) -> Vec<UserMessage> {
        self.lock().pending.drain(..).collect()
    }

    /// Closes the queue if nothing is waiting; the atomic check that lets a run end without losing a steer.
    pub(crate) fn close_if_empty(&self) -> bool {
        let mut q = self.lock();
        if q.pending.is_empty() {
            q.closed = true;
        }
        q.closed
    }

    pub(crate) fn close(&self) -> Vec<UserMessage> {
        let mut q = self.lock();
        q.closed = true;
        q.pending.drain(..).collect()
    }
}
