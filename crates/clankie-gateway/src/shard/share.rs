//! This replica's share of the shards: claimed by lease, renewed, and moved toward a fair share
//! of the replicas alive, each handed back with its session on shutdown or when over the share.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tracing::Instrument;
use twilight_gateway::ShardId;

use super::saver::{Saver, starting_session};
use crate::error::GatewayError;
use crate::leases::{self, LeaseError, ShardLeases, SharedIdentifyQueue};
use crate::session;
use crate::state::Gateway;

/// Whether Discord refused the token: a 401, or twilight's own refusal once any earlier
/// request (a reply posted before this) met one, since it then refuses locally.
fn token_refused(e: &twilight_http::Error) -> bool {
    match e.kind() {
        twilight_http::error::ErrorType::Unauthorized => true,
        twilight_http::error::ErrorType::Response { status, .. } => status.get() == 401,
        _ => false,
    }
}

/// A shard this replica runs, under its claim.
struct Running {
    held: leases::Held,
    saver: Saver,
    stop: tokio::sync::watch::Sender<bool>,
    /// Aborted when dropped, so a supervisor that stops takes its shards with it.
    task: clankie_http::Aborting,
}

impl Gateway {
    /// How many shards there are and how many may identify per 5 s: from configuration, else
    /// as Discord recommends (`/gateway/bot`), asked until it answers.
    /// `None` when Discord refused the token (401): the gateway is marked stopped for good.
    async fn shard_plan(&self) -> Option<(u32, u32)> {
        let configured = self.config().shards;
        let mut pause = Duration::from_millis(500);
        loop {
            let asked = match self.http().gateway().authed().await {
                Ok(response) => response.model().await.ok(),
                Err(e) if token_refused(&e) => {
                    tracing::error!(
                        "Discord refused the token (401 on /gateway/bot): copy the bot's token again from the Developer Portal (your application, Bot, Reset Token) into CLANKIE_DISCORD_TOKEN and restart the gateway"
                    );
                    self.supervised().set_fatal("discord_401");
                    return None;
                }
                Err(_) => None,
            };
            match asked {
                Some(info) => {
                    self.mark_token_accepted();
                    let total = if configured > 0 { configured } else { info.shards.max(1) };
                    return Some((total, u32::from(info.session_start_limit.max_concurrency).max(1)));
                }
                None if configured > 0 => {
                    tracing::warn!(shards = configured, "/gateway/bot unanswered; identifying one shard per 5 s");
                    return Some((configured, 1));
                }
                None => {
                    tracing::warn!(retry_in_ms = pause.as_millis() as u64, "/gateway/bot unanswered; the shard count is not known yet");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(30));
                }
            }
        }
    }

    /// Runs this replica's share of the shards until shutdown, then hands each back with its
    /// session so another replica resumes it.
    ///
    /// Every third of the lease TTL it renews what it holds (stopping at once any shard whose
    /// claim another replica took), says it is alive, and moves toward its fair share: it hands
    /// back one shard over it, or claims free and expired ones up to it.
    pub(crate) async fn run_shards(&self) -> Result<(), GatewayError> {
        let mut stopping = self.stopping().subscribe();
        let Some((total, max_concurrency)) = self.shard_plan().await else {
            // Stays up and unready, saying why, rather than asking again and again.
            let _ = stopping.wait_for(|s| *s).await;
            return Ok(());
        };
        self.shard_total().store(total, Ordering::SeqCst);
        let config = self.config();
        let kv = self.bus().key_value(leases::SHARDS_BUCKET, Duration::from_secs(7 * 24 * 3600)).await?;
        let leases = ShardLeases::new(kv.clone(), &config.replica, config.shard_lease_ttl);
        let queue = SharedIdentifyQueue::new(kv, max_concurrency);
        tracing::info!(shards = total, max_concurrency, replica = %config.replica, "sharing the gateway's shards");
        let flush = Arc::new(tokio::sync::Notify::new());
        let mut running: BTreeMap<u32, Running> = BTreeMap::new();
        let mut tick = tokio::time::interval(config.shard_lease_ttl / 3);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut replicas = 1;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = flush.notified() => {}
                _ = stopping.changed() => {
                    for (shard, r) in std::mem::take(&mut running) {
                        self.hand_back(&leases, shard, r).await;
                    }
                    return Ok(());
                }
            }
            self.renew_all(&leases, &mut running).await;
            if self.supervised().fatal().is_some() {
                // Discord refused this gateway for good: no shard is claimed again here.
                for (shard, r) in std::mem::take(&mut running) {
                    self.hand_back(&leases, shard, r).await;
                }
                let _ = stopping.wait_for(|s| *s).await;
                return Ok(());
            }
            match leases.announce().await.and(leases.replicas_alive().await) {
                Ok(alive) => replicas = alive.max(1),
                Err(e) => tracing::warn!(error = %e, "replica presence not refreshed"),
            }
            let fair = leases::fair_share(total, replicas) as usize;
            if running.len() > fair
                && let Some(shard) = running.keys().next_back().copied()
                && let Some(r) = running.remove(&shard)
            {
                tracing::info!(shard, replicas, "over the fair share; handing a shard back");
                self.hand_back(&leases, shard, r).await;
            }
            for shard in 0..total {
                if running.len() >= fair {
                    break;
                }
                if running.contains_key(&shard) {
                    continue;
                }
                match leases.claim(shard).await {
                    Ok(Some(held)) => {
                        tracing::info!(shard, epoch = held.claim.epoch, "shard claimed");
                        let r = self.start_shard(shard, total, held, &queue, &flush);
                        running.insert(shard, r);
                    }
                    Ok(None) => {}
                    Err(e) => tracing::warn!(shard, error = %e, "shard claim not tried"),
                }
            }
        }
    }

    /// Renews every claim held; a shard whose claim was taken, or ran out while the bus was
    /// away, or whose connection ended, stops here.
    async fn renew_all(&self, leases: &ShardLeases, running: &mut BTreeMap<u32, Running>) {
        let mut gone = Vec::new();
        for (shard, r) in running.iter_mut() {
            if r.task.0.is_finished() {
                tracing::warn!(shard, "shard connection ended; handing it back");
                gone.push((*shard, true));
                continue;
            }
            match leases.renew(*shard, &mut r.held, r.saver.latest()).await {
                Ok(()) => {}
                Err(LeaseError::Lost(_)) => {
                    tracing::warn!(shard, "shard claim taken by another replica; stopping it here");
                    gone.push((*shard, false));
                }
                Err(e) if r.held.claim.expires_ms <= clankie_bus::now_ms() => {
                    tracing::warn!(shard, error = %e, "shard claim ran out unrenewed; stopping it here");
                    gone.push((*shard, false));
                }
                Err(e) => tracing::warn!(shard, error = %e, "shard claim not renewed yet"),
            }
        }
        for (shard, ours) in gone {
            if let Some(r) = running.remove(&shard) {
                r.task.0.abort();
                self.shard_senders().write().unwrap_or_else(|p| p.into_inner()).remove(&shard);
                if ours {
                    let mut held = r.held;
                    let _ = leases.release(shard, &mut held, r.saver.latest()).await;
                }
            }
        }
    }

    fn start_shard(
        &self,
        shard: u32,
        total: u32,
        held: leases::Held,
        queue: &SharedIdentifyQueue,
        flush: &Arc<tokio::sync::Notify>,
    ) -> Running {
        let dir = self.config().state_dir.clone();
        let start = starting_session(held.claim.session.clone(), session::load(&dir, shard));
        let saver = Saver::new(dir, shard, start.clone(), flush.clone());
        let (stop, stop_rx) = tokio::sync::watch::channel(false);
        let id = ShardId::new(shard, total);
        let run = self.clone().run_shard(id, saver.clone(), stop_rx, queue.clone());
        let task = tokio::spawn(
            async move {
                if let Err(e) = run.await {
                    tracing::error!(error = %e, "shard stopped");
                }
            }
            .instrument(tracing::info_span!("shard", shard)),
        );
        Running { held, saver, stop, task: clankie_http::Aborting(task) }
    }

    /// Closes a shard for resume, then hands its claim back with the session as of the close.
    async fn hand_back(&self, leases: &ShardLeases, shard: u32, mut r: Running) {
        let _ = r.stop.send(true);
        if tokio::time::timeout(Duration::from_secs(8), &mut r.task.0).await.is_err() {
            r.task.0.abort();
        }
        self.shard_senders().write().unwrap_or_else(|p| p.into_inner()).remove(&shard);
        let mut held = r.held;
        match leases.release(shard, &mut held, r.saver.latest()).await {
            Ok(()) => tracing::info!(shard, "shard handed back with its session"),
            Err(e) => tracing::warn!(shard, error = %e, "shard not handed back; it frees itself when its claim runs out"),
        }
    }
}
