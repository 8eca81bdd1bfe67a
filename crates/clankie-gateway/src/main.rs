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
    let gateway = Gateway::new(bus, GatewayConfig::from_settings(&settings));
    tokio::select! {
        result = gateway.run() => result.context("gateway stopped"),
        _ = tokio::signal::ctrl_c() => {
            tracing::info!("interrupted; stopping");
            Ok(())
        }
    }
}
