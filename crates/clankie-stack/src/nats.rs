use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{ProcessState, StackError, find_program, pid_alive, wait_for_port};

const READY_WITHIN: Duration = Duration::from_secs(20);

/// The oldest nats-server the services are proven against; older ones are refused by name.
pub const NATS_SERVER_MIN: (u32, u32) = (2, 12);

/// Where the local scripts install pinned tools when `CLANKIE_TOOLS_DIR` is unset.
const DEFAULT_TOOLS_DIR: &str = "/var/tmp/clankie-tools";

/// Locates a nats-server of at least [`NATS_SERVER_MIN`]: `CLANKIE_NATS_SERVER` when set, else
/// the newest one the local scripts installed (`<tools dir>/nats-server-<version>/bin`), else
/// the first on PATH (or in /usr/sbin). An older server found first is refused with its version,
/// so a machine's stale Debian package is never run by accident.
pub fn find_nats_server() -> Result<PathBuf, StackError> {
    static FOUND: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    FOUND
        .get_or_init(|| {
            let bin = std::env::var_os("CLANKIE_NATS_SERVER")
                .map(PathBuf::from)
                .or_else(installed_nats_server)
                .or_else(|| find_program("nats-server", &["/usr/sbin", "/usr/local/sbin"]))
                .ok_or_else(|| StackError::NatsMissing.to_string())?;
            let version = nats_server_version(&bin).map_err(|e| e.to_string())?;
            if (version.0, version.1) < NATS_SERVER_MIN {
                return Err(StackError::NatsTooOld { path: bin, version: format!("{}.{}.{}", version.0, version.1, version.2) }.to_string());
            }
            Ok(bin)
        })
        .clone()
        .map_err(StackError::Nats)
}

/// The newest `nats-server-<version>/bin/nats-server` under the tools directory.
fn installed_nats_server() -> Option<PathBuf> {
    let dir = std::env::var_os("CLANKIE_TOOLS_DIR").map_or_else(|| PathBuf::from(DEFAULT_TOOLS_DIR), PathBuf::from);
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let version = parse_version(e.file_name().to_str()?.strip_prefix("nats-server-")?)?;
            let bin = e.path().join("bin").join("nats-server");
            bin.is_file().then_some((version, bin))
        })
        .max()
        .map(|(_, bin)| bin)
}

/// The version `bin --version` reports (`nats-server: v2.15.1`).
pub fn nats_server_version(bin: &Path) -> Result<(u32, u32, u32), StackError> {
    let out = std::process::Command::new(bin)
        .arg("--version")
        .output()
        .map_err(|source| StackError::Spawn { program: bin.display().to_string(), source })?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace().find_map(|w| parse_version(w.trim_start_matches('v'))).ok_or_else(|| StackError::Failed {
        program: bin.display().to_string(),
        status: format!("--version printed no version: {:?}", text.trim()),
        log: String::new(),
    })
}

fn parse_version(text: &str) -> Option<(u32, u32, u32)> {
    let mut parts = text.split('.').map(|p| p.parse::<u32>().ok());
    Some((parts.next()??, parts.next()??, parts.next().flatten().unwrap_or(0)))
}

/// The long-lived local nats-server, detached from the terminal and tracked by its pid file.
#[derive(Debug, Clone)]
pub struct NatsProcess {
    dir: PathBuf,
    port: u16,
}

impl NatsProcess {
    pub(crate) fn new(dir: PathBuf, port: u16) -> NatsProcess {
        NatsProcess { dir, port }
    }

    fn pid_file(&self) -> PathBuf {
        self.dir.join("nats-server.pid")
    }

    fn log_file(&self) -> PathBuf {
        self.dir.join("nats-server.log")
    }

    fn pid(&self) -> Option<u32> {
        std::fs::read_to_string(self.pid_file()).ok()?.trim().parse().ok().filter(|&pid| pid_alive(pid))
    }

    pub(crate) fn state(&self) -> ProcessState {
        match self.pid() {
            Some(pid) => ProcessState::Running { pid, port: self.port },
            None => ProcessState::Stopped,
        }
    }

    pub(crate) fn start(&self, progress: &mut dyn FnMut(&str)) -> Result<(), StackError> {
        let bin = find_nats_server()?;
        if let Some(pid) = self.pid() {
            // A server an older checkout started (Debian's 2.9, say) gives way to the pinned one.
            let running = std::fs::read_link(format!("/proc/{pid}/exe")).ok().and_then(|exe| nats_server_version(&exe).ok());
            match running {
                Some((major, minor, patch)) if (major, minor) < NATS_SERVER_MIN => {
                    progress(&format!("nats-server {major}.{minor}.{patch} is running (pid {pid}); replacing it with {}", bin.display()));
                    self.stop(progress)?;
                }
                _ => {
                    progress(&format!("nats-server already running (pid {pid}, port {})", self.port));
                    return Ok(());
                }
            }
        }
        let store = self.dir.join("jetstream");
        std::fs::create_dir_all(&store).map_err(|source| StackError::Io { path: store.clone(), source })?;
        progress(&format!("starting nats-server with JetStream on 127.0.0.1:{} (data in {})", self.port, store.display()));
        let mut cmd = Command::new("setsid");
        cmd.arg(&bin);
        server_args(&mut cmd, self.port, &store);
        cmd.arg("-P").arg(self.pid_file()).arg("-l").arg(self.log_file());
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        cmd.spawn().map_err(|source| StackError::Spawn { program: bin.display().to_string(), source })?;
        if !wait_for_port(self.port, READY_WITHIN) {
            return Err(StackError::NotReady {
                what: "nats-server",
                port: self.port,
                waited: READY_WITHIN,
                log: self.log_file().display().to_string(),
            });
        }
        progress("nats-server is ready");
        Ok(())
    }

