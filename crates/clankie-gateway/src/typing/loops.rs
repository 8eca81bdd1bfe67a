//! The typing loops themselves: one per lit channel, each keeping Discord's indicator lit while
//! the shared bucket's entry says so, and the adoption of loops whose replica went quiet.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clankie_bus::{Bus, KeyValue, KeyValueOperation, now_ms};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use twilight_model::id::Id;

use crate::config::GatewayConfig;
use crate::rest::budget::RestBudget;
use crate::rest::client::RestClient;

/// The bucket of lit channels.
const TYPING_BUCKET: &str = "clankie-typing";

/// A lit channel as the bucket holds it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Lit {
    /// The replica whose loop keeps it lit.
    host: String,
    /// When that loop last triggered the indicator.
    beat_ms: i64,
    /// When it goes dark without a stop (a backstop for a captain that died).
    until_ms: i64,
}

/// The typing loops this replica runs, one per channel, and the shared bucket.
pub(crate) struct TypingLoops {
    bus: Bus,
    http: Arc<RestClient>,
    budget: Arc<RestBudget>,
    host: String,
    /// How often a loop triggers the indicator; adoption runs every two of these.
    pub(super) interval: Duration,
    max: Duration,
    bucket: tokio::sync::OnceCell<KeyValue>,
    loops: Arc<Mutex<HashMap<u64, tokio::task::JoinHandle<()>>>>,
}

impl TypingLoops {
    /// No loops yet; the bucket is opened on first use, so a replica starts without it.
    pub(crate) fn new(bus: Bus, http: Arc<RestClient>, budget: Arc<RestBudget>, config: &GatewayConfig) -> TypingLoops {
        TypingLoops {
            bus,
            http,
            budget,
            host: config.replica.clone(),
            interval: config.typing_interval,
            max: config.typing_max,
            bucket: tokio::sync::OnceCell::new(),
            loops: Arc::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, tokio::task::JoinHandle<()>>> {
        self.loops.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn bucket(&self) -> Option<KeyValue> {
        let opened = self.bucket.get_or_try_init(|| self.bus.key_value(TYPING_BUCKET, self.max + Duration::from_secs(60))).await;
        match opened {
            Ok(b) => Some(b.clone()),
            Err(e) => {
                tracing::warn!(error = %e, "the typing bucket is unavailable; typing stays with this replica");
                None
            }
        }
    }

    /// A loop whose entry has not beaten for this long has died with its replica.
    fn quiet_after(&self) -> i64 {
        (self.interval * 3).as_millis() as i64
    }

    /// Lights the channel and keeps it lit; a second start while lit changes nothing.
    pub async fn start(&self, channel: u64) {
        let now = now_ms();
        let lit = Lit { host: self.host.clone(), beat_ms: now, until_ms: now + self.max.as_millis() as i64 };
        if let Some(bucket) = self.bucket().await
            && let Ok(value) = serde_json::to_vec(&lit)
        {
            let _ = bucket.put(channel.to_string(), value.into()).await;
        }
        self.run_loop(channel);
    }

    /// Clears the channel everywhere: no further triggers (Discord lets the last one lapse).
    pub async fn stop(&self, channel: u64) {
        if let Some(h) = self.lock().remove(&channel) {
            h.abort();
        }
        if let Some(bucket) = self.bucket().await {
            let _ = bucket.delete(channel.to_string()).await;
        }
    }

    /// Ends this replica's loops and leaves their entries: the next REST owner adopts them
    /// once they go quiet.
    pub fn stop_local(&self) {
        for (_, handle) in self.lock().drain() {
            handle.abort();
        }
    }

    fn run_loop(&self, channel: u64) {
        let Some(channel_id) = Id::new_checked(channel) else { return };
        let mut loops = self.lock();
        if loops.get(&channel).is_some_and(|h| !h.is_finished()) {
            return;
        }
        let (http, interval, host, bucket) = (self.http.clone(), self.interval, self.host.clone(), self.bucket.get().cloned());
        let budget = self.budget.clone();
        let (quiet, deadline) = (self.quiet_after(), tokio::time::Instant::now() + self.max);
        let handle = tokio::spawn(async move {
            let mut wait = interval;
            while tokio::time::Instant::now() < deadline {
                // The entry decides: gone (stopped anywhere), expired, or kept by another live loop ends this one.
                if let Some(bucket) = &bucket {
                    let (lit, revision) = match bucket.entry(channel.to_string()).await {
                        Ok(Some(e)) if matches!(e.operation, KeyValueOperation::Put) => {
                            (serde_json::from_slice::<Lit>(&e.value).ok(), e.revision)
                        }
                        Ok(_) => (None, 0),
                        // The bucket unreadable: a stop may be in it unseen, so let the indicator lapse.
                        Err(e) => {
                            tracing::warn!(channel, error = %e, "typing state unreadable; the indicator lapses");
                            (None, 0)
                        }
                    };
                    let Some(lit) = lit else { break };
                    let now = now_ms();
                    if now >= lit.until_ms || (lit.host != host && now - lit.beat_ms < quiet) {
                        break;
                    }
                    // The beat is written only over the entry just read: a stop in between wins.
                    let beat = Lit { host: host.clone(), beat_ms: now, ..lit };
                    if let Ok(value) = serde_json::to_vec(&beat)
                        && bucket.update(channel.to_string(), value.into(), revision).await.is_err()
                    {
                        break;
                    }
                }
                // Replies first: while the budget is crowded this beat waits (the indicator
                // lasts 10 s, so a short wait costs nothing).
                let slot = budget.give_way(interval).await;
                let triggered = http.get().create_typing_trigger(channel_id).await;
                drop(slot);
                match triggered {
                    Ok(_) => wait = interval,
                    Err(e) => {
                        let limited = matches!(e.kind(), twilight_http::error::ErrorType::Response { status, .. } if status.get() == 429);
                        // Back off on a rate limit instead of hammering; the indicator may lapse briefly.
                        wait = if limited { (wait * 2).min(Duration::from_secs(30)) } else { interval };
                        tracing::warn!(channel, rate_limited = limited, "typing trigger failed");
                    }
                }
                tokio::time::sleep(wait).await;
            }
        });
        loops.insert(channel, handle);
    }

    /// Takes over lit channels whose loop went quiet (its replica died), one replica winning
    /// each by the entry's revision.
    pub(super) async fn adopt_quiet(&self) {
        let Some(bucket) = self.bucket().await else { return };
        let Ok(keys) = bucket.keys().await else { return };
        let keys: Vec<String> = keys.filter_map(|k| async move { k.ok() }).collect().await;
        for key in keys {
            let Ok(channel) = key.parse::<u64>() else { continue };
            if self.lock().get(&channel).is_some_and(|h| !h.is_finished()) {
                continue;
            }
            let Ok(Some(entry)) = bucket.entry(key.clone()).await else { continue };
            if !matches!(entry.operation, KeyValueOperation::Put) {
                continue;
            }
            let Ok(lit) = serde_json::from_slice::<Lit>(&entry.value) else { continue };
            let now = now_ms();
            if now >= lit.until_ms || now - lit.beat_ms < self.quiet_after() {
                continue;
            }
            let adopted = Lit { host: self.host.clone(), beat_ms: now, ..lit };
            let Ok(value) = serde_json::to_vec(&adopted) else { continue };
            if bucket.update(key.as_str(), value.into(), entry.revision).await.is_ok() {
                tracing::info!(channel, "kept lit a typing indicator whose gateway went quiet");
                self.run_loop(channel);
            }
        }
    }
}
