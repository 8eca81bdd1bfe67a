//! `clankie-gateway`: wires settings and the bus, then runs ingest and body.

use anyhow::{Context, Result};
use clankie_gateway::{Gateway, GatewayConfig};
use clankie_settings::Settings;

#[tokio::main]
async fn main() -> Result<()> {
    let settings = Settings::from_env().context("reading CLANKIE_* settings")?;
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_new(&settings.log).unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
    let bus = clankie_bus::Bus::connect(&settings, "gateway").await?;
    bus.ensure_streams().await.context("declaring streams")?;
    if let Some(addr) = settings.http_addr {
        let readiness = clankie_http::Readiness { bus: bus.clone(), store: None };
        tokio::spawn(async move {
            if let Err(e) = clankie_http::serve(addr, readiness).await {
                tracing::error!(%addr, error = %e, "HTTP endpoint failed");
            }
        });
    }
    let gateway = Gateway::new(bus, GatewayConfig::from_settings(&settings));
    gateway.run_until(clankie_http::terminated()).await.context("gateway stopped")
}
