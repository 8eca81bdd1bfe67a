//! Serves the loopback Discord and its sandbox page: `clankie-discord-loopback [ADDR]`.

use std::net::SocketAddr;

use clankie_discord_loopback::{LoopbackConfig, showcase_channels};

fn main() -> std::io::Result<()> {
    let addr: SocketAddr = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 8700)));
    // Run alone, the page shows every kind of room: an announcement channel and a forum too.
    let mut config = LoopbackConfig::default();
    config.channels.extend(showcase_channels());
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let loopback = clankie_discord_loopback::Loopback::serve(addr, config).await?;
        eprintln!("loopback Discord and sandbox room at {}", loopback.url());
        eprintln!("voice server: voice clients trust it with SSL_CERT_FILE={}", loopback.voice().ca_bundle().display());
        tokio::signal::ctrl_c().await
    })
}
