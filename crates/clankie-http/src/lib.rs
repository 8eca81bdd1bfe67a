//! The HTTP endpoints every service serves when `CLANKIE_HTTP_ADDR` is set:
//!
//! - `/healthz`: the process is up.
//! - `/readyz`: NATS is connected and every stream exists; PostgreSQL (for
//!   services that use it) answers and its migrations are current. 503 with
//!   the failing check named otherwise, so an orchestrator stops routing to a
//!   service that lost its bus and resumes once it is back, with no restart.
//! - `/metrics`: Prometheus text.
//!
//! [`supervise`] runs a service's long-lived parts, so a part that panics is restarted and
//! `/readyz` says which is down meanwhile.

pub mod series;
pub mod supervise;

pub use supervise::{Parts, supervise};

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// Every path the services serve; manifests' probes must name one of these.
pub const PATHS: &[&str] = &["/healthz", "/readyz", "/metrics"];

/// Installs the process-wide Prometheus recorder (once) and returns its handle.
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new().build_recorder();
            let handle = recorder.handle();
            // Another recorder already installed keeps working; ours then renders nothing.
            let _ = metrics::set_global_recorder(recorder);
            handle
        })
        .clone()
}

/// What readiness depends on.
#[derive(Clone)]
pub struct Readiness {
    pub bus: clankie_bus::Bus,
    pub store: Option<clankie_store::Store>,
    /// The supervised parts of the process: one that is down (between a panic and its
    /// restart) makes the service unready.
    pub parts: Parts,
}

impl Readiness {
    /// The first failing check, or `None` when ready.
    pub async fn check(&self) -> Option<&'static str> {
        if self.parts.fatal().is_some() {
            return Some("fatal");
        }
        if self.parts.first_down().is_some() {
            return Some("part_down");
        }
        if self.bus.client().connection_state() != clankie_bus::ConnectionState::Connected {
            return Some("nats_disconnected");
        }
        for stream in clankie_bus::STREAMS {
            let found = tokio::time::timeout(std::time::Duration::from_secs(2), self.bus.jetstream().get_stream_no_info(stream.name)).await;
            if !matches!(found, Ok(Ok(_))) {
                return Some("stream_missing");
            }
        }
        if let Some(store) = &self.store {
            match tokio::time::timeout(std::time::Duration::from_secs(2), store.is_current()).await {
                Ok(Ok(true)) => {}
                Ok(Ok(false)) => return Some("migrations_pending"),
                _ => return Some("postgres_unreachable"),
            }
        }
        None
    }
}

impl Readiness {
    /// Sets the gauges alerts read at each scrape: `clankie_ready` (what `/readyz` would
    /// answer) and `clankie_dependency_up` for NATS and, where the service keeps one, PostgreSQL.
    pub async fn record(&self) {
        let nats = self.bus.client().connection_state() == clankie_bus::ConnectionState::Connected;
        metrics::gauge!("clankie_dependency_up", "dependency" => "nats").set(if nats { 1.0 } else { 0.0 });
        if let Some(store) = &self.store {
            let reached = matches!(tokio::time::timeout(std::time::Duration::from_secs(2), store.is_current()).await, Ok(Ok(_)));
            metrics::gauge!("clankie_dependency_up", "dependency" => "postgres").set(if reached { 1.0 } else { 0.0 });
        }
        metrics::gauge!("clankie_ready").set(if self.check().await.is_none() { 1.0 } else { 0.0 });
    }
}

async fn ready(State(readiness): State<Arc<Readiness>>) -> (StatusCode, String) {
    match readiness.check().await {
        None => (StatusCode::OK, "ready\n".into()),
        Some("fatal") => {
            let why = readiness.parts.fatal().unwrap_or_default();
            (StatusCode::SERVICE_UNAVAILABLE, format!("unready: {why}\n"))
        }
        Some("part_down") => {
            let part = readiness.parts.first_down().unwrap_or("?");
            (StatusCode::SERVICE_UNAVAILABLE, format!("unready: part_down ({part})\n"))
        }
        Some(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("unready: {why}\n")),
    }
}

/// The routes, for serving or testing.
pub fn router(readiness: Readiness, metrics: PrometheusHandle) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .route(
            "/metrics",
            get(move |State(readiness): State<Arc<Readiness>>| async move {
                readiness.record().await;
                metrics.render()
            }),
        )
        .with_state(Arc::new(readiness))
}

/// Serves the endpoints on `addr` until the task is dropped.
pub async fn serve(addr: SocketAddr, readiness: Readiness) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "serving /healthz, /readyz and /metrics");
    axum::serve(listener, router(readiness, metrics_handle())).await
}

