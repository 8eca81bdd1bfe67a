//! The service's process wiring, shared by its own binary and `clankie gateway`: settings,
//! connections and endpoints are set up here so each `main` stays one line.

use crate::{Gateway, GatewayConfig};
use anyhow::{Context, Result};
use clankie_settings::Settings;

/// Runs the gateway from `CLANKIE_*` settings until SIGTERM: ingest and body.
pub async fn run_from_env() -> Result<()> {
    // Installed first, so a stop that comes while the service is still starting is a clean one.
    let stopped = clankie_http::terminated();
    let settings = Settings::from_env().context("reading CLANKIE_* settings")?;
    settings.check_token_for_real_discord()?;
    let _traces = clankie_http::init_tracing(&settings.log, "gateway");
    clankie_http::announce_settings(&settings, clankie_settings::Service::Gateway);
    let bus = clankie_bus::Bus::connect(&settings, "gateway").await?;
    bus.ensure_streams().await.context("declaring streams")?;
    // Against Discord itself, a first start says how to invite him; a stand-in needs no invite.
    if settings.discord_api.is_none() {
        let (token, admitted) = (settings.discord_token.clone(), settings.discord_guilds.clone());
        tokio::spawn(async move {
            if let Some(url) = crate::invite::wanted_invite(&token, None, &admitted).await {
                tracing::warn!(%url, "he is not in every server he is meant for yet: open this invite URL as someone who manages the server (`clankie doctor` checks the rest)");
            }
        });
    }
    let gateway = Gateway::new(bus.clone(), GatewayConfig::from_settings(&settings));
    clankie_http::spawn_endpoints(settings.http_addr, clankie_http::Readiness { bus, store: None, parts: gateway.parts() });
    gateway.run_until(stopped).await.context("gateway stopped")
}
