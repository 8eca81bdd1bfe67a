//! The browser host: look at a page in headless Chromium, read it, take its picture.
//!
//! Each browse runs a fresh chromedriver (which starts Chromium) in a process
//! group of its own, with a fresh profile, and kills the whole group when it
//! ends, so a browser that crashes or hangs takes nothing with it and leaves
//! nothing behind. The URL is checked by the egress guard before anything
//! starts, and Chromium reaches the network only through the guard's proxy
//! (loopback included), so a redirect, a subresource or an address literal in
//! the page is checked as well. Downloads are refused and dialogs dismissed.
//! At most `max` browsers run at once; further browses queue.

mod driver;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clankie_egress::proxy::GuardProxy;
use clankie_egress::{EgressGuard, Refusal};
use fantoccini::{Client, ClientBuilder};
use tokio::sync::Semaphore;

pub use driver::Driver;

/// How the host browses.
#[derive(Debug, Clone)]
pub struct BrowserConfig {
    pub chromium: PathBuf,
    pub chromedriver: PathBuf,
    /// Browsers running at once; more browses wait for one to finish.
    pub max: usize,
    /// The viewport, and so the screenshot's size, in CSS pixels.
    pub viewport: (u32, u32),
    /// How long one browse may take once it has a browser, loading and settling included.
    pub deadline: Duration,
    /// The most page text a browse returns.
    pub text_max_chars: usize,
}

impl BrowserConfig {
    /// Debian's Chromium and chromedriver, two at a time, 1280×800, 30 s.
    pub fn debian() -> BrowserConfig {
        BrowserConfig {
            chromium: "/usr/bin/chromium".into(),
            chromedriver: "/usr/bin/chromedriver".into(),
            max: 2,
            viewport: (1280, 800),
            deadline: Duration::from_secs(30),
            text_max_chars: 8_000,
        }
    }

    /// The configuration the settings name.
    pub fn from_settings(settings: &clankie_settings::Settings) -> BrowserConfig {
        BrowserConfig {
            chromium: settings.chromium.clone(),
            chromedriver: settings.chromedriver.clone(),
            max: settings.browsers_max,
            viewport: settings.browser_viewport,
            deadline: settings.browse_deadline,
            text_max_chars: 8_000,
        }
    }

    /// Whether both programs are installed.
    pub fn installed(&self) -> bool {
        self.chromium.is_file() && self.chromedriver.is_file()
    }
}

/// What a browse saw.
#[derive(Debug, Clone)]
pub struct Page {
    /// Where the browser ended up, after redirects.
    pub url: String,
    pub title: String,
    /// The page's readable text, at most `text_max_chars`.
    pub text: String,
    /// A PNG of the viewport, when one was asked for.
    pub screenshot: Option<Vec<u8>>,
}

/// Why a browse gave nothing.
#[derive(Debug, thiserror::Error)]
pub enum BrowseError {
    #[error("that page is not opened: {0}")]
    Refused(#[from] Refusal),
    #[error("the page did not finish loading within {} s", .0.as_secs())]
    Deadline(Duration),
    #[error("the browser could not be started ({0})")]
    Start(String),
    #[error("the browser failed ({0})")]
    Browser(String),
}

/// The host `CLANKIE_BROWSE` asks for: none when off, or when `auto` finds no browser
/// installed; an error when `on` finds none.
pub async fn host_from_settings(
    settings: &clankie_settings::Settings,
    guard: EgressGuard,
) -> Result<Option<Arc<BrowserHost>>, BrowseError> {
    let config = BrowserConfig::from_settings(settings);
    match settings.browse {
        clankie_settings::BrowseMode::Off => return Ok(None),
        clankie_settings::BrowseMode::Auto if !config.installed() => {
            tracing::info!("browse tool off: Chromium or chromedriver is not installed (CLANKIE_BROWSE=auto)");
            return Ok(None);
        }
        clankie_settings::BrowseMode::On if !config.installed() => {
            return Err(BrowseError::Start(format!(
                "CLANKIE_BROWSE=on but {} or {} is missing",
                config.chromium.display(),
                config.chromedriver.display()
            )));
        }
        _ => {}
    }
    let host = BrowserHost::new(config, guard).await.map_err(|e| BrowseError::Start(format!("the guard proxy: {e}")))?;
    Ok(Some(Arc::new(host)))
}

/// Runs browses, at most `max` at a time.
impl std::fmt::Debug for BrowserHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrowserHost").field("config", &self.config).field("proxy", &self.proxy.addr()).finish()
    }
}

pub struct BrowserHost {
    config: BrowserConfig,
    guard: EgressGuard,
    proxy: GuardProxy,
    slots: Arc<Semaphore>,
}

impl BrowserHost {
    /// A host whose browsers reach the network only through `guard`.
    pub async fn new(config: BrowserConfig, guard: EgressGuard) -> std::io::Result<BrowserHost> {
        let proxy = GuardProxy::start(guard.clone()).await?;
        let slots = Arc::new(Semaphore::new(config.max.max(1)));
        Ok(BrowserHost { config, guard, proxy, slots })
    }

    /// Its configuration.
    pub fn config(&self) -> &BrowserConfig {
        &self.config
    }

    /// Connections the guard's proxy refused so far, across every browse.
    pub fn refused_connections(&self) -> u64 {
        self.proxy.refused()
    }

