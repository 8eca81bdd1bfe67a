//! `clankie-gateway`: the same process as `clankie gateway`, for running the service on its own.

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    clankie_gateway::service::run_from_env().await
}
