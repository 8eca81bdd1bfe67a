//! The console's process wiring, shared by `clankie console` and the embedded default.

use anyhow::{Context, Result, bail};
use clankie_settings::Settings;

use crate::state::Console;

/// Connects, declares the streams, migrates and starts a console from settings with `token`.
pub async fn start(settings: &Settings, token: String) -> Result<Console> {
    let bus = clankie_bus::Bus::connect(settings, "console").await?;
    bus.ensure_streams().await.context("declaring streams")?;
    let store = clankie_store::Store::connect(&settings.database_url).await.context("connecting to PostgreSQL")?;
    store.migrate().await.context("applying migrations")?;
    Console::from_settings(settings, token).await.context("starting the console")
}

/// Runs the console from `CLANKIE_*` settings until SIGTERM. Refuses to start without a token.
pub async fn run_from_env() -> Result<()> {
    // Installed first, so a stop that comes while the service is still starting is a clean one.
    let stopped = clankie_http::terminated();
    let settings = Settings::from_env().context("reading CLANKIE_* settings")?;
    let _traces = clankie_http::init_tracing(&settings.log, "console");
    clankie_http::announce_settings(&settings, clankie_settings::Service::Console);
    clankie_http::series::counters_at_zero(&[]);
    let Some(token) = settings.console_token.clone() else {
        bail!("CLANKIE_CONSOLE_TOKEN is not set; the console serves nobody without a token");
    };
    let console = start(&settings, token).await?;
    clankie_http::spawn_endpoints(
        settings.http_addr,
        clankie_http::Readiness { bus: console.bus().clone(), store: Some(console.store().clone()), parts: console.parts() },
    );
    let listener = tokio::net::TcpListener::bind(settings.console_addr())
        .await
        .with_context(|| format!("listening on CLANKIE_CONSOLE_ADDR {}", settings.console_addr()))?;
    tracing::info!(addr = %settings.console_addr(), "console serving");
    tokio::select! {
        served = console.serve(listener) => served.context("serving the console")?,
        () = stopped => tracing::info!("terminated; exiting"),
    }
    Ok(())
}
