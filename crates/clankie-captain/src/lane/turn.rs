//! One turn of a lane, in three stages that hand a small value on:
//!
//! - [`Captain::prepare`]: partition the burst by grant, open the session warm or cold, build
//!   the run's first messages (history, self-context, the burst with its pictures), record the
//!   turn's start, choose its tools and system prompt. Gives a [`Turn`] and its [`Start`].
//! - [`Captain::run_live`] (run): the agent run and its loop: typing, the tool card, steering and
//!   gathering what arrives meanwhile, the fence. Gives [`Ran`].
//! - [`Captain::settle`]: one outcome per delivery, committed with the reply in one fenced
//!   transaction, then published, acked, the session kept warm and the lane handed back.

use std::collections::HashSet;
use std::sync::Arc;

use clankie_agent::{AgentEvent, RunReply, RunResult, Session, Steerer, Tool, UserMessage};
use clankie_bus::now_ms;
use clankie_proto::v1;
use clankie_self::{Snapshot, Surface, experience, policy, rewrite};
use clankie_store::{Lease, OutboxRow, Outcome, Settlement, StoreError, TurnEnd, TurnMode, TurnStart};
use futures::FutureExt;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::{Opened, Presence, keep_lease, outcome_event, sleep_until_opt};
use crate::outbox::Outbox;
use crate::tools::{Browse, DescribeRuntime, ProposeMemory, ReadPage, Room, SendTextUpdate, SharePicture};
use crate::typing::{self, Answering};
use crate::{Captain, Held, Warm, prompt};

/// Who holds an elevated grant this turn: the deployment's grantees and the owner's.
struct Grants(HashSet<u64>);

impl Grants {
    fn of(config: &HashSet<u64>, snapshot: &Snapshot) -> Grants {
        Grants(config.iter().chain(snapshot.settings.grants.iter()).copied().collect())
    }

    fn has(&self, author: u64) -> bool {
        self.0.contains(&author)
    }
}

/// A prepared turn: what every later stage reads.
pub(super) struct Turn {
    lease: Lease,
    owner: Held,
    /// The burst's other deliveries, and those steered in later: each ends absorbed (or failed).
    absorbed: Vec<Held>,
    grants: Grants,
    /// Shares nothing with the room's social conversation: no warm session, no steering.
    apart: bool,
    mode: TurnMode,
    turn_id: String,
    room: Room,
    /// The delivery ids of the corrections steered into this run: a deletion of their message
    /// takes back those not yet read.
    corrections: Vec<String>,
    /// The Discord messages the conversation holds as the run starts, with the run's own: a
    /// message steered in later that replies to one of them points at it, not quoting it again.
    held_ids: std::collections::HashSet<u64>,
    /// The channels the owner admits (empty: every one): a link into another is not quoted.
    admitted_channels: Vec<u64>,
}

impl Turn {
    fn deliveries(self) -> impl Iterator<Item = Held> {
        std::iter::once(self.owner).chain(self.absorbed)
    }
}

/// What the run starts from.
pub(super) struct Start {
    session: Session,
    system: String,
    first: Vec<UserMessage>,
    tools: Vec<Arc<dyn Tool>>,
}

/// A run that ended on this replica, still holding the lane.
pub(super) struct Ran {
    turn: Turn,
    result: RunResult,
    presence: Presence,
    answering: Arc<Answering>,
}

/// The kind of a turn, from who asked and where.
struct Kind {
    privileged: bool,
    /// The room's durable system lane, for a grantee's request in a room the owner trusts.
    system_lane: bool,
    one_shot: bool,
    /// A grantee's work in this room stays out of its conversation, even as history.
    trusted: bool,
}

impl Kind {
    /// Shares nothing with the room's social conversation: no warm session, no steering.
    fn apart(&self) -> bool {
        self.one_shot || self.system_lane
    }
}

