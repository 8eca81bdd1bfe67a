//! Discord's limits as data: the numbers the loopback keeps, what it counted, and each bucket's
//! window. The rate-limit layer reads and moves them on every request; tests read what arrived
//! (and which routes were called). It also holds how slow REST answers are made to be.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// The limits the loopback keeps; on by default, with Discord's numbers.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct Limits {
    /// Off turns every limit below off (a bench of the service alone, say).
    pub enforce: bool,
    /// Requests a second per bot token, across every route.
    pub global_per_second: u32,
    /// Message creates per channel per 5 s (observed, not documented).
    pub message_creates_per_5s: u32,
    /// Typing triggers per channel per 5 s (assumed; a client refreshes one every 8 s or so).
    pub typing_per_5s: u32,
    /// Invalid requests (401, 403, and 429 other than `shared`) per 10 minutes from one client
    /// before the temporary ban.
    pub invalid_per_10_min: u32,
    /// Commands (heartbeats included) one gateway connection may send per 60 s.
    pub gateway_commands_per_60s: u32,
    /// The window of a channel's message-create bucket, in ms (Discord's is 5 s; a test
    /// shortens it to meet many resets in a few seconds).
    pub message_create_window_ms: u64,
    /// How long each REST answer spends on its way back to the client, in ms: the internet's
    /// share of a round trip, 0 on loopback. With it, a bucket's announced reset can fall
    /// while the client's next request is still on its way, as it does against Discord.
    pub answer_latency_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            enforce: true,
            global_per_second: 50,
            message_creates_per_5s: 5,
            typing_per_5s: 5,
            invalid_per_10_min: 10_000,
            gateway_commands_per_60s: 120,
            message_create_window_ms: 5_000,
            answer_latency_ms: 0,
        }
    }
}

/// What the loopback counted, for tests and `GET /control/limits`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitCounts {
    /// 429s of a route bucket (`X-RateLimit-Scope: user`).
    pub rate_limited_user: u64,
    /// 429s of the global budget (`X-RateLimit-Scope: global`).
    pub rate_limited_global: u64,
    /// Invalid requests in the last 10 minutes.
    pub invalid_recent: u64,
    /// Invalid requests since the start.
    pub invalid_total: u64,
    /// Requests refused by the ban.
    pub banned_refusals: u64,
    /// Gateway connections closed for sending too many commands (4008).
    pub gateway_rate_limit_closes: u64,
    /// Requests during whose round trip their bucket's reset, as the answer before them
    /// announced it to the client, came due: the state that panicked twilight 0.17.1's limiter.
    pub resets_in_flight: u64,
}

/// A route's bucket: its name (the `X-RateLimit-Bucket` Discord sends) and its top-level
/// resource; [`route_of`] gives its limit and window beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Route {
    pub bucket: &'static str,
    pub resource: u64,
}

pub(crate) const INVALID_WINDOW: Duration = Duration::from_secs(600);
pub(crate) const GLOBAL_WINDOW: Duration = Duration::from_secs(1);

/// A fixed window that starts at its first request, as Discord's buckets reset at a time after it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Window {
    pub started: Instant,
    pub used: u32,
}

impl Window {
    /// Takes one request if the window has room; else how long until it resets.
    pub(crate) fn take(&mut self, limit: u32, length: Duration, now: Instant) -> Result<(), Duration> {
        if now >= self.started + length {
            *self = Window { started: now, used: 0 };
        }
        if self.used >= limit {
            return Err(self.started + length - now);
        }
        self.used += 1;
        Ok(())
    }

    pub(crate) fn reset_after(&self, length: Duration, now: Instant) -> Duration {
        (self.started + length).saturating_duration_since(now)
    }
}

/// The limiter's state, one for the loopback.
#[derive(Default)]
pub(crate) struct Keeper {
    inner: Mutex<Kept>,
    /// How long after its arrival each REST request is answered, in ms (0: at once).
    rest_latency_ms: AtomicU64,
}

#[derive(Default)]
pub(crate) struct Kept {
    pub global: HashMap<String, Window>,
    pub routes: HashMap<(String, Route), Window>,
    /// Each bucket's last answer: when it was made and the reset it announced.
    pub last_answer: HashMap<(String, Route), (Instant, Duration)>,
    pub invalid: VecDeque<Instant>,
    pub counts: LimitCounts,
    /// When each request the global budget counts arrived (ms since the epoch), the last
    /// [`ARRIVALS_KEPT`]: what a test checks Discord's limits against, not these counters.
    pub arrivals: VecDeque<i64>,
    /// When each message-create request arrived, by channel, the last [`CREATES_KEPT`] of each:
    /// requests, not posts (a create an enforced nonce answered with the earlier message is here too).
    pub creates: HashMap<u64, VecDeque<i64>>,
    /// REST requests by route kind (`GET /channels/{channel}`) since the start or the last reset.
    pub calls: BTreeMap<String, u64>,
    /// Their sum.
    pub calls_total: u64,
}

