//! The operator's path to a real server: what must never meet real people (a token that is no
//! bot's, the rehearsal model) stops a service at start with one line that says what to do,
//! before it connects to anything.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `clankie <which>` with only `env` of the `CLANKIE_*` settings (and nothing listening on
/// the bus or the database, so one that gets past its checks stops there within seconds);
/// returns whether it failed and what it printed.
fn start(which: &str, env: &[(&str, &str)]) -> (bool, String) {
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
