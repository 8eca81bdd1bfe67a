//! One lane's life on this replica: take the lease, run the burst, steer what
//! arrives meanwhile, record one outcome per delivery, hand the lane back.

use std::sync::Arc;

use clankie_agent::{AgentEvent, RunReply, Session, Tool, UserMessage};
use clankie_bus::{MsgId, now_ms};
use clankie_proto::{LaneKey, ReceiptKind, Subject, v1};
use clankie_self::{Surface, experience, policy};
use clankie_store::{Lease, OutboxRow, Outcome, Settlement, StoreError, TurnEnd, TurnMode, TurnStart};
use futures::FutureExt;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::outbox::Outbox;
use crate::tools::{Browse, DescribeRuntime, ProposeMemory, ReadPage, Room, SendTextUpdate, SharePicture};
use crate::typing::{self, Answering};
use crate::{Captain, Held, Warm, prompt};

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
        let lease = self.inner.store.acquire_lease(&lane, &config.replica, config.lease_ttl).await;
        tracing::debug!(%lane, deliveries = burst.len(), took = matches!(lease, Ok(Some(_))), "lane burst");
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
    ) -> Option<String> {
        let config = &self.inner.config;
        if config.history_limit == 0 {
            return None;
        }
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
                reply.messages.retain(|m| !hidden(m.author_id) && !carried.contains(&m.message_id));
                let (block, left_out) = prompt::history(&reply.messages, config.bounds.history_chars);
                if left_out > 0 {
                    let lane = crate::lane_of(owner);
                    self.receipt("captain.bounded", &owner.delivery_id, &lane, |r| {
                        r.with_code("history_capped").with_count("left_out", left_out as i64)
                    })
                    .await;
                }
                block
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

    async fn run_turn(&self, lease: Lease, burst: Vec<Held>, inbox: &mut mpsc::UnboundedReceiver<Held>, pending: &mut Vec<Held>) {
        let inner = &self.inner;
        let config = &inner.config;
        let lane = lease.lane;
        // The lease is renewed on a task of its own from here on: a slow picture, tool or store
        // call in this run cannot let it lapse. A fenced renewal ends the run at once.
        let (fence_tx, mut fence_rx) = tokio::sync::watch::channel(false);
        let _keeper = clankie_http::Aborting(tokio::spawn(keep_lease(inner.store.clone(), lease.clone(), config.lease_ttl, fence_tx)));
        let mut burst = burst.into_iter();
        let Some(owner) = burst.next() else { return };
        let mut absorbed: Vec<Held> = burst.collect();
        if !config.one_shot {
            absorbed.extend(self.gather(&lane, owner.delivery_id()).await);
        }
        // The shared self is read afresh for every turn: an edit reaches a warm lane without a restart.
        let snapshot = match inner.selfhood.snapshot(&lane).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(%lane, error = %e, "shared self unavailable; the deliveries will come back");
                self.give_back(&lease, std::iter::once(owner).chain(absorbed)).await;
                return;
            }
        };
        let granted = |author: u64| config.grants.contains(&author) || snapshot.settings.grants.contains(&author);
        let author = owner.ingress.author_id;
        let privileged = granted(author);
        // A privileged turn carries only the grantee's own deliveries, and an ordinary one none of a
        // grantee's: whoever else spoke waits for a turn of their own kind, so no grant is borrowed.
        let (same, other): (Vec<Held>, Vec<Held>) = std::mem::take(&mut absorbed)
            .into_iter()
            .partition(|h| if privileged { h.ingress.author_id == author } else { !granted(h.ingress.author_id) });
        absorbed = same;
        pending.extend(other);
        // In a room the owner trusts, a privileged request goes on in the room's durable system
        // lane, apart from the social one. Elsewhere it runs one-shot so its grant dies with it;
        // the baseline mode runs every turn so.
        let trusted = policy::trusted_room(&snapshot.settings, &lane);
        let system_lane = privileged && trusted && !config.one_shot;
        let one_shot = (privileged && !system_lane) || config.one_shot;
        // A run that shares nothing with the room's social conversation: no warm session, no steering.
        let apart = one_shot || system_lane;
        let mode = if one_shot { TurnMode::OneShot } else { TurnMode::Durable };
        let turn_id = format!("{lane}~{}~{}", lease.epoch, owner.delivery_id());

        let warm = self.warm_session(lane, &lease, apart).await;
        let opened = warm.as_ref().map_or(Opened::Store, |(_, o)| *o);
        let session = match warm {
            Some((s, _)) => Ok(s),
            None => {
                let tree = if system_lane {
                    format!("system:{lane}")
                } else if one_shot {
                    format!("turns/{lane}~{}", owner.delivery_id())
                } else {
                    format!("rooms/{lane}")
                };
                Session::open(inner.store.clone(), lease.clone(), tree).await
            }
        };
        let session = match session {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(%lane, error = %e, "could not open the lane's session");
                self.give_back(&lease, std::iter::once(owner).chain(absorbed)).await;
                return;
            }
        };
        // Warm or cold is the stored tree's word, not this replica's memory: a lane whose tree
        // holds the room's conversation is warm on any replica and is sent only what it lacks.
        let cold = session.newest_delivery().is_none();
        let behind = opened != Opened::Memory;
        let mut first = Vec::new();
        // What reaches the model as messages of its own stays out of the history block: this run's
        // deliveries, and the lane's other admitted, unsettled ones, which come to it as steers.
        let mut carried: Vec<u64> = std::iter::once(&owner).chain(absorbed.iter()).map(|h| h.message_id()).collect();
        if behind && !system_lane {
            match inner.store.unsettled_admissions(&lane, config.gather_window).await {
                Ok(rows) => carried.extend(rows.iter().filter_map(|(id, _)| id.parse::<u64>().ok())),
                Err(e) => tracing::warn!(%lane, error = %e, "unsettled admissions not readable for the history block"),
            }
        }
        // The operator's work in a trusted room stays out of the room's conversation, even as history.
        if behind
            && !system_lane
            && let Some(block) = self.history_block(&owner.ingress, session.newest_delivery(), &carried, |a| trusted && granted(a)).await
        {
            first.push(UserMessage::new("channel history", "", block));
        }
        // Where else he is and what he lived elsewhere, just before the new input, and only when
        // it changed: the system prompt and the session before it stay one cacheable prefix.
        if let Some(context) = clankie_self::self_context_message(&snapshot, &lane, &session) {
            first.push(context);
        }
        // Oldest first, as the room saw them: gathered deliveries predate the one that started the run.
        let mut in_order: Vec<&Held> = std::iter::once(&owner).chain(absorbed.iter()).collect();
        in_order.sort_by_key(|h| h.message_id());
        for h in in_order {
            first.push(self.user_message(h).await);
        }
        let newest = absorbed.iter().chain(std::iter::once(&owner)).max_by_key(|h| h.message_id()).unwrap_or(&owner);
        let room = Room::new(lane, turn_id.clone(), newest.message_id());
        let started = inner
            .store
            .start_turn(&lease, &TurnStart { turn_id: turn_id.clone(), mode, owner_delivery_id: owner.delivery_id().to_owned() })
            .await
            .and(inner.store.capture(&lease, newest.ingress.author_id, newest.message_id()).await);
        if let Err(e) = started {
            tracing::warn!(%lane, error = %e, "could not record the turn start");
            self.give_back(&lease, std::iter::once(owner).chain(absorbed)).await;
            return;
        }
        self.receipt("captain.run", owner.delivery_id(), &lane, |r| {
            r.with_id("turn", &turn_id)
                .with_id("replica", &config.replica)
                .with_count("epoch", lease.epoch)
                .with_count("deliveries", 1 + absorbed.len() as i64)
                .with_flag("cold", cold)
                .with_flag("from_store", opened == Opened::Store)
                .with_count("refreshed_entries", if let Opened::Refreshed(n) = opened { n as i64 } else { 0 })
                .with_flag("system", system_lane)
                .with_code(if one_shot { "one_shot" } else { "durable" })
        })
        .await;

        let mut tools: Vec<Arc<dyn Tool>> = vec![
            Arc::new(SendTextUpdate::new(inner.bus.clone(), inner.outbox.clone(), inner.store.clone(), lease.clone(), room.clone())),
            Arc::new(ReadPage::new(config.egress.clone(), config.page_timeout, config.page_max_bytes)),
            Arc::new(SharePicture::new(
                inner.bus.clone(),
                room.clone(),
                config.egress.clone(),
                config.page_timeout,
                config.bounds.picture_bytes,
            )),
        ];
        tools.push(Arc::new(ProposeMemory { source: inner.selfhood.clone(), thread: lane }));
        if let Some(host) = &config.browser {
            tools.push(Arc::new(Browse::new(host.clone(), inner.bus.clone(), room.clone())));
        }
        if privileged {
            tools.push(Arc::new(DescribeRuntime { replica: config.replica.clone(), live_lanes: self.live_lanes() }));
        }
        let surface = if system_lane { Surface::System } else { Surface::Text { privileged } };
        let system = clankie_self::assemble(&snapshot, &lane, surface);
        metrics::counter!("clankie_captain_turns_total", "mode" => if one_shot { "one_shot" } else { "durable" }).increment(1);
        // Counts the run as live until this function returns: outcomes recorded, lease released.
        let _live = Live::enter(&inner.live);
        tracing::debug!(%lane, epoch = lease.epoch, cold, deliveries = 1 + absorbed.len(), "run starts");
        let answering = Arc::new(Answering::default());
        for h in std::iter::once(&owner).chain(absorbed.iter()) {
            answering.wrote(&h.ingress);
        }
        // The baseline mode is the old design, which never waited for anyone.
        let hold = (!one_shot && !config.typing_hold.is_zero()).then(|| {
            typing::hold(inner.typing_seen.clone(), answering.clone(), lane.channel(), config.typing_hold, inner.agent.clock()).boxed()
        });
        let mut run = inner.agent.start_held(session, system, first, tools, hold);
        let steerer = run.steerer();
        let mut events = run.take_events();
        let mut presence = Presence::default();
        let mut steer_sent: Vec<(String, Instant)> = Vec::new();
        let mut fenced = false;
        // Deliveries of this lane admitted elsewhere and bouncing between other replicas (their
        // forwarded steers) are gathered into the run too, so the burst gets one answer.
        let mut regather = tokio::time::interval(config.retry_delay() * 4);
        regather.tick().await;

        loop {
            let card_due = presence.card_due;
            tokio::select! {
                event = events.recv() => {
                    let Some(event) = event else { break };
                    match event {
                        AgentEvent::WordsComing if !presence.typing_lit => {
                            presence.typing_lit = true;
                            presence.card_due = None;
                            self.typing(&lane, owner.delivery_id(), v1::TypingOp::Start).await;
                        }
                        AgentEvent::SteerDelivered { delivery_id } => {
                            if let Some(h) = absorbed.iter().find(|h| h.delivery_id() == delivery_id) {
                                room.capture(h.message_id());
                                // Off the run's loop: a slow or absent database must not hold up its events.
                                let (store, lease, author, message) = (inner.store.clone(), lease.clone(), h.ingress.author_id, h.message_id());
                                tokio::spawn(async move {
                                    if let Err(e) = store.capture(&lease, author, message).await {
                                        tracing::warn!(lane = %lease.lane, error = %e, "could not re-capture the newest speaker");
                                    }
                                });
                            }
                            if let Some(pos) = steer_sent.iter().position(|(id, _)| *id == delivery_id) {
                                let (_, at) = steer_sent.swap_remove(pos);
                                metrics::histogram!("clankie_captain_steer_to_boundary_seconds").record(at.elapsed().as_secs_f64());
                            }
                        }
                        AgentEvent::ToolStart { name, activity, .. } => {
                            let label = activity.unwrap_or(name);
                            if !presence.tools_seen.contains(&label) {
                                presence.tools_seen.push(label);
                                if presence.card_posted {
                                    presence.card_edits += 1;
                                    let op = v1::ToolCardOp::Edit;
                                    self.tool_card(&room, op, &presence.tools_seen, presence.card_edits).await;
                                }
                            }
                            if !presence.typing_lit && !presence.card_posted && presence.card_due.is_none() {
                                presence.card_due = Some(Instant::now() + config.tool_card_delay);
                            }
                        }
                        _ => {}
                    }
                }
                Some(held) = inbox.recv() => {
                    if apart || granted(held.ingress.author_id) {
                        pending.push(held);
                    } else {
                        let id = held.delivery_id().to_owned();
                        if self.steer_in(held, &steerer, &answering, &mut absorbed, pending).await {
                            steer_sent.push((id, Instant::now()));
                        }
                    }
                }
                _ = regather.tick(), if !apart => {
                    for held in self.gather(&lane, owner.delivery_id()).await {
                        if granted(held.ingress.author_id) {
                            pending.push(held);
                        } else {
                            self.steer_in(held, &steerer, &answering, &mut absorbed, pending).await;
                        }
                    }
                }
                changed = fence_rx.changed() => {
                    // The keeper only ends by reporting a fence; a keeper gone is a lease no longer kept.
                    if changed.is_err() || *fence_rx.borrow() {
                        fenced = true;
                        break;
                    }
                }
                _ = sleep_until_opt(card_due) => {
                    presence.card_due = None;
                    if !presence.typing_lit && !presence.card_posted {
                        presence.card_posted = true;
                        self.tool_card(&room, v1::ToolCardOp::Post, &presence.tools_seen, 0).await;
                    }
                }
            }
        }
        if fenced {
            // Another replica holds the lane now: this run stops at once. No model call, post or
            // outcome more from it: its deliveries go back to JetStream unacked, for the new owner.
            run.abort();
            self.stop_fenced(&lease, owner.delivery_id(), &turn_id, &room, &presence).await;
            return;
        }
        let result = match run.finish().await {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(%lane, error = %e, "run task failed");
                self.give_back(&lease, std::iter::once(owner).chain(absorbed)).await;
                return;
            }
        };
        if presence.typing_lit {
            self.typing(&lane, owner.delivery_id(), v1::TypingOp::Stop).await;
        }
        if presence.card_posted {
            self.tool_card(&room, v1::ToolCardOp::Remove, &presence.tools_seen, 0).await;
        }
        let reply = match result.outcome {
            Ok(reply) => reply,
            Err(e) => {
                // The lane was lost (fenced) or the store failed: another replica will answer.
                tracing::warn!(%lane, error = %e, "run ended without a recordable outcome; handing deliveries back");
                self.give_back(&lease, std::iter::once(owner).chain(absorbed)).await;
                return;
            }
        };
        tracing::debug!(%lane, steered = result.stats.steered.len(), "run ended");
        let (owner_kind, code, post) = match &reply {
            RunReply::Words(text) => {
                let out = self.reply_message(&room, owner.delivery_id(), text);
                (v1::OutcomeKind::Replied, None, Some(Outbox::post(&turn_id, &out)))
            }
            RunReply::Silent => (v1::OutcomeKind::Silent, None, None),
            RunReply::Failed(code) => (v1::OutcomeKind::Failed, Some(*code), None),
        };
        metrics::counter!("clankie_captain_input_tokens_total").increment(result.stats.input_tokens);
        metrics::counter!("clankie_captain_output_tokens_total").increment(result.stats.output_tokens);
        if code == Some(v1::FailureCode::CaptainTurnStalled) {
            metrics::counter!("clankie_captain_stalls_total").increment(1);
        }
        let undelivered: Vec<&str> = result.undelivered.iter().map(|m| m.delivery_id.as_str()).collect();
        let mut settled = Vec::new();
        settled.push((&owner, owner_kind, code));
        for h in &absorbed {
            let kind = if code.is_some() || undelivered.contains(&h.delivery_id()) {
                (v1::OutcomeKind::Failed, Some(code.unwrap_or(v1::FailureCode::CaptainModelFailed)))
            } else {
                (v1::OutcomeKind::Absorbed, None)
            };
            settled.push((h, kind.0, kind.1));
        }
        let refresh = settled.iter().any(|(_, k, _)| matches!(k, v1::OutcomeKind::Replied | v1::OutcomeKind::Absorbed));
        let outcomes: Vec<Outcome> = settled
            .iter()
            .map(|(h, kind, code)| Outcome {
                delivery_id: h.delivery_id().to_owned(),
                turn_id: Some(turn_id.clone()),
                kind: *kind,
                failure_code: *code,
            })
            .collect();
        let end = TurnEnd {
            turn_id: turn_id.clone(),
            outcome: owner_kind,
            failure_code: code,
            model_calls: result.stats.model_calls as i32,
            input_tokens: result.stats.input_tokens as i64,
            output_tokens: result.stats.output_tokens as i64,
            steer_count: result.stats.steered.len() as i32,
            typing_lit: presence.typing_lit,
        };
        clankie_settings::fault::point("captain.before_settle");
        // The reply, the outcomes, the turn's end and the room's exchange commit together or not at all.
        let exchange = refresh.then(|| settled.iter().map(|(h, _, _)| h).max_by_key(|h| h.message_id()).map_or("", |h| h.delivery_id()));
        let events: Vec<OutboxRow> = outcomes.iter().map(|o| Outbox::outcome(&turn_id, lane, &outcome_event(&lane, o))).collect();
        let settlement = Settlement { end: &end, outcomes: &outcomes, outcome_events: &events, exchange, post: post.as_ref() };
        let recorded = match inner.store.settle_turn(&lease, &settlement).await {
            Ok(recorded) => recorded,
            Err(StoreError::Fenced { .. }) => {
                self.stop_fenced(&lease, owner.delivery_id(), &turn_id, &room, &Presence::default()).await;
                return;
            }
            Err(StoreError::AlreadySettled(_)) => {
                // Answered elsewhere meanwhile: this answer would be a second one. What was settled
                // is acked; the rest comes back for a turn of its own.
                tracing::warn!(%lane, "the turn's delivery was settled elsewhere; its answer is dropped");
                let mut rest: Vec<Held> = std::iter::once(owner).chain(absorbed).collect();
                if self.drop_settled(&lease, &mut rest).await {
                    self.give_back(&lease, rest.into_iter()).await;
                }
                return;
            }
            Err(e) => {
                tracing::warn!(%lane, error = %e, "turn not settled; nothing was posted and the deliveries will come back");
                self.give_back(&lease, std::iter::once(owner).chain(absorbed)).await;
                return;
            }
        };
        clankie_settings::fault::point("captain.after_settle");
        // The reply goes out before the outcome events the body reacts to.
        let committed = post.iter().chain(events.iter().zip(&recorded).filter(|(_, new)| **new).map(|(row, _)| row));
        for row in committed {
            if let Err(e) = inner.outbox.relay(row).await {
                tracing::warn!(%lane, outbox = %row.id, error = %e, "committed but not published yet; the outbox relay will publish it");
            }
        }
        self.turn_receipt(&lane, owner.delivery_id(), &end, mode, answering.held()).await;
        for (((held, _, _), outcome), new) in settled.iter().zip(&outcomes).zip(recorded) {
            if new {
                self.outcome_receipt(&lane, outcome, |r| r).await;
            }
            if let Err(e) = held.ack().await {
                tracing::warn!(delivery_id = held.delivery_id(), error = %e, "ack failed after the outcome was recorded");
            }
            tracing::debug!(delivery_id = held.delivery_id(), outcome = outcome.kind.code(), new, "settled");
        }
        if owner_kind == v1::OutcomeKind::Replied {
            let names: Vec<String> = std::iter::once(&owner).chain(absorbed.iter()).map(|h| h.ingress.author_name.clone()).collect();
            let lived = experience::talked(&lane, &names, owner.delivery_id(), now_ms());
            if let Err(e) = experience::publish(&inner.bus, &lived).await {
                tracing::warn!(%lane, error = %e, "experience not published");
            }
        }
        {
            let mut warm = inner.warm.lock().unwrap_or_else(|p| p.into_inner());
            if !apart {
                let mut session = result.session;
                session.forget_pictures();
                let evicted = warm.put(lane, Warm { session, epoch: lease.epoch });
                if evicted > 0 {
                    metrics::counter!("clankie_captain_warm_evictions_total").increment(evicted as u64);
                }
            } else if let Some(social) = warm.get_mut(&lane)
                && social.epoch + 1 == lease.epoch
            {
                // This replica held the lane for a turn apart, which never touched the social session:
                // what it holds is still current.
                social.epoch = lease.epoch;
            }
        }
        if let Err(e) = inner.store.release_lease(&lease).await {
            tracing::warn!(%lane, error = %e, "lease not released; it will expire");
        }
    }

    /// Steers `held` into the live run (it ends absorbed), or leaves it for a turn of its own
    /// when the run takes no more. Whether it was steered.
    async fn steer_in(
        &self,
        held: Held,
        steerer: &clankie_agent::Steerer,
        answering: &Answering,
        absorbed: &mut Vec<Held>,
        pending: &mut Vec<Held>,
    ) -> bool {
        match steerer.steer(self.user_message(&held).await) {
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
            let ingress = match inner.bus.stored::<v1::Ingress>(clankie_proto::Family::IngressText, seq).await {
                Ok(Some(i)) if i.delivery_id == delivery_id => i,
                Ok(_) => continue,
                Err(e) => {
                    tracing::warn!(%lane, error = %e, "an unsettled delivery could not be read back; it comes back on its own");
                    continue;
                }
            };
            if let Ok(held) = inner.in_hand.claim(Held::gathered(*lane, ingress)) {
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
        v1::OutboundMessage {
            idempotency_key: key,
            kind: v1::OutboundKind::Reply as i32,
            guild_id: lane.guild(),
            channel_id: lane.channel(),
            reply_to_message_id: Some(room.answering()),
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
            reply_to_message_id: Some(room.answering()),
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

impl Captain {
    /// A delivery as the model sees it: its attributed block, and its pictures fetched through media.
    async fn user_message(&self, h: &Held) -> UserMessage {
        let bound = self.inner.config.bounds.attachments_per_message;
        let pictures: Vec<&v1::Attachment> = h.ingress.attachments.iter().filter(|a| a.content_type.starts_with("image/")).collect();
        let shown = pictures.len().min(bound);
        if h.ingress.attachments.len() > bound {
            self.receipt("captain.bounded", h.delivery_id(), &h.lane, |r| {
                r.with_code("attachments_capped").with_count("attachments", h.ingress.attachments.len() as i64)
            })
            .await;
        }
        let mut message = UserMessage::new(h.ingress.author_name.clone(), h.delivery_id(), prompt::message(&h.ingress, shown));
        for a in pictures.into_iter().take(shown) {
            let request = v1::MediaAttachmentRequest { attachment: Some(a.clone()), delivery_id: h.delivery_id().to_owned() };
            match self
                .inner
                .bus
                .request::<_, v1::MediaResolveReply>(&Subject::RpcMediaAttachment, &request, self.inner.config.media_timeout)
                .await
            {
                Ok(reply) if reply.error.is_empty() && !(reply.data.is_empty() && reply.blob.is_empty()) => {
                    match self.inner.bus.bytes_of(reply.data, &reply.blob).await {
                        Ok(data) => {
                            use base64::Engine as _;
                            let encoded = base64::engine::general_purpose::STANDARD.encode(&data);
                            message.images.push(format!("data:{};base64,{encoded}", reply.content_type));
                        }
                        Err(e) => tracing::warn!(error = %e, "a big picture's blob could not be taken; the lane sees its name only"),
                    }
                }
                Ok(reply) => tracing::warn!(code = %reply.error, "a picture could not be fetched; the lane sees its name only"),
                Err(e) => tracing::warn!(error = %e, "media unreachable; the lane sees the picture's name only"),
            }
        }
        message
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
