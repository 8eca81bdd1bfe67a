//! One REST budget for the whole bot: only the replica holding the REST lease speaks Discord's
//! REST API.
//!
//! Discord limits the bot, not a process: 50 requests a second in all and per-route buckets
//! (5 message creates per 5 s in a channel). Twilight's rate limiter keeps inside both, but
//! only for the requests of its own process; two replicas each believe they own the whole
//! budget. So the replicas elect one REST owner by a lease in the shard bucket
//! ([`REST_OWNER_KEY`](crate::leases::REST_OWNER_KEY), compare-and-set like a shard claim): it
//! alone pulls outbound messages, typing actions and outcomes and answers history requests,
//! and one limiter sees every request. The others run their shards (ingest) and wait to take
//! over. A replica that loses the lease, or cannot renew it before it runs out, drops all of
//! that work at once and naks, in stream order, every outbound message it held unsettled, so
//! the next owner posts them at once and in order (a reply resumes at its next piece); one that
//! stops hands those back before it hands back the lease. Its typing loops stop for the next
//! owner to adopt.

pub(crate) mod budget;
pub(crate) mod client;

use std::sync::atomic::Ordering;
use std::time::Duration;

use clankie_bus::now_ms;

use crate::body::refusal::PostError;
use crate::error::GatewayError;
use crate::leases::{self, Held, ShardLeases};
use crate::state::Gateway;

impl Gateway {
    /// Takes the REST lease whenever it is free and does the REST work while it is held.
    pub(crate) async fn run_rest(&self) -> Result<(), GatewayError> {
        let config = self.config();
        let kv = self.bus().key_value(leases::SHARDS_BUCKET, Duration::from_secs(7 * 24 * 3600)).await?;
        let lease = ShardLeases::new(kv, &config.replica, config.rest_lease_ttl);
        let retry = (config.rest_lease_ttl / 4).max(Duration::from_millis(50));
        let mut stopping = self.stopping().subscribe();
        let mut later = false;
        let mut invite_said = false;
        loop {
            if *stopping.borrow() {
                return Ok(());
            }
            let held = match lease.claim_rest().await {
                Ok(Some((held, handover))) => {
                    self.budget().take_over(&handover);
                    if let Some(previous) = &handover.previous {
                        tracing::info!(
                            %previous,
                            handed_over = handover.spoken.is_some() && handover.unclean_end_ms.is_none(),
                            "the REST lease passed from another replica; its requests of the last seconds count against this one's first"
                        );
                    }
                    held
                }
                Ok(None) => {
                    tokio::time::sleep(retry).await;
                    continue;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the REST lease is unreadable; trying again");
                    tokio::time::sleep(retry).await;
                    continue;
                }
            };
            tracing::info!(epoch = held.claim.epoch, "this replica speaks Discord's REST API now");
            self.rest_until_ms().store(held.claim.expires_ms, Ordering::SeqCst);
            if !std::mem::replace(&mut invite_said, true) {
                tokio::spawn(self.clone().say_invite());
            }
            // Each part is supervised on its own: a panic in typing restarts typing, never posting.
            let parts = self.supervised();
            let outcome = tokio::select! {
                r = clankie_http::supervise("gateway.body", parts, |p| self.after_rest_panic(p), || self.run_body()) => Ok(r),
                r = clankie_http::supervise("gateway.typing", parts, |p| self.after_rest_panic(p), || self.run_typing()) => Ok(r),
                r = clankie_http::supervise("gateway.history", parts, |p| self.after_rest_panic(p), || self.run_history()) => Ok(r),
                r = clankie_http::supervise("gateway.context", parts, |p| self.after_rest_panic(p), || self.run_context()) => Ok(r),
                r = clankie_http::supervise("gateway.reactions", parts, |p| self.after_rest_panic(p), || self.run_outcome_reactions()) => Ok(r),
                handing = self.keep(&lease, held, &mut stopping) => Err(handing),
            };
            self.rest_until_ms().store(0, Ordering::SeqCst);
            // What the body held goes back in order before the lease does, so the next holder
            // finds it waiting when it starts pulling.
            self.hand_back_held().await;
            let outcome = match outcome {
                Ok(r) => Some(r),
                Err(Some(mut held)) => {
                    if let Err(e) = lease.release_rest(&mut held, self.budget().spoken()).await {
                        tracing::warn!(error = %e, "the REST lease could not be handed back; it runs out by itself");
                    }
                    None
                }
                Err(None) => None,
            };
            self.typing().stop_local();
            let first_tenure = !std::mem::replace(&mut later, true);
            match outcome {
                // A setup fault (a consumer the settings cannot have) stops the replica at its
                // first tenure, as at any start. A consumer that cannot be opened now (the bus
                // mid-election, a request timed out) costs the tenure, never the replica, even
                // the first: a cluster losing a node while the gateway starts is no setup fault.
                Some(Err(e)) if first_tenure && e.is_setup_fault() => return Err(e),
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "the REST work stopped; taking the lease again");
                    tokio::time::sleep(retry).await;
                }
                Some(Ok(())) => tokio::time::sleep(retry).await,
                None if *stopping.borrow() => {
                    tracing::info!("stopping: the REST lease is handed back");
                    return Ok(());
                }
                None => tracing::warn!("the REST lease was lost; this replica stops speaking REST"),
            }
        }
    }

    /// Whether this replica may make a REST request now: it holds the lease and the lease has
    /// not run out by its own clock (a process paused past it must not post on waking).
    pub(crate) fn speaks_rest(&self) -> bool {
        now_ms() < self.rest_until_ms().load(Ordering::SeqCst)
    }

    /// The last check before a REST request goes out, after every wait: a holder paused past its
    /// lease (SIGSTOP, a frozen VM) finds it gone here and sends nothing; the next holder has
    /// the message. The lease's end is kept in wall time, so a pause counts against it.
    pub(crate) fn fence(&self) -> Result<(), PostError> {
        if self.speaks_rest() {
            return Ok(());
        }
        metrics::counter!("clankie_gateway_fenced_requests_total").increment(1);
        tracing::warn!("the REST lease ran out before a request went out; it is handed back unsent");
        Err(PostError::Retry)
    }

    /// Renews the lease every third of its life; returns when it is lost, when it could not be
    /// renewed before its own expiry (a bus away that long, or this process paused), or, with
    /// the lease to hand back once the body's messages are, when the replica is stopping.
    async fn keep(&self, lease: &ShardLeases, mut held: Held, stopping: &mut tokio::sync::watch::Receiver<bool>) -> Option<Held> {
        let mut tick = tokio::time::interval(self.config().rest_lease_ttl / 3);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = async { let _ = stopping.wait_for(|s| *s).await; } => return Some(held),
            }
            if now_ms() >= held.claim.expires_ms {
                return None;
            }
            match lease.renew_rest(&mut held, self.budget().spoken()).await {
                Ok(()) => self.rest_until_ms().store(held.claim.expires_ms, Ordering::SeqCst),
                Err(leases::LeaseError::RestLost) => return None,
                Err(e) => tracing::warn!(error = %e, "the REST lease could not be renewed; trying again"),
            }
        }
    }
}
