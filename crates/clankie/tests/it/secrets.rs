//! Every secret a person configures, through the logs of a whole-stack run.
//!
//! `clankie run` (loopback Discord, gateway, captain, voice floor, media) runs
//! as a child process at debug level with a canary in each secret: the bot
//! token, the model key, the database password, the NATS token and the speech
//! engines' keys. A message goes through it and is answered, and a line said
//! aloud in voice is heard and answered aloud; then nothing it printed may hold
//! a canary.

use std::process::Stdio;
use std::time::Duration;

use clankie_model_standin::{Reply, Script, StandIn};
use clankie_testkit::{TestDb, TestDir, TestNats};
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};

const CANARIES: [&str; 6] =
    ["DiscordTokenCanary7", "ModelKeyCanary7", "DbPasswordCanary7", "NatsTokenCanary7", "SttKeyCanary7", "TtsKeyCanary7"];

/// Polls `check` until it holds or `timeout` passes; says which.
async fn until_async<F: std::future::Future<Output = bool>>(timeout: Duration, mut check: impl FnMut() -> F) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    while tokio::time::Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

/// `scheme://user@host/…` with `:password` or a token put into its user-info.
fn with_secret(url: &str, secret: &str, as_password: bool) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    match rest.split_once('@') {
        Some((user, host)) if as_password => format!("{scheme}://{user}:{secret}@{host}"),
        Some((_, host)) => format!("{scheme}://{secret}@{host}"),
        None => format!("{scheme}://{secret}@{rest}"),
    }
}

/// Starts `clankie run` and drains what it prints from the start (a full pipe would stall it).
async fn start(nats: &TestNats, db: &TestDb, dir: &TestDir, standin: &StandIn, addr: &str) -> (Child, tokio::task::JoinHandle<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_clankie"))
        .arg("run")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("CLANKIE_LOG", "debug")
        .env("CLANKIE_SANDBOX_ADDR", addr)
        .env("CLANKIE_STATE_DIR", dir.path())
        .env("CLANKIE_NATS_URL", with_secret(&nats.url(), CANARIES[3], false))
        .env("CLANKIE_DATABASE_URL", with_secret(db.url(), CANARIES[2], true))
        .env("CLANKIE_DISCORD_TOKEN", CANARIES[0])
        .env("CLANKIE_MODEL_BASE_URL", standin.base_url())
        .env("CLANKIE_MODEL_API_KEY", CANARIES[1])
        .env("CLANKIE_STT_BASE_URL", standin.base_url())
        .env("CLANKIE_STT_API_KEY", CANARIES[4])
        .env("CLANKIE_TTS_BASE_URL", standin.base_url())
        .env("CLANKIE_TTS_API_KEY", CANARIES[5])
        .env("CLANKIE_STALL_TICK_MS", "50")
        .env("CLANKIE_TYPING_HOLD_MS", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("clankie run starts");
    let (mut stdout, mut stderr) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let logs = tokio::spawn(async move {
        let (mut out, mut err) = (String::new(), String::new());
        let _ = tokio::join!(stdout.read_to_string(&mut out), stderr.read_to_string(&mut err));
        format!("{out}\n{err}")
    });
    (child, logs)
}

#[tokio::test]
async fn redact_no_secret_reaches_the_logs_of_a_whole_stack_run() {
    let (nats, db, dir) = (TestNats::start().unwrap(), TestDb::create().await, TestDir::new());
    let standin = StandIn::start().await.unwrap();
    for _ in 0..10 {
        standin.script(Script::any(Reply::text("hello there")));
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();

    // The sandbox port is picked free and then bound by the child: if another test took it meanwhile, pick again.
    let mut attempt = 0;
    let (mut child, logs, base) = loop {
        attempt += 1;
        let addr = format!("127.0.0.1:{}", free_port());
        let (mut child, logs) = start(&nats, &db, &dir, &standin, &addr).await;
        let base = format!("http://{addr}");
        let up = until_async(Duration::from_secs(60), || async {
            http.get(format!("{base}/control/rooms")).send().await.is_ok_and(|r| r.status().is_success())
        })
        .await;
        if up {
            break (child, logs, base);
        }
        let _ = child.kill().await;
        assert!(attempt < 3, "clankie run did not come up");
    };

    // The page answers before the gateway's shard has identified, and Discord replays nothing sent before that:
    // say hello until he answers (each try is a new message).
    let mut answered = false;
    for _ in 0..10 {
        let sent: Value = http
            .post(format!("{base}/control/messages"))
            .json(&json!({ "channel_id": 200, "author": "ada", "content": "@Clankie hi", "mention": true }))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert!(sent["id"].is_u64(), "{sent}");
        answered = until_async(Duration::from_secs(3), || async {
            let posts: Value = http.get(format!("{base}/control/posts?channel=200")).send().await.unwrap().json().await.unwrap();
            posts.as_array().is_some_and(|p| p.iter().any(|p| p["content"] == "hello there"))
        })
        .await;
        if answered {
            break;
        }
    }
    // A line said aloud in the voice room goes through both speech engines, with their keys.
    standin.audio().set_phrases(&[
        "hello clankie",
        "good morning everyone",
        "tell me a joke",
        "what time is it",
        "how is the weather today",
    ]);
    let joined = http.post(format!("{base}/control/voice/join")).json(&json!({ "channel_id": 300, "author": "ada" })).send().await.unwrap();
    assert!(joined.status().is_success());
    let connected = until_async(Duration::from_secs(20), || async {
        let room: Value = http.get(format!("{base}/control/voice/room?channel=300")).send().await.unwrap().json().await.unwrap();
        room["bot_connected"] == true
    })
    .await;
    assert!(connected, "his voice connection came up");
    let spoken = http
        .post(format!("{base}/control/voice/speak"))
        .json(&json!({ "channel_id": 300, "author": "ada", "text": "hello clankie" }))
        .send()
        .await
        .unwrap();
    assert!(spoken.status().is_success(), "{}", spoken.text().await.unwrap_or_default());
    let spoke_back = until_async(Duration::from_secs(20), || async {
        let heard: Value = http.get(format!("{base}/control/voice/heard?channel=300")).send().await.unwrap().json().await.unwrap();
        heard["segments"].as_array().is_some_and(|s| !s.is_empty())
    })
    .await;
    assert!(spoke_back, "he answered aloud");
    let (transcriptions, speeches) = standin.audio().counts();
    assert!(transcriptions >= 1 && speeches >= 1, "both engines were used ({transcriptions}, {speeches})");

    // SIGTERM: every service says goodbye through the same logs.
    // SAFETY: signalling our own child process by its pid.
    unsafe { libc::kill(child.id().unwrap() as i32, libc::SIGTERM) };
    let exited = tokio::time::timeout(Duration::from_secs(30), child.wait()).await.is_ok();
    let _ = child.kill().await;
    assert!(exited, "clankie run stops on SIGTERM");
    let logs = logs.await.unwrap();
    let tail: Vec<&str> = logs.lines().rev().take(40).collect();
    assert!(answered, "the stack answered through every secret; last lines:\n{}", tail.join("\n"));
    assert!(standin.requests()[0].bearer_token, "the model key was used");
    assert!(logs.lines().count() > 20, "debug logs were captured ({} lines)", logs.lines().count());
    assert!(logs.contains("***"), "the redacted URLs were logged, redacted");
    for canary in CANARIES {
        let hits: Vec<&str> = logs.lines().filter(|l| l.contains(canary)).take(3).collect();
        assert!(hits.is_empty(), "{canary} reached the logs: {hits:?}");
    }
}
