//! The service's process wiring, shared by its own binary and `clankie captain`: settings,
//! connections and endpoints are set up here so each `main` stays one line.

use crate::{Captain, CaptainConfig};
use anyhow::{Context, Result};
use clankie_settings::Settings;

/// Runs a captain replica from `CLANKIE_*` settings until SIGTERM, then drains.
pub async fn run_from_env() -> Result<()> {
    // Installed first, so a stop that comes while the service is still starting is a clean one.
    let stopped = clankie_http::terminated();
    let settings = Settings::from_env().context("reading CLANKIE_* settings")?;
    settings.check_model_for_real_discord()?;
    clankie_http::init_tracing(&settings.log);
    let bus = clankie_bus::Bus::connect(&settings, "captain").await?;
    bus.ensure_streams().await.context("declaring streams")?;
    let store = clankie_store::Store::connect(&settings.database_url).await.context("connecting to PostgreSQL")?;
    store.migrate().await.context("applying migrations")?;
    let model = clankie_agent::model_from_settings(&settings).context("configuring the model")?;
    if model.is_rehearsal() {
        tracing::warn!("no CLANKIE_MODEL_BASE_URL: running the offline rehearsal model; every answer is labelled [rehearsal]");
    }
    let agent = clankie_agent::Agent::new(model, clankie_agent::config_from_settings(&settings));
    let mut config = CaptainConfig::from_settings(&settings);
    config.browser = clankie_browser::host_from_settings(&settings, config.egress.clone()).await.context("starting the browser host")?;
    let captain = Captain::new(bus.clone(), store.clone(), agent, config);
    clankie_http::spawn_endpoints(settings.http_addr, clankie_http::Readiness { bus, store: Some(store), parts: captain.parts() });
    captain.run_until_drained(stopped, settings.shutdown_grace).await.context("captain stopped")?;
    tracing::info!("drained; exiting");
    Ok(())
}
