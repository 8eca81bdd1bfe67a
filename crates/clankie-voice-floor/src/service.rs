//! The service's process wiring, shared by its own binary and `clankie voice-floor`: settings,
//! connections and endpoints are set up here so each `main` stays one line.

use crate::rooms::{RoomConfig, RoomKeeper};
use crate::{VoiceConfig, VoiceFloor};
use anyhow::{Context, Result};
use clankie_settings::Settings;

/// Runs the voice floor from `CLANKIE_*` settings until SIGTERM, then leaves its rooms.
///
/// The voice connection is `wss://`; a voice server with a private certificate (the loopback
/// Discord's) is trusted by pointing `SSL_CERT_FILE` at its CA bundle before this starts.
pub async fn run_from_env() -> Result<()> {
    // Installed first, so a stop that comes while the service is still starting is a clean one.
    let stopped = clankie_http::terminated();
    let settings = Settings::from_env().context("reading CLANKIE_* settings")?;
    clankie_http::init_tracing_with(&settings.log, clankie_voice_body::drops::layer());
    let bus = clankie_bus::Bus::connect(&settings, "voice-floor").await?;
    bus.ensure_streams().await.context("declaring streams")?;
    let model = clankie_agent::model_from_settings(&settings).context("configuring the model")?;
    let store = clankie_store::Store::connect(&settings.database_url).await.context("connecting to PostgreSQL")?;
    clankie_http::spawn_endpoints(settings.http_addr, clankie_http::Readiness { bus: bus.clone(), store: Some(store.clone()) });
    let selfhood = clankie_self::SelfSource::new(
        store.clone(),
        Some(bus.clone()),
        &settings.bot_name,
        &settings.bot_aliases,
        settings.exchange_window,
    );
    let floor = std::sync::Arc::new(VoiceFloor::new(bus.clone(), model, selfhood, VoiceConfig::from_settings(&settings)));
    // The ring is the voice floor's: it sweeps it, by age and by lines per room.
    let ring = clankie_store::RingRetention {
        age: settings.voice_ring_retention,
        lines_per_room: i64::try_from(settings.voice_ring_max_lines).unwrap_or(i64::MAX),
        batch: 5_000,
    };
    let (sweeper_store, every) = (store.clone(), settings.retention_sweep_every);
    let _sweeper = clankie_http::Aborting(tokio::spawn(async move {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every.min(std::time::Duration::from_secs(60)), every);
        loop {
            tick.tick().await;
            match sweeper_store.sweep_voice_ring(&ring).await {
                Ok(0) => {}
                Ok(lines) => tracing::info!(lines, "swept the voice ring"),
                Err(e) => tracing::warn!(error = %e, "the voice ring sweep failed; it runs again next time"),
            }
        }
    }));
    let mut rooms = RoomKeeper::new(bus, store, floor, RoomConfig::from_settings(&settings)).context("setting up the speech engines")?;
    tokio::select! {
        result = rooms.run() => result.context("voice rooms stopped")?,
        _ = stopped => {}
    }
    rooms.leave_all().await;
    Ok(())
}
