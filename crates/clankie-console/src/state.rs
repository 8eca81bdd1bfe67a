//! The console handle and what it holds: the store, the bus, the agent, its settings, the lane
//! broadcast and the voice view. Every route and follower reaches them through its methods, so
//! this file is the one place that knows their shape.

use std::sync::{Arc, Weak};

use clankie_agent::Agent;
use clankie_bus::Bus;
use clankie_self::SelfSource;
use clankie_store::Store;

use crate::config::ConsoleConfig;
use crate::voice::VoiceState;

/// What the console reads and writes through.
#[derive(Clone)]
pub struct Console {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    bus: Bus,
    agent: Agent,
    selfhood: SelfSource,
    token: String,
    replica: String,
    lease_ttl: std::time::Duration,
    in_effect: Vec<clankie_settings::Effective>,
    trace_url: Option<String>,
    prices: clankie_store::Prices,
    lanes: tokio::sync::broadcast::Sender<clankie_store::LaneView>,
    voice: VoiceState,
    /// Which of the console's parts are down, for readiness.
    parts: clankie_http::supervise::Parts,
    /// The bus followers, ended with the console (they hold it weakly).
    followers: std::sync::Mutex<Vec<clankie_http::Aborting>>,
}

/// A console held weakly, as its bus followers hold it, so they end when it is dropped.
#[derive(Clone)]
pub(crate) struct WeakConsole(Weak<Inner>);

impl WeakConsole {
    /// The console, while anyone else still holds it.
    pub(crate) fn upgrade(&self) -> Option<Console> {
        self.0.upgrade().map(|inner| Console { inner })
    }
}

impl Console {
    /// A console over `store` and `bus` with `config`, nothing followed yet: starting it is
    /// `Console::start`, which also follows the bus.
    pub(crate) fn new(store: Store, bus: Bus, agent: Agent, selfhood: SelfSource, config: ConsoleConfig) -> Console {
        let (lanes, _) = tokio::sync::broadcast::channel(1024);
        let voice = VoiceState::default();
        Console {
            inner: Arc::new(Inner {
                store,
                bus,
                agent,
                selfhood,
                token: config.token,
                replica: config.replica,
                lease_ttl: config.lease_ttl,
                in_effect: config.in_effect,
                trace_url: config.trace_url,
                prices: config.prices,
                lanes,
                voice,
                parts: Default::default(),
                followers: Default::default(),
            }),
        }
    }

    /// The console's supervised parts (its bus followers), for readiness.
    pub fn parts(&self) -> clankie_http::supervise::Parts {
        self.inner.parts.clone()
    }

    /// The store every view reads and every edit writes.
    pub(crate) fn store(&self) -> &Store {
        &self.inner.store
    }

    /// The bus the console follows, publishes receipts on and erases from.
    pub(crate) fn bus(&self) -> &Bus {
        &self.inner.bus
    }

    /// The agent that answers console chat.
    pub(crate) fn agent(&self) -> &Agent {
        &self.inner.agent
    }

    /// The shared self that assembles console chat's prompt.
    pub(crate) fn selfhood(&self) -> &SelfSource {
        &self.inner.selfhood
    }

    /// The token every route wants.
    pub(crate) fn token(&self) -> &str {
        &self.inner.token
    }

    /// This replica's name, as lane leases and durable consumers record it.
    pub(crate) fn replica(&self) -> &str {
        &self.inner.replica
    }

    /// The console lane's lease TTL.
    pub(crate) fn lease_ttl(&self) -> std::time::Duration {
        self.inner.lease_ttl
    }

    /// The settings the console runs with, secrets masked, for its Config view.
    pub(crate) fn in_effect(&self) -> &[clankie_settings::Effective] {
        &self.inner.in_effect
    }

    /// The trace viewer's page for one trace, which the trail links to.
    pub(crate) fn trace_url(&self) -> Option<&str> {
        self.inner.trace_url.as_deref()
    }

    /// The prices the Usage view's bill is reckoned at.
    pub(crate) fn prices(&self) -> &clankie_store::Prices {
        &self.inner.prices
    }

    /// Lane changes, sent by the receipts follower to every open lanes page.
    pub(crate) fn lanes(&self) -> &tokio::sync::broadcast::Sender<clankie_store::LaneView> {
        &self.inner.lanes
    }

    /// Voice rooms as the bus told them, for the voice view.
    pub(crate) fn voice(&self) -> &VoiceState {
        &self.inner.voice
    }

    /// The console held weakly, for a follower that must not keep it alive.
    pub(crate) fn downgrade(&self) -> WeakConsole {
        WeakConsole(Arc::downgrade(&self.inner))
    }

    /// Keeps `followers` until the console is dropped, which ends them.
    pub(crate) fn keep_followers(&self, followers: impl IntoIterator<Item = clankie_http::Aborting>) {
        self.inner.followers.lock().unwrap_or_else(|p| p.into_inner()).extend(followers);
    }
}
