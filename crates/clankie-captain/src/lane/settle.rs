//! A turn's last stage: one outcome per delivery, committed with the reply in one fenced
//! transaction, then published, acked, the session kept warm and the lane handed back.

use clankie_agent::{RunReply, Session};
use clankie_bus::now_ms;
use clankie_proto::v1;
use clankie_self::experience;
use clankie_store::{OutboxRow, Outcome, Settlement, StoreError, TurnEnd};

use super::turn::*;
use super::{Presence, outcome_event};
use crate::outbox::Outbox;
use crate::tools::Room;
use crate::{Captain, Held, Warm};

impl Captain {
    /// The third stage: one outcome per delivery, committed with the reply, the turn's end and
    /// the room's exchange in one fenced transaction; then published, acked, the session kept
    /// warm and the lease released.
    pub(super) async fn settle(&self, ran: Ran) {
        let Ran { turn, result, presence, answering } = ran;
        let (inner, lane) = (&self.inner, turn.lease.lane);
        let reply = match result.outcome {
            Ok(reply) => reply,
            Err(e) => {
                // The lane was lost (fenced) or the store failed: another replica will answer.
                tracing::warn!(%lane, error = %e, "run ended without a recordable outcome; handing deliveries back");
                let lease = turn.lease.clone();
                self.give_back(&lease, turn.deliveries()).await;
                return;
            }
        };
        tracing::debug!(%lane, steered = result.stats.steered.len(), "run ended");
        let (owner_kind, code, post) = match &reply {
            RunReply::Words(text) => {
                let out = self.reply_message(&turn.room, turn.owner.delivery_id(), text);
                (v1::OutcomeKind::Replied, None, Some(Outbox::post(&turn.turn_id, &out)))
            }
            RunReply::Silent => (v1::OutcomeKind::Silent, None, None),
            RunReply::Failed(code) => (v1::OutcomeKind::Failed, Some(*code), None),
        };
        count_spent(&result.stats, code);
        let undelivered: Vec<&str> = result.undelivered.iter().map(|m| m.delivery_id.as_str()).collect();
        let mut settled = vec![(&turn.owner, owner_kind, code)];
        for h in &turn.absorbed {
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
                turn_id: Some(turn.turn_id.clone()),
                kind: *kind,
                failure_code: *code,
            })
            .collect();
        let end = turn_end(&turn.turn_id, owner_kind, code, &result.stats, &presence);
        clankie_settings::fault::point("captain.before_settle");
        // The reply, the outcomes, the turn's end and the room's exchange commit together or not at all.
        let exchange = refresh.then(|| settled.iter().map(|(h, _, _)| h).max_by_key(|h| h.message_id()).map_or("", |h| h.delivery_id()));
        let events: Vec<OutboxRow> = outcomes.iter().map(|o| Outbox::outcome(&turn.turn_id, lane, &outcome_event(&lane, o))).collect();
        let facts = turn.room.proposals();
        let asking = self.owner_ask(&facts, &turn.room).await;
        let answered = turn.owner.delivery_id().to_owned();
        let proposed_in = lane.to_string();
        // Every author the turn read: its deliveries' and those their messages carried.
        let read: Vec<u64> = settled
            .iter()
            .flat_map(|(h, _, _)| std::iter::once(h.ingress.author_id).chain(clankie_proto::words::carried_authors(&h.ingress)))
            .filter(|a| *a != 0)
            .collect();
        let drawn_from = turn.room.drawn_from(&read);
        let proposals = (!facts.is_empty()).then(|| clankie_store::Proposals {
            facts: &facts,
            drawn_from: &drawn_from,
            proposed_in: &proposed_in,
            proposed_for: &answered,
            ask: asking.as_ref().map(|a| a as &dyn clankie_store::AskOwner),
        });
        let settlement = Settlement { end: &end, outcomes: &outcomes, outcome_events: &events, exchange, post: post.as_ref(), proposals };
        let recorded = match inner.store.settle_turn(&turn.lease, &settlement).await {
            Ok(recorded) => recorded,
            Err(e) => return self.unsettled(turn, e).await,
        };
        clankie_settings::fault::point("captain.after_settle");
        let asked = asking.map(crate::commands::OwnerAsk::asked).unwrap_or_default();
        // The reply goes out before the outcome events the body reacts to, and the owner's DM after both.
        let committed = post.iter().chain(events.iter().zip(&recorded).filter(|(_, new)| **new).map(|(row, _)| row)).chain(asked.iter());
        for row in committed {
            if let Err(e) = inner.outbox.relay(row).await {
                tracing::warn!(%lane, outbox = %row.id, error = %e, "committed but not published yet; the outbox relay will publish it");
            }
        }
        self.turn_receipt(&lane, turn.owner.delivery_id(), &end, turn.mode, answering.held()).await;
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
            self.talked(&turn).await;
        }
        self.keep_warm(&turn, result.session);
        if let Err(e) = inner.store.release_lease(&turn.lease).await {
            tracing::warn!(%lane, error = %e, "lease not released; it will expire");
        }
    }

    /// The experience of a turn he answered: who he talked with, by id and name.
    async fn talked(&self, turn: &Turn) {
        let lane = turn.lease.lane;
        let people: Vec<experience::Participant<'_>> = std::iter::once(&turn.owner)
            .chain(turn.absorbed.iter())
            .map(|h| experience::Participant { id: h.ingress.author_id, name: &h.ingress.author_name })
            .collect();
        let lived = experience::talked(&lane, &people, turn.owner.delivery_id(), now_ms());
        if let Err(e) = experience::publish(&self.inner.bus, &lived).await {
            tracing::warn!(%lane, error = %e, "experience not published");
        }
    }

    /// Who is asked about this turn's proposals: the owner, when there are proposals, the
    /// memory DM is on and an owner is set.
    pub(crate) async fn owner_ask(&self, facts: &[String], room: &Room) -> Option<crate::commands::OwnerAsk> {
        let config = &self.inner.config;
        if facts.is_empty() || !config.memory_dm {
            return None;
        }
        let owner = match self.inner.store.owner_settings().await {
            Ok(s) => s.owner_id?,
            Err(e) => {
                tracing::warn!(lane = %room.lane, error = %e, "owner settings unreadable; the proposals are kept without a DM");
                return None;
            }
        };
        Some(crate::commands::OwnerAsk::new(owner, room.lane, room.turn_id.clone(), config.button_lifetime))
    }

    /// A settle transaction that did not commit: fenced (the new owner answers), settled
    /// elsewhere meanwhile (this answer would be a second one), or the store failed (the
    /// deliveries come back).
    async fn unsettled(&self, turn: Turn, error: StoreError) {
        let lane = turn.lease.lane;
        let lease = turn.lease.clone();
        match error {
            StoreError::Fenced { .. } => {
                self.stop_fenced(&lease, turn.owner.delivery_id(), &turn.turn_id, &turn.room, &Presence::default()).await;
            }
            StoreError::AlreadySettled(_) => {
                // What was settled is acked; the rest comes back for a turn of its own.
                tracing::warn!(%lane, "the turn's delivery was settled elsewhere; its answer is dropped");
                let mut rest: Vec<Held> = turn.deliveries().collect();
                if self.drop_settled(&lease, &mut rest).await {
                    self.give_back(&lease, rest.into_iter()).await;
                }
            }
            e => {
                tracing::warn!(%lane, error = %e, "turn not settled; nothing was posted and the deliveries will come back");
                self.give_back(&lease, turn.deliveries()).await;
            }
        }
    }

    /// Keeps the run's session for the lane's next turn on this replica (the bytes of pictures a
    /// compaction made stubs, and what a summary replaced, dropped).
    /// A turn apart never touched the social session, so the copy this replica holds of that
    /// stays current.
    fn keep_warm(&self, turn: &Turn, mut session: Session) {
        let mut warm = self.inner.warm.lock().unwrap_or_else(|p| p.into_inner());
        if !turn.apart {
            session.forget_pictures();
            session.let_go_of_summarised();
            let evicted = warm.put(turn.lease.lane, Warm { session, epoch: turn.lease.epoch });
            if evicted > 0 {
                metrics::counter!("clankie_captain_warm_evictions_total").increment(evicted as u64);
            }
        } else if let Some(social) = warm.get_mut(&turn.lease.lane)
            && social.epoch + 1 == turn.lease.epoch
        {
            social.epoch = turn.lease.epoch;
        }
    }
}

