//! The service's process wiring, shared by its own binary and `clankie captain`: settings,
//! connections and endpoints are set up here so each `main` stays one line.

use crate::{Captain, CaptainConfig};
use anyhow::{Context, Result};
use clankie_settings::Settings;

/// The counters the alert rules read of a captain, registered at zero as it starts.
const SERIES: &[clankie_http::series::Series] = &[
    ("clankie_captain_outcomes_total", &[("kind", "replied")]),
    ("clankie_captain_outcomes_total", &[("kind", "absorbed")]),
    ("clankie_captain_outcomes_total", &[("kind", "silent")]),
    ("clankie_captain_outcomes_total", &[("kind", "failed")]),
    ("clankie_captain_outcomes_total", &[("kind", "withdrawn")]),
    ("clankie_captain_stalls_total", &[]),
    ("clankie_captain_fenced_runs_total", &[]),
    ("clankie_captain_outbox_given_up_total", &[("code", crate::outbox::UNPUBLISHABLE)]),
    ("clankie_part_restarts_total", &[("part", "captain.admitter")]),
];

/// Runs a captain replica from `CLANKIE_*` settings until SIGTERM, then drains.
pub async fn run_from_env() -> Result<()> {
    // Installed first, so a stop that comes while the service is still starting is a clean one.
    let stopped = clankie_http::terminated();
    let settings = Settings::from_env().context("reading CLANKIE_* settings")?;
    settings.check_model_for_real_discord()?;
    let _traces = clankie_http::init_tracing(&settings.log, "captain");
    clankie_http::announce_settings(&settings, clankie_settings::Service::Captain);
    clankie_http::series::counters_at_zero(SERIES);
    let bus = clankie_bus::Bus::connect(&settings, "captain").await?;
    bus.ensure_streams().await.context("declaring streams")?;
    let store = clankie_store::Store::connect(&settings.database_url).await.context("connecting to PostgreSQL")?;
    store.migrate().await.context("applying migrations")?;
    if let Some(path) = &settings.self_file {
        apply_self_file(&store, path).await?;
    }
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

/// Applies `CLANKIE_SELF_FILE` once the tables are current and before any lane starts, so the
/// first turn already speaks as the file says; a file that cannot be applied stops the captain.
/// The log names the fields written, never their values.
async fn apply_self_file(store: &clankie_store::Store, path: &std::path::Path) -> Result<()> {
    let context = || format!("applying the self file {} (CLANKIE_SELF_FILE); fix it or unset CLANKIE_SELF_FILE", path.display());
    let file = clankie_store::SelfFile::read(path).with_context(context)?;
    let report = store.apply_self_file(&file).await.with_context(context)?;
    tracing::info!(file = %path.display(), written = %report, "self file applied");
    Ok(())
}
