//! What comes in and whether it is admitted: each admitter's batch of text ingress decided
//! from one read of the store (admitted, refused with a receipt, hushed, given up), edits,
//! deletions and archived threads applied to their lanes, a forgotten person's edit kept
//! nowhere, and forwarded steers taken in.

use clankie_bus::Delivery;
use clankie_bus::MsgId;
use clankie_proto::{LaneKey, Subject, v1};
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::{Captain, Held, admission, home_lane_of, lane_of};

/// A delivery decided "not admitted", whose receipt and ack wait for the rest of its batch.
struct Refusal {
    delivery: Delivery<v1::Ingress>,
    lane: LaneKey,
    code: &'static str,
    /// The admission's span, which the refusal's receipt is published in.
    span: tracing::Span,
}

impl Captain {
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
                // A reminder come due is his word kept, not their flooding.
                let guarded = admission::flood_guarded(&owner, &config.grants, author) && d.event.reminder.is_none();
                let limit = if guarded { config.bounds.flood_per_minute } else { 0 };
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

    pub(crate) async fn accept_steer(&self, d: Delivery<v1::Steer>) {
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
}

/// The tasks that decide admission side by side.
///
/// A lane always goes to the same admitter, so one lane's deliveries are decided in the order
/// JetStream gave them while other lanes' are decided alongside; each admitter's queue is
/// short, so a slow store pushes back on the pull instead of piling up deliveries.
pub(crate) struct Admitters {
    queues: Vec<mpsc::Sender<Delivery<v1::Ingress>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// Deliveries an admitter decides from one read of the store: whatever queued while it was busy.
const ADMISSION_BATCH: usize = 64;

impl Admitters {
    pub(crate) fn start(captain: &Captain) -> Admitters {
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

    pub(crate) async fn admit(&self, d: Delivery<v1::Ingress>) {
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
    pub(crate) async fn hand_back(mut self) {
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
