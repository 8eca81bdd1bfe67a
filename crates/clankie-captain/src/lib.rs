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
mod consuming;
mod held;
mod intake;
mod lane;
pub mod outbox;
mod parts;
pub mod prompt;
mod registry;
mod remind_commands;
mod reminders;
pub mod service;
pub mod tools;
pub mod typing;
pub mod warm;
mod when;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use clankie_agent::{Agent, Session};
use clankie_bus::{Bus, BusError};
use clankie_proto::{LaneKey, v1};
use clankie_self::SelfSource;
use clankie_store::Store;
use tokio::sync::mpsc;

pub use config::{Bounds, CaptainConfig};
pub use held::Held;
pub use reminders::MAX_REMINDER_CHARS;

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

/// A captain replica. Cheap to clone.
#[derive(Clone)]
pub struct Captain {
    pub(crate) inner: Arc<Inner>,
}

/// The lane a text delivery belongs to.
pub fn lane_of(ingress: &v1::Ingress) -> LaneKey {
    lane_at(ingress.guild_id, ingress.channel_id)
}

/// The text lane of a place: a guild channel (a thread is a channel), or a DM with no guild.
pub fn lane_at(guild_id: Option<u64>, channel_id: u64) -> LaneKey {
    match guild_id {
        Some(guild) => LaneKey::Room { guild, channel: channel_id },
        None => LaneKey::Dm { channel: channel_id },
    }
}

/// The lane whose room settings (quiet) a delivery follows: a thread's parent channel's.
pub fn home_lane_of(ingress: &v1::Ingress) -> LaneKey {
    match ingress.guild_id {
        Some(guild) => LaneKey::Room { guild, channel: admission::home_channel(ingress) },
        None => LaneKey::Dm { channel: ingress.channel_id },
    }
}

/// The key a receipt is stored under once, as its row id: the time in nanoseconds the receipts
/// stream stored it. Every redelivery of it carries that time; its stream sequence alone would
/// repeat after the stream is deleted and made again, and a text key cost each receipt an index
/// of its own.
pub fn receipt_key(published_ns: i128) -> i64 {
    i64::try_from(published_ns).unwrap_or(i64::MAX)
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

    /// Whether the replica is shutting down.
    pub fn is_draining(&self) -> bool {
        self.inner.draining.load(Ordering::SeqCst)
    }
}
