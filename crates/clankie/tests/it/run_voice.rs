//! `clankie run` as a newcomer starts it, on a machine whose shell already sets `SSL_CERT_FILE`.

use std::time::{Duration, Instant};

use clankie_testkit::{TestDb, TestDir, TestNats};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

const SYSTEM_ROOTS: &str = "/etc/ssl/certs/ca-certificates.crt";
const VOICE: u64 = 300;

/// The roots a TLS client trusts when `SSL_CERT_FILE` is `file`, loaded as songbird's and
/// reqwest's rustls clients load them.
fn native_roots_with(file: &str) -> Vec<Vec<u8>> {
    // SAFETY: nextest runs each test in its own process, and nothing else reads it meanwhile.
    unsafe { std::env::set_var("SSL_CERT_FILE", file) };
    let loaded = rustls_native_certs::load_native_certs();
    assert!(loaded.errors.is_empty(), "{file}: {:?}", loaded.errors);
    loaded.certs.into_iter().map(|c| c.to_vec()).collect()
}

#[tokio::test]
async fn newcomer_voice_connects_when_ssl_cert_file_is_already_set() {
    assert!(std::path::Path::new(SYSTEM_ROOTS).is_file(), "the machine has the system bundle");
    let (nats, db, dir) = (TestNats::start().unwrap(), TestDb::create().await, TestDir::new());
    let mut run = tokio::process::Command::new(env!("CARGO_BIN_EXE_clankie"))
        .arg("run")
        .env("CLANKIE_NATS_URL", nats.url())
        .env("CLANKIE_DATABASE_URL", db.url())
        .env("CLANKIE_STATE_DIR", dir.path())
        .env("CLANKIE_SANDBOX_ADDR", "127.0.0.1:0")
        .env("CLANKIE_CONSOLE_ADDR", "127.0.0.1:0")
        // The shard's "identified" line says when the gateway is attached and hears voice states.
        .env("CLANKIE_LOG", "warn,clankie_gateway::shard=info")
        .env("NO_COLOR", "1")
        .env("SSL_CERT_FILE", SYSTEM_ROOTS)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(run.stderr.take().unwrap()).lines();
    let (mut printed, mut sandbox) = (Vec::new(), None);
    let started = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(url) = line.strip_prefix("Open the sandbox room: ") {
                sandbox = Some(url.trim_end_matches('/').to_owned());
            }
            let attached = line.contains("shard identified");
            printed.push(line);
            if attached {
                return;
            }
        }
    })
    .await;
    assert!(started.is_ok() && sandbox.is_some(), "clankie run did not start: {printed:#?}");
    let sandbox = sandbox.unwrap();
    // Keep what it prints, to show when the test fails, and so it never blocks on a full pipe.
    let later = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let sink = later.clone();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            sink.lock().unwrap().push(line);
        }
    });

    let trust: Vec<&String> = printed.iter().filter(|l| l.starts_with("Voice trusts")).collect();
    assert_eq!(trust.len(), 1, "what voice trusts is said once, at start: {printed:#?}");
    assert!(trust[0].contains(SYSTEM_ROOTS), "it names the file the user set: {}", trust[0]);
    let bundle = trust[0].split("SSL_CERT_FILE=").nth(1).expect("it names the bundle it set").trim_end_matches('.').to_owned();
    assert_ne!(bundle, SYSTEM_ROOTS, "the process trusts a bundle of its own");
    assert!(bundle.starts_with(&dir.path().display().to_string()), "a bundle in its own state: {bundle}");

    // A human joins the voice channel; his audio connects.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
    let joined =
        http.post(format!("{sandbox}/control/voice/join")).json(&json!({ "channel_id": VOICE, "author": "ada" })).send().await.unwrap();
    assert!(joined.status().is_success(), "{}", joined.text().await.unwrap_or_default());
    let deadline = Instant::now() + Duration::from_secs(30);
    let room = loop {
        let room: Value = http.get(format!("{sandbox}/control/voice/room?channel={VOICE}")).send().await.unwrap().json().await.unwrap();
        if room["bot_connected"] == true || Instant::now() > deadline {
            break room;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(room["bot_connected"], true, "his voice connection never came up: {room}\n{:#?}", later.lock().unwrap());

    // A public TLS client built the same way trusts every system root, and the loopback's CA besides.
    let system = native_roots_with(SYSTEM_ROOTS);
    let trusted = native_roots_with(&bundle);
    assert!(system.len() > 10, "the system bundle holds roots");
    let missing = system.iter().filter(|c| !trusted.contains(c)).count();
    assert_eq!(missing, 0, "{missing} system roots are no longer trusted");
    assert_eq!(trusted.len(), system.len() + 1, "the bundle adds the loopback's CA");
    let mut store = rustls::RootCertStore::empty();
    let (added, ignored) = store.add_parsable_certificates(trusted.into_iter().map(rustls::pki_types::CertificateDer::from));
    assert_eq!((added, ignored), (system.len() + 1, 0));
    let _ = run.start_kill();
}
