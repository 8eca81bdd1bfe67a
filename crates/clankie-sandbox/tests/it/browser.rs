//! A person's view: headless Chromium, driven over WebDriver, chats in the sandbox page.

use std::process::Stdio;
use std::time::Duration;

use clankie_model_standin::{Reply, Script};
use fantoccini::{ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;

use super::{GENERAL, Rig};

/// chromedriver, killed when dropped.
struct Driver(#[allow(dead_code)] tokio::process::Child, u16);

impl Driver {
    /// chromedriver on a port it picks itself (`--port=0`) and prints: no window between
    /// choosing a free port and binding it for another test to take it.
    async fn start() -> Driver {
        use tokio::io::AsyncBufReadExt;
        let mut child = tokio::process::Command::new("chromedriver")
            .arg("--port=0")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("chromedriver is installed (deploy/local/lib.sh installs chromium-driver)");
        let mut lines = tokio::io::BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let port = tokio::time::timeout(Duration::from_secs(20), async {
            while let Some(line) = lines.next_line().await.expect("chromedriver's output") {
                if let Some(port) = line.split("started successfully on port ").nth(1) {
                    return port.trim().trim_end_matches('.').parse::<u16>().expect("a port number");
                }
            }
            panic!("chromedriver exited before it listened");
        })
        .await
        .expect("chromedriver did not listen");
        // Keep draining its output so a full pipe never blocks it.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Driver(child, port)
    }
}

#[tokio::test]
async fn a_person_chats_in_the_sandbox_and_sees_clankie_reply() {
    let rig = Rig::new().await;
    rig.standin.script(Script::any(Reply::Text {
        text: "Hello from the other side of the loopback!".into(),
        chunk_chars: 3,
        chunk_delay_ms: 40,
        first_delay_ms: 300,
        tail_delay_ms: 0,
    }));
    let driver = Driver::start().await;
    let profile = clankie_testkit::TestDir::new();
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({
            "binary": "/usr/bin/chromium",
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync", "--window-size=1100,700",
                format!("--user-data-dir={}", profile.path().display()),
            ],
        }),
    );
    let browser = ClientBuilder::new(HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{}", driver.1))
        .await
        .expect("a WebDriver session");

    browser.goto(&rig.sandbox.url()).await.unwrap();
    let author = browser.wait().for_element(Locator::Id("author")).await.unwrap();
    author.clear().await.unwrap();
    author.send_keys("ada").await.unwrap();
    let text = browser.find(Locator::Id("text")).await.unwrap();
    text.send_keys("@Clankie hello from the browser").await.unwrap();
    browser.find(Locator::Id("send")).await.unwrap().click().await.unwrap();

    // Clankie's reply appears on the page, and the message shows its outcome.
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !seen.contains("Hello from the other side") {
        assert!(tokio::time::Instant::now() < deadline, "no reply on the page; it shows: {seen}");
        tokio::time::sleep(Duration::from_millis(200)).await;
        seen = browser.find(Locator::Id("log")).await.unwrap().text().await.unwrap();
    }
    let badge_deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let badges = browser.find_all(Locator::Css(".msg.user .badge.outcome")).await.unwrap();
        let mut texts = Vec::new();
        for b in &badges {
            texts.push(b.text().await.unwrap());
        }
        if texts.iter().any(|t| t == "replied") {
            break;
        }
        assert!(tokio::time::Instant::now() < badge_deadline, "no outcome badge: {texts:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let posts = rig.sandbox.discord.posts(GENERAL);
    assert_eq!(posts.len(), 1);
    assert!(seen.contains("ada"), "the person's own message shows: {seen}");

    let png = browser.screenshot().await.unwrap();
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("sandbox-reply.png");
    std::fs::write(&path, &png).unwrap();
    eprintln!("screenshot saved to {}", path.display());
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    browser.close().await.unwrap();
}
