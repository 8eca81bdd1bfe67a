//! One lane's life on this replica: take the lease, run the burst, steer what
//! arrives meanwhile, record one outcome per delivery, hand the lane back.

use clankie_agent::Session;
use clankie_bus::{MsgId, now_ms};
use clankie_proto::{LaneKey, ReceiptKind, Subject, v1};
use clankie_store::{Lease, Outcome, StoreError, StoredChange, TurnEnd, TurnMode};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::tools::Room;
use crate::typing::Answering;
use crate::{Captain, Held, Warm, prompt};

mod changes;
mod live;
mod message;
mod prepare;
mod settle;
mod turn;

/// What the run's event loop saw, for the turn receipt.
#[derive(Default)]
struct Presence {
    typing_lit: bool,
    card_posted: bool,
    card_due: Option<Instant>,
    tools_seen: Vec<String>,
    card_edits: u32,
}

/// Where a run's session came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Opened {
    /// This replica's copy, and nobody held the lane since.
    Memory,
    /// This replica's copy, with this many entries other replicas appended since read from the store.
    Refreshed(usize),
    /// Read from the store, from the tree's newest compaction on.
    Store,
}

impl Captain {
    /// Serves one lane until its inbox is empty, then retires the actor.
    pub(crate) async fn lane_actor(self, lane: LaneKey, mut inbox: mpsc::UnboundedReceiver<Held>) {
        let mut pending: Vec<Held> = Vec::new();
        loop {
            while let Ok(h) = inbox.try_recv() {
                pending.push(h);
            }
            if pending.is_empty() {
                let mut lanes = self.inner.lanes.lock().unwrap_or_else(|p| p.into_inner());
                match inbox.try_recv() {
                    Ok(h) => pending.push(h),
                    Err(_) => {
                        lanes.remove(&lane);
                        return;
                    }
                }
            }
            let burst = std::mem::take(&mut pending);
            self.serve_burst(lane, burst, &mut inbox, &mut pending).await;
        }
    }

    async fn serve_burst(&self, lane: LaneKey, mut burst: Vec<Held>, inbox: &mut mpsc::UnboundedReceiver<Held>, pending: &mut Vec<Held>) {
        let config = &self.inner.config;
        if self.is_draining() {
            // Shutting down: another replica answers these.
            for held in burst {
                let _ = held.nak_after(std::time::Duration::ZERO).await;
            }
            return;
        }
        self.settle_unheld_changes(&lane, &mut burst).await;
        if burst.is_empty() {
            return;
        }
        let lease = self.inner.store.acquire_lease(&lane, &config.replica, config.lease_ttl).await;
        tracing::debug!(%lane, deliveries = burst.len(), took = matches!(lease, Ok(Some(_))), "lane burst");
        let lease = match lease {
            Ok(Some(lease)) if burst.iter().any(Held::is_change) => {
                burst = self.apply_changes(&lease, burst).await;
                if burst.is_empty() {
                    let _ = self.inner.store.release_lease(&lease).await;
                    return;
                }
                Ok(Some(lease))
            }
            other => other,
        };
        if let Ok(Some(lease)) = &lease {
            self.apply_stored_changes(lease, &mut burst).await;
        }
        match lease {
            Ok(Some(lease)) if !self.drop_settled(&lease, &mut burst).await => {}
            Ok(Some(lease)) if config.one_shot => {
                // The baseline answers each delivery on its own: the rest wait for turns of their own.
                let mut burst = burst.into_iter();
                let Some(first) = burst.next() else { return };
                pending.extend(burst);
                self.run_turn(lease, vec![first], inbox, pending).await
            }
            Ok(Some(lease)) => self.run_turn(lease, burst, inbox, pending).await,
            Ok(None) => {
                for held in burst {
                    if held.forwarded() {
                        let _ = held.nak_after(config.retry_delay()).await;
                    } else {
                        self.forward(held).await;
                    }
                }
            }
            Err(e) => {
                tracing::warn!(%lane, error = %e, "could not take the lane lease; deliveries will come back");
                for held in burst {
                    let _ = held.nak_after(config.retry_delay()).await;
                }
            }
        }
    }

