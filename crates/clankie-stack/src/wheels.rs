//! Pinned PyPI wheels installed outside the clone, and the Python servers the stack runs from them.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::StackError;

/// Where the machine's tools live: `CLANKIE_TOOLS_DIR`, else `/var/tmp/clankie-tools`.
pub(crate) fn tools_dir() -> PathBuf {
    std::env::var_os("CLANKIE_TOOLS_DIR").map_or_else(|| PathBuf::from("/var/tmp/clankie-tools"), PathBuf::from)
}

/// Installs `wheels` (each `name==version`, the whole set pinned, so nothing is resolved) with
/// `pip install --no-deps --target` into `dir`. The install goes to a sibling directory renamed
/// into place, so a concurrent or interrupted install never leaves a half-filled one behind;
/// another process that finished first wins. `what` names the set in errors.
pub(crate) fn install(dir: &Path, wheels: &[String], what: &'static str, installed: impl Fn(&Path) -> bool) -> Result<(), StackError> {
    let parent = dir.parent().unwrap_or(Path::new("/var/tmp"));
    std::fs::create_dir_all(parent).map_err(|source| StackError::Io { path: parent.to_owned(), source })?;
    let staging = parent.join(format!(".{}.{}", dir.file_name().and_then(|n| n.to_str()).unwrap_or("wheels"), std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    let output = Command::new("python3")
        .args(["-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", "--target"])
        .arg(&staging)
        .args(wheels)
        // A directory of our own, never the system's site-packages: Debian's "externally
        // managed" guard has nothing to protect here.
        .env("PIP_BREAK_SYSTEM_PACKAGES", "1")
        .stdin(Stdio::null())
        .output()
        .map_err(|source| StackError::Spawn { program: "python3 -m pip".into(), source })?;
    if !output.status.success() {
        let _ = std::fs::remove_dir_all(&staging);
        let said = String::from_utf8_lossy(&output.stderr);
        let last = said.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").chars().take(300).collect::<String>();
        let said = match pip_cause(&said) {
            Some(cause) => format!("{cause} (pip's last line: {last})"),
            None => last,
        };
        return Err(StackError::PipInstall { what, status: output.status.to_string(), said });
    }
    match std::fs::rename(&staging, dir) {
        Ok(()) => Ok(()),
        Err(_) if installed(dir) => {
            let _ = std::fs::remove_dir_all(&staging);
            Ok(())
        }
        Err(source) => Err(StackError::Io { path: dir.to_owned(), source }),
    }
}

/// What pip's retries say went wrong, where its last line only says no distribution matched:
/// a certificate the machine does not trust, or an index it cannot reach.
pub(crate) fn pip_cause(stderr: &str) -> Option<&'static str> {
    let lower = stderr.to_ascii_lowercase();
    if lower.contains("certificate_verify_failed") || lower.contains("sslerror") || lower.contains("ssl certificate") {
        Some(
            "TLS to the package index failed: this machine (or image) does not trust the certificate it was shown; add the CA to the system bundle (/etc/ssl/certs) or point PIP_CERT at one that holds it",
        )
    } else if lower.contains("temporary failure in name resolution")
        || lower.contains("name or service not known")
        || lower.contains("newconnectionerror")
        || lower.contains("connection refused")
    {
        Some("the package index could not be reached: check the network, or PIP_INDEX_URL and the proxy settings")
    } else {
        None
    }
}

/// A Python server on a loopback port, its output in a log file of its own, killed when dropped.
pub(crate) struct PythonServer {
    child: Child,
    port: u16,
    log: PathBuf,
    _reserved: Option<crate::ReservedPort>,
}

impl PythonServer {
    /// Runs `python3` with the wheels in `dir` on its path, on `port` (or a free one it reserves),
    /// its output in `<name>.log`; `configure` adds the arguments for the port it is given. Returns
    /// once `GET health` answers 200 and fails when the process exits or `ready_within` passes.
    pub(crate) fn start(
        name: &str,
        what: &'static str,
        dir: &Path,
        port: Option<u16>,
        health: &str,
        ready_within: Duration,
        configure: impl FnOnce(&mut Command, u16),
    ) -> Result<PythonServer, StackError> {
        let reserved = match port {
            Some(_) => None,
            None => Some(crate::reserve_port().map_err(|source| StackError::Io { path: std::env::temp_dir(), source })?),
        };
        let port = port.or(reserved.as_ref().map(crate::ReservedPort::port)).unwrap_or(0);
        let logs = crate::nats::unique_dir(&format!("clankie-{name}"))?;
        let log = logs.join(format!("{name}.log"));
        let file = std::fs::File::create(&log).map_err(|source| StackError::Io { path: log.clone(), source })?;
        let err = file.try_clone().map_err(|source| StackError::Io { path: log.clone(), source })?;
        let mut command = Command::new("python3");
        configure(&mut command, port);
        let child = command
            .env("PYTHONPATH", dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::from(file))
            .stderr(Stdio::from(err))
            .spawn()
            .map_err(|source| StackError::Spawn { program: format!("python3 ({what})"), source })?;
        let mut server = PythonServer { child, port, log, _reserved: reserved };
        let start = Instant::now();
        loop {
            if matches!(get(port, health), Ok((200, _))) {
                return Ok(server);
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(StackError::Failed { program: what.into(), status: status.to_string(), log: server.log.display().to_string() });
            }
            if start.elapsed() > ready_within {
                return Err(StackError::NotReady { what, port, waited: ready_within, log: server.log.display().to_string() });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    pub(crate) fn log(&self) -> &Path {
        &self.log
    }

    pub(crate) fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub(crate) fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        self.child.wait()
    }
}

impl Drop for PythonServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A plain HTTP/1.1 GET on loopback: the status and the body.
pub(crate) fn get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = std::net::TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(stream, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let status = response.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = response.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_owned();
    Ok((status, body))
}

#[cfg(test)]
mod pip_tests {
    use super::pip_cause;

    #[test]
    fn pip_a_tls_failure_is_named_for_what_it_is_not_a_missing_distribution() {
        let tls = "WARNING: Retrying (Retry(total=4)) after connection broken by 'SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: unable to get local issuer certificate'))': /simple/piper-tts/\nERROR: Could not find a version that satisfies the requirement piper-tts==1.8.0\nERROR: No matching distribution found for piper-tts==1.8.0";
        assert!(pip_cause(tls).is_some_and(|c| c.starts_with("TLS to the package index failed")));
        let dns = "WARNING: Retrying ... NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection>: Failed to establish a new connection: [Errno -3] Temporary failure in name resolution')\nERROR: No matching distribution found for x==1";
        assert!(pip_cause(dns).is_some_and(|c| c.contains("could not be reached")));
        assert_eq!(
            pip_cause("ERROR: No matching distribution found for nosuchwheel==9"),
            None,
            "a real missing wheel is left as pip said it"
        );
    }
}
