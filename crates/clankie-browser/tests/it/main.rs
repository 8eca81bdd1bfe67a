//! The browser host with real Chromium and chromedriver (Debian's packages) against pages
//! this test serves on loopback, through an allow list naming only those pages.

use std::time::{Duration, Instant};

use clankie_browser::{BrowseError, BrowserConfig, BrowserHost, png_size};
use clankie_egress::{AllowList, EgressGuard};
use clankie_testkit::pages::{Answer, TestPages};

const PHRASE: &str = "The kestrel hovers over the ninth lobby";

fn config(max: usize, deadline: Duration) -> BrowserConfig {
    BrowserConfig { max, viewport: (800, 600), deadline, ..BrowserConfig::debian() }
}

async fn host(pages: &TestPages, max: usize, deadline: Duration) -> BrowserHost {
    let allow = AllowList::parse(&pages.addr().to_string()).unwrap();
    BrowserHost::new(config(max, deadline), EgressGuard::new(allow)).await.unwrap()
}

fn page(body: &str) -> Answer {
    Answer::html(format!("<!doctype html><html><head><title>Lobby</title></head><body><h1>{body}</h1></body></html>"))
}

/// Processes (pid, process group, state) still running with a profile this test process made.
fn browsers_running() -> Vec<(u32, i32, char)> {
    let mark = format!("clankie-browser-{}-", std::process::id());
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            if !String::from_utf8_lossy(&cmdline).contains(&mark) {
                return None;
            }
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let after = stat.rsplit_once(')')?.1.split_whitespace().collect::<Vec<_>>();
            let state = after.first()?.chars().next()?;
            let pgid = after.get(2)?.parse().ok()?;
            (state != 'Z').then_some((pid, pgid, state))
        })
        .collect()
}

/// Waits (boundedly) for every browser process of this test to be gone: a SIGKILLed
/// process still needs a moment to exit.
async fn browsers_left() -> Vec<(u32, i32, char)> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = browsers_running();
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn no_alive() -> impl Fn() + Send + Sync {
    || {}
}

#[tokio::test]
async fn browse_reads_a_page_and_takes_a_picture_the_size_of_the_viewport() {
    let pages = TestPages::start("127.0.0.1", vec![("/lobby", page(PHRASE))]).await.unwrap();
    let host = host(&pages, 1, Duration::from_secs(30)).await;
    let alive_calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = alive_calls.clone();
    let alive = move || {
        counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    };
    let page = host.browse(&pages.url("/lobby"), true, &alive).await.unwrap();
    assert!(page.text.contains(PHRASE), "{:?}", page.text);
    assert_eq!(page.title, "Lobby");
    let png = page.screenshot.expect("a screenshot");
    assert_eq!(png_size(&png), Some((800, 600)), "the picture is the configured viewport");
    let saved = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("browse-lobby.png");
    std::fs::write(&saved, &png).unwrap();
    eprintln!("screenshot saved to {}", saved.display());
    assert!(alive_calls.load(std::sync::atomic::Ordering::SeqCst) >= 1, "the browse showed signs of life");
    assert_eq!(browsers_left().await, [], "the browser's process group is gone");
}

#[tokio::test]
async fn browse_refuses_an_address_off_the_allow_list_before_starting_a_browser() {
    let pages = TestPages::start("127.0.0.1", vec![("/lobby", page(PHRASE))]).await.unwrap();
    let private = TestPages::start("127.0.0.2", vec![("/admin", page("internal"))]).await.unwrap();
    let host = host(&pages, 1, Duration::from_secs(30)).await;
    for url in [private.url("/admin"), "file:///etc/passwd".into(), "http://169.254.169.254/latest/meta-data/".into()] {
        let started = Instant::now();
        let refused = host.browse(&url, false, &no_alive()).await;
        assert!(matches!(refused, Err(BrowseError::Refused(_))), "{url}: {refused:?}");
        assert!(started.elapsed() < Duration::from_secs(2), "refused before any browser started");
    }
    assert_eq!(private.all_hits(), 0);
    assert_eq!(browsers_left().await, []);
}

/// A page on an allowed address that pulls a picture from one that is not: the guard's proxy
/// refuses that connection, so nothing reaches the private address.
#[tokio::test]
async fn browse_sends_every_connection_the_page_makes_through_the_guard() {
    let private = TestPages::start("127.0.0.2", vec![("/canary.png", page("x"))]).await.unwrap();
    let lure = format!(
        "<!doctype html><body><h1>{PHRASE}</h1><img src=\"{}\"><img src=\"http://localhost:{}/canary.png\"></body>",
        private.url("/canary.png"),
        private.addr().port()
    );
    let pages = TestPages::start("127.0.0.1", vec![("/lure", Answer::html(lure))]).await.unwrap();
    let host = host(&pages, 1, Duration::from_secs(30)).await;
    let page = host.browse(&pages.url("/lure"), false, &no_alive()).await.unwrap();
    assert!(page.text.contains(PHRASE));
    assert_eq!(private.all_hits(), 0, "the page reached an address off the allow list");
    assert!(host.refused_connections() >= 1, "the guard saw the subresource");
}

