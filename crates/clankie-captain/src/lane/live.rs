//! A turn's second stage, the run itself: the agent run and its loop (typing, the tool card,
//! steering and gathering what arrives meanwhile, the fence).
use std::sync::Arc;

use clankie_agent::{AgentEvent, Steerer, UserMessage};
use clankie_proto::v1;
use clankie_self::rewrite;
use clankie_store::TurnMode;
use futures::FutureExt;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::turn::*;
use super::{Presence, sleep_until_opt};
use crate::typing::{self, Answering};
use crate::{Captain, Held, prompt};

impl Captain {
    /// The second stage: the run and what happens around it until it ends. `None` when this
    /// replica no longer holds the lane (fenced) or the run task failed; the deliveries are
    /// then left for the new owner or handed back.
    pub(super) async fn run_live(
        &self,
        mut turn: Turn,
        start: Start,
        inbox: &mut mpsc::UnboundedReceiver<Held>,
        pending: &mut Vec<Held>,
        mut fence_rx: watch::Receiver<bool>,
    ) -> Option<Ran> {
        let config = &self.inner.config;
        let lane = turn.lease.lane;
        let answering = Arc::new(Answering::default());
        for h in std::iter::once(&turn.owner).chain(turn.absorbed.iter()) {
            answering.wrote(&h.ingress);
        }
        // The baseline mode is the old design, which never waited for anyone.
        let one_shot = turn.mode == TurnMode::OneShot;
        let hold = (!one_shot && !config.typing_hold.is_zero()).then(|| {
            let clock = self.inner.agent.clock();
            typing::hold(self.inner.typing_seen.clone(), answering.clone(), lane.channel(), config.typing_hold, clock).boxed()
        });
        let mut run = self.inner.agent.start_held(start.session, start.system, start.first, start.tools, hold);
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
                    self.on_event(event, &turn, &mut presence, &mut steer_sent).await;
                }
                Some(held) = inbox.recv() => {
                    if held.is_change() {
                        self.change_live(&mut turn, &steerer, held, pending).await;
                    } else if turn.apart || turn.grants.has(held.ingress.author_id) || held.is_direct_reminder() {
                        pending.push(held);
                    } else {
                        let id = held.delivery_id().to_owned();
                        if self.steer_in(held, &steerer, &answering, &mut turn.absorbed, pending, (&turn.held_ids, &turn.admitted_channels)).await {
                            steer_sent.push((id, Instant::now()));
                        }
                    }
                }
                _ = regather.tick(), if !turn.apart => self.regather(&mut turn, &steerer, &answering, pending).await,
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
                        self.tool_card(&turn.room, v1::ToolCardOp::Post, &presence.tools_seen, 0).await;
                    }
                }
            }
        }
        if fenced {
            // Another replica holds the lane now: this run stops at once. No model call, post or
            // outcome more from it: its deliveries go back to JetStream unacked, for the new owner.
            run.abort();
            self.stop_fenced(&turn.lease, turn.owner.delivery_id(), &turn.turn_id, &turn.room, &presence).await;
            return None;
        }
        let result = match run.finish().await {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(%lane, error = %e, "run task failed");
                let lease = turn.lease.clone();
                self.give_back(&lease, turn.deliveries()).await;
                return None;
            }
        };
        if presence.typing_lit {
            self.typing(&lane, turn.owner.delivery_id(), v1::TypingOp::Stop).await;
        }
        if presence.card_posted {
            self.tool_card(&turn.room, v1::ToolCardOp::Remove, &presence.tools_seen, 0).await;
        }
        Some(Ran { turn, result, presence, answering })
    }

    /// What one agent event shows the room: typing once words come, the tool card for a turn
    /// spent in tools, and the newest speaker captured when a steer lands.
    async fn on_event(&self, event: AgentEvent, turn: &Turn, presence: &mut Presence, steer_sent: &mut Vec<(String, Instant)>) {
        let lane = turn.lease.lane;
        match event {
            AgentEvent::WordsComing if !presence.typing_lit && turn.room.direct().is_none() => {
                presence.typing_lit = true;
                presence.card_due = None;
                self.typing(&lane, turn.owner.delivery_id(), v1::TypingOp::Start).await;
            }
            AgentEvent::SteerDelivered { delivery_id } => {
                if let Some(h) = turn.absorbed.iter().find(|h| h.delivery_id() == delivery_id) {
                    turn.room.capture(h.message_id());
                    turn.room.asked_by(h.ingress.author_id, &h.ingress.author_name);
                    // Off the run's loop: a slow or absent database must not hold up its events.
                    let (store, lease, author, message) =
                        (self.inner.store.clone(), turn.lease.clone(), h.ingress.author_id, h.message_id());
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
                        self.tool_card(&turn.room, v1::ToolCardOp::Edit, &presence.tools_seen, presence.card_edits).await;
                    }
                }
                if !presence.typing_lit && !presence.card_posted && presence.card_due.is_none() && turn.room.direct().is_none() {
                    presence.card_due = Some(Instant::now() + self.inner.config.tool_card_delay);
                }
            }
            _ => {}
        }
    }

    /// A change reaching the live run. A steered message deleted before the run read it is taken
    /// back and ends `withdrawn`; an edit of a message the run holds reaches it as a correction at
    /// its next boundary. Everything else, and the stored entry of an edited message, is settled
    /// after the run under the lease.
    async fn change_live(&self, turn: &mut Turn, steerer: &Steerer, change: Held, pending: &mut Vec<Held>) {
        if matches!(change.ingress.change(), v1::MessageChange::ThreadArchived | v1::MessageChange::ThreadDeleted) {
            // The thread's lane goes cold after this run, under the lease.
            pending.push(change);
            return;
        }
        let target = change.ingress.changed_message_id;
        let lane = turn.lease.lane;
        // Stored first: a copy of the message that reaches this run later (forwarded by another
        // replica), or the run's replacement after a crash, reads it as changed.
        if let Err(e) = self.store_change(&lane, &change).await {
            tracing::warn!(%lane, error = %e, "a change could not be stored; it is applied to this run only");
        }
        match change.ingress.change() {
            v1::MessageChange::Delete => {
                let unread_corrections =
                    turn.corrections.iter().filter(|id| rewrite::is_correction_of(id, target) && steerer.withdraw(id)).count();
                if unread_corrections > 0 {
                    self.receipt("captain.correction", change.delivery_id(), &lane, |r| {
                        r.with_id("message", target).with_id("turn", &turn.turn_id).with_flag("withdrawn", true)
                    })
                    .await;
                }
                let unread = turn.absorbed.iter().position(|h| h.message_id() == target);
                if let Some(at) = unread
                    && steerer.withdraw(turn.absorbed[at].delivery_id())
                {
                    let message = turn.absorbed.remove(at);
                    match self.withdraw(&turn.lease, &message).await {
                        // A dead run may have stored a copy of it: that goes too.
                        Ok(()) => return self.changed_waiting(&turn.lease, change).await,
                        Err(e) => {
                            tracing::warn!(%lane, error = %e, "a deleted message could not be withdrawn; it is answered");
                            if steerer.steer(self.user_message(&message, &turn.held_ids, &turn.admitted_channels).await).is_ok() {
                                turn.absorbed.push(message);
                            } else {
                                pending.push(message);
                            }
                        }
                    }
                }
            }
            v1::MessageChange::Edit => {
                let holds = std::iter::once(&turn.owner).chain(turn.absorbed.iter()).any(|h| h.message_id() == target);
                if holds && !turn.apart {
                    // The edit's own delivery id, which names the message it edits: a later edit,
                    // delete or forget of that message finds the correction too.
                    let correction =
                        UserMessage::new(change.ingress.author_name.clone(), change.delivery_id(), prompt::correction(&change.ingress));
                    let steered = steerer.steer(correction).is_ok();
                    if steered {
                        turn.corrections.push(change.delivery_id().to_owned());
                    }
                    self.receipt("captain.correction", change.delivery_id(), &lane, |r| {
                        r.with_id("message", target).with_id("turn", &turn.turn_id).with_flag("steered", steered)
                    })
                    .await;
                }
            }
            v1::MessageChange::None | v1::MessageChange::ThreadArchived | v1::MessageChange::ThreadDeleted => {}
        }
        pending.push(change);
    }

    /// Steers in what the lane admitted elsewhere meanwhile; a grantee's waits for a turn of its own.
    async fn regather(&self, turn: &mut Turn, steerer: &Steerer, answering: &Answering, pending: &mut Vec<Held>) {
        for held in self.gather(&turn.lease.lane, turn.owner.delivery_id()).await {
            if turn.grants.has(held.ingress.author_id) {
                pending.push(held);
            } else {
                self.steer_in(held, steerer, answering, &mut turn.absorbed, pending, (&turn.held_ids, &turn.admitted_channels)).await;
            }
        }
    }
}
