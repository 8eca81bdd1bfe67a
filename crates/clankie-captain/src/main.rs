//! `clankie-captain`: the same process as `clankie captain`, for running the service on its own.

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    clankie_captain::service::run_from_env().await
}
