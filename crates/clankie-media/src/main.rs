//! `clankie-media`: wires settings and the bus, then runs media.

use anyhow::{Context, Result};
use clankie_media::{Media, MediaConfig};
use clankie_settings::Settings;

#[tokio::main]
async fn main() -> Result<()> {
    let settings = Settings::from_env().context("reading CLANKIE_* settings")?;
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_new(&settings.log).unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
    let bus = clankie_bus::Bus::connect(&settings, "media").await?;
    bus.ensure_streams().await.context("declaring streams")?;
    if let Some(addr) = settings.http_addr {
        let readiness = clankie_http::Readiness { bus: bus.clone(), store: None };
        tokio::spawn(async move {
            if let Err(e) = clankie_http::serve(addr, readiness).await {
                tracing::error!(%addr, error = %e, "HTTP endpoint failed");
            }
        });
    }
    let media = Media::new(bus, &settings, MediaConfig::from_settings(&settings)).context("opening the attachment root")?;
    tracing::info!(root = %media.root().dir().display(), "media serving the attachment root");
    tokio::select! {
        result = media.run() => result.context("media stopped"),
        _ = clankie_http::terminated() => Ok(()),
    }
}
