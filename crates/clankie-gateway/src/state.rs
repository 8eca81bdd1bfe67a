//! A gateway replica's shared state and the cheap handle every part runs on: kept in a module
//! of its own, so the parts (shards, body, REST, typing) read it through methods and none of
//! them is imported back by it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use clankie_bus::Bus;

use crate::body::held::{self, HandBack, HandedBack};
use crate::config::GatewayConfig;
use crate::context::places::Places;
use crate::normalise::Arrivals;
use crate::rest::budget::RestBudget;
use crate::rest::client::RestClient;
use crate::typing::loops::TypingLoops;

/// Everything a replica's parts share, behind one `Arc`; read only through [`Gateway`]'s methods.
struct Inner {
    bus: Bus,
    /// Discord's REST client, rebuilt whole when its rate limiter's task panicked.
    http: Arc<RestClient>,
    config: GatewayConfig,
    /// The supervised parts of this replica (shards, REST work, voice): readiness reads them.
    parts: clankie_http::Parts,
    /// The bot's own user id, learned from READY.
    bot_id: AtomicU64,
    /// The live voice channel of each guild.
    voice: RwLock<HashMap<u64, clankie_proto::v1::VoiceSession>>,
    /// The shared bucket of tool cards on screen, opened on first use.
    cards: tokio::sync::OnceCell<clankie_bus::KeyValue>,
    /// The shared bucket of posted pieces per reply, opened on first use.
    posted: tokio::sync::OnceCell<clankie_bus::KeyValue>,
    typing: TypingLoops,
    /// The command sender of each shard this replica runs: op 4 goes out through its guild's.
    shard_senders: RwLock<HashMap<u32, twilight_gateway::MessageSender>>,
    /// Shards in all, once known.
    shard_total: AtomicU32,
    /// Flipped on shutdown: the shard closes with a resumable frame.
    stopping: tokio::sync::watch::Sender<bool>,
    /// Stamps messages and typing signals in the order they are handled.
    arrivals: Arrivals,
    /// Until when (wall clock, ms) this replica holds the REST lease; 0 while it does not.
    rest_until_ms: AtomicI64,
    /// Its recent REST requests: typing and reactions give way to replies.
    budget: Arc<RestBudget>,
    /// Outbound messages a dropped body held unsettled, naked in order when its tenure ends.
    hand_back: HandBack,
    handed_back: HandedBack,
    /// Channel facts and role names learned for messages' context.
    places: Places,
    /// Flipped once a shard has been identified (READY): from then on messages are heard.
    identified: tokio::sync::watch::Sender<bool>,
    /// Flipped once Discord answered `/gateway/bot` for the token: requests beyond it may follow.
    token_accepted: tokio::sync::watch::Sender<bool>,
}

/// A gateway replica. Cheap to clone.
#[derive(Clone)]
pub struct Gateway {
    inner: Arc<Inner>,
}

/// Gives rustls (used by twilight without a provider of its own here) the ring provider.
fn install_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

impl Gateway {
    /// A gateway over `bus` with the given configuration.
    pub fn new(bus: Bus, config: GatewayConfig) -> Gateway {
        install_tls_provider();
        let http = Arc::new(RestClient::new(&config));
        let budget = Arc::new(RestBudget::new(config.create_span));
        let typing = TypingLoops::new(bus.clone(), http.clone(), budget.clone(), &config);
        let (hand_back, handed_back) = held::hand_back();
        let places = Places::new(config.places_kept);
        Gateway {
            inner: Arc::new(Inner {
                bus,
                http,
                config,
                parts: clankie_http::Parts::default(),
                bot_id: AtomicU64::new(0),
                voice: RwLock::new(HashMap::new()),
                cards: tokio::sync::OnceCell::new(),
                posted: tokio::sync::OnceCell::new(),
                typing,
                shard_senders: RwLock::new(HashMap::new()),
                shard_total: AtomicU32::new(1),
                stopping: tokio::sync::watch::channel(false).0,
                arrivals: Arrivals::default(),
                rest_until_ms: AtomicI64::new(0),
                budget,
                hand_back,
                handed_back,
                places,
                identified: tokio::sync::watch::channel(false).0,
                token_accepted: tokio::sync::watch::channel(false).0,
            }),
        }
    }

    /// The bot's user id, once READY has arrived (0 before).
    pub fn bot_id(&self) -> u64 {
        self.inner.bot_id.load(Ordering::SeqCst)
    }

    /// Resolves once a shard of this replica has been identified, so a message sent from then
    /// on is heard; what a person is told to open waits for it.
    pub async fn identified(&self) {
        let mut identified = self.inner.identified.subscribe();
        let _ = identified.wait_for(|ready| *ready).await;
    }

