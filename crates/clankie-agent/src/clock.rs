//! Time, injectable: a monotonic clock that keeps counting while the host is
//! suspended (the stall watchdog, the typing hold) and a wall clock for ages
//! measured against timestamps other processes wrote (shared-self expiry).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A monotonic clock. The watchdog re-reads it on every tick instead of
/// trusting one long timer, so a suspended host overshoots by one tick.
pub trait Clock: Send + Sync + 'static {
    /// Time since an arbitrary fixed origin.
    fn now(&self) -> Duration;
}

/// `CLOCK_BOOTTIME`: monotonic, and counting through suspend.
#[derive(Debug, Clone, Copy, Default)]
pub struct BootClock;

/// The clock [`BootClock`] reads; `CLOCK_MONOTONIC` would stop while the host sleeps.
const BOOT_CLOCK_ID: libc::clockid_t = libc::CLOCK_BOOTTIME;

impl Clock for BootClock {
    fn now(&self) -> Duration {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: clock_gettime writes one timespec through a valid pointer.
        let rc = unsafe { libc::clock_gettime(BOOT_CLOCK_ID, &mut ts) };
        if rc != 0 {
            return Duration::ZERO;
        }
        Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
    }
}

/// Milliseconds since the Unix epoch.
pub trait WallClock: Send + Sync + 'static {
    /// The time now, in ms since the epoch.
    fn now_ms(&self) -> i64;
}

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemWallClock;

impl WallClock for SystemWallClock {
    fn now_ms(&self) -> i64 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
    }
}

/// The boot clock plus a jump a test can add, to stand in for a host suspend:
/// time the process did not run, but that the boot clock still counts.
#[derive(Debug, Clone, Default)]
pub struct SuspendableClock {
    jumped_nanos: Arc<AtomicU64>,
}

impl SuspendableClock {
    /// A clock that starts in step with the boot clock.
    pub fn new() -> SuspendableClock {
        SuspendableClock::default()
    }

    /// Moves the clock forward as if the host had slept for `d`.
    pub fn suspend_for(&self, d: Duration) {
        self.jumped_nanos.fetch_add(d.as_nanos() as u64, Ordering::SeqCst);
    }
}

impl Clock for SuspendableClock {
    fn now(&self) -> Duration {
        BootClock.now() + Duration::from_nanos(self.jumped_nanos.load(Ordering::SeqCst))
    }
}

/// The same jump moves its wall clock, as a real suspend moves both.
impl WallClock for SuspendableClock {
    fn now_ms(&self) -> i64 {
        SystemWallClock.now_ms() + (self.jumped_nanos.load(Ordering::SeqCst) / 1_000_000) as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_clock_moves_forward() {
        let a = BootClock.now();
        std::thread::sleep(Duration::from_millis(2));
        assert!(BootClock.now() > a);
        assert!(a > Duration::ZERO);
    }

    /// The boot clock is CLOCK_BOOTTIME itself, not CLOCK_MONOTONIC (which stops during a
    /// suspend). On a host that has slept only BOOTTIME brackets its reading; on one that
    /// never has, the two agree, so the clock id is checked too.
    #[test]
    fn the_boot_clock_reads_clock_boottime() {
        assert_eq!(BOOT_CLOCK_ID, libc::CLOCK_BOOTTIME);
        let read = |clock| {
            let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            // SAFETY: clock_gettime writes one timespec through a valid pointer.
            assert_eq!(unsafe { libc::clock_gettime(clock, &mut ts) }, 0);
            Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
        };
        let before = read(libc::CLOCK_BOOTTIME);
        let ours = BootClock.now();
        let after = read(libc::CLOCK_BOOTTIME);
        assert!(before <= ours && ours <= after, "{before:?} <= {ours:?} <= {after:?}");
    }

    #[test]
    fn a_suspend_jumps_the_clock() {
        let c = SuspendableClock::new();
        let before = c.now();
        let wall = c.now_ms();
        c.suspend_for(Duration::from_secs(600));
        assert!(c.now() - before >= Duration::from_secs(600));
        assert!(c.now_ms() - wall >= 600_000, "the wall clock jumps with it");
    }
}
