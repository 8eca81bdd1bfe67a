//! `clankie-voice-floor`: the same process as `clankie voice-floor`, for running the service on its own.

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    clankie_voice_floor::service::run_from_env().await
}