    /// Acks and drops the deliveries of `burst` that were settled before this replica took the
    /// lane (a run elsewhere absorbed a copy of them). Under the lease nobody settles them
    /// meanwhile. False, with the lease released, when nothing is left to run.
    async fn drop_settled(&self, lease: &Lease, burst: &mut Vec<Held>) -> bool {
        let ids: Vec<&str> = burst.iter().map(Held::delivery_id).collect();
        let settled = match self.inner.store.settled_among(&ids).await {
            Ok(settled) => settled,
            // Unknown: the settle transaction refuses a second answer anyway.
            Err(_) => return true,
        };
        if !settled.is_empty() {
            let (done, left): (Vec<Held>, Vec<Held>) =
                std::mem::take(burst).into_iter().partition(|h| settled.iter().any(|s| s == h.delivery_id()));
            for h in done {
                tracing::debug!(delivery_id = h.delivery_id(), "settled elsewhere before this run; acked");
                let _ = h.ack().await;
            }
            *burst = left;
        }
        if burst.is_empty() {
            let _ = self.inner.store.release_lease(lease).await;
            return false;
        }
        true
    }

    /// Hands a delivery to whichever replica owns the lane's live run.
    async fn forward(&self, held: Held) {
        let lane = held.lane;
        let steer = v1::Steer {
            lane: lane.to_string(),
            epoch: 0,
            ingress: Some(held.ingress.clone()),
            forwarded_by: self.inner.config.replica.clone(),
        };
        let id = MsgId::new(format!("steer:{}", held.delivery_id()));
        match self.inner.bus.publish(&Subject::LaneSteer { lane }, &steer, Some(&id)).await {
            Ok(_) => {
                self.receipt("captain.forwarded", held.delivery_id(), &lane, |r| r).await;
                let _ = held.ack().await;
            }
            Err(e) => {
                tracing::warn!(%lane, error = %e, "could not forward a delivery; it will come back");
                let _ = held.nak_after(self.inner.config.backoff(held.delivered())).await;
            }
        }
    }

    /// The lane's session from this replica's memory: as it is when nobody held the lane since,
    /// brought up to date with what other replicas appended when somebody did. `None` when this
    /// replica holds no copy (or the refresh failed): the session is then read from the store.
    async fn warm_session(&self, lane: LaneKey, lease: &Lease, apart: bool) -> Option<(Session, Opened)> {
        if apart {
            return None;
        }
        let kept = self.inner.warm.lock().unwrap_or_else(|p| p.into_inner()).take(&lane);
        let Warm { mut session, epoch } = kept?;
        if epoch + 1 == lease.epoch {
            session.set_lease(lease.clone());
            return Some((session, Opened::Memory));
        }
        match session.refresh(lease.clone()).await {
            Ok(read) => Some((session, Opened::Refreshed(read))),
            Err(e) => {
                tracing::warn!(%lane, error = %e, "the warm copy could not be brought up to date; opening from the store");
                None
            }
        }
    }

    /// The room's history for a lane opening cold. A session resumed from the store already
    /// holds the room up to its newest delivery, so it gets only the lines after that, and
    /// none of his own (his words are in it as he wrote them): no line reaches a tree twice.
    /// `carried` are the run's own deliveries, which reach the model as messages of their own (a
    /// takeover gathers ones older than the message that started it), and `hidden` picks out the
    /// grantees whose work in a trusted room stays out of its conversation.
    async fn history_block(
        &self,
        owner: &v1::Ingress,
        heard_up_to: Option<u64>,
        carried: &[u64],
        hidden: impl Fn(u64) -> bool,
    ) -> Option<(String, Vec<u64>)> {
        let config = &self.inner.config;
        if config.history_limit == 0 {
            return None;
        }
        // A person forgotten stays forgotten: what they wrote before it never comes back as history.
        let forgotten = self.forgotten().await;
        let forgot = |m: &v1::HistoryMessage| !clankie_proto::audience::history_shows(&forgotten, m.author_id, m.message_id);
        let request = v1::HistoryRequest {
            channel_id: owner.channel_id,
            before_message_id: owner.delivery_id.parse().unwrap_or(0),
            limit: config.history_limit,
        };
        let subject = Subject::RpcHistory { channel: owner.channel_id };
        match self.inner.bus.request::<_, v1::HistoryReply>(&subject, &request, config.history_timeout).await {
            Ok(mut reply) if reply.error.is_empty() => {
                if let Some(heard) = heard_up_to {
                    reply.messages.retain(|m| m.message_id > heard && !m.is_him);
                }
                reply.messages.retain(|m| !hidden(m.author_id) && !carried.contains(&m.message_id) && !forgot(m));
                let (block, left_out, ids) = prompt::history(&reply.messages, config.bounds.history_chars);
                if left_out > 0 {
                    let lane = crate::lane_of(owner);
                    self.receipt("captain.bounded", &owner.delivery_id, &lane, |r| {
                        r.with_code("history_capped").with_count("left_out", left_out as i64)
                    })
                    .await;
                }
                block.map(|b| (b, ids))
            }
            Ok(reply) => {
                tracing::warn!(code = %reply.error, "history unavailable for a cold lane");
                None
            }
            Err(e) => {
                tracing::warn!(error = %e, "history unavailable for a cold lane");
                None
            }
        }
    }

