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

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use clankie_bus::now_ms;

use crate::leases::{Held, ShardLeases};
use crate::{Gateway, GatewayError, leases};

impl Gateway {
    /// Takes the REST lease whenever it is free and does the REST work while it is held.
    pub(crate) async fn run_rest(&self) -> Result<(), GatewayError> {
        let config = &self.inner.config;
        let kv = self.inner.bus.key_value(leases::SHARDS_BUCKET, Duration::from_secs(7 * 24 * 3600)).await?;
        let lease = ShardLeases::new(kv, &config.replica, config.rest_lease_ttl);
        let retry = (config.rest_lease_ttl / 4).max(Duration::from_millis(50));
        let mut stopping = self.inner.stopping.subscribe();
        let mut later = false;
        let mut invite_said = false;
        loop {
            if *stopping.borrow() {
                return Ok(());
            }
            let held = match lease.claim_rest().await {
                Ok(Some((held, handover))) => {
                    self.inner.budget.take_over(&handover);
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
            self.inner.rest_until_ms.store(held.claim.expires_ms, Ordering::SeqCst);
            if !std::mem::replace(&mut invite_said, true) {
                tokio::spawn(self.clone().say_invite());
            }
            // Each part is supervised on its own: a panic in typing restarts typing, never posting.
            let parts = &self.inner.parts;
            let outcome = tokio::select! {
                r = clankie_http::supervise("gateway.body", parts, |p| self.after_rest_panic(p), || self.run_body()) => Ok(r),
                r = clankie_http::supervise("gateway.typing", parts, |p| self.after_rest_panic(p), || self.run_typing()) => Ok(r),
                r = clankie_http::supervise("gateway.history", parts, |p| self.after_rest_panic(p), || self.run_history()) => Ok(r),
                r = clankie_http::supervise("gateway.reactions", parts, |p| self.after_rest_panic(p), || self.run_outcome_reactions()) => Ok(r),
                handing = self.keep(&lease, held, &mut stopping) => Err(handing),
            };
            self.inner.rest_until_ms.store(0, Ordering::SeqCst);
            // What the body held goes back in order before the lease does, so the next holder
            // finds it waiting when it starts pulling.
            self.hand_back_held().await;
            let outcome = match outcome {
                Ok(r) => Some(r),
                Err(Some(mut held)) => {
                    if let Err(e) = lease.release_rest(&mut held, self.inner.budget.spoken()).await {
                        tracing::warn!(error = %e, "the REST lease could not be handed back; it runs out by itself");
                    }
                    None
                }
                Err(None) => None,
            };
            self.inner.typing.stop_local();
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
        now_ms() < self.inner.rest_until_ms.load(Ordering::SeqCst)
    }

    /// The last check before a REST request goes out, after every wait: a holder paused past its
    /// lease (SIGSTOP, a frozen VM) finds it gone here and sends nothing; the next holder has
    /// the message. The lease's end is kept in wall time, so a pause counts against it.
    pub(crate) fn fence(&self) -> Result<(), crate::body::PostError> {
        if self.speaks_rest() {
            return Ok(());
        }
        metrics::counter!("clankie_gateway_fenced_requests_total").increment(1);
        tracing::warn!("the REST lease ran out before a request went out; it is handed back unsent");
        Err(crate::body::PostError::Retry)
    }

    /// Renews the lease every third of its life; returns when it is lost, when it could not be
    /// renewed before its own expiry (a bus away that long, or this process paused), or, with
    /// the lease to hand back once the body's messages are, when the replica is stopping.
    async fn keep(&self, lease: &ShardLeases, mut held: Held, stopping: &mut tokio::sync::watch::Receiver<bool>) -> Option<Held> {
        let mut tick = tokio::time::interval(self.inner.config.rest_lease_ttl / 3);
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
            match lease.renew_rest(&mut held, self.inner.budget.spoken()).await {
                Ok(()) => self.inner.rest_until_ms.store(held.claim.expires_ms, Ordering::SeqCst),
                Err(leases::LeaseError::RestLost) => return None,
                Err(e) => tracing::warn!(error = %e, "the REST lease could not be renewed; trying again"),
            }
        }
    }
}

/// What twilight's limiter says in the panic of every request made after its task died.
pub(crate) const LIMITER_PANICKED: &str = "actor task panicked";

/// Discord's REST client, replaceable: twilight's rate limiter is a task of its own, and once it
/// has panicked every request through that client panics too. A REST part that panicked so gets
/// a new client (counted as `clankie_gateway_rest_clients_rebuilt_total` and logged) before it
/// starts again, never the broken one.
pub(crate) struct RestClient {
    current: RwLock<Arc<twilight_http::Client>>,
    token: String,
    api: Option<String>,
    rebuilt: AtomicU64,
}

impl RestClient {
    pub(crate) fn new(config: &crate::GatewayConfig) -> RestClient {
        let (token, api) = (config.token.clone(), config.api.clone());
        RestClient { current: RwLock::new(Arc::new(build(&token, api.as_deref()))), token, api, rebuilt: AtomicU64::new(0) }
    }

    /// The client to make a request with now.
    pub(crate) fn get(&self) -> Arc<twilight_http::Client> {
        self.current.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replaces the client (and with it the limiter) by a fresh one.
    pub(crate) fn rebuild(&self) {
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(build(&self.token, self.api.as_deref()));
        let n = self.rebuilt.fetch_add(1, Ordering::SeqCst) + 1;
        metrics::counter!("clankie_gateway_rest_clients_rebuilt_total").increment(1);
        tracing::error!(rebuilt = n, "twilight's rate limiter had panicked: the REST client was rebuilt");
    }

    pub(crate) fn rebuilt(&self) -> u64 {
        self.rebuilt.load(Ordering::SeqCst)
    }
}

pub(crate) fn build(token: &str, api: Option<&str>) -> twilight_http::Client {
    let mut builder = twilight_http::Client::builder().token(token.to_owned());
    if let Some(api) = api {
        builder = builder.proxy(api.to_owned(), true);
    }
    builder.build()
}

/// This replica's REST requests: paced evenly under Discord's global limit, and counted so
/// typing and reactions can give way to replies.
///
/// Twilight's limiter counts Discord's 50 a second in windows that start at its first request,
/// and Discord's own window starts when that request arrives: when twilight's window resets it
/// sends a burst that can land in the end of Discord's, and twilight retries a global 429 at
/// once. So every request first takes a slot at most [`PACED_PER_SECOND`] a second, evenly
/// spaced, and is sent only while fewer than that are in flight or were answered within the
/// last second. A request is counted from its slot until a second after its answer: it arrived
/// at Discord before it was answered, so however late a loaded machine sends it (or twilight's
/// route bucket holds it), no second at Discord can hold more than the budget.
/// Twilight still keeps the per-route buckets. And while the last second used most of the
/// budget, typing triggers and outcome reactions wait, so a reply never queues behind them.
#[derive(Debug)]
pub(crate) struct RestBudget {
    window: std::sync::Mutex<Window>,
    next_slot: std::sync::Mutex<tokio::time::Instant>,
    creates: std::sync::Mutex<Creates>,
}

/// The message creates of the last create span, per channel, by when each was answered; and,
/// after a tenure taken from a holder that did not hand over its record, when creates may
/// start at all.
#[derive(Debug)]
struct Creates {
    answered: std::collections::HashMap<u64, std::collections::VecDeque<tokio::time::Instant>>,
    not_before: tokio::time::Instant,
    span: Duration,
}

/// The requests counted against the last second: those in flight, and when the others were answered.
#[derive(Debug, Default)]
struct Window {
    in_flight: usize,
    answered: std::collections::VecDeque<tokio::time::Instant>,
}

impl Window {
    /// Counts answers given at `at` (another holder's, taken over) in their place in time.
    fn count_answered(&mut self, at: impl IntoIterator<Item = tokio::time::Instant>) {
        self.answered.extend(at);
        self.answered.make_contiguous().sort_unstable();
    }

    fn count(&mut self, now: tokio::time::Instant) -> usize {
        while self.answered.front().is_some_and(|t| now.duration_since(*t) >= Duration::from_secs(1)) {
            self.answered.pop_front();
        }
        self.in_flight + self.answered.len()
    }
}

/// A request's place in the budget, held until its answer is in: dropping it starts the
/// second the request still counts for.
#[must_use = "hold the slot until the request is answered"]
pub(crate) struct Slot<'a>(&'a RestBudget);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut window = self.0.window.lock().unwrap_or_else(|p| p.into_inner());
        window.in_flight = window.in_flight.saturating_sub(1);
        window.answered.push_back(tokio::time::Instant::now());
    }
}