    /// Opens `url`, waits for it to settle, reads its text and, if asked, takes its picture.
    ///
    /// `alive` is called while the browse waits and works, at least once a second: the
    /// caller's sign of life. The deadline starts once a browser is free.
    pub async fn browse(&self, url: &str, screenshot: bool, alive: &(dyn Fn() + Send + Sync)) -> Result<Page, BrowseError> {
        let parsed = clankie_egress::Url::parse(url).map_err(|_| Refusal::BadUrl)?;
        self.guard.resolve(&parsed).await?;
        let slot =
            tick_while(alive, self.slots.clone().acquire_owned()).await.map_err(|_| BrowseError::Browser("the host is shut".into()))?;
        let started = std::time::Instant::now();
        let result = tick_while(alive, tokio::time::timeout(self.config.deadline, self.look(parsed.as_str(), screenshot))).await;
        drop(slot);
        tracing::debug!(ms = started.elapsed().as_millis() as u64, ok = matches!(result, Ok(Ok(_))), "browse ended");
        result.unwrap_or(Err(BrowseError::Deadline(self.config.deadline)))
    }

    async fn look(&self, url: &str, screenshot: bool) -> Result<Page, BrowseError> {
        // Dropped on every path out of here, the deadline's included: the whole group dies with it.
        let driver = Driver::start(&self.config.chromedriver).await?;
        let client = self.session(&driver).await?;
        let page = self.read(&client, url, screenshot).await;
        let _ = client.close().await;
        page
    }

    async fn session(&self, driver: &Driver) -> Result<Client, BrowseError> {
        let (w, h) = self.config.viewport;
        let mut caps = serde_json::Map::new();
        caps.insert("unhandledPromptBehavior".into(), "dismiss".into());
        caps.insert("pageLoadStrategy".into(), "normal".into());
        caps.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({
                "binary": self.config.chromium,
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
                    "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    "--disable-extensions", "--disable-features=MediaRouter,OptimizationHints",
                    "--hide-scrollbars", "--mute-audio",
                    format!("--window-size={w},{h}"),
                    format!("--proxy-server=http://{}", self.proxy.addr()),
                    // Chromium sends loopback around a proxy unless told not to; the guard must see it too.
                    "--proxy-bypass-list=<-loopback>",
                    format!("--user-data-dir={}", driver.profile().display()),
                ],
                "prefs": { "download_restrictions": 3, "download.prompt_for_download": false },
            }),
        );
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{}", driver.port()))
            .await
            .map_err(|e| BrowseError::Start(e.to_string()))?;
        let timeouts = fantoccini::wd::TimeoutConfiguration::new(Some(self.config.deadline), Some(self.config.deadline), None);
        client.update_timeouts(timeouts).await.map_err(browser_error)?;
        // The window includes whatever frame the browser draws; grow it by that much so the
        // viewport, and so the picture, is the configured size.
        let frame = client
            .execute("return [window.outerWidth - window.innerWidth, window.outerHeight - window.innerHeight]", vec![])
            .await
            .map_err(browser_error)?;
        let extra = |i: usize| frame.get(i).and_then(serde_json::Value::as_u64).unwrap_or(0) as u32;
        client.set_window_size(w + extra(0), h + extra(1)).await.map_err(browser_error)?;
        Ok(client)
    }

    async fn read(&self, client: &Client, url: &str, screenshot: bool) -> Result<Page, BrowseError> {
        dismissing(client, || client.goto(url)).await?;
        // Settled: the document is complete and its fonts are in, so the picture shows the page as drawn.
        let settle = "return document.fonts ? document.fonts.ready.then(() => document.readyState) : document.readyState";
        dismissing(client, || client.execute(settle, vec![])).await?;
        let title = dismissing(client, || client.title()).await.unwrap_or_default();
        let final_url = dismissing(client, || client.current_url()).await.map(|u| u.to_string()).unwrap_or_else(|_| url.to_owned());
        let text = dismissing(client, || client.execute("return document.body ? document.body.innerText : ''", vec![]))
            .await?
            .as_str()
            .unwrap_or_default()
            .chars()
            .take(self.config.text_max_chars)
            .collect();
        let screenshot = if screenshot { Some(dismissing(client, || client.screenshot()).await?) } else { None };
        Ok(Page { url: final_url, title, text, screenshot })
    }
}

/// Runs a WebDriver command, dismissing any dialog the page opens in its way.
async fn dismissing<T, F, Fut>(client: &Client, command: F) -> Result<T, BrowseError>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T, fantoccini::error::CmdError>>,
{
    const DIALOGS: usize = 20;
    for _ in 0..DIALOGS {
        match command().await {
            Err(e) if is_dialog(&e) => {
                let _ = client.dismiss_alert().await;
            }
            other => return other.map_err(browser_error),
        }
    }
    Err(BrowseError::Browser(format!("the page kept opening dialogs ({DIALOGS} dismissed)")))
}

fn is_dialog(e: &fantoccini::error::CmdError) -> bool {
    matches!(e, fantoccini::error::CmdError::Standard(w) if w.error == fantoccini::error::ErrorStatus::UnexpectedAlertOpen)
}

fn browser_error(e: fantoccini::error::CmdError) -> BrowseError {
    BrowseError::Browser(e.to_string().chars().take(200).collect())
}

/// Awaits `work`, calling `alive` every half second meanwhile.
async fn tick_while<T>(alive: &(dyn Fn() + Send + Sync), work: impl std::future::Future<Output = T>) -> T {
    tokio::pin!(work);
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            out = &mut work => return out,
            _ = tick.tick() => alive(),
        }
    }
}

/// The width and height a PNG declares in its header.
pub fn png_size(png: &[u8]) -> Option<(u32, u32)> {
    if png.len() < 24 || &png[..8] != b"\x89PNG\r\n\x1a\n" || &png[12..16] != b"IHDR" {
        return None;
    }
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    Some((be(&png[16..20]), be(&png[20..24])))
}
