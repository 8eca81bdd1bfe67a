use std::time::Duration;

use clankie_bus::{Bus, BusError};
use clankie_settings::Settings;
use clankie_testkit::{TestDir, TestNats};

fn settings_for(url: &str, dir: &TestDir, timeout_secs: u64) -> Settings {
    let dir = dir.path().display().to_string();
    let timeout = timeout_secs.to_string();
    Settings::from_lookup(|k| match k {
        "CLANKIE_NATS_URL" => Some(url.to_owned()),
        "CLANKIE_STATE_DIR" => Some(dir.clone()),
        "CLANKIE_BUS_CONNECT_TIMEOUT_SECS" => Some(timeout.clone()),
        _ => None,
    })
    .unwrap()
}

#[tokio::test]
async fn connect_waits_for_a_server_that_comes_up_late() {
    let dir = TestDir::new();
    let mut nats = TestNats::start().unwrap();
    nats.stop();
    let settings = settings_for(&nats.url(), &dir, 30);
    let connecting = tokio::spawn(async move { Bus::connect(&settings, "test").await });
    // Let the first attempts fail against the stopped server.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!connecting.is_finished(), "connect gave up while the server was down");
    nats.restart().unwrap();
    let bus = tokio::time::timeout(Duration::from_secs(20), connecting).await.unwrap().unwrap().unwrap();
    bus.ensure_streams().await.unwrap();
}

#[tokio::test]
async fn connect_gives_up_after_the_deadline_with_a_clear_error() {
    let dir = TestDir::new();
    let mut nats = TestNats::start().unwrap();
    nats.stop();
    let err = match Bus::connect(&settings_for(&nats.url(), &dir, 1), "test").await {
        Err(e) => e,
        Ok(_) => panic!("connected to a stopped server"),
    };
    match &err {
        BusError::Connect { attempts, .. } => assert!(*attempts > 1, "no retry: {err}"),
        other => panic!("unexpected error {other}"),
    }
}

/// A server that speaks NATS's INFO line as 2.9.10 does: the client connects, and the bus refuses
/// it by its version before any JetStream call would fail on a reply it cannot read.
#[tokio::test]
async fn connect_refuses_a_nats_server_older_than_the_oldest_it_runs_on_by_its_version() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    assert_eq!(
        (clankie_bus::OLDEST_NATS_SERVER.0, clankie_bus::OLDEST_NATS_SERVER.1),
        clankie_testkit::NATS_SERVER_MIN,
        "the services and the local stack name one oldest server"
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let old = tokio::spawn(async move {
        let (socket, _) = listener.accept().await.unwrap();
        let (read, mut write) = socket.into_split();
        let info = r#"{"server_id":"OLD","server_name":"old","version":"2.9.10","proto":1,"go":"go1.19","host":"127.0.0.1","port":4222,"headers":true,"max_payload":1048576,"jetstream":true}"#;
        write.write_all(format!("INFO {info}\r\n").as_bytes()).await.unwrap();
        let mut lines = BufReader::new(read).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if line.starts_with("PING") {
                write.write_all(b"PONG\r\n").await.unwrap();
            }
        }
    });
    let dir = TestDir::new();
    let err = match Bus::connect(&settings_for(&format!("nats://{addr}"), &dir, 5), "test").await {
        Err(e) => e,
        Ok(_) => panic!("connected to a 2.9.10 server"),
    };
    assert!(matches!(&err, BusError::ServerTooOld { found, .. } if found == "2.9.10"), "{err}");
    let said = err.to_string();
    assert!(said.contains("2.9.10") && said.contains("2.12.0") && said.contains("upgrade"), "{said}");
    old.abort();
}

#[test]
fn connect_reads_server_versions_as_nats_writes_them() {
    use clankie_bus::server_version_suffices as ok;
    assert!(ok("2.15.1") && ok("2.12.0") && ok("2.12.0-RC.2") && ok("3.0.0") && ok("v2.14.0"));
    assert!(!ok("2.11.11") && !ok("2.9.10") && !ok("1.4.1"));
}