    pub(crate) fn stop(&self, progress: &mut dyn FnMut(&str)) -> Result<(), StackError> {
        let Some(pid) = self.pid() else {
            progress("nats-server is not running");
            return Ok(());
        };
        progress(&format!("stopping nats-server (pid {pid})"));
        terminate(pid, Duration::from_secs(15));
        let _ = std::fs::remove_file(self.pid_file());
        Ok(())
    }
}

fn server_args(cmd: &mut Command, port: u16, store: &Path) {
    cmd.arg("-a").arg("127.0.0.1").arg("-p").arg(port.to_string()).arg("-js").arg("-sd").arg(store);
}

/// Sends SIGTERM and waits for the process to go; SIGKILL if it will not.
fn terminate(pid: u32, grace: Duration) {
    let _ = Command::new("kill").arg("-TERM").arg(pid.to_string()).status();
    let start = Instant::now();
    while pid_alive(pid) && start.elapsed() < grace {
        std::thread::sleep(Duration::from_millis(25));
    }
    if pid_alive(pid) {
        let _ = Command::new("kill").arg("-KILL").arg(pid.to_string()).status();
    }
}

/// A nats-server owned by one test: its own port and store, killed when dropped.
pub struct EphemeralNats {
    child: Option<Child>,
    dir: PathBuf,
    port: crate::ReservedPort,
}

impl EphemeralNats {
    /// Starts a fresh nats-server with JetStream on a loopback port reserved for it, so a
    /// [`EphemeralNats::restart`] finds the port still its own.
    pub fn start() -> Result<EphemeralNats, StackError> {
        let dir = unique_dir("clankie-nats")?;
        let port = crate::reserve_port().map_err(|source| StackError::Io { path: std::env::temp_dir(), source })?;
        let mut nats = EphemeralNats { child: None, dir, port };
        nats.spawn()?;
        Ok(nats)
    }

