use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{Endpoint, ProcessState, StackError, pid_alive, run};

/// A PostgreSQL cluster of our own, created with initdb and run with pg_ctl.
///
/// PostgreSQL refuses to run as root, so under root the cluster lives in the
/// `postgres` user's home and every command runs as that user.
#[derive(Debug, Clone)]
pub struct PostgresCluster {
    bin: PathBuf,
    data: PathBuf,
    port: u16,
    user: String,
    database: String,
    as_postgres_user: bool,
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0")))
        .unwrap_or(false)
}

fn find_bin_dir() -> Option<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .filter(|(_, bin): &(u32, PathBuf)| bin.join("pg_ctl").is_file())
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin).or_else(|| crate::find_program("pg_ctl", &[]).and_then(|p| p.parent().map(Path::to_path_buf)))
}

fn plain_name(what: &'static str, name: &str) -> Result<(), StackError> {
    if !name.is_empty() && name.len() <= 63 && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        Ok(())
    } else {
        Err(StackError::Endpoint(crate::EndpointError::plain(what)))
    }
}

impl PostgresCluster {
    pub(crate) fn new(state_root: &Path, ep: Endpoint) -> Result<PostgresCluster, StackError> {
        let bin = find_bin_dir().ok_or(StackError::Missing { program: "pg_ctl", package: "postgresql" })?;
        let as_postgres_user = is_root();
        let data =
            if as_postgres_user { PathBuf::from(format!("/var/lib/postgresql/clankie-{}", ep.port)) } else { state_root.join("postgres") };
        let user = ep.user.unwrap_or_else(|| "clankie".into());
        let database = ep.path.unwrap_or_else(|| "clankie".into());
        plain_name("database user", &user)?;
        plain_name("database name", &database)?;
        Ok(PostgresCluster { bin, data, port: ep.port, user, database, as_postgres_user })
    }

    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        let mut cmd = if self.as_postgres_user {
            let mut c = Command::new("runuser");
            c.arg("-u").arg("postgres").arg("--").arg(path);
            c
        } else {
            Command::new(path)
        };
        cmd.current_dir(self.data.parent().unwrap_or(Path::new("/")));
        cmd
    }

    fn log_file(&self) -> PathBuf {
        self.data.join("server.log")
    }

    fn pid(&self) -> Option<u32> {
        let text = std::fs::read_to_string(self.data.join("postmaster.pid")).ok()?;
        text.lines().next()?.trim().parse().ok().filter(|&pid| pid_alive(pid))
    }

    pub(crate) fn state(&self) -> ProcessState {
        match self.pid() {
            Some(pid) => ProcessState::Running { pid, port: self.port },
            None => ProcessState::Stopped,
        }
    }

    pub(crate) fn start(&self, progress: &mut dyn FnMut(&str)) -> Result<(), StackError> {
        let log = self.log_file().display().to_string();
        if !self.data.join("PG_VERSION").is_file() {
            progress(&format!("creating a PostgreSQL cluster in {}", self.data.display()));
            std::fs::create_dir_all(&self.data).map_err(|source| StackError::Io { path: self.data.clone(), source })?;
            if self.as_postgres_user {
                run(Command::new("chown").arg("postgres:postgres").arg(&self.data), &log)?;
            }
            run(
                self.command("initdb")
                    .arg("-D")
                    .arg(&self.data)
                    .arg("-U")
                    .arg(&self.user)
                    .arg("-A")
                    .arg("trust")
                    .arg("-E")
                    .arg("UTF8")
                    .arg("--no-instructions"),
                &log,
            )?;
        }
        if let Some(pid) = self.pid() {
            progress(&format!("PostgreSQL already running (pid {pid}, port {})", self.port));
        } else {
            progress(&format!("starting PostgreSQL on 127.0.0.1:{}", self.port));
            let options = format!(
                "-c port={} -c listen_addresses=127.0.0.1 -c unix_socket_directories={} -c max_connections=200",
                self.port,
                self.data.display()
            );
            run(
                self.command("pg_ctl")
                    .arg("-D")
                    .arg(&self.data)
                    .arg("-l")
                    .arg(self.log_file())
                    .arg("-o")
                    .arg(options)
                    .arg("-w")
                    .arg("-t")
                    .arg("60")
                    .arg("start"),
                &log,
            )?;
        }
        self.ensure_database(progress)?;
        progress("PostgreSQL is ready");
        Ok(())
    }

    fn ensure_database(&self, progress: &mut dyn FnMut(&str)) -> Result<(), StackError> {
        let log = self.log_file().display().to_string();
        let exists = run(
            self.command("psql")
                .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", &self.user, "-d", "postgres", "-tAc"])
                .arg(format!("SELECT 1 FROM pg_database WHERE datname = '{}'", self.database)),
            &log,
        )?;
        if exists.trim() != "1" {
            progress(&format!("creating database {}", self.database));
            run(self.command("createdb").args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", &self.user, &self.database]), &log)?;
        }
        Ok(())
    }

    pub(crate) fn stop(&self, progress: &mut dyn FnMut(&str)) -> Result<(), StackError> {
        self.stop_with("fast", progress)
    }

    /// Stops the server with pg_ctl's `mode`: `fast` rolls back and disconnects cleanly,
    /// `immediate` quits at once as a crash would (recovery runs at the next start).
    fn stop_with(&self, mode: &str, progress: &mut dyn FnMut(&str)) -> Result<(), StackError> {
        let Some(pid) = self.pid() else {
            progress("PostgreSQL is not running");
            return Ok(());
        };
        progress(&format!("stopping PostgreSQL (pid {pid})"));
        run(
            self.command("pg_ctl").arg("-D").arg(&self.data).arg("-m").arg(mode).arg("-w").arg("stop"),
            &self.log_file().display().to_string(),
        )?;
        Ok(())
    }
}

/// A PostgreSQL server owned by one test: its own cluster on a reserved port, stoppable
/// and restartable as an outage would make it, removed when dropped.
pub struct EphemeralPostgres {
    cluster: PostgresCluster,
    port: crate::ReservedPort,
    dir: PathBuf,
}

impl EphemeralPostgres {
    /// Creates and starts a fresh cluster (initdb takes a few seconds).
    pub fn start() -> Result<EphemeralPostgres, StackError> {
        let dir = crate::nats::unique_dir("clankie-pg")?;
        let port = crate::reserve_port().map_err(|source| StackError::Io { path: std::env::temp_dir(), source })?;
        let ep = Endpoint::parse(&format!("postgres://clankie@127.0.0.1:{}/clankie", port.port()), 5432)?;
        let cluster = PostgresCluster::new(&dir, ep)?;
        cluster.start(&mut |_| {})?;
        Ok(EphemeralPostgres { cluster, port, dir })
    }

    /// A URL with rights to create databases.
    pub fn url(&self) -> String {
        format!("postgres://{}@127.0.0.1:{}/{}", self.cluster.user, self.port.port(), self.cluster.database)
    }

    /// Quits the server at once, as a crash would: open connections break mid-transaction.
    pub fn crash(&self) -> Result<(), StackError> {
        self.cluster.stop_with("immediate", &mut |_| {})
    }

    /// Starts it again on the same port and data.
    pub fn restart(&self) -> Result<(), StackError> {
        self.cluster.start(&mut |_| {})
    }
}

impl Drop for EphemeralPostgres {
    fn drop(&mut self) {
        let _ = self.cluster.stop_with("immediate", &mut |_| {});
        let _ = std::fs::remove_dir_all(&self.cluster.data);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
