//! The compose healthcheck, exactly as the compose file writes it, run the way Docker runs a
//! `CMD-SHELL` check in our image: `/bin/sh -c`, where `/bin/sh` is dash.

use std::time::{Duration, Instant};

use tokio::process::Command;

fn workspace() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The `CMD-SHELL` string of the compose file's healthcheck.
fn compose_healthcheck() -> String {
    let compose = std::fs::read_to_string(workspace().join("deploy/compose/docker-compose.yml")).unwrap();
    let line = compose.lines().find(|l| l.contains("\"CMD-SHELL\"")).expect("a CMD-SHELL healthcheck");
    let json = line.split_once("test:").expect("a test: line").1.trim();
    let parts: Vec<String> = serde_json::from_str(json).expect("the test is a JSON-style list");
    assert_eq!(parts.len(), 2, "{parts:?}");
    parts[1].clone()
}

fn dash() -> &'static str {
    ["/bin/dash", "/usr/bin/dash"].into_iter().find(|p| std::path::Path::new(p).exists()).expect("dash is installed (Debian's /bin/sh)")
}

/// Runs the healthcheck through dash with the container's environment: its HTTP address, and
/// the directory `clankie` lives in on PATH, as /usr/local/bin is in the image.
async fn run_check(command: &str, http_addr: &str) -> i32 {
    let bin_dir = std::path::Path::new(env!("CARGO_BIN_EXE_clankie")).parent().unwrap().to_owned();
    let path = format!("{}:/usr/bin:/bin", bin_dir.display());
    let out = Command::new(dash())
        .arg("-c")
        .arg(command)
        .env_clear()
        .env("PATH", path)
        .env("CLANKIE_HTTP_ADDR", http_addr)
        .output()
        .await
        .unwrap();
    out.status.code().unwrap_or(-1)
}

async fn until_check(command: &str, http_addr: &str, want_zero: bool) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let code = run_check(command, http_addr).await;
        if (code == 0) == want_zero {
            return code;
        }
        assert!(Instant::now() < deadline, "the healthcheck stayed at {code}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn healthcheck_passes_for_a_ready_service_and_fails_when_its_nats_is_down_under_dash() {
    let command = compose_healthcheck();
    assert_eq!(command, "clankie health");
    let dockerfile = std::fs::read_to_string(workspace().join("Dockerfile")).unwrap();
    assert!(
        dockerfile.lines().any(|l| l.starts_with("HEALTHCHECK") && l.ends_with(&format!("CMD {command}"))),
        "the image runs the same check"
    );

    let (mut nats, dir) = (clankie_testkit::TestNats::start().unwrap(), clankie_testkit::TestDir::new());
    let port = clankie_stack::reserve_port().unwrap();
    let http_addr = format!("0.0.0.0:{}", port.port());
    // Nothing listens yet: the check fails, and says so without a shell's /dev/tcp.
    assert_ne!(run_check(&command, &http_addr).await, 0);

    let mut media = Command::new(env!("CARGO_BIN_EXE_clankie"))
        .arg("media")
        .env("CLANKIE_NATS_URL", nats.url())
        .env("CLANKIE_STATE_DIR", dir.path())
        .env("CLANKIE_HTTP_ADDR", &http_addr)
        .env("CLANKIE_LOG", "warn")
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    assert_eq!(until_check(&command, &http_addr, true).await, 0, "a ready service passes");
    nats.stop();
    let code = until_check(&command, &http_addr, false).await;
    assert_eq!(code, 1, "NATS down: /readyz answers 503 and the check fails");
    nats.restart().unwrap();
    assert_eq!(until_check(&command, &http_addr, true).await, 0, "back when NATS is");
    media.start_kill().unwrap();
}
