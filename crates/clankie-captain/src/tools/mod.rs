//! The captain's tools. Each is bound to the room of the run it serves.

mod browse;
mod memory;
mod read_page;
mod remind;
mod runtime;
mod share_picture;
mod text_update;

pub use browse::Browse;
pub use memory::{MAX_FACT_CHARS, ProposeMemory};
pub use read_page::ReadPage;
pub use remind::Remind;
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
    /// Pictures a tool made but could not save; the reply says so in a short note.
    lost: Arc<std::sync::Mutex<Vec<String>>>,
    /// Memories the run proposed: recorded, and put to the owner, only when the turn settles.
    proposals: Arc<std::sync::Mutex<Vec<(String, Vec<u64>)>>>,
    /// Who wrote the message answered (id and name): whom a reminder set now is for.
    asker: Arc<std::sync::Mutex<(u64, String)>>,
    /// The reply goes to this person alone, by DM (a reminder asked for so): no typing, no card.
    direct_to: Option<u64>,
}

impl Room {
    /// A room answering `message_id`.
    pub fn new(lane: LaneKey, turn_id: String, message_id: u64) -> Room {
        Room {
            lane,
            turn_id,
            answering: Arc::new(AtomicU64::new(message_id)),
            artifacts: Arc::default(),
            lost: Arc::default(),
            proposals: Arc::default(),
            asker: Arc::default(),
            direct_to: None,
        }
    }

    /// The reply goes to `user` alone, by DM.
    pub fn direct_to(mut self, user: u64) -> Room {
        self.direct_to = Some(user);
        self
    }

    /// Whom the reply goes to alone, by DM; `None` when it is posted in the room.
    pub fn direct(&self) -> Option<u64> {
        self.direct_to
    }

    /// Notes who wrote the message answered now.
    pub fn asked_by(&self, author_id: u64, author_name: &str) {
        *self.asker.lock().unwrap_or_else(|p| p.into_inner()) = (author_id, author_name.to_owned());
    }

    /// Who wrote the message answered now (0 when nobody did: a voice ask without one).
    pub fn asker(&self) -> (u64, String) {
        self.asker.lock().unwrap_or_else(|p| p.into_inner()).clone()
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

    /// Keeps a memory the run proposed for the turn's settlement; `false` when this run
    /// already proposed the same fact.
    pub fn propose(&self, fact: &str, named: Vec<u64>) -> bool {
        let mut proposals = self.proposals.lock().unwrap_or_else(|p| p.into_inner());
        if proposals.iter().any(|(f, _)| f == fact) {
            return false;
        }
        proposals.push((fact.to_owned(), named));
        true
    }

    /// The memories the run proposed, in order.
    pub fn proposals(&self) -> Vec<String> {
        self.proposals.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|(f, _)| f.clone()).collect()
    }

    /// Whose words each proposal was drawn from, in the order of [`Room::proposals`]: the
    /// people the model named, among `read` (every author the run read), else all of `read`.
    pub fn drawn_from(&self, read: &[u64]) -> Vec<Vec<u64>> {
        let proposals = self.proposals.lock().unwrap_or_else(|p| p.into_inner());
        proposals
            .iter()
            .map(|(_, named)| {
                let mut from: Vec<u64> = named.iter().copied().filter(|n| read.contains(n)).collect();
                if from.is_empty() {
                    from = read.to_vec();
                }
                from.sort_unstable();
                from.dedup();
                from
            })
            .collect()
    }

    /// Notes a picture that was made but could not be saved.
    pub fn lost(&self, what: String) {
        self.lost.lock().unwrap_or_else(|p| p.into_inner()).push(what);
    }

    /// The reply's words with a short note for every lost picture.
    pub fn with_notes(&self, text: &str) -> String {
        let lost = self.lost.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = text.to_owned();
        for what in lost.iter() {
            out.push_str(&format!("\n(I couldn't attach {what}: it could not be saved.)"));
        }
        out
    }

    /// Re-captures the newest speaker's message.
    pub fn capture(&self, message_id: u64) {
        self.answering.store(message_id, Ordering::SeqCst);
    }
}

/// Saves a picture through media, handing big bytes over as a blob; answers media's reply.
pub(crate) async fn register(
    bus: &clankie_bus::Bus,
    data: Vec<u8>,
    filename: String,
    content_type: String,
) -> Result<clankie_proto::v1::MediaRegisterReply, clankie_bus::BusError> {
    let (data, blob) = bus.hand_over(&filename, data).await?;
    let request = clankie_proto::v1::MediaRegisterRequest { data, filename, content_type, blob };
    bus.request(&clankie_proto::Subject::RpcMediaRegister, &request, std::time::Duration::from_secs(30)).await
}
