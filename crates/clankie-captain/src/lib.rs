//! The captain: Discord text rooms as durable lanes.
//!
//! It consumes text ingress, admits what concerns him, and gives each lane
//! exactly one live run across all replicas (a PostgreSQL lease with a
//! fencing epoch decides which). A delivery for a lane with a live run here
//! is steered into it and ends `absorbed`; one for a lane owned elsewhere is
//! forwarded as a steer. Every delivery gets one recorded outcome before its
//! ingress is acked, so a replica that dies loses nothing.

pub mod admission;
mod ask;
mod audience;
pub mod commands;
mod config;
mod held;
mod lane;
pub mod outbox;
pub mod prompt;
pub mod service;
pub mod tools;
pub mod typing;
pub mod warm;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use clankie_agent::{Agent, Session};
use clankie_bus::MsgId;
use clankie_bus::{Bus, BusError, ConsumerSpec, Delivery};
use clankie_proto::{Family, LaneKey, Subject, v1};
use clankie_self::SelfSource;
use clankie_store::Store;
use tokio::sync::mpsc;
use tracing::Instrument;

pub use config::{Bounds, CaptainConfig};
pub use held::Held;

/// Why the captain stopped.
#[derive(Debug, thiserror::Error)]
pub enum CaptainError {
    #[error(transparent)]
    Bus(#[from] BusError),
}

/// A lane's session kept in memory between runs, with the epoch it last ran under.
pub(crate) struct Warm {
    pub session: Session,
    pub epoch: i64,
}

impl warm::Weighed for Warm {
    fn weight(&self) -> usize {
        self.session.approx_bytes()
    }
}

pub(crate) struct Inner {
    pub bus: Bus,
    pub store: Store,
    pub agent: Agent,
    pub config: CaptainConfig,
    /// The shared self every turn reads afresh.
    pub selfhood: SelfSource,
    /// Who is typing where, for the typing hold.
    pub typing_seen: Arc<typing::TypingSeen>,
    /// The inbox of each lane with an actor on this replica.
    pub lanes: Mutex<HashMap<LaneKey, mpsc::UnboundedSender<Held>>>,
    pub warm: Mutex<warm::WarmCache<LaneKey, Warm>>,
    pub live: AtomicUsize,
    /// Delivery ids this replica holds, so a redelivered copy joins nothing twice.
    pub in_hand: held::InHand,
    /// Set on shutdown: take no new runs, hand queued deliveries to other replicas.
    pub draining: std::sync::atomic::AtomicBool,
    /// Publishes what turns committed to post.
    pub outbox: outbox::Outbox,
    /// The replica's supervised parts (the recorders, relay, sweeper, keep-alive, admitters).
    pub parts: clankie_http::Parts,
}

/// A delivery decided "not admitted", whose receipt and ack wait for the rest of its batch.
struct Refusal {
    delivery: Delivery<v1::Ingress>,
    lane: LaneKey,
    code: &'static str,
    /// The admission's span, which the refusal's receipt is published in.
    span: tracing::Span,
}

/// A captain replica. Cheap to clone.
#[derive(Clone)]
pub struct Captain {
    pub(crate) inner: Arc<Inner>,
}

/// The lane a text delivery belongs to.
pub fn lane_of(ingress: &v1::Ingress) -> LaneKey {
    match ingress.guild_id {
        Some(guild) => LaneKey::Room { guild, channel: ingress.channel_id },
        None => LaneKey::Dm { channel: ingress.channel_id },
    }
}

/// The lane whose room settings (quiet) a delivery follows: a thread's parent channel's.
pub fn home_lane_of(ingress: &v1::Ingress) -> LaneKey {
    match ingress.guild_id {
        Some(guild) => LaneKey::Room { guild, channel: admission::home_channel(ingress) },
        None => LaneKey::Dm { channel: ingress.channel_id },
    }
}

/// The key a receipt is stored under once: its stream sequence alone would repeat after the
/// receipts stream is deleted and made again (sequences start at 1 again, and every new
/// receipt would be taken for one already stored), so the time the stream stored it comes too.
pub fn receipt_dedup_key(published_ns: i128, stream_sequence: u64) -> String {
    format!("receipts:{published_ns}:{stream_sequence}")
}

impl Captain {
    /// A replica over the given bus, store and agent.
    pub fn new(bus: Bus, store: Store, agent: Agent, config: CaptainConfig) -> Captain {
        let selfhood = SelfSource::new(store.clone(), Some(bus.clone()), &config.bot_name, &config.aliases, config.exchange_window);
        let warm_budget = config.warm_cache_bytes;
        Captain {
            inner: Arc::new(Inner {
                outbox: outbox::Outbox::new(bus.clone(), store.clone()),
                bus,
                store,
                agent,
                config,
                selfhood,
                typing_seen: Arc::default(),
                lanes: Mutex::new(HashMap::new()),
                warm: Mutex::new(warm::WarmCache::new(warm_budget)),
                live: AtomicUsize::new(0),
                in_hand: held::InHand::default(),
                draining: std::sync::atomic::AtomicBool::new(false),
                parts: clankie_http::Parts::default(),
            }),
        }
    }

