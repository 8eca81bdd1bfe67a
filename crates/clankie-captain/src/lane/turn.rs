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

use clankie_agent::{RunResult, Session, Tool, UserMessage};
use clankie_self::Snapshot;
use clankie_store::{Lease, TurnMode};
use tokio::sync::{mpsc, watch};

use super::{Presence, keep_lease};
use crate::tools::Room;
use crate::typing::Answering;
use crate::{Captain, Held};

/// Who holds an elevated grant this turn: the deployment's grantees and the owner's.
pub(super) struct Grants(pub(super) HashSet<u64>);

impl Grants {
    pub(super) fn of(config: &HashSet<u64>, snapshot: &Snapshot) -> Grants {
        Grants(config.iter().chain(snapshot.settings.grants.iter()).copied().collect())
    }

    pub(super) fn has(&self, author: u64) -> bool {
        self.0.contains(&author)
    }
}

/// A prepared turn: what every later stage reads.
pub(super) struct Turn {
    pub(super) lease: Lease,
    pub(super) owner: Held,
    /// The burst's other deliveries, and those steered in later: each ends absorbed (or failed).
    pub(super) absorbed: Vec<Held>,
    pub(super) grants: Grants,
    /// Shares nothing with the room's social conversation: no warm session, no steering.
    pub(super) apart: bool,
    pub(super) mode: TurnMode,
    pub(super) turn_id: String,
    pub(super) room: Room,
    /// The delivery ids of the corrections steered into this run: a deletion of their message
    /// takes back those not yet read.
    pub(super) corrections: Vec<String>,
    /// The Discord messages the conversation holds as the run starts, with the run's own: a
    /// message steered in later that replies to one of them points at it, not quoting it again.
    pub(super) held_ids: std::collections::HashSet<u64>,
    /// The channels the owner admits (empty: every one): a link into another is not quoted.
    pub(super) admitted_channels: Vec<u64>,
}

impl Turn {
    pub(super) fn deliveries(self) -> impl Iterator<Item = Held> {
        std::iter::once(self.owner).chain(self.absorbed)
    }
}

/// What the run starts from.
pub(super) struct Start {
    pub(super) session: Session,
    pub(super) system: String,
    pub(super) first: Vec<UserMessage>,
    pub(super) tools: Vec<Arc<dyn Tool>>,
}

/// A run that ended on this replica, still holding the lane.
pub(super) struct Ran {
    pub(super) turn: Turn,
    pub(super) result: RunResult,
    pub(super) presence: Presence,
    pub(super) answering: Arc<Answering>,
}

/// The kind of a turn, from who asked and where.
pub(super) struct Kind {
    pub(super) privileged: bool,
    /// The room's durable system lane, for a grantee's request in a room the owner trusts.
    pub(super) system_lane: bool,
    pub(super) one_shot: bool,
    /// A grantee's work in this room stays out of its conversation, even as history.
    pub(super) trusted: bool,
    /// A reminder that goes to its asker alone, by DM: run one-shot and alone, shown nothing of
    /// the room, so neither the room's words reach a DM nor the DM's the room's conversation.
    pub(super) direct: bool,
}

impl Kind {
    /// Shares nothing with the room's social conversation: no warm session, no steering.
    pub(super) fn apart(&self) -> bool {
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
}