    /// Steers `held` into the live run (it ends absorbed), or leaves it for a turn of its own
    /// when the run takes no more or a stored deletion holds it back (the next burst withdraws
    /// it); a stored edit is applied first. Whether it was steered.
    async fn steer_in(
        &self,
        held: Held,
        steerer: &clankie_agent::Steerer,
        answering: &Answering,
        absorbed: &mut Vec<Held>,
        pending: &mut Vec<Held>,
        (held_ids, admitted_channels): (&std::collections::HashSet<u64>, &[u64]),
    ) -> bool {
        // A change stored before this copy arrived (consumed on another replica, say): an edit
        // is read as edited; a deleted message waits for the next burst, which withdraws it.
        let mut held = held;
        if let Ok(stored) = self.inner.store.changes_among(&[held.delivery_id()]).await {
            match stored.into_iter().next().map(|(_, c)| c) {
                Some(StoredChange::Delete) => {
                    self.receipt("captain.withheld", held.delivery_id(), &held.lane, |r| r.with_code("deleted")).await;
                    pending.push(held);
                    return false;
                }
                Some(StoredChange::Edit(bytes)) => {
                    if let Ok(change) = <v1::Ingress as prost::Message>::decode(bytes.as_slice()) {
                        changes::edit(&mut held.ingress, &change);
                    }
                }
                None => {}
            }
        }
        // A message steered into a run is read as a turn reads one: with what it points at.
        self.context_before_turn(std::iter::once(&mut held)).await;
        match steerer.steer(self.user_message(&held, held_ids, admitted_channels).await) {
            Ok(()) => {
                answering.wrote(&held.ingress);
                absorbed.push(held);
                true
            }
            Err(_) => {
                pending.push(held);
                false
            }
        }
    }

    /// Ends a run whose lane another replica took: its presence is cleared and its deliveries
    /// are left unacked, for the new owner.
    async fn stop_fenced(&self, lease: &Lease, owner: &str, turn_id: &str, room: &Room, presence: &Presence) {
        let lane = lease.lane;
        tracing::warn!(%lane, epoch = lease.epoch, "fenced: another replica took the lane; the run stopped");
        metrics::counter!("clankie_captain_fenced_runs_total").increment(1);
        self.receipt("captain.fenced", owner, &lane, |r| r.with_id("turn", turn_id)).await;
        if presence.typing_lit {
            self.typing(&lane, owner, v1::TypingOp::Stop).await;
        }
        if presence.card_posted {
            self.tool_card(room, v1::ToolCardOp::Remove, &presence.tools_seen, 0).await;
        }
        self.inner.warm.lock().unwrap_or_else(|p| p.into_inner()).take(&lane);
    }

