//! The stall watchdog: a run may take as long as its work takes, but a run
//! with no sign of life for the configured silence is dead.

use std::time::Duration;

use crate::EventSink;

/// How the watchdog measures silence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StallPolicy {
    /// Silence that counts as a stall (default 300 s).
    pub silence: Duration,
    /// How often the clock is re-read (default 5 s).
    pub tick: Duration,
}

impl Default for StallPolicy {
    fn default() -> Self {
        StallPolicy { silence: Duration::from_secs(300), tick: Duration::from_secs(5) }
    }
}

/// Whether `now` is at least `silence` past the last sign of life.
pub fn stalled(last_activity: Duration, now: Duration, silence: Duration) -> bool {
    now.saturating_sub(last_activity) >= silence
}

/// Resolves when the run has been silent for the policy's silence.
///
/// It wakes every tick and re-reads the sink's clock, so a host suspend (the
/// clock jumps, the tick does not fire) is caught on the first tick after
/// waking rather than after a whole timer's worth of remaining delay.
pub(crate) async fn watch(sink: &EventSink, policy: StallPolicy) -> Duration {
    let mut ticker = tokio::time::interval(policy.tick);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let (last, now) = (sink.last_activity(), sink.clock().now());
        if stalled(last, now, policy.silence) {
            return now.saturating_sub(last);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn silence_is_measured_from_the_last_event() {
        let s = Duration::from_secs(300);
        assert!(!stalled(Duration::from_secs(100), Duration::from_secs(399), s));
        assert!(stalled(Duration::from_secs(100), Duration::from_secs(400), s));
        assert!(!stalled(Duration::from_secs(500), Duration::from_secs(400), s), "a clock read before the event is not silence");
    }
}
