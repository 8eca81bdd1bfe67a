//! One chromedriver and the Chromium it starts, in a process group of their own.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncBufReadExt;

use crate::BrowseError;

/// A running chromedriver. Dropping it kills its whole process group (Chromium and its
/// helpers included) and removes the profile.
pub struct Driver {
    child: tokio::process::Child,
    pgid: i32,
    port: u16,
    profile: PathBuf,
}

impl Driver {
    /// Starts chromedriver on a port it picks itself, in a new process group.
    pub async fn start(chromedriver: &Path) -> Result<Driver, BrowseError> {
        let profile = std::env::temp_dir().join(format!("clankie-browser-{}-{}", std::process::id(), unique()));
        std::fs::create_dir_all(&profile).map_err(|e| BrowseError::Start(format!("profile: {e}")))?;
        let mut child = tokio::process::Command::new(chromedriver)
            .arg("--port=0")
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| BrowseError::Start(format!("{}: {e}", chromedriver.display())))?;
        let pgid = child.id().map(|p| p as i32).ok_or_else(|| BrowseError::Start("chromedriver exited at once".into()))?;
        let stdout = child.stdout.take().ok_or_else(|| BrowseError::Start("no output from chromedriver".into()))?;
        let mut driver = Driver { child, pgid, port: 0, profile };
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let port = tokio::time::timeout(Duration::from_secs(20), async {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(port) = line.split("started successfully on port ").nth(1) {
                    return port.trim().trim_end_matches('.').parse::<u16>().ok();
                }
            }
            None
        })
        .await
        .ok()
        .flatten()
        .ok_or_else(|| BrowseError::Start("chromedriver did not listen".into()))?;
        // Keep reading so a full pipe never blocks it.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        driver.port = port;
        Ok(driver)
    }

    /// The port its WebDriver endpoint listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The fresh Chromium profile of this browse.
    pub fn profile(&self) -> &Path {
        &self.profile
    }

    /// The process group everything it started runs in.
    pub fn process_group(&self) -> i32 {
        self.pgid
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // SAFETY: killpg only sends a signal to the group this driver created.
        unsafe {
            libc::killpg(self.pgid, libc::SIGKILL);
        }
        let _ = self.child.start_kill();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
