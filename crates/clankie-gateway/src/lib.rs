//! The gateway: Discord's side of Clankie.
//!
//! - **Shards**: replicas share the shards by lease ([`leases`]), each running its fair
//!   share and handing them over, session and all, on shutdown or when it dies.
//! - **Ingest**: a twilight shard reads MESSAGE_CREATE, [`normalise`]s it and
//!   publishes it with `Nats-Msg-Id = discord:message:<id>`, so resume
//!   replays and duplicate gateways yield one ingress. Text typed into the
//!   chat of the guild's live voice channel goes to the voice room instead.
//! - **Body**: posts what the captain asks (replies split at 2000 characters,
//!   Discord's `nonce` with `enforce_nonce` from the idempotency key), keeps
//!   the typing indicator alive, manages the tool card, answers history
//!   requests for cold lanes, and (in the sandbox) shows outcomes as reactions.
//! - **REST**: one replica at a time speaks Discord's REST API, the one holding the REST
//!   lease ([`rest`]): posting, typing, reactions and history all run there, so one
//!   twilight rate limiter sees every request the bot makes.
//! - **Voice**: voice states and voice server updates of admitted guilds are
//!   forwarded as events; join and leave commands become op 4 on the shard.

mod body;
pub mod commands;
mod context;
pub mod doctor;
pub mod invite;
pub mod leases;
pub mod normalise;
mod rest;
pub mod service;
pub mod session;
mod shard;
mod typing;
mod voice;

pub use context::GATHER_PATIENCE;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use clankie_bus::{Bus, BusError};
use clankie_settings::Settings;

/// Why the gateway stopped.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error(transparent)]
    Bus(#[from] BusError),
    #[error("the Discord shard ended: {0}")]
    Shard(String),
}

impl GatewayError {
    /// Whether starting again cannot mend it: the settings ask for what the bus holds otherwise.
    pub fn is_setup_fault(&self) -> bool {
        matches!(self, GatewayError::Bus(BusError::ConsumerFixed { .. } | BusError::Subject(_)))
    }
}

/// How the gateway connects and behaves.
#[derive(Clone)]
pub struct GatewayConfig {
    pub token: String,
    /// host:port of a REST stand-in spoken to over HTTP.
    pub api: Option<String>,
    /// Gateway WebSocket URL override.
    pub gateway_url: Option<String>,
    /// Admitted guilds; empty for all.
    pub guilds: Vec<u64>,
    pub outcome_reactions: bool,
    pub typing_interval: Duration,
    /// The longest a typing loop runs without a stop (a backstop for a captain that died).
    pub typing_max: Duration,
    /// Where shard session state is saved so a restart resumes.
    pub state_dir: PathBuf,
    pub history_limit: u32,
    /// Discord messages one reply may take (`CLANKIE_REPLY_MAX_PIECES`).
    pub reply_max_pieces: usize,
    /// This replica's name (`CLANKIE_REPLICA_ID`): its own consumers are named by it, never by pid.
    pub replica: String,
    /// How long an ingress publish may wait for JetStream before the shard gives the message
    /// back (closes and resumes from before it).
    pub publish_patience: Duration,
    /// Shards in all (`CLANKIE_DISCORD_SHARDS`); 0 asks Discord.
    pub shards: u32,
    /// How long a claim on a shard lasts unrenewed.
    pub shard_lease_ttl: Duration,
    /// How long the REST ownership lasts unrenewed.
    pub rest_lease_ttl: Duration,
    /// The span in which a channel takes 5 creates: Discord's [`body::CREATE_SPAN`]; a stand-in
    /// with a shorter message-create window sets its own.
    pub create_span: Duration,
    /// How many messages of a reply chain a message is shown with: the one it replies to and
    /// those above it (`CLANKIE_REPLY_CHAIN_DEPTH`).
    pub reply_chain_depth: usize,
}

impl std::fmt::Debug for GatewayConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayConfig")
            .field("api", &self.api)
            .field("gateway_url", &self.gateway_url)
            .field("guilds", &self.guilds)
            .finish()
    }
}

impl GatewayConfig {
    /// The gateway's configuration from settings.
    pub fn from_settings(settings: &Settings) -> GatewayConfig {
        GatewayConfig {
            token: settings.discord_token.clone(),
            api: settings.discord_api.clone(),
            gateway_url: settings.discord_gateway_url.clone(),
            guilds: settings.discord_guilds.clone(),
            outcome_reactions: settings.outcome_reactions,
            typing_interval: settings.typing_interval,
            typing_max: settings.stall_silence + Duration::from_secs(60),
            state_dir: settings.state_root.join("gateway"),
            history_limit: settings.history_limit,
            reply_max_pieces: settings.reply_max_pieces,
            replica: settings.replica_id.clone(),
            publish_patience: settings.gateway_publish_patience,
            shards: settings.discord_shards,
            shard_lease_ttl: settings.shard_lease_ttl,
            rest_lease_ttl: settings.rest_lease_ttl,
            create_span: body::CREATE_SPAN,
            reply_chain_depth: settings.reply_chain_depth,
        }
    }
}

