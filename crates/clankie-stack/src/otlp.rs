//! An OTLP/HTTP trace receiver (`deploy/otel/receiver.py`, on the `opentelemetry-proto` wheel):
//! what the trace tests export to, and what `clankie trail` users can point
//! `OTEL_EXPORTER_OTLP_ENDPOINT` at to look at a trace by hand. Installed like the speech
//! engines: pinned wheels, `pip install --no-deps --target`, outside the clone.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::StackError;

const RECEIVER: &str = include_str!("../../../deploy/otel/receiver.py");

/// The pinned set: OpenTelemetry's protobuf classes and the protobuf runtime they need.
pub const OTLP_WHEELS: &[&str] = &["opentelemetry-proto==1.45.2", "protobuf==7.36.2"];

/// Where the set is installed, under `CLANKIE_TOOLS_DIR`.
pub fn otlp_dir() -> PathBuf {
    crate::wheels::tools_dir().join("otlp-receiver-proto-1.45.2")
}

fn installed(dir: &Path) -> bool {
    dir.join("opentelemetry").join("proto").is_dir() && dir.join("google").join("protobuf").is_dir()
}

/// Installs the receiver's wheels into [`otlp_dir`] unless they are there, saying so through `progress`.
pub fn ensure_otlp(progress: &mut dyn FnMut(&str)) -> Result<PathBuf, StackError> {
    let dir = otlp_dir();
    if installed(&dir) {
        return Ok(dir);
    }
    progress(&format!(
        "installing the OTLP trace receiver's wheels from PyPI ({}; about 2 MB) into {}",
        OTLP_WHEELS.join(", "),
        dir.display()
    ));
    let wheels: Vec<String> = OTLP_WHEELS.iter().map(|w| (*w).to_owned()).collect();
    crate::wheels::install(&dir, &wheels, "the OTLP receiver", installed)?;
    progress("installed the OTLP receiver");
    Ok(dir)
}

/// A running receiver, killed when dropped (and exiting when its owner does).
pub struct OtlpReceiver {
    server: crate::wheels::PythonServer,
    dir: PathBuf,
    mode: Mode,
}

/// Whether the receiver keeps what it is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Keep,
    Count,
}

impl OtlpReceiver {
    /// Installs the wheels if needed and starts the receiver on a free port, returning once it answers.
    pub fn start(progress: &mut dyn FnMut(&str)) -> Result<OtlpReceiver, StackError> {
        let dir = ensure_otlp(progress)?;
        let server = Self::spawn(&dir, None, Mode::Keep)?;
        Ok(OtlpReceiver { server, dir, mode: Mode::Keep })
    }

    /// A receiver that takes every export and keeps nothing (`--count-only`): what exporting
    /// costs the exporter, with no collector's decoding on the same machine.
    pub fn start_counting(progress: &mut dyn FnMut(&str)) -> Result<OtlpReceiver, StackError> {
        let dir = ensure_otlp(progress)?;
        let server = Self::spawn(&dir, None, Mode::Count)?;
        Ok(OtlpReceiver { server, dir, mode: Mode::Count })
    }

    fn spawn(dir: &Path, port: Option<u16>, mode: Mode) -> Result<crate::wheels::PythonServer, StackError> {
        crate::wheels::PythonServer::start("otlp", "OTLP receiver", dir, port, "/healthz", Duration::from_secs(30), |command, port| {
            command.arg("-c").arg(RECEIVER).args(["--die-with-stdin", "--port", &port.to_string()]);
            if mode == Mode::Count {
                command.arg("--count-only");
            }
        })
    }

    /// The base URL for `OTEL_EXPORTER_OTLP_ENDPOINT` (`/v1/traces` is appended by the exporter).
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.server.port())
    }

    pub fn port(&self) -> u16 {
        self.server.port()
    }

    /// Every span received so far, as the receiver serves them (`{"requests": n, "spans": [...]}`).
    pub fn spans_json(&self) -> Result<String, StackError> {
        match crate::wheels::get(self.server.port(), "/spans") {
            Ok((200, body)) => Ok(body),
            Ok((status, _)) => Err(StackError::NotReady {
                what: "OTLP receiver",
                port: self.server.port(),
                waited: Duration::ZERO,
                log: format!("{} (GET /spans answered {status})", self.server.log().display()),
            }),
            Err(source) => Err(StackError::Io { path: self.server.log().to_owned(), source }),
        }
    }

    /// Kills the receiver: a collector that went away.
    pub fn stop(&mut self) {
        self.server.stop();
    }

    /// Starts it again on the same port, empty.
    pub fn restart(&mut self) -> Result<(), StackError> {
        let port = self.server.port();
        self.server.stop();
        self.server = Self::spawn(&self.dir, Some(port), self.mode)?;
        Ok(())
    }
}
