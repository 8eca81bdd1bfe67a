//! Loopback ports a process keeps for itself across a restart of what listens on them.
//!
//! A port the kernel handed out with bind(0) comes from the ephemeral range, and once its
//! listener stops any other process's bind(0) may be given it. A server that must come
//! back on the same port (a restarted nats-server, as an outage ends) therefore takes its
//! port from below that range, where bind(0) never reaches, and holds an exclusive lock
//! file for it so no other test process on the machine picks the same one. The lock goes
//! with the file handle, so a crashed test leaves nothing held.

use std::fs::File;
use std::path::PathBuf;

/// Where reservations are kept: shared by every process on the machine.
const LOCK_DIR: &str = "clankie-ports";
/// The range ports are reserved from, below Linux's default ephemeral range (32768 and up).
const FIRST: u16 = 20_000;
const COUNT: u16 = 10_000;

/// A loopback port held for as long as this value lives.
#[derive(Debug)]
pub struct ReservedPort {
    port: u16,
    _lock: File,
}

impl ReservedPort {
    /// The port number.
    pub fn port(&self) -> u16 {
        self.port
    }
}

/// Reserves a port nobody on this machine is listening on or has reserved.
pub fn reserve_port() -> std::io::Result<ReservedPort> {
    let dir = std::env::temp_dir().join(LOCK_DIR);
    std::fs::create_dir_all(&dir)?;
    // Start somewhere different in every process so parallel tests rarely probe the same ports.
    let seed =
        std::process::id() as u64 ^ std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let start = (seed % u64::from(COUNT)) as u16;
    for i in 0..COUNT {
        let port = FIRST + (start + i) % COUNT;
        let lock = File::create(lock_path(&dir, port))?;
        if lock.try_lock().is_err() {
            continue;
        }
        // Locked, but something outside our tests may be listening there.
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(ReservedPort { port, _lock: lock });
        }
    }
    Err(std::io::Error::new(std::io::ErrorKind::AddrInUse, "no free port left to reserve"))
}

fn lock_path(dir: &std::path::Path, port: u16) -> PathBuf {
    dir.join(format!("{port}.lock"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reserved_port_is_not_given_twice_while_held() {
        let a = reserve_port().unwrap();
        let b = reserve_port().unwrap();
        assert_ne!(a.port(), b.port());
        assert!((FIRST..FIRST + COUNT).contains(&a.port()));
        // Held: a second lock on its file fails, even from this process.
        let again = File::create(lock_path(&std::env::temp_dir().join(LOCK_DIR), a.port())).unwrap();
        assert!(again.try_lock().is_err());
        drop(a);
        assert!(again.try_lock().is_ok(), "dropping the reservation frees it");
    }
}
