//! The operator's path to a real server: what must never meet real people (a token that is no
//! bot's, the rehearsal model) stops a service at start with one line that says what to do,
//! before it connects to anything.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `clankie <which>` with only `env` of the `CLANKIE_*` settings (and nothing listening on
/// the bus or the database, so one that gets past its checks stops there within seconds);
/// returns whether it failed and what it printed.
pub(crate) fn start(which: &str, env: &[(&str, &str)]) -> (bool, String) {
    let dir = clankie_testkit::TestDir::new();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_clankie"));
    cmd.arg(which);
    // As a person's shell runs it: no test settings, no backtraces.
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("CLANKIE_") || k.ends_with("BACKTRACE")) {
        cmd.env_remove(k);
    }
    cmd.env("CLANKIE_STATE_DIR", dir.path())
        .env("CLANKIE_NATS_URL", "nats://127.0.0.1:1")
        .env("CLANKIE_BUS_CONNECT_TIMEOUT_SECS", "1")
        .env("CLANKIE_DATABASE_URL", "postgres://clankie@127.0.0.1:1/clankie")
        .env("NO_COLOR", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let log = dir.path().join("stderr");
    let mut child = cmd.stdout(Stdio::null()).stderr(std::fs::File::create(&log).unwrap()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("clankie {which} neither started nor stopped within 30 s: {}", std::fs::read_to_string(&log).unwrap());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (!status.success(), std::fs::read_to_string(&log).unwrap())
}

const STAND_IN: (&str, &str) = ("CLANKIE_DISCORD_API", "127.0.0.1:1");

#[test]
fn operator_against_discord_itself_a_placeholder_token_refuses_to_start_with_its_line() {
    let says = |out: &str| out.contains("CLANKIE_DISCORD_TOKEN") && out.contains("Developer Portal");
    for token in [None, Some("replace-me"), Some("loopback-token"), Some(" ")] {
        let env: Vec<(&str, &str)> = token.map(|t| ("CLANKIE_DISCORD_TOKEN", t)).into_iter().collect();
        let (failed, out) = start("gateway", &env);
        assert!(failed && says(&out), "the gateway with token {token:?} and Discord itself: {out}");
        assert!(!out.contains("NATS") && !out.contains("nats"), "it tried the bus before refusing: {out}");
        println!("operator: token {token:?} against Discord itself: {}", out.trim());
    }
    // A real-looking token, or the placeholder against a stand-in, passes the check (and stops
    // at the bus, which is not there).
    for env in [vec![("CLANKIE_DISCORD_TOKEN", "MTA5.not-a-real.token")], vec![("CLANKIE_DISCORD_TOKEN", "replace-me"), STAND_IN]] {
        let (failed, out) = start("gateway", &env);
        assert!(failed && !says(&out), "{env:?} was refused as a placeholder: {out}");
    }
}

#[test]
fn operator_against_discord_itself_the_rehearsal_model_refuses_to_start_with_its_line() {
    let says = |out: &str| out.contains("CLANKIE_MODEL_BASE_URL") && out.contains("rehearsal model");
    for service in ["captain", "voice-floor"] {
        let (failed, out) = start(service, &[]);
        assert!(failed && says(&out), "{service} with the rehearsal model and Discord itself: {out}");
        assert!(!out.contains("NATS") && !out.contains("nats"), "{service} tried the bus before refusing: {out}");
        println!("operator: {service} with no model against Discord itself: {}", out.trim());
        // The sandbox's default stays: against a stand-in the rehearsal model passes the check.
        let (failed, out) = start(service, &[STAND_IN]);
        assert!(failed && !says(&out), "{service} refused the rehearsal model against a stand-in: {out}");
        let (_, out) = start(service, &[("CLANKIE_MODEL_BASE_URL", "http://127.0.0.1:1/v1")]);
        assert!(!says(&out), "{service} refused a real model: {out}");
    }
}

/// A misspelt model name: the provider answers 404 with its own message, the turn is `failed`,
/// and the operator reads the provider's words where they look (`clankie trail`, the console's
/// trail), while no log line of any service and no receipt holds them.
#[tokio::test]
async fn operator_a_provider_404_for_a_misspelt_model_is_shown_in_the_trail_and_the_console_and_nowhere_else() {
    let cast = crate::chaos::Cast::start(clankie_discord_loopback::LoopbackConfig::default()).await;
    cast.standin.script(clankie_model_standin::Script::any(clankie_model_standin::Reply::ModelNotFound));
    let console_addr = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).unwrap().to_string();
    let debug = ("CLANKIE_LOG", "debug");
    let _gateway = cast.service("gateway", "gateway-a", None, &[debug]);
    let _captain = cast.service("captain", "captain-a", None, &[debug, ("CLANKIE_MODEL_NAME", "gpt-4o-mnii")]);
    let _console = cast.service(
        "console",
        "console-a",
        None,
        &[debug, ("CLANKIE_CONSOLE_ADDR", &console_addr), ("CLANKIE_CONSOLE_TOKEN", "op-token")],
    );
    assert!(cast.discord.wait_for_session(Duration::from_secs(20)).await, "the gateway never attached");
    let id = cast.mention("ada", "what is on today?");
    let delivery = id.to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    let outcome = loop {
        if let Some(outcome) = cast.store.outcome(&delivery).await.unwrap() {
            break outcome;
        }
        assert!(Instant::now() < deadline, "no outcome for the message within 30 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(outcome.kind, clankie_proto::v1::OutcomeKind::Failed);
    let said = "The model `gpt-4o-mnii` does not exist or you do not have access to it.";

    let out = cast.trail(&delivery).await;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let from_cli: Vec<serde_json::Value> = text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let cli_said = from_cli.iter().find_map(|r| r["provider_message"].as_str());
    assert_eq!(cli_said, Some(said), "clankie trail: {text}");

    let _ = rustls::crypto::ring::default_provider().install_default();
    let rows: Vec<serde_json::Value> = reqwest::Client::new()
        .get(format!("http://{console_addr}/api/trail/{delivery}"))
        .bearer_auth("op-token")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let console_said = rows.iter().find_map(|r| r["provider_message"].as_str());
    assert_eq!(console_said, Some(said), "the console's trail: {rows:?}");
    println!("operator: a failed turn's trail row: {}", from_cli.iter().find(|r| r.get("outcome").is_some()).unwrap());

    let receipts: i64 = sqlx::query_scalar("SELECT count(*) FROM receipts r WHERE r::text LIKE '%does not exist%'")
        .fetch_one(cast.store.pool())
        .await
        .unwrap();
    assert_eq!(receipts, 0, "a receipt holds the provider's message");
    let mut logs = 0;
    for entry in std::fs::read_dir(cast.dir.path()).unwrap().flatten().filter(|e| e.path().extension().is_some_and(|x| x == "log")) {
        let log = std::fs::read_to_string(entry.path()).unwrap_or_default();
        assert!(!log.contains("does not exist"), "{} holds the provider's message", entry.path().display());
        logs += usize::from(log.contains("DEBUG"));
    }
    assert!(logs >= 2, "the services' logs were not written at debug level, so they prove nothing");
}

/// `clankie invite` asks the API for the application and prints the URL that invites it with
/// the permissions the code lists; a token Discord refuses is named as such.
#[tokio::test]
async fn operator_clankie_invite_prints_the_url_with_the_applications_id_and_the_listed_permissions() {
    let discord = clankie_discord_loopback::Loopback::serve("127.0.0.1:0".parse().unwrap(), Default::default()).await.unwrap();
    let invite = |token: &str| {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_clankie"));
        for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("CLANKIE_") || k.ends_with("BACKTRACE")) {
            cmd.env_remove(k);
        }
        cmd.arg("invite").env("CLANKIE_DISCORD_API", discord.addr().to_string()).env("CLANKIE_DISCORD_TOKEN", token).output()
    };
    let out = invite(&discord.config().token).await.unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout.trim(), clankie_gateway::invite::invite_url(discord.config().bot_user_id), "{stderr}");
    for need in clankie_gateway::invite::NEEDS {
        assert!(stderr.contains(need.name), "{} is not explained: {stderr}", need.name);
    }
    println!("operator: clankie invite printed {}\n{stderr}", stdout.trim());

    let out = invite("not-this-bots-token").await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("Discord refused the token (401)"), "{stderr}");
}