impl Captain {
    /// Runs one turn over the burst: prepare, run ([`Captain::run_live`]), settle. The lease is renewed on a task of
    /// its own throughout, so a slow picture, tool or store call cannot let it lapse; a fenced
    /// renewal ends the run at once.
    pub(super) async fn run_turn(
        &self,
        lease: Lease,
        burst: Vec<Held>,
        inbox: &mut mpsc::UnboundedReceiver<Held>,
        pending: &mut Vec<Held>,
    ) {
        use tracing::Instrument as _;
        // The turn joins the trace its first message began in; the rest of the burst link to it.
        let span = tracing::info_span!(
            "turn",
            otel.name = "captain.turn",
            delivery_id = burst.first().map_or("", |h| h.delivery_id()),
            lane = %lease.lane,
            deliveries = burst.len() as i64,
            gen_ai.conversation.id = %lease.lane,
        );
        if let Some(first) = burst.first() {
            first.trace.parent(&span);
        }
        for other in burst.iter().skip(1) {
            other.trace.link(&span);
        }
        async move {
            let (fence_tx, fence_rx) = watch::channel(false);
            let store = self.inner.store.clone();
            let _keeper = clankie_http::Aborting(tokio::spawn(keep_lease(store, lease.clone(), self.inner.config.lease_ttl, fence_tx)));
            let Some((turn, start)) = self.prepare(lease, burst, pending).instrument(tracing::info_span!("captain.prepare")).await else {
                return;
            };
            // Counts the run as live until its outcomes are recorded and the lease released.
            let _live = super::Live::enter(&self.inner.live);
            let Some(ran) = self.run_live(turn, start, inbox, pending, fence_rx).instrument(tracing::info_span!("captain.run")).await
            else {
                return;
            };
            self.settle(ran).instrument(tracing::info_span!("captain.settle")).await;
        }
        .instrument(span)
        .await
    }

