//! Blobs too big for one NATS message (1 MiB by default): pictures on their way to the
//! model and artifacts on their way to Discord travel through JetStream's object store,
//! and the request or reply carries only the blob's name.

use std::time::Duration;

use async_nats::jetstream::object_store;

use crate::{Bus, BusError};

/// The object store bucket blobs pass through.
pub const BLOB_BUCKET: &str = "clankie-blobs";
/// The most a request or reply carries inline; anything bigger goes as a blob.
pub const INLINE_MAX: usize = 512 * 1024;
/// A blob is in transit, not kept: the bucket drops what its reader never collected.
const BLOB_MAX_AGE: Duration = Duration::from_secs(3600);

impl Bus {
    pub(crate) async fn ensure_blobs(&self) -> Result<(), BusError> {
        let config = object_store::Config {
            bucket: BLOB_BUCKET.to_owned(),
            description: Some("pictures and artifacts in transit between services".into()),
            max_age: BLOB_MAX_AGE,
            num_replicas: self.stream_replicas.max(1),
            ..Default::default()
        };
        self.js.create_object_store(config).await.map_err(|e| blob_error("create", e))?;
        Ok(())
    }

    async fn blobs(&self) -> Result<object_store::ObjectStore, BusError> {
        match self.js.get_object_store(BLOB_BUCKET).await {
            Ok(store) => Ok(store),
            Err(_) => {
                self.ensure_blobs().await?;
                self.js.get_object_store(BLOB_BUCKET).await.map_err(|e| blob_error("open", e))
            }
        }
    }

    /// Stores `data` as a blob named `name` (unique per transfer) for another service to take.
    pub async fn put_blob(&self, name: &str, data: &[u8]) -> Result<(), BusError> {
        let store = self.blobs().await?;
        let mut reader = data;
        store.put(name, &mut reader).await.map_err(|e| blob_error("put", e))?;
        Ok(())
    }

    /// Takes a blob: reads it whole and deletes it, since each blob has one reader.
    pub async fn take_blob(&self, name: &str) -> Result<Vec<u8>, BusError> {
        use tokio::io::AsyncReadExt as _;
        let store = self.blobs().await?;
        let mut object = store.get(name).await.map_err(|e| blob_error("get", e))?;
        let mut data = Vec::new();
        object.read_to_end(&mut data).await.map_err(|e| blob_error("read", e))?;
        if let Err(e) = store.delete(name).await {
            tracing::debug!(blob = name, error = %e, "a taken blob was not deleted; the bucket's age limit drops it");
        }
        Ok(data)
    }

    /// The bytes a message carries: inline `data`, or the named blob taken from the store.
    pub async fn bytes_of(&self, data: Vec<u8>, blob: &str) -> Result<Vec<u8>, BusError> {
        if blob.is_empty() { Ok(data) } else { self.take_blob(blob).await }
    }

    /// Hands `data` to a request: inline when it fits one message, else as a blob named after
    /// `what`. Returns (inline bytes, blob name), one of them empty.
    pub async fn hand_over(&self, what: &str, data: Vec<u8>) -> Result<(Vec<u8>, String), BusError> {
        if data.len() <= INLINE_MAX {
            return Ok((data, String::new()));
        }
        let name = blob_name(what);
        self.put_blob(&name, &data).await?;
        Ok((Vec::new(), name))
    }
}

/// A unique blob name for one transfer of `what`.
pub fn blob_name(what: &str) -> String {
    let clean: String = what.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).take(64).collect();
    format!("{clean}.{}", crate::unique_msg_id())
}

fn blob_error(what: &str, e: impl std::fmt::Display) -> BusError {
    BusError::Stream { stream: "OBJ_clankie-blobs", detail: format!("{what}: {e}") }
}