#[tokio::test]
async fn browse_of_a_page_that_never_loads_ends_at_its_deadline_and_kills_the_browser() {
    let pages = TestPages::start("127.0.0.1", vec![("/forever", Answer::Hang)]).await.unwrap();
    // Long enough for chromedriver and Chromium to start and ask for the page on a loaded 2-core
    // machine (3 s once ran out before the page was asked for).
    let deadline = Duration::from_secs(8);
    let host = host(&pages, 1, deadline).await;
    let started = Instant::now();
    let result = host.browse(&pages.url("/forever"), true, &no_alive()).await;
    let took = started.elapsed();
    assert!(matches!(result, Err(BrowseError::Deadline(_))), "{result:?}");
    assert!(took >= deadline && took < deadline + Duration::from_secs(3), "took {took:?}");
    assert_eq!(pages.hits("/forever"), 1, "the browser did ask for the page");
    assert_eq!(browsers_left().await, [], "the hung browser's process group was killed");
}

#[tokio::test]
async fn browse_queues_when_every_browser_is_busy() {
    // Each page takes a second to answer, so two browsers at once would overlap on it.
    let slow = Answer::Html { body: format!("<h1>{PHRASE}</h1>"), delay: Duration::from_secs(1) };
    let pages = TestPages::start("127.0.0.1", vec![("/slow", slow)]).await.unwrap();
    let host = host(&pages, 1, Duration::from_secs(30)).await;
    let (url, alive) = (pages.url("/slow"), no_alive());
    let (a, b) = tokio::join!(host.browse(&url, false, &alive), host.browse(&url, false, &alive));
    assert!(a.unwrap().text.contains(PHRASE));
    assert!(b.unwrap().text.contains(PHRASE));
    assert_eq!(pages.hits("/slow"), 2);
    assert_eq!(pages.most_in_flight(), 1, "with one browser allowed, the second browse waited");
}

#[tokio::test]
async fn browse_dismisses_dialogs_and_refuses_downloads() {
    // Chromium saves downloads under $HOME/Downloads: a home of the test's own shows every file.
    let home = clankie_testkit::TestDir::new();
    let downloads = home.path().join("Downloads");
    // SAFETY: nextest runs each test in its own process, before any browser starts.
    unsafe { std::env::set_var("HOME", home.path()) };
    let alert = Answer::html(format!("<!doctype html><body><h1>{PHRASE}</h1><script>alert('hello'); confirm('sure?');</script></body>"));
    let file = Answer::Download { content_type: "application/octet-stream".into(), body: b"MZ not a program".to_vec() };
    let pages = TestPages::start("127.0.0.1", vec![("/alert", alert), ("/payload", file)]).await.unwrap();
    // The control: the same Chromium, driven without the host's refusal, saves the download
    // there; so an empty folder after the host's browse is the host's doing.
    let saved_by_plain_chromium = plain_chromium_download(&pages.url("/payload"), &downloads).await;
    assert!(
        !saved_by_plain_chromium.is_empty(),
        "plain Chromium saved nothing under {}: the check below would prove nothing",
        downloads.display()
    );
    std::fs::remove_dir_all(&downloads).unwrap();
    let host = host(&pages, 1, Duration::from_secs(20)).await;
    let page = host.browse(&pages.url("/alert"), false, &no_alive()).await.unwrap();
    assert!(page.text.contains(PHRASE), "the dialogs did not hold the page: {:?}", page.text);
    let fetched = host.browse(&pages.url("/payload"), false, &no_alive()).await;
    assert_eq!(pages.hits("/payload"), 2, "the browser asked for the download (after the control)");
    if let Ok(page) = &fetched {
        assert!(!page.text.contains("MZ"), "the download's bytes reached the page text: {:?}", page.text);
    }
    // Once no browser is left, nothing can still be writing the file.
    assert_eq!(browsers_left().await, []);
    let saved: Vec<_> =
        std::fs::read_dir(&downloads).map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect()).unwrap_or_default();
    assert!(saved.is_empty(), "a download was saved: {saved:?}");
}

/// Chromium through chromedriver with the host's flags but none of its refusals: what it saves
/// of `url` under `downloads` within 15 s (names of finished files).
async fn plain_chromium_download(url: &str, downloads: &std::path::Path) -> Vec<std::ffi::OsString> {
    let config = BrowserConfig::debian();
    let driver = clankie_browser::Driver::start(&config.chromedriver).await.unwrap();
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({
            "binary": config.chromium,
            "args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                     format!("--user-data-dir={}", driver.profile().display())],
        }),
    );
    let client = fantoccini::ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{}", driver.port()))
        .await
        .unwrap();
    let _ = client.goto(url).await;
    let finished = || -> Vec<std::ffi::OsString> {
        std::fs::read_dir(downloads)
            .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).filter(|n| !n.to_string_lossy().ends_with(".crdownload")).collect())
            .unwrap_or_default()
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    while finished().is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = client.close().await;
    drop(driver);
    finished()
}