pub(crate) struct Inner {
    pub bus: Bus,
    /// Discord's REST client, rebuilt whole when its rate limiter's task panicked.
    pub http: Arc<rest::RestClient>,
    pub config: GatewayConfig,
    /// The supervised parts of this replica (shards, REST work, voice): readiness reads them.
    pub parts: clankie_http::Parts,
    /// The bot's own user id, learned from READY.
    pub bot_id: AtomicU64,
    /// The live voice channel of each guild.
    pub voice: RwLock<HashMap<u64, clankie_proto::v1::VoiceSession>>,
    /// The shared bucket of tool cards on screen, opened on first use.
    pub cards: tokio::sync::OnceCell<clankie_bus::KeyValue>,
    /// The shared bucket of posted pieces per reply, opened on first use.
    pub posted: tokio::sync::OnceCell<clankie_bus::KeyValue>,
    pub typing: typing::TypingLoops,
    /// The command sender of each shard this replica runs: op 4 goes out through its guild's.
    pub shard_senders: RwLock<HashMap<u32, twilight_gateway::MessageSender>>,
    /// Shards in all, once known.
    pub shard_total: std::sync::atomic::AtomicU32,
    /// Flipped on shutdown: the shard closes with a resumable frame.
    pub stopping: tokio::sync::watch::Sender<bool>,
    /// Stamps messages and typing signals in the order they are handled.
    pub arrivals: normalise::Arrivals,
    /// Until when (wall clock, ms) this replica holds the REST lease; 0 while it does not.
    pub rest_until_ms: AtomicI64,
    /// Its recent REST requests: typing and reactions give way to replies.
    pub budget: Arc<rest::RestBudget>,
    /// Outbound messages a dropped body held unsettled, naked in order when its tenure ends.
    pub hand_back: body::HandBack,
    pub handed_back: body::HandedBack,
    /// Channel facts and role names learned for messages' context.
    pub places: context::Places,
    /// Flipped once a shard has been identified (READY): from then on messages are heard.
    pub identified: tokio::sync::watch::Sender<bool>,
    /// Flipped once Discord answered `/gateway/bot` for the token: requests beyond it may follow.
    pub token_accepted: tokio::sync::watch::Sender<bool>,
}

/// A gateway replica. Cheap to clone.
#[derive(Clone)]
pub struct Gateway {
    pub(crate) inner: Arc<Inner>,
}

/// Gives rustls (used by twilight without a provider of its own here) the ring provider.
fn install_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

impl Gateway {
    /// A gateway over `bus` with the given configuration.
    pub fn new(bus: Bus, config: GatewayConfig) -> Gateway {
        install_tls_provider();
        let http = Arc::new(rest::RestClient::new(&config));
        let budget = Arc::new(rest::RestBudget::new(config.create_span));
        let typing = typing::TypingLoops::new(bus.clone(), http.clone(), budget.clone(), &config);
        let (hand_back, handed_back) = body::hand_back();
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
                shard_total: std::sync::atomic::AtomicU32::new(1),
                stopping: tokio::sync::watch::channel(false).0,
                arrivals: normalise::Arrivals::default(),
                rest_until_ms: AtomicI64::new(0),
                budget,
                hand_back,
                handed_back,
                places: context::Places::default(),
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

    /// Runs until `shutdown`, then closes each shard for resume and hands its claim back with
    /// the session, so another replica (or this one restarted) resumes it; consumers stop
    /// with the process.
    pub async fn run_until(&self, shutdown: impl std::future::Future<Output = ()>) -> Result<(), GatewayError> {
        let run = self.run();
        tokio::pin!(run);
        tokio::select! {
            r = &mut run => return r,
            _ = shutdown => {}
        }
        let _ = self.inner.stopping.send(true);
        // Let the shards close and be handed back; that ends the run.
        let _ = tokio::time::timeout(Duration::from_secs(10), run).await;
        Ok(())
    }

    /// Runs ingest and body until one of them fails. Each is supervised: a panic restarts
    /// that part alone, so a fault in posting never stops the shards' ingest.
    pub async fn run(&self) -> Result<(), GatewayError> {
        let parts = &self.inner.parts;
        let rest = clankie_http::supervise("gateway.rest", parts, |p| self.after_rest_panic(p), || self.run_rest());
        let ingest = async {
            tokio::select! {
                r = clankie_http::supervise("gateway.shards", parts, |p| self.after_rest_panic(p), || self.run_shards()) => r,
                r = clankie_http::supervise("gateway.voice_sessions", parts, |_| {}, || self.run_voice_sessions()) => r,
                r = clankie_http::supervise("gateway.voice_commands", parts, |_| {}, || self.run_voice_commands()) => r,
                r = clankie_http::supervise("gateway.audience", parts, |_| {}, || self.run_audience()) => r,
            }
        };
        tokio::pin!(rest, ingest);
        // Stopping, each half finishes its hand-over (the shards their sessions, the REST
        // tenure its held messages and the lease) before the other is dropped.
        let stopping = || *self.inner.stopping.borrow();
        tokio::select! {
            r = &mut rest => {
                if stopping() {
                    let _ = tokio::time::timeout(Duration::from_secs(10), &mut ingest).await;
                }
                r
            }
            r = &mut ingest => {
                if stopping() {
                    let _ = tokio::time::timeout(Duration::from_secs(5), &mut rest).await;
                }
                r
            }
        }
    }

    /// This replica's supervised parts, for its readiness and for tests.
    pub fn parts(&self) -> clankie_http::Parts {
        self.inner.parts.clone()
    }

    /// How often the REST client was rebuilt because its rate limiter had panicked.
    pub fn rest_clients_rebuilt(&self) -> u64 {
        self.inner.http.rebuilt()
    }

    /// A REST part panicked: if twilight's limiter task died, every later request would panic
    /// too, so the client is replaced before the part starts again.
    pub(crate) fn after_rest_panic(&self, payload: &(dyn std::any::Any + Send)) {
        let text = payload.downcast_ref::<String>().map(String::as_str).or_else(|| payload.downcast_ref::<&str>().copied());
        if text.is_some_and(|t| t.contains(rest::LIMITER_PANICKED)) {
            self.inner.http.rebuild();
        }
    }
}