/// Discord's bucket for messages created in one channel: this many in any create span
/// ([`crate::GatewayConfig::create_span`]).
pub(crate) const CREATES_PER_SPAN: usize = 5;

/// A message create's place in its channel's window: once the request may have left, dropping
/// it counts the create as answered now, so a create cut off by a tenure's end still counts.
#[must_use = "hold the turn until the create is answered"]
pub(crate) struct CreateTurn<'a> {
    budget: &'a RestBudget,
    channel: u64,
    sent: bool,
}

impl CreateTurn<'_> {
    /// The request is about to leave: from here on it counts, answered or not.
    pub(crate) fn sending(&mut self) {
        self.sent = true;
    }
}

impl Drop for CreateTurn<'_> {
    fn drop(&mut self) {
        if self.sent {
            self.budget.create_answered(self.channel, tokio::time::Instant::now());
        }
    }
}

/// `at` (wall clock, ms) as an instant of this process's clock.
fn instant_of(at: i64) -> tokio::time::Instant {
    let (now, now_ms) = (tokio::time::Instant::now(), now_ms());
    let ago = Duration::from_millis(now_ms.saturating_sub(at).unsigned_abs());
    if at <= now_ms { now.checked_sub(ago).unwrap_or(now) } else { now + ago }
}

/// `at` as wall clock ms, for another process to read.
fn wall_ms_of(at: tokio::time::Instant) -> i64 {
    now_ms() - tokio::time::Instant::now().saturating_duration_since(at).as_millis() as i64
}