/// Serves on an already-bound listener (tests bind port 0 first).
pub async fn serve_on(listener: tokio::net::TcpListener, readiness: Readiness) -> std::io::Result<()> {
    axum::serve(listener, router(readiness, metrics_handle())).await
}

/// Logs to stderr with the service's `CLANKIE_LOG` filter, and exports the service's spans to
/// an OpenTelemetry collector when `OTEL_EXPORTER_OTLP_ENDPOINT` names one; every service's
/// `main` calls it first and holds what it returns until it exits.
pub fn init_tracing(filter: &str, service: &str) -> Traces {
    init_tracing_with(filter, service, tracing_subscriber::layer::Identity::new())
}

/// The exporter of a service's spans, if any: dropped as the service exits, it sends what is
/// still queued.
#[must_use = "spans are exported only while this is held"]
pub struct Traces {
    _telemetry: Option<clankie_trace::Telemetry>,
}

/// Says once, after logging starts, what the operator should hear about the settings (a
/// clamped value, a deprecated name) at warn, and every value `service` runs with and where it
/// came from at debug; secrets masked.
pub fn announce_settings(settings: &clankie_settings::Settings, service: clankie_settings::Service) {
    for notice in &settings.notices {
        tracing::warn!(service = service.name(), "{notice}");
    }
    for e in settings.sources.effective(Some(service)) {
        tracing::debug!(service = service.name(), setting = e.name, value = %e.value, origin = %e.origin, "setting in effect");
    }
}

/// Like [`init_tracing`], with `extra` beside the log layer: a layer with a filter of its own
/// (the voice body's drop counter reads songbird's debug lines whatever the log filter says).
pub fn init_tracing_with<L>(filter: &str, service: &str, extra: L) -> Traces
where
    L: tracing_subscriber::Layer<tracing_subscriber::Registry> + Send + Sync + 'static,
{
    install(filter, service, extra, None)
}

/// Like [`init_tracing`], exporting as `export` says whatever the environment holds: a test or
/// the bench that starts its own receiver.
pub fn init_tracing_to(filter: &str, service: &str, export: clankie_trace::Export) -> Traces {
    install(filter, service, tracing_subscriber::layer::Identity::new(), Some(export))
}

fn install<L>(filter: &str, service: &str, extra: L, export: Option<clankie_trace::Export>) -> Traces
where
    L: tracing_subscriber::Layer<tracing_subscriber::Registry> + Send + Sync + 'static,
{
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let env = tracing_subscriber::EnvFilter::try_new(filter).unwrap_or_else(|_| "info".into());
    let log = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_filter(env);
    let exporting = export.or_else(clankie_trace::Export::from_env).map(|export| clankie_trace::layer_to(service, export)).transpose();
    let (otel, telemetry, refused) = match exporting {
        Ok(Some((layer, telemetry))) => (Some(layer), Some(telemetry), None),
        Ok(None) => (None, None, None),
        Err(e) => (None, None, Some(e)),
    };
    // Another subscriber already set (a test process running several services) keeps logging.
    let _ = tracing_subscriber::registry().with(extra).with(otel).with(log).try_init();
    match (&telemetry, refused) {
        (Some(_), _) => {
            tracing::info!(service, endpoint = %clankie_settings::redact_url(&clankie_trace::endpoint().unwrap_or_default()), "exporting traces over OTLP")
        }
        (None, Some(e)) => tracing::warn!(service, error = %e, "traces are not exported; fix OTEL_EXPORTER_OTLP_ENDPOINT or unset it"),
        (None, None) => {}
    }
    Traces { _telemetry: telemetry }
}

/// Serves the endpoints in the background when an address is configured.
pub fn spawn_endpoints(addr: Option<SocketAddr>, readiness: Readiness) {
    let Some(addr) = addr else { return };
    tokio::spawn(async move {
        if let Err(e) = serve(addr, readiness).await {
            tracing::error!(%addr, error = %e, "HTTP endpoint failed");
        }
    });
}

/// Aborts a background task when the scope that started it ends: a service's side loops
/// (keepers, relays, publishers) live exactly as long as what needs them.
pub struct Aborting(pub tokio::task::JoinHandle<()>);

impl Drop for Aborting {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Resolves on SIGTERM (how orchestrators stop a container) or Ctrl-C.
///
/// The SIGTERM handler is installed when this is called, not when the future is first polled:
/// a service calls it before it opens its consumers, so a stop that arrives while it is still
/// starting is a clean shutdown, not the signal's default death. Call it inside the runtime.
pub fn terminated() -> impl std::future::Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    async move {
        #[cfg(unix)]
        {
            let Some(mut term) = term else {
                let _ = tokio::signal::ctrl_c().await;
                return;
            };
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM received"),
                _ = tokio::signal::ctrl_c() => tracing::info!("interrupted"),
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
