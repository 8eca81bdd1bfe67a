//! The captain's tools. Each is bound to the room of the run it serves.

mod memory;
mod read_page;
mod runtime;
mod share_picture;
mod text_update;

pub use memory::{MAX_FACT_CHARS, ProposeMemory};
pub use read_page::ReadPage;
pub use runtime::DescribeRuntime;
pub use share_picture::SharePicture;
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
    /// Pictures the run's tools saved, to go out with the reply.
    artifacts: Arc<std::sync::Mutex<Vec<clankie_proto::v1::ArtifactRef>>>,
}

impl Room {
    /// A room answering `message_id`.
    pub fn new(lane: LaneKey, turn_id: String, message_id: u64) -> Room {
        Room { lane, turn_id, answering: Arc::new(AtomicU64::new(message_id)), artifacts: Arc::default() }
    }

    /// The message replies and updates thread onto.
    pub fn answering(&self) -> u64 {
        self.answering.load(Ordering::SeqCst)
    }

    /// Adds a saved picture to the reply.
    pub fn attach(&self, artifact: clankie_proto::v1::ArtifactRef) {
        self.artifacts.lock().unwrap_or_else(|p| p.into_inner()).push(artifact);
    }

    /// The pictures the reply carries.
    pub fn artifacts(&self) -> Vec<clankie_proto::v1::ArtifactRef> {
        self.artifacts.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Re-captures the newest speaker's message.
    pub fn capture(&self, message_id: u64) {
        self.answering.store(message_id, Ordering::SeqCst);
    }
}