/// Requests a second this replica sends at most: Discord's 50, less a margin for the way there.
pub const PACED_PER_SECOND: u32 = 45;
/// Requests in the last second past which typing and reactions wait.
const CROWDED_PER_SECOND: usize = 36;

impl RestBudget {
    /// A budget with no requests yet, whose channels take [`CREATES_PER_SPAN`] creates per `create_span`.
    pub(crate) fn new(create_span: Duration) -> RestBudget {
        let now = tokio::time::Instant::now();
        RestBudget {
            window: Default::default(),
            next_slot: std::sync::Mutex::new(now),
            creates: std::sync::Mutex::new(Creates { answered: Default::default(), not_before: now, span: create_span }),
        }
    }

    /// Waits until `channel` may take another message create: until the one
    /// [`CREATES_PER_SPAN`] before it was answered a create span ago. Counted from answers, not
    /// sends, because a request reaches Discord before it is answered: however late a loaded
    /// machine sends one, no span at Discord holds more. One poster per channel calls it.
    pub(crate) async fn create_turn(&self, channel: u64) -> CreateTurn<'_> {
        loop {
            let free_at = {
                let creates = self.creates.lock().unwrap_or_else(|p| p.into_inner());
                let by_window = creates
                    .answered
                    .get(&channel)
                    .filter(|a| a.len() >= CREATES_PER_SPAN)
                    .map(|a| a[a.len() - CREATES_PER_SPAN] + creates.span);
                by_window.map_or(creates.not_before, |w| w.max(creates.not_before))
            };
            if free_at <= tokio::time::Instant::now() {
                return CreateTurn { budget: self, channel, sent: false };
            }
            tokio::time::sleep_until(free_at).await;
        }
    }

    fn create_answered(&self, channel: u64, at: tokio::time::Instant) {
        let mut creates = self.creates.lock().unwrap_or_else(|p| p.into_inner());
        let answered = creates.answered.entry(channel).or_default();
        let place = answered.partition_point(|t| *t <= at);
        answered.insert(place, at);
        while answered.len() > CREATES_PER_SPAN {
            answered.pop_front();
        }
    }

    /// What this replica's requests still count for at Discord, for the next REST holder:
    /// the answers of the last second and each channel's creates of the last create span.
    pub(crate) fn spoken(&self) -> crate::leases::Spoken {
        let now = tokio::time::Instant::now();
        let answered_ms = {
            let mut window = self.window.lock().unwrap_or_else(|p| p.into_inner());
            window.count(now);
            // In flight: it reaches Discord now at the latest, and is answered later still.
            let in_flight = std::iter::repeat_n(now_ms(), window.in_flight);
            window.answered.iter().map(|t| wall_ms_of(*t)).chain(in_flight).collect()
        };
        let mut creates = self.creates.lock().unwrap_or_else(|p| p.into_inner());
        let span = creates.span;
        creates.answered.retain(|_, a| {
            a.retain(|t| now.saturating_duration_since(*t) < span);
            !a.is_empty()
        });
        let mut by_channel: Vec<(u64, Vec<i64>)> =
            creates.answered.iter().map(|(c, a)| (*c, a.iter().map(|t| wall_ms_of(*t)).collect())).collect();
        by_channel.sort_unstable();
        crate::leases::Spoken { answered_ms, creates: by_channel }
    }

    /// Counts what the previous REST holder's requests still count for at Discord before this
    /// replica's first: its record as it handed it over, and, when it lost the lease without
    /// handing over (killed, paused, cut off from the bus), every request it may have sent up
    /// to its lease's end: no request until a second past that end, no create until a create
    /// span past it.
    pub(crate) fn take_over(&self, handover: &crate::leases::RestHandover) {
        if let Some(spoken) = &handover.spoken {
            self.window.lock().unwrap_or_else(|p| p.into_inner()).count_answered(spoken.answered_ms.iter().map(|t| instant_of(*t)));
            for (channel, answered) in &spoken.creates {
                for at in answered {
                    self.create_answered(*channel, instant_of(*at));
                }
            }
        }
        if let Some(ended_ms) = handover.unclean_end_ms {
            let end = instant_of(ended_ms);
            self.window.lock().unwrap_or_else(|p| p.into_inner()).count_answered(std::iter::repeat_n(end, PACED_PER_SECOND as usize));
            let mut creates = self.creates.lock().unwrap_or_else(|p| p.into_inner());
            creates.not_before = creates.not_before.max(end + creates.span);
        }
    }

    /// Waits for the next free slot and takes it; every REST request calls this first and
    /// holds the slot until it is answered.
    pub(crate) async fn pace(&self) -> Slot<'_> {
        let slot = {
            let mut next = self.next_slot.lock().unwrap_or_else(|p| p.into_inner());
            let slot = (*next).max(tokio::time::Instant::now());
            *next = slot + Duration::from_secs(1) / PACED_PER_SECOND;
            slot
        };
        tokio::time::sleep_until(slot).await;
        loop {
            let free_at = {
                let now = tokio::time::Instant::now();
                let mut window = self.window.lock().unwrap_or_else(|p| p.into_inner());
                if window.count(now) < PACED_PER_SECOND as usize {
                    window.in_flight += 1;
                    return Slot(self);
                }
                // Full: the oldest answer leaves the second first (or an answer is awaited).
                window.answered.front().map_or(now + Duration::from_millis(20), |t| *t + Duration::from_secs(1))
            };
            tokio::time::sleep_until(free_at).await;
        }
    }

    /// Whether the last second used most of the budget.
    pub(crate) fn crowded(&self) -> bool {
        let mut window = self.window.lock().unwrap_or_else(|p| p.into_inner());
        window.count(tokio::time::Instant::now()) >= CROWDED_PER_SECOND
    }

    /// Waits, up to `at_most`, for the budget to be uncrowded, then for a slot.
    pub(crate) async fn give_way(&self, at_most: Duration) -> Slot<'_> {
        let deadline = tokio::time::Instant::now() + at_most;
        while self.crowded() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.pace().await
    }
}
