//! A turn's first stage: the burst partitioned by grant, the session opened warm or cold,
//! the run's first messages built, the turn's start recorded, its tools and system prompt chosen.
use std::sync::Arc;

use clankie_agent::{Session, Tool, UserMessage};
use clankie_self::{Snapshot, Surface, policy};
use clankie_store::{Lease, TurnMode, TurnStart};

use super::Opened;
use super::turn::*;
use crate::tools::{Browse, DescribeRuntime, ProposeMemory, ReadPage, Remind, Room, SendTextUpdate, SharePicture};
use crate::{Captain, Held, prompt};

impl Captain {
    /// The first stage: everything the run needs, recorded as started. `None` when the
    /// deliveries were handed back (the shared self or the session unreadable, the start not
    /// recorded).
    pub(super) async fn prepare(&self, lease: Lease, burst: Vec<Held>, pending: &mut Vec<Held>) -> Option<(Turn, Start)> {
        let (inner, config, lane) = (&self.inner, &self.inner.config, lease.lane);
        let mut burst = burst.into_iter();
        let mut owner = burst.next()?;
        let mut absorbed: Vec<Held> = burst.collect();
        if !config.one_shot {
            // What a dead run held may have been changed since: read as changed, or withdrawn.
            let mut gathered = self.gather(&lane, owner.delivery_id()).await;
            self.apply_stored_changes(&lease, &mut gathered).await;
            absorbed.extend(gathered);
        }
        self.context_before_turn(std::iter::once(&mut owner).chain(absorbed.iter_mut())).await;
        // The shared self is read afresh for every turn: an edit reaches a warm lane without a restart.
        let snapshot = match inner.selfhood.snapshot(&lane).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(%lane, error = %e, "shared self unavailable; the deliveries will come back");
                self.give_back(&lease, std::iter::once(owner).chain(absorbed)).await;
                return None;
            }
        };
        let grants = Grants::of(&config.grants, &snapshot);
        let kind = self.kind_of(&grants, &snapshot, &owner, &mut absorbed, pending);
        let apart = kind.apart();
        let turn_id = format!("{lane}~{}~{}", lease.epoch, owner.delivery_id());
        let Some((session, opened)) = self.open_session(&lease, &owner, &kind).await else {
            self.give_back(&lease, std::iter::once(owner).chain(absorbed)).await;
            return None;
        };
        // Warm or cold is the stored tree's word, not this replica's memory: a lane whose tree
        // holds the room's conversation is warm on any replica and is sent only what it lacks.
        let cold = session.newest_delivery().is_none();
        let mut held_ids = session.message_ids();
        held_ids.extend(std::iter::once(&owner).chain(absorbed.iter()).map(Held::message_id));
        let first = self.first_messages(&lease, &owner, &absorbed, &session, opened, &kind, &grants, &snapshot, &mut held_ids).await;
        let newest = absorbed.iter().chain(std::iter::once(&owner)).max_by_key(|h| h.message_id()).unwrap_or(&owner);
        let mut room = Room::new(lane, turn_id.clone(), newest.message_id());
        room.asked_by(newest.ingress.author_id, &newest.ingress.author_name);
        if kind.direct {
            room = room.direct_to(owner.ingress.author_id);
        }
        let mode = if kind.one_shot { TurnMode::OneShot } else { TurnMode::Durable };
        let started = inner
            .store
            .start_turn(&lease, &TurnStart { turn_id: turn_id.clone(), mode, owner_delivery_id: owner.delivery_id().to_owned() })
            .await
            .and(inner.store.capture(&lease, newest.ingress.author_id, newest.message_id()).await);
        if let Err(e) = started {
            tracing::warn!(%lane, error = %e, "could not record the turn start");
            self.give_back(&lease, std::iter::once(owner).chain(absorbed)).await;
            return None;
        }
        self.receipt("captain.run", owner.delivery_id(), &lane, |r| {
            r.with_id("turn", &turn_id)
                .with_id("replica", &config.replica)
                .with_count("epoch", lease.epoch)
                .with_count("deliveries", 1 + absorbed.len() as i64)
                .with_flag("cold", cold)
                .with_flag("from_store", opened == Opened::Store)
                .with_count("refreshed_entries", if let Opened::Refreshed(n) = opened { n as i64 } else { 0 })
                .with_flag("system", kind.system_lane)
                .with_code(if kind.one_shot { "one_shot" } else { "durable" })
        })
        .await;
        let tools = self.tools_for(&lease, &room, kind.privileged);
        let surface = if kind.system_lane { Surface::System } else { Surface::Text { privileged: kind.privileged } };
        let system = clankie_self::assemble(&snapshot, &lane, surface);
        metrics::counter!("clankie_captain_turns_total", "mode" => if kind.one_shot { "one_shot" } else { "durable" }).increment(1);
        tracing::debug!(%lane, epoch = lease.epoch, cold, deliveries = 1 + absorbed.len(), "run starts");
        let turn = Turn {
            lease,
            owner,
            absorbed,
            grants,
            apart,
            mode,
            turn_id,
            room,
            corrections: Vec::new(),
            held_ids,
            admitted_channels: snapshot.settings.channels.clone(),
        };
        Some((turn, Start { session, system, first, tools }))
    }

    /// What kind of turn the owner's delivery starts. A privileged turn carries only the
    /// grantee's own deliveries, and an ordinary one none of a grantee's: whoever else spoke
    /// waits in `pending` for a turn of their own kind, so no grant is borrowed.
    fn kind_of(&self, grants: &Grants, snapshot: &Snapshot, owner: &Held, absorbed: &mut Vec<Held>, pending: &mut Vec<Held>) -> Kind {
        let config = &self.inner.config;
        let author = owner.ingress.author_id;
        let direct = owner.is_direct_reminder();
        let privileged = grants.has(author) && !direct;
        let (same, other): (Vec<Held>, Vec<Held>) = std::mem::take(absorbed).into_iter().partition(|h| {
            if direct || h.is_direct_reminder() {
                false
            } else if privileged {
                h.ingress.author_id == author
            } else {
                !grants.has(h.ingress.author_id)
            }
        });
        *absorbed = same;
        pending.extend(other);
        // In a room the owner trusts, a privileged request goes on in the room's durable system
        // lane, apart from the social one. Elsewhere it runs one-shot so its grant dies with it;
        // the baseline mode runs every turn so.
        // A thread is trusted where its parent channel is.
        let trusted = policy::trusted_room(&snapshot.settings, &owner.lane)
            || policy::trusted_room(&snapshot.settings, &crate::home_lane_of(&owner.ingress));
        let system_lane = privileged && trusted && !config.one_shot;
        let one_shot = (privileged && !system_lane) || config.one_shot || direct;
        Kind { privileged, system_lane, one_shot, trusted, direct }
    }

    /// The session the run goes on: this replica's warm copy, or the tree its kind names read
    /// from the store. `None` when it cannot be opened.
    async fn open_session(&self, lease: &Lease, owner: &Held, kind: &Kind) -> Option<(Session, Opened)> {
        let lane = lease.lane;
        if let Some(warm) = self.warm_session(lane, lease, kind.apart()).await {
            return Some(warm);
        }
        let tree = if kind.system_lane {
            format!("system:{lane}")
        } else if kind.one_shot {
            format!("turns/{lane}~{}", owner.delivery_id())
        } else {
            format!("rooms/{lane}")
        };
        match Session::open(self.inner.store.clone(), lease.clone(), tree).await {
            Ok(session) => Some((session, Opened::Store)),
            Err(e) => {
                tracing::error!(%lane, error = %e, "could not open the lane's session");
                None
            }
        }
    }

    /// The run's opening messages: the room's history when the session is behind it, the
    /// self-context note when it changed, then the burst oldest first with its pictures.
    #[allow(clippy::too_many_arguments)]
    async fn first_messages(
        &self,
        lease: &Lease,
        owner: &Held,
        absorbed: &[Held],
        session: &Session,
        opened: Opened,
        kind: &Kind,
        grants: &Grants,
        snapshot: &Snapshot,
        held_ids: &mut std::collections::HashSet<u64>,
    ) -> Vec<UserMessage> {
        let lane = lease.lane;
        let behind = opened != Opened::Memory;
        let mut first = Vec::new();
        // What reaches the model as messages of its own stays out of the history block: this run's
        // deliveries, and the lane's other admitted, unsettled ones, which come to it as steers.
        let mut carried: Vec<u64> = std::iter::once(owner).chain(absorbed.iter()).map(|h| h.message_id()).collect();
        if behind && !kind.system_lane && !kind.direct {
            match self.inner.store.unsettled_admissions(&lane, self.inner.config.gather_window).await {
                Ok(rows) => carried.extend(rows.iter().filter_map(|(id, _)| id.parse::<u64>().ok())),
                Err(e) => tracing::warn!(%lane, error = %e, "unsettled admissions not readable for the history block"),
            }
        }
        // The operator's work in a trusted room stays out of the room's conversation, even as history.
        if behind
            && !kind.system_lane
            && !kind.direct
            && let Some((block, lines)) =
                self.history_block(&owner.ingress, session.newest_delivery(), &carried, |a| kind.trusted && grants.has(a)).await
        {
            // A reply to one of these lines points at it: it is in the conversation from now.
            held_ids.extend(lines.iter().copied());
            first.push(UserMessage { lines, ..UserMessage::new(clankie_store::HISTORY_AUTHOR, "", block) });
        }
        // A thread's subject, when the lane walks in cold and its conversation does not hold it
        // as it stands (new, renamed, retagged, or compacted away).
        let ruled = if behind && !kind.system_lane && !kind.direct && owner.ingress.thread.is_some() {
            Some(self.ruled(&owner.ingress, &snapshot.settings.channels).await)
        } else {
            None
        };
        if let Some(ruled) = &ruled
            && let Some((block, lines)) = prompt::thread(ruled)
            && !session.entries().iter().any(|e| matches!(&e.body, clankie_agent::EntryBody::User { text, .. } if *text == block))
        {
            held_ids.extend(lines.iter().copied());
            first.push(UserMessage { lines, ..UserMessage::new(prompt::THREAD_AUTHOR, "", block) });
        }
        // Where else he is and what he lived elsewhere, just before the new input, and only when
        // it changed: the system prompt and the session before it stay one cacheable prefix.
        if let Some(context) = clankie_self::self_context_message(snapshot, &lane, session) {
            first.push(context);
        }
        // Oldest first, as the room saw them: gathered deliveries predate the one that started the run.
        let mut in_order: Vec<&Held> = std::iter::once(owner).chain(absorbed.iter()).collect();
        in_order.sort_by_key(|h| h.message_id());
        for h in in_order {
            first.push(self.user_message(h, held_ids, &snapshot.settings.channels).await);
        }
        first
    }

    /// The tools a turn in `room` may call; `describe_runtime` only for a privileged one.
    pub(crate) fn tools_for(&self, lease: &Lease, room: &Room, privileged: bool) -> Vec<Arc<dyn Tool>> {
        let (inner, config) = (&self.inner, &self.inner.config);
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
        tools.push(Arc::new(ProposeMemory { room: room.clone() }));
        tools.push(Arc::new(Remind { captain: self.clone(), room: room.clone() }));
        if let Some(host) = &config.browser {
            tools.push(Arc::new(Browse::new(host.clone(), inner.bus.clone(), room.clone())));
        }
        if privileged {
            tools.push(Arc::new(DescribeRuntime { replica: config.replica.clone(), live_lanes: self.live_lanes() }));
        }
        tools
    }
}
