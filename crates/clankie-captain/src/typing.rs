//! The typing hold: a lane's first model call waits while someone it is
//! answering is still typing, so the rest of their burst is in that one call
//! rather than steered into a second. Bounded by `typing_hold`; messages that
//! arrive during the hold are steered in before the call. The bound is read
//! from the run's clock (the one the stall watchdog uses), so a host suspend
//! counts against it and a test can move it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use clankie_agent::Clock;
use clankie_bus::now_ms;
use clankie_proto::v1;
use tokio::sync::Notify;

/// How long one TYPING_START means "still typing": Discord's indicator lasts ten seconds.
pub const TYPING_LASTS_MS: i64 = 10_000;

/// Who was last seen typing where, from the gateway's signals.
#[derive(Default)]
pub struct TypingSeen {
    at: Mutex<HashMap<(u64, u64), i64>>,
    changed: Notify,
}

impl TypingSeen {
    /// Notes a signal and wakes every hold.
    pub fn note(&self, signal: &v1::TypingSignal) {
        let mut at = self.at.lock().unwrap_or_else(|p| p.into_inner());
        let now = now_ms();
        at.retain(|_, t| now - *t < TYPING_LASTS_MS);
        at.insert((signal.channel_id, signal.user_id), signal.at_ms);
        drop(at);
        self.changed.notify_waiters();
    }

    fn last(&self, channel: u64, user: u64) -> Option<i64> {
        self.at.lock().unwrap_or_else(|p| p.into_inner()).get(&(channel, user)).copied()
    }
}

/// The people a run answers, with when each last wrote; the lane updates it as steers arrive.
#[derive(Default)]
pub struct Answering {
    last_message_at: Mutex<HashMap<u64, i64>>,
    changed: Notify,
    held_ms: std::sync::atomic::AtomicU64,
}

impl Answering {
    /// Someone's message joined the run.
    pub fn wrote(&self, ingress: &v1::Ingress) {
        let mut m = self.last_message_at.lock().unwrap_or_else(|p| p.into_inner());
        let at = m.entry(ingress.author_id).or_insert(i64::MIN);
        *at = (*at).max(ingress.received_at_ms);
        drop(m);
        self.changed.notify_waiters();
    }

    /// How long the hold lasted.
    pub fn held(&self) -> Duration {
        Duration::from_millis(self.held_ms.load(std::sync::atomic::Ordering::SeqCst))
    }
}

/// Whether someone whose last message was at `last_message_at` is still typing at `now`,
/// given their last typing signal.
pub fn still_typing(typing_at: Option<i64>, last_message_at: i64, now: i64) -> bool {
    typing_at.is_some_and(|t| t > last_message_at && now - t < TYPING_LASTS_MS)
}

/// After someone who was typing sends their message, how long the hold still waits for them
/// to start on the next one: a burst typed in a row shows a fresh TYPING_START within it.
pub const TYPING_GRACE_MS: i64 = 1_000;

/// How often a hold re-reads its clock while nothing else wakes it.
const HOLD_TICK: Duration = Duration::from_millis(50);

