//! `clankie-voice-floor`: wires settings, bus and model, then runs the floor.

use anyhow::{Context, Result};
use clankie_settings::Settings;
use clankie_voice_floor::{VoiceConfig, VoiceFloor};

#[tokio::main]
async fn main() -> Result<()> {
    let settings = Settings::from_env().context("reading CLANKIE_* settings")?;
    clankie_http::init_tracing(&settings.log);
    let bus = clankie_bus::Bus::connect(&settings, "voice-floor").await?;
    bus.ensure_streams().await.context("declaring streams")?;
    let model = clankie_agent::model_from_settings(&settings).context("configuring the model")?;
    clankie_http::spawn_endpoints(settings.http_addr, clankie_http::Readiness { bus: bus.clone(), store: None });
    let floor = VoiceFloor::new(bus, model, VoiceConfig::from_settings(&settings));
    tokio::select! {
        result = floor.run() => result.context("voice floor stopped"),
        _ = clankie_http::terminated() => Ok(()),
    }
}