/// What the run spent, on the captain's counters; a stalled turn counted too.
fn count_spent(stats: &clankie_agent::RunStats, code: Option<v1::FailureCode>) {
    metrics::counter!("clankie_captain_input_tokens_total").increment(stats.input_tokens);
    metrics::counter!("clankie_captain_output_tokens_total").increment(stats.output_tokens);
    metrics::counter!("clankie_captain_cached_input_tokens_total").increment(stats.cached_input_tokens);
    metrics::counter!("clankie_captain_cache_write_input_tokens_total").increment(stats.cache_write_input_tokens);
    metrics::counter!("clankie_captain_reasoning_tokens_total").increment(stats.reasoning_tokens);
    if code == Some(v1::FailureCode::CaptainTurnStalled) {
        metrics::counter!("clankie_captain_stalls_total").increment(1);
    }
}

/// The turn's end as the store records it: its outcome and what the run spent.
fn turn_end(
    turn_id: &str,
    outcome: v1::OutcomeKind,
    failure_code: Option<v1::FailureCode>,
    stats: &clankie_agent::RunStats,
    presence: &Presence,
) -> TurnEnd {
    TurnEnd {
        turn_id: turn_id.to_owned(),
        outcome,
        failure_code,
        model_calls: stats.model_calls as i32,
        input_tokens: stats.input_tokens as i64,
        output_tokens: stats.output_tokens as i64,
        cached_input_tokens: stats.cached_input_tokens as i64,
        reasoning_tokens: stats.reasoning_tokens as i64,
        cache_write_input_tokens: stats.cache_write_input_tokens as i64,
        steer_count: stats.steered.len() as i32,
        typing_lit: presence.typing_lit,
    }
}