    /// What the lane has admitted and not settled that this replica does not hold (a run that
    /// died held it, or it is bouncing between other replicas as a forwarded steer), read back
    /// from the ingress stream, so this run answers the whole burst rather than only what
    /// reached it. Deliveries held on this replica are its own and are left alone.
    async fn gather(&self, lane: &LaneKey, owner: &str) -> Vec<Held> {
        let inner = &self.inner;
        let unsettled = match inner.store.unsettled_admissions(lane, inner.config.gather_window).await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(%lane, error = %e, "unsettled admissions not readable; the run answers what it holds");
                return Vec::new();
            }
        };
        let mut gathered = Vec::new();
        for (delivery_id, seq) in unsettled {
            if delivery_id == owner || inner.in_hand.holds(&delivery_id) {
                continue;
            }
            let (ingress, trace) = match inner.bus.stored_traced::<v1::Ingress>(clankie_proto::Family::IngressText, seq).await {
                Ok(Some((i, trace))) if i.delivery_id == delivery_id => (i, trace),
                Ok(_) => continue,
                Err(e) => {
                    tracing::warn!(%lane, error = %e, "an unsettled delivery could not be read back; it comes back on its own");
                    continue;
                }
            };
            if let Ok(held) = inner.in_hand.claim(Held::gathered(*lane, ingress, trace)) {
                gathered.push(held);
            }
        }
        if !gathered.is_empty() {
            tracing::info!(%lane, gathered = gathered.len(), "gathered admitted deliveries held nowhere here");
            self.receipt("captain.gathered", owner, lane, |r| r.with_count("deliveries", gathered.len() as i64)).await;
        }
        gathered
    }

    /// Tells the bus a recorded outcome: the outcome event the body reacts to, then the
    /// metric and the content-free receipt (`extra` adds to it).
    pub(crate) async fn announce_outcome(&self, lane: &LaneKey, outcome: &Outcome, extra: impl FnOnce(v1::Receipt) -> v1::Receipt) {
        let id = MsgId::new(format!("outcome:{}", outcome.delivery_id));
        if let Err(e) = self.inner.bus.publish(&Subject::LaneOutcome { lane: *lane }, &outcome_event(lane, outcome), Some(&id)).await {
            tracing::warn!(delivery_id = %outcome.delivery_id, error = %e, "outcome event not published");
        }
        self.outcome_receipt(lane, outcome, extra).await;
    }

    /// The metric and content-free receipt of a recorded outcome.
    async fn outcome_receipt(&self, lane: &LaneKey, outcome: &Outcome, extra: impl FnOnce(v1::Receipt) -> v1::Receipt) {
        let (kind, code) = (outcome.kind, outcome.failure_code);
        metrics::counter!("clankie_captain_outcomes_total", "kind" => kind.code()).increment(1);
        let turn_id = outcome.turn_id.clone().unwrap_or_default();
        self.receipt("captain.outcome", &outcome.delivery_id, lane, |r| {
            let r = if turn_id.is_empty() { r } else { r.with_id("turn", &turn_id) };
            let r = r.with_code(kind.code());
            extra(match code {
                Some(c) => r.with_code(c.code()),
                None => r,
            })
        })
        .await;
    }

    /// Gives deliveries back to JetStream and the lane back to the pool.
    async fn give_back(&self, lease: &Lease, held: impl Iterator<Item = Held>) {
        for h in held {
            let _ = h.nak_after(self.inner.config.backoff(h.delivered())).await;
        }
        self.inner.warm.lock().unwrap_or_else(|p| p.into_inner()).take(&lease.lane);
        let _ = self.inner.store.release_lease(lease).await;
    }

    /// The turn's reply, keyed by its turn: the outbox row's id and Discord's nonce come from it.
    fn reply_message(&self, room: &Room, owner: &str, text: &str) -> v1::OutboundMessage {
        let lane = room.lane;
        let key = format!("reply:{}", room.turn_id);
        // A reminder for its asker alone goes by DM: no reply in the room, no attachments.
        let (kind, reply_to) = match room.direct() {
            Some(_) => (v1::OutboundKind::Direct, None),
            // A reminder come due answers no Discord message: it posts plainly.
            None => (v1::OutboundKind::Reply, Some(room.answering()).filter(|m| *m != 0)),
        };
        v1::OutboundMessage {
            idempotency_key: key,
            kind: kind as i32,
            direct_user_id: room.direct().unwrap_or(0),
            guild_id: lane.guild(),
            channel_id: lane.channel(),
            reply_to_message_id: reply_to,
            text: room.with_notes(text),
            artifacts: room.artifacts(),
            lane: lane.to_string(),
            delivery_id: owner.to_owned(),
            ..Default::default()
        }
    }

    async fn typing(&self, lane: &LaneKey, delivery_id: &str, op: v1::TypingOp) {
        let action = v1::TypingAction {
            channel_id: lane.channel(),
            lane: lane.to_string(),
            delivery_id: delivery_id.to_owned(),
            op: op as i32,
            host: self.inner.config.replica.clone(),
            stamped_at_ms: now_ms(),
        };
        if let Err(e) = self.inner.bus.publish(&Subject::BodyTyping { channel: lane.channel() }, &action, None).await {
            tracing::warn!(%lane, error = %e, "typing action not published");
        }
    }

    async fn tool_card(&self, room: &Room, op: v1::ToolCardOp, tools: &[String], edit: u32) {
        let lane = room.lane;
        let step = match op {
            v1::ToolCardOp::Post => "post".to_owned(),
            v1::ToolCardOp::Edit => format!("edit:{edit}"),
            _ => "remove".to_owned(),
        };
        let key = format!("card:{}:{step}", room.turn_id);
        let card = v1::OutboundMessage {
            idempotency_key: key.clone(),
            kind: v1::OutboundKind::ToolCard as i32,
            guild_id: lane.guild(),
            channel_id: lane.channel(),
            reply_to_message_id: Some(room.answering()).filter(|m| *m != 0),
            lane: lane.to_string(),
            delivery_id: room.answering().to_string(),
            tool_card_op: op as i32,
            tool_names: tools.to_vec(),
            ..Default::default()
        };
        if let Err(e) = self.inner.bus.publish(&Subject::BodySend { channel: lane.channel() }, &card, Some(&MsgId::new(key))).await {
            tracing::warn!(%lane, error = %e, "tool card not published");
        }
    }

    async fn turn_receipt(&self, lane: &LaneKey, owner: &str, end: &TurnEnd, mode: TurnMode, held: std::time::Duration) {
        self.receipt("captain.turn", owner, lane, |r| {
            let r = r
                .with_id("turn", &end.turn_id)
                .with_code(if mode == TurnMode::Durable { "durable" } else { "one_shot" })
                .with_code(end.outcome.code())
                .with_count("model_calls", i64::from(end.model_calls))
                .with_count("input_tokens", end.input_tokens)
                .with_count("output_tokens", end.output_tokens)
                .with_count("cached_input_tokens", end.cached_input_tokens)
                .with_count("cache_write_input_tokens", end.cache_write_input_tokens)
                .with_count("reasoning_tokens", end.reasoning_tokens)
                .with_count("steer_count", i64::from(end.steer_count))
                .with_count("typing_hold_ms", held.as_millis() as i64)
                .with_flag("typing_lit", end.typing_lit);
            match end.failure_code {
                Some(c) => r.with_code(c.code()),
                None => r,
            }
        })
        .await;
    }

    pub(crate) async fn receipt(
        &self,
        kind: &'static str,
        delivery_id: &str,
        lane: &LaneKey,
        build: impl FnOnce(v1::Receipt) -> v1::Receipt,
    ) {
        let Ok(kind) = ReceiptKind::new(kind) else { return };
        let receipt = build(v1::Receipt::new(&kind, self.inner.bus.service(), delivery_id, now_ms()).with_lane(lane));
        if let Err(e) = self.inner.bus.publish_receipt(&receipt).await {
            tracing::warn!(error = %e, "receipt not published");
        }
    }
}