/// Message-create requests kept per channel for tests (over a minute at 5 a second).
pub(crate) const CREATES_KEPT: usize = 400;

/// Request arrivals kept for tests: a few minutes at Discord's 50 a second, 80 KB at most.
pub(crate) const ARRIVALS_KEPT: usize = 10_000;

impl Keeper {
    /// A keeper whose REST answers go out `rest_latency_ms` after each request arrived.
    pub(crate) fn new(rest_latency_ms: u64) -> Keeper {
        Keeper { rest_latency_ms: AtomicU64::new(rest_latency_ms), ..Keeper::default() }
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How long after its arrival a REST request is answered now.
    pub(crate) fn rest_latency(&self) -> Duration {
        Duration::from_millis(self.rest_latency_ms.load(Ordering::Relaxed))
    }

    /// Makes REST answers go out `latency` after their requests arrived (zero: at once).
    pub(crate) fn set_rest_latency(&self, latency: Duration) {
        self.rest_latency_ms.store(u64::try_from(latency.as_millis()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// Counts one REST request of `kind` (method and route template).
    pub(crate) fn count_call(&self, kind: String) {
        let mut kept = self.lock();
        *kept.calls.entry(kind).or_default() += 1;
        kept.calls_total += 1;
    }

    /// REST requests by route kind since the start or the last reset, and their sum.
    pub(crate) fn calls(&self) -> (BTreeMap<String, u64>, u64) {
        let kept = self.lock();
        (kept.calls.clone(), kept.calls_total)
    }

    /// Zeroes the REST requests counted by kind, so a phase can be measured alone.
    pub(crate) fn reset_calls(&self) {
        let mut kept = self.lock();
        kept.calls.clear();
        kept.calls_total = 0;
    }

    /// What was counted so far.
    pub(crate) fn counts(&self) -> LimitCounts {
        let mut kept = self.lock();
        kept.expire_invalid(Instant::now());
        let mut counts = kept.counts;
        counts.invalid_recent = kept.invalid.len() as u64;
        counts
    }

    /// When each request with the bot's token arrived, oldest first (ms since the epoch).
    pub(crate) fn arrivals(&self) -> Vec<i64> {
        self.lock().arrivals.iter().copied().collect()
    }

    /// When each message-create request into `channel` arrived, oldest first (ms since the epoch).
    pub(crate) fn create_requests(&self, channel: u64) -> Vec<i64> {
        self.lock().creates.get(&channel).map(|c| c.iter().copied().collect()).unwrap_or_default()
    }

    /// Counts a gateway connection closed for its command rate.
    pub(crate) fn gateway_closed(&self) {
        self.lock().counts.gateway_rate_limit_closes += 1;
    }
}

impl Kept {
    pub(crate) fn expire_invalid(&mut self, now: Instant) {
        while self.invalid.front().is_some_and(|t| now.duration_since(*t) >= INVALID_WINDOW) {
            self.invalid.pop_front();
        }
    }

    pub(crate) fn count_invalid(&mut self, now: Instant) {
        self.invalid.push_back(now);
        self.counts.invalid_total += 1;
    }
}

/// Counts one gateway connection's commands over 60 s windows.
pub(crate) struct CommandWindow {
    window: Window,
    limit: u32,
}

impl CommandWindow {
    pub(crate) fn new(limits: &Limits) -> CommandWindow {
        let limit = if limits.enforce { limits.gateway_commands_per_60s } else { u32::MAX };
        CommandWindow { window: Window { started: Instant::now(), used: 0 }, limit }
    }

    /// Takes one command; false once the connection is over its limit and must be closed (4008).
    pub(crate) fn take(&mut self) -> bool {
        self.window.take(self.limit, Duration::from_secs(60), Instant::now()).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_refuses_past_its_limit_until_it_resets() {
        let start = Instant::now();
        let mut w = Window { started: start, used: 0 };
        for _ in 0..5 {
            assert!(w.take(5, Duration::from_secs(5), start).is_ok());
        }
        let wait = w.take(5, Duration::from_secs(5), start + Duration::from_secs(2)).unwrap_err();
        assert_eq!(wait, Duration::from_secs(3));
        assert!(w.take(5, Duration::from_secs(5), start + Duration::from_secs(5)).is_ok());
    }
}
