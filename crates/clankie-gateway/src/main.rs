//! `clankie-gateway`: wires settings and the bus, then runs ingest and body.

use anyhow::{Context, Result};
use clankie_gateway::{Gateway, GatewayConfig};
use clankie_settings::Settings;

#[tokio::main]
async fn main() -> Result<()> {
    let settings = Settings::from_env().context("reading CLANKIE_* settings")?;
    clankie_http::init_tracing(&settings.log);
    let bus = clankie_bus::Bus::connect(&settings, "gateway").await?;
    bus.ensure_streams().await.context("declaring streams")?;
    clankie_http::spawn_endpoints(settings.http_addr, clankie_http::Readiness { bus: bus.clone(), store: None });
    let gateway = Gateway::new(bus, GatewayConfig::from_settings(&settings));
    gateway.run_until(clankie_http::terminated()).await.context("gateway stopped")
}
