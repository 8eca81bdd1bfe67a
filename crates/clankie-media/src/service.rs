//! The service's process wiring, shared by its own binary and `clankie media`: settings,
//! connections and endpoints are set up here so each `main` stays one line.

use crate::{Media, MediaConfig};
use anyhow::{Context, Result};
use clankie_settings::Settings;

/// Runs media from `CLANKIE_*` settings until SIGTERM.
pub async fn run_from_env() -> Result<()> {
    // Installed first, so a stop that comes while the service is still starting is a clean one.
    let stopped = clankie_http::terminated();
    let settings = Settings::from_env().context("reading CLANKIE_* settings")?;
    let _traces = clankie_http::init_tracing(&settings.log, "media");
    clankie_http::announce_settings(&settings, clankie_settings::Service::Media);
    clankie_http::series::counters_at_zero(&[]);
    let bus = clankie_bus::Bus::connect(&settings, "media").await?;
    bus.ensure_streams().await.context("declaring streams")?;
    clankie_http::spawn_endpoints(settings.http_addr, clankie_http::Readiness { bus: bus.clone(), store: None, parts: Default::default() });
    let media = Media::new(bus, &settings, MediaConfig::from_settings(&settings)).context("opening the attachment root")?;
    tracing::info!(root = %media.root().dir().display(), "media serving the attachment root");
    tokio::select! {
        result = media.run() => result.context("media stopped"),
        _ = stopped => Ok(()),
    }
}
