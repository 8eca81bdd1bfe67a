//! `clankie-voice-floor`: wires settings, bus and model, then runs the floor.

use anyhow::{Context, Result};
use clankie_settings::Settings;
use clankie_voice_floor::{VoiceConfig, VoiceFloor};

#[tokio::main]
async fn main() -> Result<()> {
    let settings = Settings::from_env().context("reading CLANKIE_* settings")?;
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_new(&settings.log).unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
    let bus = clankie_bus::Bus::connect(&settings, "voice-floor").await?;
    bus.ensure_streams().await.context("declaring streams")?;
    let model = clankie_agent::model_from_settings(&settings).context("configuring the model")?;
    if let Some(addr) = settings.http_addr {
        let readiness = clankie_http::Readiness { bus: bus.clone(), store: None };
        tokio::spawn(async move {
            if let Err(e) = clankie_http::serve(addr, readiness).await {
                tracing::error!(%addr, error = %e, "HTTP endpoint failed");
            }
        });
    }
    let floor = VoiceFloor::new(bus, model, VoiceConfig::from_settings(&settings));
    tokio::select! {
        result = floor.run() => result.context("voice floor stopped"),
        _ = clankie_http::terminated() => Ok(()),
    }
}
