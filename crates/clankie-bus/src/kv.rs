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
        // The bucket's stream declared as the client library would, without its account query,
        // which older servers (Debian's 2.9) answer in a shape it cannot read.
        let config = stream::Config {
            name: format!("KV_{bucket}"),
            subjects: vec![format!("$KV.{bucket}.>")],
            max_messages_per_subject: 1,
            max_age,
            max_message_size: -1,
            max_bytes: -1,
            storage: stream::StorageType::File,
            allow_rollup: true,
            deny_delete: true,
            allow_direct: true,
            discard: stream::DiscardPolicy::New,
            num_replicas: self.stream_replicas.max(1),
            ..Default::default()
        };
        if let Err(e) = self.js.get_or_create_stream(config).await {
            return Err(fail(e.to_string()));
        }
        self.js.get_key_value(bucket).await.map_err(|e| fail(e.to_string()))
    }
}

/// A key-value key for any text: keys allow only letters, digits and `-/_=.`.
pub fn kv_key(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02x}")).collect()
}