/// Waits while anyone in `answering` is typing in `channel`, for at most `max` on `clock`.
/// Once someone was seen typing, their message does not end the hold at once: it lasts
/// [`TYPING_GRACE_MS`] more in case they go on typing.
pub async fn hold(
    seen: std::sync::Arc<TypingSeen>,
    answering: std::sync::Arc<Answering>,
    channel: u64,
    max: Duration,
    clock: std::sync::Arc<dyn Clock>,
) {
    let started = clock.now();
    let deadline = started + max;
    let mut someone_typed = false;
    while clock.now() < deadline {
        let typing_changed = seen.changed.notified();
        let someone_wrote = answering.changed.notified();
        tokio::pin!(typing_changed, someone_wrote);
        typing_changed.as_mut().enable();
        someone_wrote.as_mut().enable();
        let now = now_ms();
        let (typing_since, last_wrote) = {
            let people = answering.last_message_at.lock().unwrap_or_else(|p| p.into_inner());
            let typing =
                people.iter().filter_map(|(user, last)| seen.last(channel, *user).filter(|t| still_typing(Some(*t), *last, now))).max();
            (typing, people.values().copied().max().unwrap_or(i64::MIN))
        };
        let wait_until = match typing_since {
            Some(t) => {
                someone_typed = true;
                now + (TYPING_LASTS_MS - (now - t)).max(0)
            }
            None if someone_typed && now - last_wrote < TYPING_GRACE_MS => last_wrote + TYPING_GRACE_MS,
            None => break,
        };
        let left = deadline.saturating_sub(clock.now());
        let nap = Duration::from_millis((wait_until - now).max(0) as u64).min(left).min(HOLD_TICK);
        tokio::select! {
            _ = tokio::time::sleep(nap) => {}
            _ = typing_changed => {}
            _ = someone_wrote => {}
        }
    }
    let held = clock.now().saturating_sub(started);
    answering.held_ms.store(held.as_millis() as u64, std::sync::atomic::Ordering::SeqCst);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typing_counts_only_after_the_last_message_and_for_ten_seconds() {
        assert!(!still_typing(None, 0, 0));
        assert!(still_typing(Some(1_000), 500, 2_000));
        assert!(!still_typing(Some(1_000), 1_000, 2_000), "the message they were typing has arrived");
        assert!(!still_typing(Some(1_000), 500, 1_000 + TYPING_LASTS_MS), "the indicator lapsed");
    }

    #[tokio::test]
    async fn the_hold_ends_when_the_typist_writes_and_is_bounded_otherwise() {
        let clock: std::sync::Arc<dyn Clock> = std::sync::Arc::new(clankie_agent::BootClock);
        let seen = std::sync::Arc::new(TypingSeen::default());
        let answering = std::sync::Arc::new(Answering::default());
        let first = v1::Ingress { author_id: 7, received_at_ms: now_ms() - 10, ..Default::default() };
        answering.wrote(&first);
        // Nobody typing: no hold at all.
        hold(seen.clone(), answering.clone(), 1, Duration::from_secs(5), clock.clone()).await;
        assert!(answering.held() < Duration::from_millis(50));

        seen.note(&v1::TypingSignal { channel_id: 1, user_id: 7, at_ms: now_ms(), ..Default::default() });
        let task = tokio::spawn(hold(seen.clone(), answering.clone(), 1, Duration::from_secs(5), clock.clone()));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!task.is_finished(), "released while they were still typing");
        let wrote = std::time::Instant::now();
        answering.wrote(&v1::Ingress { author_id: 7, received_at_ms: now_ms(), ..Default::default() });
        tokio::time::timeout(Duration::from_secs(3), task).await.expect("their message ends the hold").unwrap();
        let grace = Duration::from_millis(TYPING_GRACE_MS as u64);
        assert!(wrote.elapsed() >= grace - Duration::from_millis(20), "released before the grace for a next message");

        // Typing that never turns into a message holds only as long as allowed.
        seen.note(&v1::TypingSignal { channel_id: 1, user_id: 7, at_ms: now_ms() + 1, ..Default::default() });
        let started = std::time::Instant::now();
        hold(seen, answering.clone(), 1, Duration::from_millis(200), clock).await;
        assert!(started.elapsed() >= Duration::from_millis(200) && started.elapsed() < Duration::from_secs(2));
    }

    /// The bound is read from the injected clock: a minute's hold ends as soon as that clock
    /// passes it, though the typist is still typing and almost no real time went by.
    #[tokio::test]
    async fn the_hold_is_bounded_on_the_injected_clock() {
        let clock = clankie_agent::SuspendableClock::new();
        let seen = std::sync::Arc::new(TypingSeen::default());
        let answering = std::sync::Arc::new(Answering::default());
        answering.wrote(&v1::Ingress { author_id: 7, received_at_ms: now_ms() - 10, ..Default::default() });
        seen.note(&v1::TypingSignal { channel_id: 1, user_id: 7, at_ms: now_ms(), ..Default::default() });
        let max = Duration::from_secs(60);
        let task = tokio::spawn(hold(seen.clone(), answering.clone(), 1, max, std::sync::Arc::new(clock.clone())));
        // On this single-threaded runtime one yield runs the hold up to its first wait, so it has read its start.
        tokio::task::yield_now().await;
        assert!(!task.is_finished(), "a typist still typing was let go at once");
        clock.suspend_for(max + Duration::from_secs(1));
        tokio::time::timeout(Duration::from_secs(2), task).await.expect("the hold outlived its bound on the clock").unwrap();
        assert!(answering.held() > max, "held {:?}", answering.held());
    }
}
