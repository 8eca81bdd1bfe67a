//! No half-alive process: every long-lived part of a service runs under [`supervise`].
//!
//! A part that panics is logged by name, counted (`clankie_part_restarts_total{part}`), marked
//! down in [`Parts`] (so `/readyz` fails while it is) and started again after a backoff that
//! grows while it keeps failing. A part that returns hands its result to its caller, which
//! decides: a service's `main` exits non-zero with it so its own supervisor restarts the
//! process. One part's panic never unwinds the parts beside it.

use std::collections::BTreeMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt as _;

/// The first wait before a panicked part starts again; it doubles up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_millis(200);
/// The longest wait between two starts of a part that keeps panicking.
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// A part that ran this long before panicking starts again after [`FIRST_BACKOFF`].
const HEALTHY_RUN: Duration = Duration::from_secs(60);

/// Which supervised parts of this process are down now, and how often each was restarted.
/// Cheap to clone; every clone sees the same parts.
#[derive(Clone, Default)]
pub struct Parts {
    inner: Arc<Mutex<BTreeMap<&'static str, PartState>>>,
    /// Why the process can no longer do its work and will not try again by itself (Discord
    /// refused its token, say): it stays unready, saying so, until someone mends the cause.
    fatal: Arc<Mutex<Option<String>>>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct PartState {
    down: bool,
    restarts: u64,
}

impl Parts {
    /// The first part that is down now, by name.
    pub fn first_down(&self) -> Option<&'static str> {
        self.lock().iter().find(|(_, s)| s.down).map(|(name, _)| *name)
    }

    /// Marks the process as stopped for good by `why` (a code, e.g. `discord_close_4004`).
    pub fn set_fatal(&self, why: impl Into<String>) {
        *self.fatal.lock().unwrap_or_else(|p| p.into_inner()) = Some(why.into());
    }

    /// What stopped the process for good, if anything did.
    pub fn fatal(&self) -> Option<String> {
        self.fatal.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// How often `part` was restarted after a panic.
    pub fn restarts(&self, part: &str) -> u64 {
        self.lock().get(part).map_or(0, |s| s.restarts)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<&'static str, PartState>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set_down(&self, part: &'static str, down: bool) {
        let mut parts = self.lock();
        let state = parts.entry(part).or_default();
        state.down = down;
        if down {
            state.restarts += 1;
        }
    }
}

/// Marks a part up when dropped.
struct Up<'a> {
    parts: &'a Parts,
    name: &'static str,
}

impl Drop for Up<'_> {
    fn drop(&mut self) {
        self.parts.set_down(self.name, false);
    }
}

/// What a panic said, when it said it with a literal (code, never content); a formatted
/// message is printed by the panic hook itself and not repeated here.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> &'static str {
    payload.downcast_ref::<&'static str>().copied().unwrap_or("a formatted message (see the panic line above)")
}

