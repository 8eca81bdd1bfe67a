//! `clankie-media`: the same process as `clankie media`, for running the service on its own.

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    clankie_media::service::run_from_env().await
}