    /// The client URL.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port.port())
    }

    /// The port it listens on; stable across [`EphemeralNats::restart`].
    pub fn port(&self) -> u16 {
        self.port.port()
    }

    /// The server's process id while it runs: a test pauses it (SIGSTOP) to stand for a
    /// server that stops answering without closing its connections.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills the server, keeping its store, as an outage would.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port and store.
    pub fn restart(&mut self) -> Result<(), StackError> {
        self.stop();
        self.spawn()
    }

    fn spawn(&mut self) -> Result<(), StackError> {
        let bin = find_nats_server()?;
        let ports_dir = self.dir.join("ports");
        let _ = std::fs::remove_dir_all(&ports_dir);
        std::fs::create_dir_all(&ports_dir).map_err(|source| StackError::Io { path: ports_dir.clone(), source })?;
        let mut cmd = Command::new(&bin);
        cmd.arg("-a").arg("127.0.0.1").arg("-p").arg(self.port.port().to_string()).arg("-js").arg("-sd").arg(self.dir.join("js"));
        cmd.arg("--ports_file_dir").arg(&ports_dir);
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::from(
            std::fs::File::create(self.dir.join("nats.log")).map_err(|source| StackError::Io { path: self.dir.clone(), source })?,
        ));
        let child = cmd.spawn().map_err(|source| StackError::Spawn { program: bin.display().to_string(), source })?;
        let start = Instant::now();
        let port = loop {
            if let Some(port) = read_ports_file(&ports_dir) {
                break port;
            }
            if start.elapsed() > READY_WITHIN {
                return Err(StackError::NotReady {
                    what: "nats-server",
                    port: 0,
                    waited: READY_WITHIN,
                    log: self.dir.join("nats.log").display().to_string(),
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        self.child = Some(child);
        if !wait_for_port(port, READY_WITHIN) {
            return Err(StackError::NotReady {
                what: "nats-server",
                port,
                waited: READY_WITHIN,
                log: self.dir.join("nats.log").display().to_string(),
            });
        }
        Ok(())
    }
}

impl Drop for EphemeralNats {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn read_ports_file(dir: &Path) -> Option<u16> {
    let entry = std::fs::read_dir(dir).ok()?.filter_map(Result::ok).find(|e| e.path().extension().is_some_and(|x| x == "ports"))?;
    let text = std::fs::read_to_string(entry.path()).ok()?;
    let after = &text[text.find("nats://")? + "nats://".len()..];
    let hostport = after.split('"').next()?;
    hostport.rsplit_once(':')?.1.parse().ok()
}

pub(crate) fn unique_dir(prefix: &str) -> Result<PathBuf, StackError> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    let dir = std::env::temp_dir().join(format!("{prefix}-{}-{}-{nanos}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
    std::fs::create_dir_all(&dir).map_err(|source| StackError::Io { path: dir.clone(), source })?;
    Ok(dir)
}

/// A three-or-more-node JetStream cluster on loopback, owned by one test: every node on
/// reserved client and route ports with a store of its own, each killable and restartable
/// by itself, as a lost machine would be.
pub struct EphemeralNatsCluster {
    dir: PathBuf,
    nodes: Vec<ClusterNode>,
}

struct ClusterNode {
    name: String,
    client: crate::ReservedPort,
    route: crate::ReservedPort,
    child: Option<Child>,
}

impl EphemeralNatsCluster {
    /// Starts `size` nodes that route to each other, and waits until each accepts clients.
    pub fn start(size: usize) -> Result<EphemeralNatsCluster, StackError> {
        let dir = unique_dir("clankie-nats-cluster")?;
        let reserve = || crate::reserve_port().map_err(|source| StackError::Io { path: std::env::temp_dir(), source });
        let mut nodes = Vec::with_capacity(size);
        for i in 0..size {
            nodes.push(ClusterNode { name: format!("n{i}"), client: reserve()?, route: reserve()?, child: None });
        }
        let mut cluster = EphemeralNatsCluster { dir, nodes };
        for i in 0..size {
            cluster.spawn(i)?;
        }
        for node in &cluster.nodes {
            if !wait_for_port(node.client.port(), READY_WITHIN) {
                return Err(StackError::NotReady {
                    what: "nats-server",
                    port: node.client.port(),
                    waited: READY_WITHIN,
                    log: cluster.dir.join(format!("{}.log", node.name)).display().to_string(),
                });
            }
        }
        Ok(cluster)
    }

    /// Every node's client URL, comma-separated, as `CLANKIE_NATS_URL` takes them.
    pub fn urls(&self) -> String {
        (0..self.nodes.len()).map(|i| self.url(i)).collect::<Vec<_>>().join(",")
    }

    /// One node's client URL.
    pub fn url(&self, node: usize) -> String {
        format!("nats://127.0.0.1:{}", self.nodes[node].client.port())
    }

    /// The index of the node with this server name (`n0`, `n1`, …).
    pub fn node_named(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }

    /// SIGKILLs one node, keeping its store.
    pub fn kill(&mut self, node: usize) {
        if let Some(mut child) = self.nodes[node].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts a killed node again on the same ports and store, and waits until it accepts clients.
    pub fn restart(&mut self, node: usize) -> Result<(), StackError> {
        self.kill(node);
        self.spawn(node)?;
        let port = self.nodes[node].client.port();
        if wait_for_port(port, READY_WITHIN) {
            Ok(())
        } else {
            Err(StackError::NotReady { what: "nats-server", port, waited: READY_WITHIN, log: self.dir.display().to_string() })
        }
    }

    fn spawn(&mut self, i: usize) -> Result<(), StackError> {
        let bin = find_nats_server()?;
        let routes: Vec<String> = self.nodes.iter().map(|n| format!("nats://127.0.0.1:{}", n.route.port())).collect();
        let node = &self.nodes[i];
        let log = self.dir.join(format!("{}.log", node.name));
        let mut cmd = Command::new(&bin);
        cmd.arg("-a")
            .arg("127.0.0.1")
            .arg("-p")
            .arg(node.client.port().to_string())
            .arg("-n")
            .arg(&node.name)
            .arg("-js")
            .arg("-sd")
            .arg(self.dir.join(&node.name))
            .arg("--cluster_name")
            .arg("clankie")
            .arg("--cluster")
            .arg(format!("nats://127.0.0.1:{}", node.route.port()))
            .arg("--routes")
            .arg(routes.join(","));
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(&log).map_err(|source| StackError::Io { path: log.clone(), source })?));
        let child = cmd.spawn().map_err(|source| StackError::Spawn { program: bin.display().to_string(), source })?;
        self.nodes[i].child = Some(child);
        Ok(())
    }
}

impl Drop for EphemeralNatsCluster {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            self.kill(i);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nats_server_versions_are_read_as_the_server_prints_them() {
        assert_eq!(parse_version("2.15.1"), Some((2, 15, 1)));
        assert_eq!(parse_version("2.12"), Some((2, 12, 0)));
        assert_eq!(parse_version("2.x"), None);
        assert!((2, 9) < NATS_SERVER_MIN && (2, 15) >= NATS_SERVER_MIN);
    }
}
