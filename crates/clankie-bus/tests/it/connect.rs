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
