//! Small shared state in JetStream key-value buckets: what one service replica must be
//! able to pick up from another (a tool card's message, a typing indicator kept lit).

use std::time::Duration;

use async_nats::jetstream::{kv, stream};

use crate::{Bus, BusError};

impl Bus {
    /// The key-value bucket `bucket`, created on first use; entries older than `max_age` go.
    pub async fn key_value(&self, bucket: &str, max_age: Duration) -> Result<kv::Store, BusError> {
        let fail = |e: String| BusError::Stream { stream: "KV", detail: format!("{bucket}: {e}") };
        if let Ok(store) = self.js.get_key_value(bucket).await {
            return Ok(store);
        }
        let config = kv::Config {
            bucket: bucket.to_owned(),
            history: 1,
            max_age,
            storage: stream::StorageType::File,
            num_replicas: self.stream_replicas.max(1),
            ..Default::default()
        };
        self.js.create_key_value(config).await.map_err(|e| fail(e.to_string()))
    }
}

/// A key-value key for any text: keys allow only letters, digits and `-/_=.`.
pub fn kv_key(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02x}")).collect()
}
