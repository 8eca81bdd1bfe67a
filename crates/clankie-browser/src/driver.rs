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

/// How many times a start whose IPv6 port was taken is tried.
const START_ATTEMPTS: usize = 5;

impl Driver {
    /// Starts chromedriver on a port it picks itself, in a new process group.
    ///
    /// With `--port=0` chromedriver takes a free IPv4 port and then the same port on IPv6; when
    /// another process holds that one it says "IPv6 port not available" and exits. That
    /// collision is started again, a few times; any other failure is reported with what
    /// chromedriver said.
    pub async fn start(chromedriver: &Path) -> Result<Driver, BrowseError> {
        let mut said = Vec::new();
        for _ in 0..START_ATTEMPTS {
            match Driver::start_once(chromedriver).await? {
                Ok(driver) => return Ok(driver),
                Err(lines) if lines.iter().any(|l| l.contains("port not available")) => said = lines,
                Err(lines) => return Err(BrowseError::Start(format!("chromedriver did not listen: {}", lines.join(" | ")))),
            }
        }
        Err(BrowseError::Start(format!("chromedriver's port was taken {START_ATTEMPTS} times: {}", said.join(" | "))))
    }

    /// One start: the driver, or what chromedriver printed before it exited or gave up.
    async fn start_once(chromedriver: &Path) -> Result<Result<Driver, Vec<String>>, BrowseError> {
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
        let mut said = Vec::new();
        let port = tokio::time::timeout(Duration::from_secs(20), async {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(port) = line.split("started successfully on port ").nth(1) {
                    return port.trim().trim_end_matches('.').parse::<u16>().ok();
                }
                said.push(line);
            }
            None
        })
        .await
        .ok()
        .flatten();
        let Some(port) = port else { return Ok(Err(said)) };
        // Keep reading so a full pipe never blocks it.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        driver.port = port;
        Ok(Ok(driver))
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
