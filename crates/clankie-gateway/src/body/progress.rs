//! The posted-pieces bucket: how far each reply's posting got, shared by the replicas, so a
//! reply handed over resumes at its next piece and its outcome reaction waits until it is out.

use std::time::Duration;

use crate::body::refusal::PostError;
use crate::state::Gateway;

/// The bucket that remembers how many pieces of each reply are posted, so a reply handed to
/// another replica (or the same one restarted) resumes at its next piece.
const POSTED_BUCKET: &str = "clankie-posted";
/// How long a reply's posted pieces are remembered.
const POSTED_FOR: Duration = Duration::from_secs(24 * 3600);

/// How far a reply's posting got, as the posted-pieces bucket holds it.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Posted {
    /// Pieces posted, from the first.
    pub pieces: usize,
    /// The first piece's Discord message id.
    pub first_message: u64,
    /// Discord refused it for good: nothing will be posted, so its outcome waits no longer.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub refused: bool,
}

impl Gateway {
    /// Marks an outbound message Discord refused in the posted-pieces bucket, so a reply's
    /// outcome reaction stops waiting for it.
    pub(crate) async fn remember_refused(&self, key: &str) {
        let Ok(progress) = self.posted().await else { return };
        // Unreadable progress is left alone rather than written over with none.
        let Ok(mut done) = self.posted_so_far(key).await else { return };
        done.refused = true;
        if let Ok(value) = serde_json::to_vec(&done) {
            let _ = progress.put(clankie_bus::kv_key(key).as_str(), value.into()).await;
        }
    }

    /// Whether at least the first piece of the reply keyed `key` is posted; an unreadable
    /// bucket holds no outcome back.
    pub(crate) async fn reply_is_out(&self, key: &str) -> bool {
        self.posted_so_far(key).await.map_or(true, |p| p.pieces > 0 || p.refused)
    }

    /// How far the posting of the outbound message keyed `key` got (nothing yet: the default).
    pub(crate) async fn posted_so_far(&self, key: &str) -> Result<Posted, PostError> {
        match self.posted().await?.get(clankie_bus::kv_key(key).as_str()).await {
            Ok(v) => Ok(v.and_then(|v| serde_json::from_slice::<Posted>(&v).ok()).unwrap_or_default()),
            Err(e) => {
                tracing::warn!(error = %e, "the posted-pieces bucket is unreadable");
                Err(PostError::Retry)
            }
        }
    }

    /// The posted-pieces bucket, opened on first use; unavailable, the post is tried again later.
    pub(crate) async fn posted(&self) -> Result<clankie_bus::KeyValue, PostError> {
        let opened = self.posted_bucket().get_or_try_init(|| self.bus().key_value(POSTED_BUCKET, POSTED_FOR)).await;
        opened.cloned().map_err(|e| {
            tracing::warn!(error = %e, "the posted-pieces bucket is unavailable");
            PostError::Retry
        })
    }
}