    /// The first stage: everything the run needs, recorded as started. `None` when the
    /// deliveries were handed back (the shared self or the session unreadable, the start not
    /// recorded).
    async fn prepare(&self, lease: Lease, burst: Vec<Held>, pending: &mut Vec<Held>) -> Option<(Turn, Start)> {
        let (inner, config, lane) = (&self.inner, &self.inner.config, lease.lane);
        let mut burst = burst.into_iter();
        let owner = burst.next()?;
        let mut absorbed: Vec<Held> = burst.collect();
        if !config.one_shot {
            // What a dead run held may have been changed since: read as changed, or withdrawn.
            let mut gathered = self.gather(&lane, owner.delivery_id()).await;
            self.apply_stored_changes(&lease, &mut gathered).await;
            absorbed.extend(gathered);
        }
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
        let room = Room::new(lane, turn_id.clone(), newest.message_id());
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
        let privileged = grants.has(author);
        let (same, other): (Vec<Held>, Vec<Held>) = std::mem::take(absorbed)
            .into_iter()
            .partition(|h| if privileged { h.ingress.author_id == author } else { !grants.has(h.ingress.author_id) });
        *absorbed = same;
        pending.extend(other);
        // In a room the owner trusts, a privileged request goes on in the room's durable system
        // lane, apart from the social one. Elsewhere it runs one-shot so its grant dies with it;
        // the baseline mode runs every turn so.
        // A thread is trusted where its parent channel is.
        let trusted = policy::trusted_room(&snapshot.settings, &owner.lane)
            || policy::trusted_room(&snapshot.settings, &crate::home_lane_of(&owner.ingress));
        let system_lane = privileged && trusted && !config.one_shot;
        let one_shot = (privileged && !system_lane) || config.one_shot;
        Kind { privileged, system_lane, one_shot, trusted }
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
        if behind && !kind.system_lane {
            match self.inner.store.unsettled_admissions(&lane, self.inner.config.gather_window).await {
                Ok(rows) => carried.extend(rows.iter().filter_map(|(id, _)| id.parse::<u64>().ok())),
                Err(e) => tracing::warn!(%lane, error = %e, "unsettled admissions not readable for the history block"),
            }
        }
        // The operator's work in a trusted room stays out of the room's conversation, even as history.
        if behind
            && !kind.system_lane
            && let Some((block, lines)) =
                self.history_block(&owner.ingress, session.newest_delivery(), &carried, |a| kind.trusted && grants.has(a)).await
        {
            // A reply to one of these lines points at it: it is in the conversation from now.
            held_ids.extend(lines.iter().copied());
            first.push(UserMessage { lines, ..UserMessage::new(clankie_store::HISTORY_AUTHOR, "", block) });
        }
        // A thread's subject, when the lane walks in cold and its conversation does not hold it
        // as it stands (new, renamed, retagged, or compacted away).
        let ruled = if behind && !kind.system_lane && owner.ingress.thread.is_some() {
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
        if let Some(host) = &config.browser {
            tools.push(Arc::new(Browse::new(host.clone(), inner.bus.clone(), room.clone())));
        }
        if privileged {
            tools.push(Arc::new(DescribeRuntime { replica: config.replica.clone(), live_lanes: self.live_lanes() }));
        }
        tools
    }

    /// The second stage: the run and what happens around it until it ends. `None` when this
    /// replica no longer holds the lane (fenced) or the run task failed; the deliveries are
    /// then left for the new owner or handed back.
    async fn run_live(
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
                    } else if turn.apart || turn.grants.has(held.ingress.author_id) {
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
            AgentEvent::WordsComing if !presence.typing_lit => {
                presence.typing_lit = true;
                presence.card_due = None;
                self.typing(&lane, turn.owner.delivery_id(), v1::TypingOp::Start).await;
            }
            AgentEvent::SteerDelivered { delivery_id } => {
                if let Some(h) = turn.absorbed.iter().find(|h| h.delivery_id() == delivery_id) {
                    turn.room.capture(h.message_id());
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
                if !presence.typing_lit && !presence.card_posted && presence.card_due.is_none() {
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

    /// The third stage: one outcome per delivery, committed with the reply, the turn's end and
    /// the room's exchange in one fenced transaction; then published, acked, the session kept
    /// warm and the lease released.
    async fn settle(&self, ran: Ran) {
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
        metrics::counter!("clankie_captain_input_tokens_total").increment(result.stats.input_tokens);
        metrics::counter!("clankie_captain_output_tokens_total").increment(result.stats.output_tokens);
        metrics::counter!("clankie_captain_cached_input_tokens_total").increment(result.stats.cached_input_tokens);
        metrics::counter!("clankie_captain_cache_write_input_tokens_total").increment(result.stats.cache_write_input_tokens);
        metrics::counter!("clankie_captain_reasoning_tokens_total").increment(result.stats.reasoning_tokens);
        if code == Some(v1::FailureCode::CaptainTurnStalled) {
            metrics::counter!("clankie_captain_stalls_total").increment(1);
        }
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
        let end = TurnEnd {
            turn_id: turn.turn_id.clone(),
            outcome: owner_kind,
            failure_code: code,
            model_calls: result.stats.model_calls as i32,
            input_tokens: result.stats.input_tokens as i64,
            output_tokens: result.stats.output_tokens as i64,
            cached_input_tokens: result.stats.cached_input_tokens as i64,
            reasoning_tokens: result.stats.reasoning_tokens as i64,
            cache_write_input_tokens: result.stats.cache_write_input_tokens as i64,
            steer_count: result.stats.steered.len() as i32,
            typing_lit: presence.typing_lit,
        };
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
            let people: Vec<experience::Participant<'_>> = std::iter::once(&turn.owner)
                .chain(turn.absorbed.iter())
                .map(|h| experience::Participant { id: h.ingress.author_id, name: &h.ingress.author_name })
                .collect();
            let lived = experience::talked(&lane, &people, turn.owner.delivery_id(), now_ms());
            if let Err(e) = experience::publish(&inner.bus, &lived).await {
                tracing::warn!(%lane, error = %e, "experience not published");
            }
        }
        self.keep_warm(&turn, result.session);
        if let Err(e) = inner.store.release_lease(&turn.lease).await {
            tracing::warn!(%lane, error = %e, "lease not released; it will expire");
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

    /// Keeps the run's session for the lane's next turn on this replica (its pictures and what
    /// a summary replaced dropped).
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
