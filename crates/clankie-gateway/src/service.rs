//! The service's process wiring, shared by its own binary and `clankie gateway`: settings,
//! connections and endpoints are set up here so each `main` stays one line.

use crate::{Gateway, GatewayConfig};
use anyhow::{Context, Result};
use clankie_settings::Settings;

/// The counters the alert rules read of a gateway, registered at zero as it starts: each close
/// Discord does not take back (one is enough to alert), each REST refusal the rules count.
const SERIES: &[clankie_http::series::Series] = &[
    ("clankie_gateway_fenced_requests_total", &[]),
    ("clankie_gateway_fatal_closes_total", &[("code", "4004")]),
    ("clankie_gateway_fatal_closes_total", &[("code", "4010")]),
    ("clankie_gateway_fatal_closes_total", &[("code", "4011")]),
    ("clankie_gateway_fatal_closes_total", &[("code", "4012")]),
    ("clankie_gateway_fatal_closes_total", &[("code", "4013")]),
    ("clankie_gateway_fatal_closes_total", &[("code", "4014")]),
    ("clankie_gateway_rest_errors_total", &[("status", "401")]),
    ("clankie_gateway_rest_errors_total", &[("status", "403")]),
    ("clankie_gateway_rest_errors_total", &[("status", "429")]),
];

/// Runs the gateway from `CLANKIE_*` settings until SIGTERM: ingest and body.
pub async fn run_from_env() -> Result<()> {
    // Installed first, so a stop that comes while the service is still starting is a clean one.
    let stopped = clankie_http::terminated();
    let settings = Settings::from_env().context("reading CLANKIE_* settings")?;
    settings.check_token_for_real_discord()?;
    let _traces = clankie_http::init_tracing(&settings.log, "gateway");
    clankie_http::announce_settings(&settings, clankie_settings::Service::Gateway);
    clankie_http::series::counters_at_zero(SERIES);
    let bus = clankie_bus::Bus::connect(&settings, "gateway").await?;
    bus.ensure_streams().await.context("declaring streams")?;
    let gateway = Gateway::new(bus.clone(), GatewayConfig::from_settings(&settings));
    clankie_http::spawn_endpoints(settings.http_addr, clankie_http::Readiness { bus, store: None, parts: gateway.parts() });
    gateway.run_until(stopped).await.context("gateway stopped")
}