/// Runs the part `make` builds until it returns, starting it again whenever it panics.
///
/// `on_panic` sees each panic's payload before the restart (the gateway rebuilds its REST
/// client when the panic came from twilight's limiter).
pub async fn supervise<T, F, Fut>(
    name: &'static str,
    parts: &Parts,
    mut on_panic: impl FnMut(&(dyn std::any::Any + Send)),
    mut make: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = T>,
{
    // Exported from the start: the part's first restart is then an increase Prometheus sees.
    metrics::counter!("clankie_part_restarts_total", "part" => name).increment(0);
    let mut backoff = FIRST_BACKOFF;
    loop {
        let started = tokio::time::Instant::now();
        match AssertUnwindSafe(make()).catch_unwind().await {
            Ok(done) => return done,
            Err(payload) => {
                if started.elapsed() >= HEALTHY_RUN {
                    backoff = FIRST_BACKOFF;
                }
                parts.set_down(name, true);
                metrics::counter!("clankie_part_restarts_total", "part" => name).increment(1);
                tracing::error!(
                    part = name,
                    panic = panic_message(payload.as_ref()),
                    restart_in_ms = backoff.as_millis() as u64,
                    "a part of this process panicked; starting it again"
                );
                on_panic(payload.as_ref());
                // Up again when the wait ends, or when whoever runs the part drops it meanwhile
                // (a REST tenure that ended): a part nobody runs is not down.
                let _up = Up { parts, name };
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                tracing::info!(part = name, "the part started again");
            }
        }
    }
}

/// Runs a part that never has anything to return (a relay, a sweeper, a recorder): a panic
/// starts it again as [`supervise`] does, and so does an end, logged by name, counted and
/// marked down through the same backoff, so nothing that should run stops quietly.
pub async fn keep_running<F, Fut>(name: &'static str, parts: Parts, mut make: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let mut backoff = FIRST_BACKOFF;
    loop {
        let started = tokio::time::Instant::now();
        supervise(name, &parts, |_| {}, &mut make).await;
        if started.elapsed() >= HEALTHY_RUN {
            backoff = FIRST_BACKOFF;
        }
        parts.set_down(name, true);
        metrics::counter!("clankie_part_restarts_total", "part" => name).increment(1);
        tracing::error!(part = name, restart_in_ms = backoff.as_millis() as u64, "a part of this process ended; starting it again");
        let _up = Up { parts: &parts, name };
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test(start_paused = true)]
    async fn supervise_a_part_that_panics_twice_is_started_three_times_and_marked_down_meanwhile() {
        let parts = Parts::default();
        let starts = Arc::new(AtomicU32::new(0));
        let seen = Arc::new(AtomicU32::new(0));
        let (s, p) = (starts.clone(), parts.clone());
        let watcher = tokio::spawn(async move {
            // While the part waits out its backoff it is down.
            loop {
                if p.first_down() == Some("flaky") {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        let seen2 = seen.clone();
        let out = supervise(
            "flaky",
            &parts,
            |_| {
                seen2.fetch_add(1, Ordering::SeqCst);
            },
            || {
                let n = s.fetch_add(1, Ordering::SeqCst);
                async move {
                    if n < 2 {
                        panic!("injected");
                    }
                    n
                }
            },
        )
        .await;
        assert_eq!(out, 2);
        assert_eq!(starts.load(Ordering::SeqCst), 3);
        assert_eq!(seen.load(Ordering::SeqCst), 2);
        assert_eq!(parts.restarts("flaky"), 2);
        assert_eq!(parts.first_down(), None, "up again once it runs");
        assert!(watcher.await.unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn supervise_a_part_dropped_while_it_waits_to_restart_is_not_left_down() {
        let parts = Parts::default();
        let running = supervise(
            "dropped",
            &parts,
            |_| {},
            || async {
                panic!("injected");
            },
        );
        // Dropped during its first backoff, as a REST tenure that ends drops its parts.
        let _ = tokio::time::timeout(FIRST_BACKOFF / 2, running).await;
        assert_eq!(parts.restarts("dropped"), 1);
        assert_eq!(parts.first_down(), None, "a part nobody runs any more is not down");
    }

    #[tokio::test(start_paused = true)]
    async fn supervise_a_part_kept_running_is_started_again_after_it_panics_and_after_it_ends() {
        let parts = Parts::default();
        let starts = Arc::new(AtomicU32::new(0));
        let s = starts.clone();
        let running = tokio::spawn(keep_running("relay", parts.clone(), move || {
            let n = s.fetch_add(1, Ordering::SeqCst);
            async move {
                match n {
                    0 => panic!("injected"),
                    1 => {}
                    _ => std::future::pending().await,
                }
            }
        }));
        while starts.load(Ordering::SeqCst) < 3 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(parts.restarts("relay"), 2, "one panic and one end, each a restart");
        tokio::time::sleep(MAX_BACKOFF).await;
        assert_eq!(parts.first_down(), None, "running again");
        assert!(!running.is_finished());
        running.abort();
    }

    #[test]
    fn a_literal_panic_message_is_kept_and_a_formatted_one_is_not() {
        let literal: Box<dyn std::any::Any + Send> = Box::new("actor task panicked");
        let formatted: Box<dyn std::any::Any + Send> = Box::new(String::from("secret words"));
        assert_eq!(panic_message(literal.as_ref()), "actor task panicked");
        assert!(!panic_message(formatted.as_ref()).contains("secret"));
    }
}
