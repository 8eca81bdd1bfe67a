//! Serves the model stand-in on a fixed loopback port for the local stack.

use std::net::SocketAddr;

fn main() -> std::io::Result<()> {
    // An address (`0.0.0.0:8711`) or a bare port on loopback.
    let arg = std::env::args().nth(1).unwrap_or_else(|| "8711".into());
    let addr = arg.parse::<SocketAddr>().ok().or_else(|| arg.parse::<u16>().ok().map(|p| SocketAddr::from(([127, 0, 0, 1], p))));
    let Some(addr) = addr else {
        eprintln!("usage: clankie-model-standin [PORT | ADDR:PORT]");
        std::process::exit(2);
    };
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let standin = clankie_model_standin::StandIn::serve(addr).await?;
        eprintln!("model stand-in at {} (scripts: POST /control/script)", standin.base_url());
        tokio::signal::ctrl_c().await
    })
}
