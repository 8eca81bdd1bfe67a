//! A person's view: headless Chromium, driven over WebDriver, chats in the sandbox page.

use std::process::Stdio;
use std::time::Duration;

use clankie_model_standin::{Reply, Script};
use fantoccini::{ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;

use super::{GENERAL, Rig};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

/// chromedriver, killed when dropped.
struct Driver(#[allow(dead_code)] tokio::process::Child, u16);

impl Driver {
    async fn start() -> Driver {
        let port = free_port();
        let child = tokio::process::Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("chromedriver is installed (deploy/local/lib.sh installs chromium-driver)");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            assert!(tokio::time::Instant::now() < deadline, "chromedriver did not listen");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
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
