//! A shard's session as its messages are stored: saved to this replica's own file (read back
//! on its restart) and kept as the newest mark for the shard's claim, so another replica resumes it.

use std::sync::{Arc, Mutex};

use twilight_gateway::Shard;

use crate::leases::SharedIdentifyQueue;
use crate::session::{self, SavedSession};

/// The shard's session as of now: what a restart resumes from.
pub(crate) fn mark(shard: &Shard<SharedIdentifyQueue>) -> Option<SavedSession> {
    let (s, url) = (shard.session()?, shard.resume_url()?);
    Some(SavedSession { session_id: s.id().to_owned(), sequence: s.sequence(), resume_url: url.to_owned() })
}

/// Where one shard's session goes as its messages are stored: the replica's own file (read
/// back on its restart) and the newest mark, which the supervisor writes into the shard's
/// claim so another replica can resume it.
#[derive(Clone)]
pub(crate) struct Saver {
    dir: std::path::PathBuf,
    shard: u32,
    latest: Arc<Mutex<Option<SavedSession>>>,
    /// Rung when the claim should carry the session at once (a new or resumed session).
    flush: Arc<tokio::sync::Notify>,
}

impl Saver {
    /// A saver for `shard` under `dir`, starting from the session `start` and ringing `flush`
    /// when the claim should carry a new mark at once.
    pub(crate) fn new(dir: std::path::PathBuf, shard: u32, start: Option<SavedSession>, flush: Arc<tokio::sync::Notify>) -> Saver {
        Saver { dir, shard, latest: Arc::new(Mutex::new(start)), flush }
    }

    /// Saves the session as of a stored message: the file now, the claim at its next renewal.
    pub(crate) fn save(&self, saved: &SavedSession) {
        if let Err(e) = session::save(&self.dir, self.shard, saved) {
            tracing::warn!(error = %e, "shard session not saved; a restart will identify afresh");
        }
        *self.latest.lock().unwrap_or_else(|p| p.into_inner()) = Some(saved.clone());
    }

    /// Keeps a stored message's mark as the newest without writing the file: the claim carries
    /// it at its next renewal, and the next [`Saver::save`] writes it.
    pub(crate) fn note(&self, saved: &SavedSession) {
        *self.latest.lock().unwrap_or_else(|p| p.into_inner()) = Some(saved.clone());
    }

    /// Saves a new or resumed session and has the claim carry it at once.
    pub(crate) fn save_now(&self, saved: &SavedSession) {
        self.save(saved);
        self.flush.notify_one();
    }

    /// The newest mark: what a claim carries and a connection resumes from.
    pub(crate) fn latest(&self) -> Option<SavedSession> {
        self.latest.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// The session a shard starts from: its claim's, or this replica's own file when the file is
/// further along the same session (or the claim carries none).
pub(crate) fn starting_session(claimed: Option<SavedSession>, file: Option<SavedSession>) -> Option<SavedSession> {
    match (claimed, file) {
        (Some(c), Some(f)) if f.session_id == c.session_id && f.sequence > c.sequence => Some(f),
        (Some(c), _) => Some(c),
        (None, f) => f,
    }
}
