//! The service's process wiring, shared by its own binary and `clankie voice-floor`: settings,
//! connections and endpoints are set up here so each `main` stays one line.

use crate::{VoiceConfig, VoiceFloor};
use anyhow::{Context, Result};
use clankie_settings::Settings;

/// Runs the voice floor from `CLANKIE_*` settings until SIGTERM, then leaves its rooms.
pub async fn run_from_env() -> Result<()> {
    let settings = Settings::from_env().context("reading CLANKIE_* settings")?;
    clankie_http::init_tracing(&settings.log);
    let bus = clankie_bus::Bus::connect(&settings, "voice-floor").await?;
    bus.ensure_streams().await.context("declaring streams")?;
    let model = clankie_agent::model_from_settings(&settings).context("configuring the model")?;
    let store = clankie_store::Store::connect(&settings.database_url).await.context("connecting to PostgreSQL")?;
    clankie_http::spawn_endpoints(settings.http_addr, clankie_http::Readiness { bus: bus.clone(), store: Some(store.clone()) });
    let selfhood =
        clankie_self::SelfSource::new(store, Some(bus.clone()), &settings.bot_name, &settings.bot_aliases, settings.exchange_window);
    let floor = VoiceFloor::new(bus, model, selfhood, VoiceConfig::from_settings(&settings));
    tokio::select! {
        result = floor.run() => result.context("voice floor stopped")?,
        _ = clankie_http::terminated() => {}
    }
    floor.leave().await;
    Ok(())
}
