//! Serves the model stand-in on a fixed loopback port for the local stack.

use std::net::SocketAddr;

fn main() -> std::io::Result<()> {
    let port: u16 = std::env::args().nth(1).and_then(|p| p.parse().ok()).unwrap_or(8711);
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let standin = clankie_model_standin::StandIn::serve(SocketAddr::from(([127, 0, 0, 1], port))).await?;
        eprintln!("model stand-in at {} (scripts: POST /control/script)", standin.base_url());
        tokio::signal::ctrl_c().await
    })
}
