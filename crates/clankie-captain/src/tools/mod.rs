//! The captain's tools. Each is bound to the room of the run it serves.

mod read_page;
mod runtime;
mod text_update;

pub use read_page::ReadPage;
pub use runtime::DescribeRuntime;
pub use text_update::{MAX_TEXT_UPDATE_CHARS, SendTextUpdate};

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use clankie_proto::LaneKey;

/// The room a run speaks in, and the message it is currently answering.
#[derive(Clone)]
pub struct Room {
    pub lane: LaneKey,
    pub turn_id: String,
    /// The newest speaker's message; a steer moves it.
    answering: Arc<AtomicU64>,
}

impl Room {
    /// A room answering `message_id`.
    pub fn new(lane: LaneKey, turn_id: String, message_id: u64) -> Room {
        Room { lane, turn_id, answering: Arc::new(AtomicU64::new(message_id)) }
    }

    /// The message replies and updates thread onto.
    pub fn answering(&self) -> u64 {
        self.answering.load(Ordering::SeqCst)
    }

    /// Re-captures the newest speaker's message.
    pub fn capture(&self, message_id: u64) {
        self.answering.store(message_id, Ordering::SeqCst);
    }
}
