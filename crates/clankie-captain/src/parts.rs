//! The replica's background parts, each supervised on a task of its own, never on the loop
//! that admits ingress: the receipts recorder, the keep-alive of held deliveries, the sweeper,
//! the audience teller and the outbox relay.

use std::sync::Arc;

use clankie_bus::{ConsumerSpec, Delivery};
use clankie_proto::{Family, v1};

use crate::{Captain, CaptainError, audience, receipt_key};

impl Captain {
    /// Starts the parts; each ends when its guard is dropped (with the loop that started them).
    pub(crate) async fn start_parts(&self) -> Result<Vec<clankie_http::Aborting>, CaptainError> {
        let ack_wait = self.inner.config.ack_wait;
        let parts = self.inner.parts.clone();
        // Every service's receipts land in PostgreSQL through whichever captain takes them, in
        // batches, on a task of their own: never on the loop that admits ingress.
        let spec = ConsumerSpec::durable("receipts-recorder", Family::Receipt).with_prefetch(1_024, 20_000);
        let receipts = self.inner.bus.consumer::<v1::Receipt>(spec.clone()).await?;
        let mut first = Some(receipts);
        let captain = self.clone();
        let receipts_part =
            clankie_http::Aborting(tokio::spawn(clankie_http::supervise::keep_running("captain.receipts", parts.clone(), move || {
                let (captain, spec, ready) = (captain.clone(), spec.clone(), first.take());
                async move {
                    let receipts = match ready {
                        Some(r) => r,
                        None => match captain.inner.bus.consumer::<v1::Receipt>(spec).await {
                            Ok(r) => r,
                            Err(e) => return tracing::warn!(error = %e, "the receipts consumer is unavailable"),
                        },
                    };
                    captain.record_receipts(receipts).await
                }
            })));
        // Held deliveries are kept alive, and committed posts published, on tasks of their own.
        let in_hand = self.inner.in_hand.clone();
        let keep_alive =
            clankie_http::Aborting(tokio::spawn(clankie_http::supervise::keep_running("captain.keep_alive", parts.clone(), move || {
                in_hand.clone().keep_alive(ack_wait / 3)
            })));
        // Nothing grows forever: every replica sweeps (batched deletes are safe side by side).
        let (store, retention, every) = (self.inner.store.clone(), self.inner.config.retention, self.inner.config.sweep_every);
        let sweeper =
            clankie_http::Aborting(tokio::spawn(clankie_http::supervise::keep_running("captain.sweeper", parts.clone(), move || {
                let store = store.clone();
                async move {
                    let mut tick =
                        tokio::time::interval_at(tokio::time::Instant::now() + every.min(std::time::Duration::from_secs(60)), every);
                    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    loop {
                        tick.tick().await;
                        match store.sweep(&retention).await {
                            Ok(swept) if swept.total() > 0 => tracing::info!(
                                receipts = swept.receipts,
                                outbox = swept.outbox,
                                deliveries = swept.deliveries,
                                admissions = swept.admissions,
                                turns = swept.turns,
                                session_entries = swept.session_entries,
                                abandoned_entries = swept.abandoned_entries,
                                one_shot_entries = swept.one_shot_entries,
                                message_changes = swept.message_changes,
                                "swept what aged past its retention"
                            ),
                            Ok(_) => {}
                            Err(e) => tracing::warn!(error = %e, "the sweep failed; it runs again next time"),
                        }
                    }
                }
            })));
        let (store, bus) = (self.inner.store.clone(), self.inner.bus.clone());
        let audience_part =
            clankie_http::Aborting(tokio::spawn(clankie_http::supervise::keep_running("captain.audience", parts.clone(), move || {
                audience::keep_audience_told(store.clone(), bus.clone())
            })));
        let relay = self.inner.outbox.clone();
        let relay_after = self.inner.config.outbox_relay_after;
        let (max_age, replica) = (self.inner.config.outbox_max_age, self.inner.config.replica.clone());
        let relay_part =
            clankie_http::Aborting(tokio::spawn(clankie_http::supervise::keep_running("captain.relay", parts.clone(), move || {
                let (relay, replica) = (relay.clone(), replica.clone());
                async move {
                    let mut tick = tokio::time::interval((relay_after / 2).max(std::time::Duration::from_millis(50)));
                    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    loop {
                        tick.tick().await;
                        clankie_settings::fault::panic_once("captain.relay");
                        relay.relay_unsent(relay_after, max_age, &replica).await;
                    }
                }
            })));
        Ok(vec![receipts_part, keep_alive, sweeper, audience_part, relay_part])
    }

    /// Records the receipts stream: what has arrived by the time a writer is free (up to
    /// `RECEIPT_BATCH`; nothing waits to fill a batch) is stored in one statement under each
    /// one's stream sequence, then acked. Up to `RECEIPT_WRITERS` batches are stored side by
    /// side, so one slow commit does not hold back the receipts behind it; the order they land
    /// in does not matter, as each carries its own time. A batch the store refused comes back.
    async fn record_receipts(self, mut receipts: clankie_bus::Consumer<v1::Receipt>) {
        const RECEIPT_BATCH: usize = 256;
        const RECEIPT_WRITERS: usize = 4;
        let writers = Arc::new(tokio::sync::Semaphore::new(RECEIPT_WRITERS));
        loop {
            let first = match receipts.next().await {
                Ok(d) => d,
                Err(e) => {
                    tracing::error!(error = %e, "receipts are no longer recorded");
                    return;
                }
            };
            let Ok(writer) = writers.clone().acquire_owned().await else { return };
            let mut batch = vec![first];
            // A zero timeout still polls once: it takes what the pull has already brought.
            let now = tokio::time::Instant::now();
            while batch.len() < RECEIPT_BATCH {
                match tokio::time::timeout_at(now, receipts.next()).await {
                    Ok(Ok(d)) => batch.push(d),
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, "receipts consumer failed mid-batch");
                        break;
                    }
                    Err(_) => break,
                }
            }
            let captain = self.clone();
            tokio::spawn(async move {
                let rows: Vec<(&v1::Receipt, i64)> = batch.iter().map(|d| (&d.event, receipt_key(d.published_ns))).collect();
                let stored = captain.inner.store.insert_receipts(&rows).await;
                drop(writer);
                metrics::histogram!("clankie_captain_receipt_batch").record(batch.len() as f64);
                match stored {
                    // A lost ack costs a redelivery the dedup key absorbs.
                    Ok(_) => {
                        futures::future::join_all(batch.iter().map(|d| d.ack())).await;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, receipts = batch.len(), "receipts not recorded; they will come back");
                        for d in &batch {
                            let _ = d.nak_after(captain.inner.config.backoff(d.delivered)).await;
                        }
                    }
                }
            });
        }
    }

    /// Acks an event once it is stored; otherwise hands it back to come again.
    pub(crate) async fn recorded<E: clankie_proto::Event>(
        &self,
        d: Delivery<E>,
        stored: Result<bool, clankie_store::StoreError>,
        what: &str,
    ) {
        match stored {
            Ok(_) => {
                let _ = d.ack().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "{what} not recorded; it will come back");
                let _ = d.nak_after(self.inner.config.backoff(d.delivered)).await;
            }
        }
    }
}
