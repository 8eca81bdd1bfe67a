//! The operator console: one small web service, reading NATS and PostgreSQL, that shows a
//! person what every lane is doing and lets the owner talk with him.
//!
//! - [`Console::router`] serves the page and its JSON and server-sent-event routes; every
//!   route, the page included, wants the token ([`auth`]) and answers 401 without it.
//! - Lanes live and the tap are pushed from the bus ([`live`]).
//! - Trails, memory, the persona and owner settings with their versions, voice rooms and
//!   figures are read from the store ([`views`]).
//! - Console chat is the owner's own thread of the one self, `console:<owner>` ([`chat`]).

pub mod auth;
pub mod chat;
pub mod diff;
pub mod live;
pub mod service;
pub mod views;

use std::sync::Arc;

use axum::Router;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use clankie_agent::Agent;
use clankie_bus::Bus;
use clankie_self::SelfSource;
use clankie_store::Store;

/// Every route the console serves, for the manifests and the 401 test. `{id}` stands for a
/// path parameter.
pub const ROUTES: &[(&str, &str)] = &[
    ("GET", "/"),
    ("GET", "/api/lanes"),
    ("GET", "/api/lanes/events"),
    ("GET", "/api/tap"),
    ("GET", "/api/trail/{id}"),
    ("GET", "/api/memory"),
    ("POST", "/api/memory/{id}/approve"),
    ("POST", "/api/memory/{id}/reject"),
    ("POST", "/api/people/{id}/forget"),
    ("GET", "/api/persona"),
    ("PUT", "/api/persona"),
    ("GET", "/api/settings"),
    ("PUT", "/api/settings"),
    ("GET", "/api/voice"),
    ("GET", "/api/figures"),
    ("GET", "/api/config"),
    ("GET", "/api/chat"),
    ("POST", "/api/chat"),
];

