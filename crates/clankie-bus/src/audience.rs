//! The audience facts every service must know the same way, kept where a process that was away
//! (restarted, reconnecting, cut off) reads them all again: a JetStream key-value bucket.
//!
//! - `forgotten.<user id>`: that person asked to be forgotten, at the value's ms since the epoch.
//!   The forget writes it before it reads the streams; the captain writes every one the store
//!   holds as it starts, so a bucket lost with its server is filled again.
//! - `admitted_channels`: the owner's admitted channels, comma-separated (empty: every channel),
//!   written by the captain whenever it reads a different list from the store.
//!
//! Ids and times only: no words. What the facts mean for a text is `clankie_proto::audience`'s
//! to decide; the gateway and the voice floor read them here because they have no store.

use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};

use crate::{Bus, BusError};

/// The bucket the facts live in.
pub const AUDIENCE_BUCKET: &str = "clankie_audience";

const FORGOTTEN_PREFIX: &str = "forgotten.";
const ADMITTED_KEY: &str = "admitted_channels";

/// One fact as a watcher learns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AudienceFact {
    /// `user_id` asked to be forgotten at `at_ms`: words they wrote before it are not theirs to show.
    Forgotten { user_id: u64, at_ms: i64 },
    /// The owner's admitted channels (empty: every channel).
    AdmittedChannels(Vec<u64>),
}

impl AudienceFact {
    fn from_entry(key: &str, value: &[u8]) -> Option<AudienceFact> {
        let value = std::str::from_utf8(value).ok()?;
        if let Some(id) = key.strip_prefix(FORGOTTEN_PREFIX) {
            return Some(AudienceFact::Forgotten { user_id: id.parse().ok()?, at_ms: value.trim().parse().ok()? });
        }
        (key == ADMITTED_KEY).then(|| AudienceFact::AdmittedChannels(value.split(',').filter_map(|id| id.trim().parse().ok()).collect()))
    }
}

impl Bus {
    async fn audience_bucket(&self) -> Result<crate::KeyValue, BusError> {
        self.key_value(AUDIENCE_BUCKET, Duration::ZERO).await
    }

    /// Records that `user_id` was forgotten at `at_ms`, for every process now and later.
    pub async fn record_forgotten(&self, user_id: u64, at_ms: i64) -> Result<(), BusError> {
        self.record_fact(&format!("{FORGOTTEN_PREFIX}{user_id}"), at_ms.to_string()).await
    }

    /// Records the owner's admitted channels.
    pub async fn record_admitted_channels(&self, channels: &[u64]) -> Result<(), BusError> {
        self.record_fact(ADMITTED_KEY, channels.iter().map(u64::to_string).collect::<Vec<_>>().join(",")).await
    }

    /// Writes `value` under `key` only when the bucket holds something else: every watcher
    /// acts on each write (a voice room withdraws ring lines and says so), and the captains
    /// tell the same facts again and again.
    async fn record_fact(&self, key: &str, value: String) -> Result<(), BusError> {
        let bucket = self.audience_bucket().await?;
        let current = bucket.get(key).await.map_err(|e| kv_failed(key, e))?;
        if current.as_deref() != Some(value.as_bytes()) {
            bucket.put(key, Bytes::from(value)).await.map_err(|e| kv_failed(key, e))?;
        }
        Ok(())
    }

    /// Every fact recorded so far, then each new one as it is recorded, for as long as the
    /// stream is read. A lost connection costs nothing (the watch takes up again after the last
    /// fact it handed on); a watch that fails is opened again, handing every fact on anew.
    pub fn audience_facts(&self) -> impl Stream<Item = AudienceFact> + Send + 'static {
        type Watching = std::pin::Pin<Box<dyn Stream<Item = AudienceFact> + Send>>;
        futures::stream::unfold((self.clone(), None::<Watching>), |(bus, mut watch)| async move {
            loop {
                if let Some(w) = watch.as_mut() {
                    if let Some(fact) = w.next().await {
                        return Some((fact, (bus, watch)));
                    }
                    watch = None;
                }
                match bus.watch_audience().await {
                    Ok(w) => watch = Some(Box::pin(w)),
                    Err(e) => {
                        tracing::warn!(error = %e, "the audience bucket cannot be watched now; trying again");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }
        })
    }

    async fn watch_audience(&self) -> Result<impl Stream<Item = AudienceFact> + Send + 'static, BusError> {
        let bucket = self.audience_bucket().await?;
        let watch = bucket.watch_with_history(">").await.map_err(|e| kv_failed(">", e))?;
        Ok(watch.filter_map(|entry| async move {
            match entry {
                Ok(e) if e.operation == crate::KeyValueOperation::Put => AudienceFact::from_entry(&e.key, &e.value),
                Ok(_) => None,
                Err(e) => {
                    tracing::warn!(error = %e, "the audience watch lost an entry");
                    None
                }
            }
        }))
    }
}

fn kv_failed(key: &str, e: impl std::fmt::Display) -> BusError {
    BusError::Stream { stream: "KV", detail: format!("{AUDIENCE_BUCKET} {key}: {e}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audience_facts_read_from_their_keys_and_nothing_else() {
        assert_eq!(
            AudienceFact::from_entry("forgotten.42", b"1700000000000"),
            Some(AudienceFact::Forgotten { user_id: 42, at_ms: 1_700_000_000_000 })
        );
        assert_eq!(AudienceFact::from_entry("admitted_channels", b"1,2"), Some(AudienceFact::AdmittedChannels(vec![1, 2])));
        assert_eq!(AudienceFact::from_entry("admitted_channels", b""), Some(AudienceFact::AdmittedChannels(vec![])));
        assert_eq!(AudienceFact::from_entry("forgotten.x", b"1"), None);
        assert_eq!(AudienceFact::from_entry("other", b"1"), None);
    }
}