/// `clankie invite` against the API, as a person runs it: stdout and stderr, and whether it succeeded.
async fn invite(api: &str, token: &str) -> (bool, String, String) {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_clankie"));
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("CLANKIE_") || k.ends_with("BACKTRACE")) {
        cmd.env_remove(k);
    }
    let out = cmd.arg("invite").env("CLANKIE_DISCORD_API", api).env("CLANKIE_DISCORD_TOKEN", token).output().await.unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// He answers in threads and forum posts, where Send Messages has no effect: the invite asks
/// for Send Messages in Threads (1 << 38) and says why.
#[tokio::test]
async fn operator_the_invite_integer_includes_send_messages_in_threads() {
    let discord = clankie_discord_loopback::Loopback::serve("127.0.0.1:0".parse().unwrap(), Default::default()).await.unwrap();
    let (ok, stdout, stderr) = invite(&discord.addr().to_string(), &discord.config().token).await;
    assert!(ok, "{stderr}");
    let asked: u64 = stdout.trim().rsplit_once("permissions=").and_then(|(_, p)| p.parse().ok()).unwrap_or_else(|| panic!("{stdout}"));
    assert_ne!(asked & clankie_discord_loopback::permission::SEND_MESSAGES_IN_THREADS, 0, "the invite asks for {asked}");
    assert!(stderr.contains("Send Messages in Threads: to answer in threads and forum posts"), "{stderr}");
    println!("operator: clankie invite asks for {asked}");
}

/// Discord not reachable at all: `clankie invite` says so and what to do, not only that a
/// response could not be received.
#[tokio::test]
async fn operator_clankie_invite_when_discord_cannot_be_reached_says_what_to_do() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).unwrap().to_string();
    let (ok, _, stderr) = invite(&closed, "MTA5.not-a-real.token").await;
    assert!(!ok);
    assert!(stderr.contains(&format!("the Discord API at {closed} could not be reached")), "{stderr}");
    assert!(stderr.contains("start the stand-in CLANKIE_DISCORD_API names"), "{stderr}");
    assert!(!stderr.contains("not-a-real"), "the token was printed: {stderr}");
    println!("operator: clankie invite with nothing listening: {}", stderr.trim());
}