/// Why a console request failed; the page shows the code.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    #[error("store: {0}")]
    Store(#[from] clankie_store::StoreError),
    #[error("bus: {0}")]
    Bus(#[from] clankie_bus::BusError),
    #[error("shared self: {0}")]
    Selfhood(#[from] clankie_self::SelfError),
    #[error("forget: {0}")]
    Forget(#[from] clankie_self::rewrite::ForgetError),
    #[error("console session: {0}")]
    Session(#[from] clankie_agent::AgentError),
    #[error("model: {0}")]
    Model(#[from] clankie_agent::ModelError),
    #[error("{0}")]
    BadRequest(String),
    #[error("not found")]
    NotFound,
    #[error("the console lane is busy; try again")]
    Busy,
}

impl ConsoleError {
    fn code(&self) -> &'static str {
        match self {
            ConsoleError::Store(_) => "store_unavailable",
            ConsoleError::Bus(_) => "bus_unavailable",
            ConsoleError::Selfhood(_) => "self_unavailable",
            ConsoleError::Forget(clankie_self::rewrite::ForgetError::Running) => "forget_running",
            ConsoleError::Forget(_) => "store_unavailable",
            ConsoleError::Session(_) => "session_unavailable",
            ConsoleError::Model(_) => "model_unconfigured",
            ConsoleError::BadRequest(_) => "bad_request",
            ConsoleError::NotFound => "not_found",
            ConsoleError::Busy => "lane_busy",
        }
    }
}

impl IntoResponse for ConsoleError {
    fn into_response(self) -> Response {
        let status = match self {
            ConsoleError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ConsoleError::NotFound => StatusCode::NOT_FOUND,
            ConsoleError::Busy | ConsoleError::Forget(clankie_self::rewrite::ForgetError::Running) => StatusCode::CONFLICT,
            _ => StatusCode::SERVICE_UNAVAILABLE,
        };
        // The detail of a store or bus failure stays in the log; the page gets the code.
        if status == StatusCode::SERVICE_UNAVAILABLE {
            tracing::warn!(error = %self, "console request failed");
        }
        let message = if status == StatusCode::SERVICE_UNAVAILABLE { self.code().to_owned() } else { self.to_string() };
        (status, axum::Json(serde_json::json!({ "error": self.code(), "message": message }))).into_response()
    }
}

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
    lanes: tokio::sync::broadcast::Sender<clankie_store::LaneView>,
    voice: live::VoiceState,
    /// Which of the console's parts are down, for readiness.
    parts: clankie_http::supervise::Parts,
    /// The bus followers, ended with the console (they hold it weakly).
    followers: std::sync::Mutex<Vec<clankie_http::Aborting>>,
}

/// The console's own settings.
#[derive(Clone)]
pub struct ConsoleConfig {
    /// The token every route wants.
    pub token: String,
    /// This replica's name, as lane leases record it.
    pub replica: String,
    /// The console lane's lease TTL.
    pub lease_ttl: std::time::Duration,
    /// The settings the console runs with, secrets masked, for its Config view.
    pub in_effect: Vec<clankie_settings::Effective>,
    /// The trace viewer's page for one trace (`CLANKIE_TRACE_URL`), which the trail links to.
    pub trace_url: Option<String>,
}

impl ConsoleConfig {
    /// The console's configuration from settings, with `token` (the caller decides where it comes from).
    pub fn from_settings(settings: &clankie_settings::Settings, token: String) -> ConsoleConfig {
        ConsoleConfig {
            token,
            replica: format!("console-{}", settings.replica_id),
            lease_ttl: settings.lane_lease_ttl,
            in_effect: settings.sources.effective(Some(clankie_settings::Service::Console)),
            trace_url: settings.trace_url.clone(),
        }
    }
}

impl Console {
    /// A console over `store` and `bus`; `agent` answers console chat and `selfhood` assembles its prompt.
    /// Starts the tasks that follow the bus (lane changes, voice members and floor decisions).
    pub async fn start(store: Store, bus: Bus, agent: Agent, selfhood: SelfSource, config: ConsoleConfig) -> Result<Console, ConsoleError> {
        let (lanes, _) = tokio::sync::broadcast::channel(1024);
        let voice = live::VoiceState::default();
        let console = Console {
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
                lanes,
                voice,
                parts: Default::default(),
                followers: Default::default(),
            }),
        };
        live::follow(console.clone()).await?;
        Ok(console)
    }

    /// A console from settings with `token`: its own bus and store connections, the configured
    /// model for console chat, and the shared self read from the same store.
    pub async fn from_settings(settings: &clankie_settings::Settings, token: String) -> Result<Console, ConsoleError> {
        let bus = Bus::connect(settings, "console").await?;
        let store = Store::connect(&settings.database_url).await?;
        let agent = Agent::new(clankie_agent::model_from_settings(settings)?, clankie_agent::config_from_settings(settings));
        let selfhood =
            SelfSource::new(store.clone(), Some(bus.clone()), &settings.bot_name, &settings.bot_aliases, settings.exchange_window);
        Console::start(store, bus, agent, selfhood, ConsoleConfig::from_settings(settings, token)).await
    }

    /// The console's supervised parts (its bus followers), for readiness.
    pub fn parts(&self) -> clankie_http::supervise::Parts {
        self.inner.parts.clone()
    }

    /// Every route, each behind the token.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/", get(|| async { Html(PAGE) }))
            .route("/api/lanes", get(views::lanes))
            .route("/api/lanes/events", get(live::lane_events))
            .route("/api/tap", get(live::tap))
            .route("/api/trail/{id}", get(views::trail_route))
            .route("/api/memory", get(views::memory))
            .route("/api/memory/{id}/approve", post(views::approve))
            .route("/api/memory/{id}/reject", post(views::reject))
            .route("/api/people/{id}/forget", post(views::forget_user))
            .route("/api/persona", get(views::persona).put(views::set_persona))
            .route("/api/settings", get(views::settings).put(views::set_settings))
            .route("/api/voice", get(views::voice))
            .route("/api/figures", get(views::figures))
            .route("/api/config", get(views::config))
            .route("/api/chat", get(chat::thread).post(chat::route))
            .fallback(|| async { (StatusCode::NOT_FOUND, "not found\n") })
            .layer(axum::middleware::from_fn_with_state(self.clone(), auth::require_token))
            .with_state(self.clone())
    }

    /// Serves the console on `listener` until the task is dropped.
    pub async fn serve(self, listener: tokio::net::TcpListener) -> std::io::Result<()> {
        axum::serve(listener, self.router()).await
    }
}

/// The page: every view, plain HTML and a little script.
const PAGE: &str = include_str!("console.html");
