//! The service's process wiring, shared by its own binary and `clankie voice-floor`: settings,
//! connections and endpoints are set up here so each `main` stays one line.

use crate::config::VoiceConfig;
use crate::rooms::{RoomConfig, RoomKeeper};
use crate::voice_floor::VoiceFloor;
use anyhow::{Context, Result};
use clankie_settings::Settings;

/// The counters the alert rules read of a voice floor, registered at zero as it starts.
const SERIES: &[clankie_http::series::Series] = &[
    ("clankie_voice_utterances_dropped_total", &[]),
    ("clankie_speech_errors_total", &[("stage", "transcribe"), ("code", "speech_unreachable")]),
    ("clankie_speech_errors_total", &[("stage", "synthesize"), ("code", "speech_unreachable")]),
    ("clankie_part_restarts_total", &[("part", "voice.room")]),
];

/// Runs the voice floor from `CLANKIE_*` settings until SIGTERM, then leaves its rooms.
///
/// The voice connection is `wss://`; a voice server with a private certificate (the loopback
/// Discord's) is trusted by pointing `SSL_CERT_FILE` at its CA bundle before this starts.
pub async fn run_from_env() -> Result<()> {
    // Installed first, so a stop that comes while the service is still starting is a clean one.
    let stopped = clankie_http::terminated();
    let settings = Settings::from_env().context("reading CLANKIE_* settings")?;
    settings.check_model_for_real_discord()?;
    let _traces = clankie_http::init_tracing_with(&settings.log, "voice-floor", clankie_voice_body::drops::layer());
    clankie_http::announce_settings(&settings, clankie_settings::Service::VoiceFloor);
    clankie_http::series::counters_at_zero(SERIES);
    let bus = clankie_bus::Bus::connect(&settings, "voice-floor").await?;
    bus.ensure_streams().await.context("declaring streams")?;
    let model = clankie_agent::model_from_settings(&settings).context("configuring the model")?;
    let store = clankie_store::Store::connect(&settings.database_url).await.context("connecting to PostgreSQL")?;
    let selfhood = clankie_self::SelfSource::new(
        store.clone(),
        Some(bus.clone()),
        &settings.bot_name,
        &settings.bot_aliases,
        settings.exchange_window,
    );
    let floor = std::sync::Arc::new(VoiceFloor::new(bus.clone(), model, selfhood, VoiceConfig::from_settings(&settings)));
    clankie_http::spawn_endpoints(
        settings.http_addr,
        clankie_http::Readiness { bus: bus.clone(), store: Some(store.clone()), parts: floor.parts() },
    );
    let ring = clankie_store::RingRetention {
        age: settings.voice_ring_retention,
        lines_per_room: i64::try_from(settings.voice_ring_max_lines).unwrap_or(i64::MAX),
        batch: 5_000,
    };
    let (sweep_store, sweep_every) = (store.clone(), settings.retention_sweep_every);
    let _sweeper =
        clankie_http::Aborting(tokio::spawn(clankie_http::supervise::keep_running("voice.ring_sweeper", floor.parts(), move || {
            crate::rooms::sweep_ring(sweep_store.clone(), ring.clone(), sweep_every)
        })));
    let mut rooms = RoomKeeper::new(bus, store, floor, RoomConfig::from_settings(&settings)).context("setting up the speech engines")?;
    tokio::select! {
        result = rooms.run() => result.context("voice rooms stopped")?,
        _ = stopped => {}
    }
    rooms.leave_all().await;
    Ok(())
}