    /// This replica's supervised parts, for its readiness and for tests.
    pub fn parts(&self) -> clankie_http::Parts {
        self.inner.parts.clone()
    }

    /// How often the REST client was rebuilt because its rate limiter had panicked.
    pub fn rest_clients_rebuilt(&self) -> u64 {
        self.inner.http.rebuilt()
    }

    /// The bus every part publishes to and consumes from.
    pub(crate) fn bus(&self) -> &Bus {
        &self.inner.bus
    }

    /// How this replica was configured; every part reads its own settings from it.
    pub(crate) fn config(&self) -> &GatewayConfig {
        &self.inner.config
    }

    /// Discord's REST client to make a request with now (a fresh one after a limiter panic).
    pub(crate) fn http(&self) -> Arc<twilight_http::Client> {
        self.inner.http.get()
    }

    /// The replaceable REST client itself, for the supervisor that rebuilds it.
    pub(crate) fn rest_client(&self) -> &RestClient {
        &self.inner.http
    }

    /// The supervised parts by reference: the supervisor registers them and a fatal refusal
    /// marks them, both on the one record readiness reads.
    pub(crate) fn supervised(&self) -> &clankie_http::Parts {
        &self.inner.parts
    }

    /// Learns the bot's own user id (from READY, or from REST on a resumed session).
    pub(crate) fn set_bot_id(&self, id: u64) {
        self.inner.bot_id.store(id, Ordering::SeqCst);
    }

    /// Says a shard was identified, so what waits on [`Gateway::identified`] goes on.
    pub(crate) fn mark_identified(&self) {
        self.inner.identified.send_replace(true);
    }

    /// Says Discord took the token, so requests that must not meet a refused one may follow.
    pub(crate) fn mark_token_accepted(&self) {
        self.inner.token_accepted.send_replace(true);
    }

    /// Watches whether Discord took the token: the invite check waits for it.
    pub(crate) fn token_accepted(&self) -> tokio::sync::watch::Receiver<bool> {
        self.inner.token_accepted.subscribe()
    }

    /// The shutdown flag: shards and the REST tenure watch it to hand over before they end.
    pub(crate) fn stopping(&self) -> &tokio::sync::watch::Sender<bool> {
        &self.inner.stopping
    }

    /// The live voice session of each guild, as the voice side last announced it: routing
    /// reads it, the voice-session consumer keeps it.
    pub(crate) fn voice_sessions(&self) -> &RwLock<HashMap<u64, clankie_proto::v1::VoiceSession>> {
        &self.inner.voice
    }

    /// The shared tool-card bucket, opened once on first use by the body.
    pub(crate) fn cards_bucket(&self) -> &tokio::sync::OnceCell<clankie_bus::KeyValue> {
        &self.inner.cards
    }

    /// The shared posted-pieces bucket, opened once on first use by the body.
    pub(crate) fn posted_bucket(&self) -> &tokio::sync::OnceCell<clankie_bus::KeyValue> {
        &self.inner.posted
    }

    /// This replica's typing loops: the REST holder runs them, a lost tenure stops them.
    pub(crate) fn typing(&self) -> &TypingLoops {
        &self.inner.typing
    }

    /// The command sender of each shard this replica runs, so op 4 reaches the guild's shard.
    pub(crate) fn shard_senders(&self) -> &RwLock<HashMap<u32, twilight_gateway::MessageSender>> {
        &self.inner.shard_senders
    }

    /// Shards in all, once known: a guild's shard is picked by it.
    pub(crate) fn shard_total(&self) -> &AtomicU32 {
        &self.inner.shard_total
    }

    /// The stamps that order messages and typing signals as they are handled.
    pub(crate) fn arrivals(&self) -> &Arrivals {
        &self.inner.arrivals
    }

    /// Until when (wall clock, ms) this replica holds the REST lease; the fence reads it.
    pub(crate) fn rest_until_ms(&self) -> &AtomicI64 {
        &self.inner.rest_until_ms
    }

    /// This replica's REST budget: every request takes its slot, typing and reactions give way.
    pub(crate) fn budget(&self) -> &RestBudget {
        &self.inner.budget
    }

    /// Where a dropped body's unsettled outbound messages go, for the body to hold them by.
    pub(crate) fn outbound_hand_back(&self) -> &HandBack {
        &self.inner.hand_back
    }

    /// What dropped bodies handed back, read when a tenure ends.
    pub(crate) fn outbound_handed_back(&self) -> &HandedBack {
        &self.inner.handed_back
    }

    /// The channel facts, roles and audience facts learned for messages' context.
    pub(crate) fn places(&self) -> &Places {
        &self.inner.places
    }
}