    /// The replica's supervised parts, for its readiness.
    pub fn parts(&self) -> clankie_http::Parts {
        self.inner.parts.clone()
    }

    /// Runs this replica live on this replica right now.
    pub fn live_lanes(&self) -> usize {
        self.inner.live.load(Ordering::SeqCst)
    }

    /// Lanes whose session this replica holds warm.
    pub fn warm_lanes(&self) -> usize {
        self.inner.warm.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// The bytes the warm sessions weigh together (at most `CLANKIE_WARM_CACHE_MIB`).
    pub fn warm_bytes(&self) -> usize {
        self.inner.warm.lock().unwrap_or_else(|p| p.into_inner()).bytes()
    }

    /// Consumes ingress and forwarded steers until the bus fails.
    pub async fn run(&self) -> Result<(), CaptainError> {
        self.run_until(std::future::pending()).await
    }

    /// Like [`Captain::run`], but on `shutdown` stops taking deliveries, lets live runs
    /// finish for up to `grace` (they record outcomes and release their leases), and
    /// hands anything queued back to JetStream for the other replicas.
    pub async fn run_until_drained(
        &self,
        shutdown: impl std::future::Future<Output = ()>,
        grace: std::time::Duration,
    ) -> Result<(), CaptainError> {
        self.run_until(shutdown).await?;
        self.inner.draining.store(true, Ordering::SeqCst);
        tracing::info!(live = self.live_lanes(), "draining: no new deliveries; letting live runs finish");
        let deadline = tokio::time::Instant::now() + grace;
        while self.live_lanes() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        if self.live_lanes() > 0 {
            tracing::warn!(live = self.live_lanes(), "grace period over; unfinished runs will be taken over after their leases expire");
        }
        Ok(())
    }

    /// Whether the replica is shutting down.
    pub fn is_draining(&self) -> bool {
        self.inner.draining.load(Ordering::SeqCst)
    }

    async fn run_until(&self, shutdown: impl std::future::Future<Output = ()>) -> Result<(), CaptainError> {
        tokio::pin!(shutdown);
        let ack_wait = self.inner.config.ack_wait;
        let mut ingress = self
            .inner
            .bus
            .consumer::<v1::Ingress>(
                ConsumerSpec::durable("captain", Family::IngressText)
                    .with_ack_wait(ack_wait)
                    .with_max_deliver(i64::from(self.inner.config.max_deliver))
                    .with_prefetch(self.inner.config.ingress_prefetch(), CaptainConfig::INGRESS_MAX_ACK_PENDING),
            )
            .await?;
        let admitters = Admitters::start(self);
        let mut steers =
            self.inner.bus.consumer::<v1::Steer>(ConsumerSpec::durable("captain-steer", Family::LaneSteer).with_ack_wait(ack_wait)).await?;
        let mut asks = self.inner.bus.serve(Family::RpcAsk.wildcard(), "captain").await?;
        let mut commands = self.inner.bus.serve(Family::RpcCommand.wildcard(), "captain").await?;
        let parts = self.inner.parts.clone();
        // Every service's receipts land in PostgreSQL through whichever captain takes them, in
        // batches, on a task of their own: never on the loop that admits ingress.
        let spec = ConsumerSpec::durable("receipts-recorder", Family::Receipt).with_prefetch(1_024, 20_000);
        let receipts = self.inner.bus.consumer::<v1::Receipt>(spec.clone()).await?;
        let mut first = Some(receipts);
        let captain = self.clone();
        let _receipts =
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
        // Likewise every thread's experiences land in the shared self.
        let mut experiences =
            self.inner.bus.consumer::<v1::Experience>(ConsumerSpec::durable("experiences-recorder", Family::SelfExperience)).await?;
        let mut expiry = tokio::time::interval(std::time::Duration::from_secs(600));
        // Every replica sees every typing signal: any of them may hold a run for it.
        let typing = self.inner.bus.signals::<v1::TypingSignal>(Family::SignalTyping).await?;
        tokio::pin!(typing);
        // Held deliveries are kept alive, and committed posts published, on tasks of their own.
        let in_hand = self.inner.in_hand.clone();
        let _keep_alive =
            clankie_http::Aborting(tokio::spawn(clankie_http::supervise::keep_running("captain.keep_alive", parts.clone(), move || {
                in_hand.clone().keep_alive(ack_wait / 3)
            })));
        // Nothing grows forever: every replica sweeps (batched deletes are safe side by side).
        let (store, retention, every) = (self.inner.store.clone(), self.inner.config.retention, self.inner.config.sweep_every);
        let _sweeper =
            clankie_http::Aborting(tokio::spawn(clankie_http::supervise::keep_running("captain.sweeper", parts.clone(), move || {
                let store = store.clone();
                let retention = retention.clone();
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
        let _audience =
            clankie_http::Aborting(tokio::spawn(clankie_http::supervise::keep_running("captain.audience", parts.clone(), move || {
                audience::keep_audience_told(store.clone(), bus.clone())
            })));
        let relay = self.inner.outbox.clone();
        let relay_after = self.inner.config.outbox_relay_after;
        let (max_age, replica) = (self.inner.config.outbox_max_age, self.inner.config.replica.clone());
        let _relay =
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
        tracing::info!(replica = %self.inner.config.replica, "captain consuming ingress");
        loop {
            tokio::select! {
                _ = &mut shutdown => {
                    self.inner.draining.store(true, Ordering::SeqCst);
                    admitters.hand_back().await;
                    return Ok(());
                }
                d = experiences.next() => {
                    let d = d?;
                    let stored = self.inner.store.insert_experience(&d.event, self.inner.config.experience_ttl).await;
                    self.recorded(d, stored, "experience").await;
                }
                Some(signal) = futures::StreamExt::next(&mut typing) => self.inner.typing_seen.note(&signal),
                _ = expiry.tick() => {
                    match self.inner.store.expire_experiences(self.inner.selfhood.clock().now_ms()).await {
                        Ok(0) => {}
                        Ok(n) => tracing::debug!(expired = n, "experiences expired"),
                        Err(e) => tracing::warn!(error = %e, "expired experiences not removed"),
                    }
                }
                Some(msg) = futures::StreamExt::next(&mut commands) => {
                    let captain = self.clone();
                    tokio::spawn(async move { captain.answer_command(msg).await });
                }
                Some(msg) = futures::StreamExt::next(&mut asks) => {
                    let captain = self.clone();
                    tokio::spawn(async move { captain.answer_ask(msg).await });
                }
                d = ingress.next() => admitters.admit(d?).await,
                d = steers.next() => {
                    let d = d?;
                    let id = d.event.ingress.as_ref().map(|i| i.delivery_id.clone()).unwrap_or_default();
                    let span = tracing::info_span!("delivery", otel.name = "captain.steer", delivery_id = %id, forwarded = true);
                    d.traced(&span);
                    self.accept_steer(d).instrument(span).await;
                }
            }
        }
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
                let rows: Vec<(&v1::Receipt, String)> =
                    batch.iter().map(|d| (&d.event, receipt_dedup_key(d.published_ns, d.stream_sequence))).collect();
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
    async fn recorded<E: clankie_proto::Event>(&self, d: Delivery<E>, stored: Result<bool, clankie_store::StoreError>, what: &str) {
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

    /// Decides an admitter's batch of ingress deliveries in order, from one read of the store
    /// for all of them; while draining hands them back instead.
    async fn decide(&self, batch: Vec<Delivery<v1::Ingress>>) {
        if self.is_draining() {
            futures::future::join_all(batch.iter().map(|d| d.nak_after(std::time::Duration::ZERO))).await;
            return;
        }
        let facts = {
            let lanes: Vec<LaneKey> = batch.iter().map(|d| lane_of(&d.event)).collect();
            let homes: Vec<LaneKey> = batch.iter().map(|d| home_lane_of(&d.event)).collect();
            let keys: Vec<(&str, &LaneKey, &LaneKey)> =
                batch.iter().zip(&lanes).zip(&homes).map(|((d, lane), home)| (d.event.delivery_id.as_str(), lane, home)).collect();
            self.inner.store.ingress_facts_homed(&keys, self.inner.config.exchange_window).await
        };
        match facts {
            Ok(facts) => {
                let mut refused = Vec::new();
                for (d, facts) in batch.into_iter().zip(facts) {
                    let span = tracing::info_span!("delivery", otel.name = "captain.admit", delivery_id = %d.event.delivery_id);
                    d.traced(&span);
                    let named = self.names_him(&d.event, &facts.persona_names);
                    refused.extend(self.accept_ingress(d, facts, named).instrument(span).await);
                }
                self.refuse(refused).await;
            }
            Err(e) => {
                tracing::warn!(error = %e, deliveries = batch.len(), "admission needs the store; the deliveries will come back");
                futures::future::join_all(batch.iter().map(|d| d.nak_after(self.inner.config.backoff(d.delivered)))).await;
            }
        }
    }

    /// Whether a guild message that is not otherwise addressed names him: the persona's name
    /// and aliases (the deployment's where it has none), as words. Never when naming is off.
    fn names_him(&self, ingress: &v1::Ingress, persona_names: &[String]) -> bool {
        let config = &self.inner.config;
        if !config.named_admission || ingress.change() != v1::MessageChange::None || !admission::needs_exchange(ingress) {
            return false;
        }
        let (name, aliases) = persona_names.split_first().map_or(("", &[][..]), |(n, a)| (n.as_str(), a));
        let name = if name.trim().is_empty() { config.bot_name.as_str() } else { name };
        let aliases = if aliases.is_empty() { config.aliases.as_slice() } else { aliases };
        let names: Vec<String> = std::iter::once(name)
            .chain(aliases.iter().map(String::as_str))
            .map(|n| n.trim().to_owned())
            .filter(|n| !n.is_empty())
            .collect();
        clankie_self::names_him(&ingress.content, &names)
    }

    async fn already_settled(&self, delivery_id: &str) -> bool {
        matches!(self.inner.store.outcome(delivery_id).await, Ok(Some(_)))
    }

    /// Records the batch's refusals at once: every receipt published side by side, then every
    /// delivery acked, so a batch costs two round-trips to JetStream rather than two per delivery.
    /// A receipt goes out before its delivery is acked: evidence is never behind the decision.
    async fn refuse(&self, refused: Vec<Refusal>) {
        if refused.is_empty() {
            return;
        }
        futures::future::join_all(refused.iter().map(|r| {
            self.receipt("captain.not_admitted", &r.delivery.event.delivery_id, &r.lane, |receipt| receipt.with_code(r.code))
                .instrument(r.span.clone())
        }))
        .await;
        futures::future::join_all(refused.iter().map(|r| r.delivery.ack())).await;
    }

    /// Decides a delivery from what the store said of it ([`Store::ingress_facts`]); only an
    /// admission writes, in one statement. A refusal is handed back for [`Captain::refuse`].
    async fn accept_ingress(&self, d: Delivery<v1::Ingress>, facts: clankie_store::IngressFacts, named: bool) -> Option<Refusal> {
        let lane = lane_of(&d.event);
        tracing::debug!(%lane, delivered = d.delivered, "ingress received");
        let config = &self.inner.config;
        if facts.settled {
            let _ = d.ack().await;
            return None;
        }
        if d.event.change() != v1::MessageChange::None {
            self.accept_change(lane, d).await;
            return None;
        }
        // A copy of a delivery held here is not a failure: the original answers for it.
        if d.delivered >= i64::from(config.max_deliver) && !self.inner.in_hand.holds(&d.event.delivery_id) {
            self.give_up(lane, d).await;
            return None;
        }
        if facts.admitted {
            // Admitted before, by this replica or one that died holding it: the decision stands.
            self.dispatch(Held::from_ingress(lane, d));
            return None;
        }
        let owner = facts.owner;
        if !admission::owner_admits(&owner, &d.event) {
            return Some(Refusal { delivery: d, lane, code: admission::Refused::NotAdmittedHere.code(), span: tracing::Span::current() });
        }
        // A lane with an actor here is in conversation already: its run may not be visible in the store yet.
        let local = self.inner.lanes.lock().unwrap_or_else(|p| p.into_inner()).contains_key(&lane);
        let live = local || (admission::needs_exchange(&d.event) && facts.in_conversation);
        match admission::admit(&d.event, live, named) {
            Err(refused) => {
                tracing::debug!(%lane, code = refused.code(), "not admitted");
                Some(Refusal { delivery: d, lane, code: refused.code(), span: tracing::Span::current() })
            }
            Ok(_) if facts.quiet => {
                self.hush(lane, d).await;
                None
            }
            Ok(why) => {
                // A private thread is its own audience: marked before anything lived there can
                // reach another lane's self-context (`clankie_self::policy::may_know_of`).
                if d.event.thread.as_ref().is_some_and(|t| t.kind() == v1::ThreadKind::Private)
                    && let Err(e) = self.inner.store.mark_private(&lane).await
                {
                    tracing::warn!(%lane, error = %e, "a private thread could not be marked as its own audience; the delivery will come back");
                    let _ = d.nak_after(config.backoff(d.delivered)).await;
                    return None;
                }
                let author = d.event.author_id;
                let limit = if admission::flood_guarded(&owner, &config.grants, author) { config.bounds.flood_per_minute } else { 0 };
                let id = &d.event.delivery_id;
                // When the person wrote it (the gateway's receipt of it), not when this captain got to it.
                let written = if d.event.received_at_ms > 0 { d.event.received_at_ms } else { clankie_bus::now_ms() };
                match self.inner.store.admit_within_flood(id, &lane, why.code(), author, limit, d.stream_sequence, written).await {
                    Ok(true) => {}
                    // Not inserted: either another replica admitted it meanwhile (the decision stands) or the flood guard held it.
                    Ok(false) if matches!(self.inner.store.admission(id).await, Ok(Some(_))) => {}
                    Ok(false) => {
                        let code = admission::Refused::FloodGuard.code();
                        tracing::debug!(%lane, code, "not admitted");
                        metrics::counter!("clankie_captain_flood_guarded_total").increment(1);
                        return Some(Refusal { delivery: d, lane, code, span: tracing::Span::current() });
                    }
                    Err(e) => {
                        tracing::warn!(%lane, error = %e, "admission not recorded; the delivery will come back");
                        let _ = d.nak_after(config.backoff(d.delivered)).await;
                        return None;
                    }
                }
                self.receipt("captain.admitted", &d.event.delivery_id, &lane, |r| r.with_code(why.code())).await;
                self.dispatch(Held::from_ingress(lane, d));
                None
            }
        }
    }

    /// The last delivery JetStream will make of a message every earlier try failed to handle:
    /// it is settled `failed` (`captain_lane_unavailable`) instead of looping, so the lane goes
    /// on with its next message and the person sees a failure, not silence.
    async fn give_up(&self, lane: LaneKey, d: Delivery<v1::Ingress>) {
        let id = d.event.delivery_id.clone();
        let code = v1::FailureCode::CaptainLaneUnavailable;
        let outcome =
            clankie_store::Outcome { delivery_id: id.clone(), turn_id: None, kind: v1::OutcomeKind::Failed, failure_code: Some(code) };
        if let Err(e) = self.inner.store.record_unhandled(&lane, &id, code).await {
            tracing::error!(%lane, error = %e, "could not record a delivery that kept failing; JetStream stops delivering it");
            let _ = d.nak_after(self.inner.config.backoff(d.delivered)).await;
            return;
        }
        tracing::warn!(%lane, delivered = d.delivered, "a delivery kept failing; settled as captain_lane_unavailable");
        self.announce_outcome(&lane, &outcome, |r| r.with_count("delivered", d.delivered)).await;
        let _ = d.ack().await;
    }

    /// A delivery in a room the owner made quiet: `silent`, with the `quiet` code, and no turn.
    async fn hush(&self, lane: LaneKey, d: Delivery<v1::Ingress>) {
        let id = d.event.delivery_id.clone();
        if let Err(e) = self.inner.store.record_quiet(&lane, &id).await {
            tracing::warn!(%lane, error = %e, "a quiet room's delivery could not be settled; it will come back");
            let _ = d.nak_after(self.inner.config.backoff(d.delivered)).await;
            return;
        }
        let outcome = clankie_store::Outcome { delivery_id: id, turn_id: None, kind: v1::OutcomeKind::Silent, failure_code: None };
        self.announce_outcome(&lane, &outcome, |r| r.with_code("quiet")).await;
        let _ = d.ack().await;
    }

    /// An edit or a deletion goes to its lane unadmitted: it never starts a turn, and a lane
    /// that holds nothing of the message settles it at once. A bot's is ignored, as its messages are.
    async fn accept_change(&self, lane: LaneKey, d: Delivery<v1::Ingress>) {
        if d.event.author_is_bot || d.delivered >= i64::from(self.inner.config.max_deliver) {
            let code = if d.event.author_is_bot { "bot_author" } else { "kept_failing" };
            self.receipt("captain.change_ignored", &d.event.delivery_id, &lane, |r| r.with_code(code)).await;
            let _ = d.ack().await;
            return;
        }
        if d.event.change() == v1::MessageChange::ThreadDeleted {
            return self.thread_deleted(lane, d).await;
        }
        if d.event.change() == v1::MessageChange::Edit {
            match self.inner.store.forgotten_at(d.event.author_id).await {
                Ok(Some(at)) if clankie_proto::time::snowflake_ms(d.event.changed_message_id) < at => {
                    return self.ignore_forgotten_edit(lane, d).await;
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "whether the editor was forgotten is unknown; the edit will come back");
                    let _ = d.nak_after(self.inner.config.backoff(d.delivered)).await;
                    return;
                }
            }
        }
        self.dispatch(Held::from_ingress(lane, d));
    }

    /// A thread deleted takes every message in it: each one the lane holds or waits on is
    /// deleted as a MESSAGE_DELETE of it would be (published as one, with the same id), so
    /// what waits is withdrawn and what was stored is rewritten, by the path every deletion takes.
    async fn thread_deleted(&self, lane: LaneKey, d: Delivery<v1::Ingress>) {
        let ids = match self.inner.store.messages_of_lane(&lane.to_string()).await {
            Ok(ids) => ids,
            Err(e) => {
                tracing::warn!(%lane, error = %e, "a deleted thread's messages could not be read; it will come back");
                let _ = d.nak_after(self.inner.config.backoff(d.delivered)).await;
                return;
            }
        };
        let subject = Subject::ingress_text(d.event.guild_id, d.event.channel_id);
        let thread = d.event.channel_id;
        for id in &ids {
            // An id of its own: a MESSAGE_DELETE of the same message is not taken for this one.
            let deletion = v1::Ingress {
                delivery_id: format!("thread-delete:{thread}:{id}"),
                guild_id: d.event.guild_id,
                channel_id: d.event.channel_id,
                change: v1::MessageChange::Delete as i32,
                changed_message_id: *id,
                received_at_ms: d.event.received_at_ms,
                ..Default::default()
            };
            if let Err(e) = self.inner.bus.publish(&subject, &deletion, Some(&MsgId::new(deletion.delivery_id.clone()))).await {
                tracing::warn!(%lane, error = %e, "a deleted thread's message could not be deleted; it will come back");
                let _ = d.nak_after(self.inner.config.backoff(d.delivered)).await;
                return;
            }
        }
        self.inner.warm.lock().unwrap_or_else(|p| p.into_inner()).take(&lane);
        self.receipt("captain.changed", &d.event.delivery_id, &lane, |r| {
            r.with_code("thread_deleted").with_count("messages", ids.len() as i64)
        })
        .await;
        let _ = d.ack().await;
    }

    /// An edit by someone forgotten of a message they wrote before the forget: the message is
    /// withdrawn everywhere, so its new words have nowhere to go and are kept nowhere, not even
    /// in the ingress stream.
    async fn ignore_forgotten_edit(&self, lane: LaneKey, d: Delivery<v1::Ingress>) {
        if let Err(e) = self.inner.bus.erase_delivered(&d).await {
            tracing::warn!(error = %e, "a forgotten person's edit could not be erased from its stream; it will come back");
            let _ = d.nak_after(self.inner.config.backoff(d.delivered)).await;
            return;
        }
        self.receipt("captain.change_ignored", &d.event.delivery_id, &lane, |r| r.with_code("author_forgotten")).await;
        let _ = d.ack().await;
    }

    async fn accept_steer(&self, d: Delivery<v1::Steer>) {
        tracing::debug!(delivered = d.delivered, "steer received");
        let (Some(ingress), Ok(lane)) = (d.event.ingress.clone(), d.event.lane.parse::<LaneKey>()) else {
            tracing::warn!("a steer without an ingress or with a bad lane; terminated");
            let _ = d.term().await;
            return;
        };
        if self.already_settled(&ingress.delivery_id).await {
            let _ = d.ack().await;
            return;
        }
        self.dispatch(Held::from_steer(lane, ingress, d));
    }

    /// Hands a delivery to its lane's actor, starting one if the lane has none here.
    ///
    /// A copy of a delivery this replica already holds (JetStream redelivered it while its run
    /// was slow to settle, or a forwarded steer crossed a redelivery) is not handed on: it is
    /// marked in progress so JetStream waits, and the held original settles and acks the one
    /// stream message both stand for.
    fn dispatch(&self, held: Held) {
        let held = match self.inner.in_hand.claim(held) {
            Ok(held) => held,
            Err(copy) => {
                tracing::debug!(delivery_id = copy.delivery_id(), "a copy of a held delivery; the original answers for it");
                metrics::counter!("clankie_captain_held_copies_total").increment(1);
                tokio::spawn(async move {
                    let _ = copy.in_progress().await;
                });
                return;
            }
        };
        let lane = held.lane;
        let mut lanes = self.inner.lanes.lock().unwrap_or_else(|p| p.into_inner());
        let held = match lanes.get(&lane) {
            Some(tx) => match tx.send(held) {
                Ok(()) => return,
                Err(mpsc::error::SendError(h)) => h,
            },
            None => held,
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let _ = tx.send(held);
        lanes.insert(lane, tx);
        let captain = self.clone();
        tokio::spawn(captain.lane_actor(lane, rx).instrument(tracing::info_span!("lane", %lane)));
    }
}

/// The tasks that decide admission side by side.
///
/// A lane always goes to the same admitter, so one lane's deliveries are decided in the order
/// JetStream gave them while other lanes' are decided alongside; each admitter's queue is
/// short, so a slow store pushes back on the pull instead of piling up deliveries.
struct Admitters {
    queues: Vec<mpsc::Sender<Delivery<v1::Ingress>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// Deliveries an admitter decides from one read of the store: whatever queued while it was busy.
const ADMISSION_BATCH: usize = 64;

impl Admitters {
    fn start(captain: &Captain) -> Admitters {
        let (queues, tasks) = (0..captain.inner.config.admitters.max(1))
            .map(|_| {
                let (tx, mut rx) = mpsc::channel::<Delivery<v1::Ingress>>(64);
                let captain = captain.clone();
                let task = tokio::spawn(async move {
                    while let Some(first) = rx.recv().await {
                        let mut batch = vec![first];
                        while batch.len() < ADMISSION_BATCH {
                            match rx.try_recv() {
                                Ok(d) => batch.push(d),
                                Err(_) => break,
                            }
                        }
                        // A batch whose decision panicked comes back after its ack wait; the
                        // admitter goes on, or every later delivery of its lanes would be refused.
                        let decided = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(captain.decide(batch))).await;
                        if let Err(payload) = decided {
                            metrics::counter!("clankie_part_restarts_total", "part" => "captain.admitter").increment(1);
                            let panic = clankie_http::supervise::panic_message(payload.as_ref());
                            tracing::error!(part = "captain.admitter", panic, "an admission batch panicked; the admitter goes on");
                        }
                    }
                });
                (tx, task)
            })
            .unzip();
        Admitters { queues, tasks }
    }

    async fn admit(&self, d: Delivery<v1::Ingress>) {
        use std::hash::{BuildHasher, BuildHasherDefault};
        let lane = lane_of(&d.event);
        let hash = BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default().hash_one(lane);
        let queue = &self.queues[(hash % self.queues.len() as u64) as usize];
        if let Err(mpsc::error::SendError(d)) = queue.send(d).await {
            let _ = d.nak_after(std::time::Duration::ZERO).await;
        }
    }

    /// On shutdown: what is queued goes back to JetStream at once (the captain is draining,
    /// so the admitters nak instead of deciding), and the admitters end.
    async fn hand_back(mut self) {
        self.queues.clear();
        for task in std::mem::take(&mut self.tasks) {
            let _ = task.await;
        }
    }
}

impl Drop for Admitters {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}