/// Marks a run live for as long as it is held; a draining replica waits for it.
struct Live<'a>(&'a std::sync::atomic::AtomicUsize);

impl<'a> Live<'a> {
    fn enter(counter: &'a std::sync::atomic::AtomicUsize) -> Live<'a> {
        counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Live(counter)
    }
}

impl Drop for Live<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Renews `lease` every third of its TTL until a renewal is fenced, which it reports on `fenced`.
/// A failed renewal (the database away) is tried again at the next tick.
async fn keep_lease(store: clankie_store::Store, lease: Lease, ttl: std::time::Duration, fenced: tokio::sync::watch::Sender<bool>) {
    let mut tick = tokio::time::interval(ttl / 3);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        match store.renew_lease(&lease, ttl).await {
            Ok(_) => {}
            Err(StoreError::Fenced { .. } | StoreError::UnknownLane(_)) => {
                let _ = fenced.send(true);
                return;
            }
            Err(e) => tracing::warn!(lane = %lease.lane, error = %e, "lease renewal failed"),
        }
    }
}

/// The event that tells the body (and any tap) a delivery's outcome.
fn outcome_event(lane: &LaneKey, outcome: &Outcome) -> v1::DeliveryOutcome {
    v1::DeliveryOutcome {
        delivery_id: outcome.delivery_id.clone(),
        lane: lane.to_string(),
        kind: outcome.kind as i32,
        failure_code: outcome.failure_code.map_or(0, |c| c as i32),
        turn_id: outcome.turn_id.clone().unwrap_or_default(),
        recorded_at_ms: now_ms(),
    }
}
