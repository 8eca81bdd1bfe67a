//! Readiness against a real nats-server that goes away and comes back.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn status(addr: std::net::SocketAddr, path: &str) -> u16 {
    let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else { return 0 };
    let _ = s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes()).await;
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf)).await;
    String::from_utf8_lossy(&buf).split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0)
}

async fn until_status(addr: std::net::SocketAddr, want: u16) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let got = status(addr, "/readyz").await;
        if got == want {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "/readyz stayed {got}, wanted {want}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn readyz_follows_nats_down_and_back_without_a_restart() {
    let (mut nats, db, dir) =
        (clankie_testkit::TestNats::start().unwrap(), clankie_testkit::TestDb::create().await, clankie_testkit::TestDir::new());
    let settings = clankie_testkit::settings(&nats, &db, &dir);
    let bus = clankie_bus::Bus::connect(&settings, "test").await.unwrap();
    let store = clankie_store::Store::connect(db.url()).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(clankie_http::serve_on(
        listener,
        clankie_http::Readiness { bus: bus.clone(), store: Some(store.clone()), parts: Default::default() },
    ));

    assert_eq!(status(addr, "/healthz").await, 200);
    until_status(addr, 503).await; // no streams, no migrations yet
    bus.ensure_streams().await.unwrap();
    store.migrate().await.unwrap();
    until_status(addr, 200).await;

    nats.stop();
    until_status(addr, 503).await;
    assert_eq!(status(addr, "/healthz").await, 200, "the process stays up");
    nats.restart().unwrap();
    until_status(addr, 200).await;
}
