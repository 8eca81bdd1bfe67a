//! Time for the stall watchdog: a clock that keeps counting while the host is suspended.

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

impl Clock for BootClock {
    fn now(&self) -> Duration {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: clock_gettime writes one timespec through a valid pointer.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
        if rc != 0 {
            return Duration::ZERO;
        }
        Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
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

    #[test]
    fn a_suspend_jumps_the_clock() {
        let c = SuspendableClock::new();
        let before = c.now();
        c.suspend_for(Duration::from_secs(600));
        assert!(c.now() - before >= Duration::from_secs(600));
    }
}
