//! The REST budget: this replica's requests paced under Discord's global limit and each
//! channel's create bucket, counted so typing and reactions give way to replies, and handed on
//! to the next REST holder with the lease.

use std::time::Duration;

use clankie_bus::now_ms;

use crate::leases::{RestHandover, Spoken};

/// The span of Discord's message-create bucket; [`crate::GatewayConfig::create_span`] holds the one in use.
pub const CREATE_SPAN: Duration = Duration::from_secs(5);

/// This replica's REST requests: paced evenly under Discord's global limit, and counted so
/// typing and reactions can give way to replies.
///
/// Twilight's limiter counts Discord's 50 a second in windows that start at its first request,
/// and Discord's own window starts when that request arrives: when twilight's window resets it
/// sends a burst that can land in the end of Discord's, and twilight retries a global 429 at
/// once. So every request first takes a slot at most [`PACED_PER_SECOND`] a second, evenly
/// spaced, and is sent only while fewer than that are in flight or were answered within the
/// last second. A request is counted from its slot until a second after its answer: it arrived
/// at Discord before it was answered, so however late a loaded machine sends it (or twilight's
/// route bucket holds it), no second at Discord can hold more than the budget.
/// Twilight still keeps the per-route buckets. And while the last second used most of the
/// budget, typing triggers and outcome reactions wait, so a reply never queues behind them.
#[derive(Debug)]
pub(crate) struct RestBudget {
    window: std::sync::Mutex<Window>,
    next_slot: std::sync::Mutex<tokio::time::Instant>,
    creates: std::sync::Mutex<Creates>,
    /// Requests waiting for a slot in [`RestBudget::pace`]: context fetches give way to them.
    waiting: std::sync::atomic::AtomicUsize,
}

/// The message creates of the last create span, per channel, by when each was answered; and,
/// after a tenure taken from a holder that did not hand over its record, when creates may
/// start at all.
#[derive(Debug)]
struct Creates {
    answered: std::collections::HashMap<u64, std::collections::VecDeque<tokio::time::Instant>>,
    not_before: tokio::time::Instant,
    span: Duration,
}

/// The requests counted against the last second: those in flight, and when the others were answered.
#[derive(Debug, Default)]
struct Window {
    in_flight: usize,
    answered: std::collections::VecDeque<tokio::time::Instant>,
}

impl Window {
    /// Counts answers given at `at` (another holder's, taken over) in their place in time.
    fn count_answered(&mut self, at: impl IntoIterator<Item = tokio::time::Instant>) {
        self.answered.extend(at);
        self.answered.make_contiguous().sort_unstable();
    }

    fn count(&mut self, now: tokio::time::Instant) -> usize {
        while self.answered.front().is_some_and(|t| now.duration_since(*t) >= Duration::from_secs(1)) {
            self.answered.pop_front();
        }
        self.in_flight + self.answered.len()
    }
}

/// A request's place in the budget, held until its answer is in: dropping it starts the
/// second the request still counts for.
#[must_use = "hold the slot until the request is answered"]
pub(crate) struct Slot<'a>(&'a RestBudget);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut window = self.0.window.lock().unwrap_or_else(|p| p.into_inner());
        window.in_flight = window.in_flight.saturating_sub(1);
        window.answered.push_back(tokio::time::Instant::now());
    }
}

/// Discord's bucket for messages created in one channel: this many in any create span
/// ([`crate::GatewayConfig::create_span`]).
pub(crate) const CREATES_PER_SPAN: usize = 5;

/// A message create's place in its channel's window: once the request may have left, dropping
/// it counts the create as answered now, so a create cut off by a tenure's end still counts.
#[must_use = "hold the turn until the create is answered"]
pub(crate) struct CreateTurn<'a> {
    budget: &'a RestBudget,
    channel: u64,
    sent: bool,
}

impl CreateTurn<'_> {
    /// The request is about to leave: from here on it counts, answered or not.
    pub(crate) fn sending(&mut self) {
        self.sent = true;
    }
}

impl Drop for CreateTurn<'_> {
    fn drop(&mut self) {
        if self.sent {
            self.budget.create_answered(self.channel, tokio::time::Instant::now());
        }
    }
}

/// `at` (wall clock, ms) as an instant of this process's clock.
fn instant_of(at: i64) -> tokio::time::Instant {
    let (now, now_ms) = (tokio::time::Instant::now(), now_ms());
    let ago = Duration::from_millis(now_ms.saturating_sub(at).unsigned_abs());
    if at <= now_ms { now.checked_sub(ago).unwrap_or(now) } else { now + ago }
}

/// `at` as wall clock ms, for another process to read.
fn wall_ms_of(at: tokio::time::Instant) -> i64 {
    now_ms() - tokio::time::Instant::now().saturating_duration_since(at).as_millis() as i64
}

/// Requests a second this replica sends at most: Discord's 50, less a margin for the way there.
pub const PACED_PER_SECOND: u32 = 45;
/// Requests in the last second past which typing and reactions wait.
const CROWDED_PER_SECOND: usize = 36;
/// Requests in the last second past which context fetches wait: their share is the budget's
/// lower part, so replies keep the rest.
const CONTEXT_PER_SECOND: usize = 20;

impl RestBudget {
    /// A budget with no requests yet, whose channels take [`CREATES_PER_SPAN`] creates per `create_span`.
    pub(crate) fn new(create_span: Duration) -> RestBudget {
        let now = tokio::time::Instant::now();
        RestBudget {
            window: Default::default(),
            next_slot: std::sync::Mutex::new(now),
            creates: std::sync::Mutex::new(Creates { answered: Default::default(), not_before: now, span: create_span }),
            waiting: Default::default(),
        }
    }

    /// Waits until `channel` may take another message create: until the one
    /// [`CREATES_PER_SPAN`] before it was answered a create span ago. Counted from answers, not
    /// sends, because a request reaches Discord before it is answered: however late a loaded
    /// machine sends one, no span at Discord holds more. One poster per channel calls it.
    pub(crate) async fn create_turn(&self, channel: u64) -> CreateTurn<'_> {
        loop {
            let free_at = {
                let creates = self.creates.lock().unwrap_or_else(|p| p.into_inner());
                let by_window = creates
                    .answered
                    .get(&channel)
                    .filter(|a| a.len() >= CREATES_PER_SPAN)
                    .map(|a| a[a.len() - CREATES_PER_SPAN] + creates.span);
                by_window.map_or(creates.not_before, |w| w.max(creates.not_before))
            };
            if free_at <= tokio::time::Instant::now() {
                return CreateTurn { budget: self, channel, sent: false };
            }
            tokio::time::sleep_until(free_at).await;
        }
    }

    fn create_answered(&self, channel: u64, at: tokio::time::Instant) {
        let mut creates = self.creates.lock().unwrap_or_else(|p| p.into_inner());
        let answered = creates.answered.entry(channel).or_default();
        let place = answered.partition_point(|t| *t <= at);
        answered.insert(place, at);
        while answered.len() > CREATES_PER_SPAN {
            answered.pop_front();
        }
    }

    /// What this replica's requests still count for at Discord, for the next REST holder:
    /// the answers of the last second and each channel's creates of the last create span.
    pub(crate) fn spoken(&self) -> Spoken {
        let now = tokio::time::Instant::now();
        let answered_ms = {
            let mut window = self.window.lock().unwrap_or_else(|p| p.into_inner());
            window.count(now);
            // In flight: it reaches Discord now at the latest, and is answered later still.
            let in_flight = std::iter::repeat_n(now_ms(), window.in_flight);
            window.answered.iter().map(|t| wall_ms_of(*t)).chain(in_flight).collect()
        };
        let mut creates = self.creates.lock().unwrap_or_else(|p| p.into_inner());
        let span = creates.span;
        creates.answered.retain(|_, a| {
            a.retain(|t| now.saturating_duration_since(*t) < span);
            !a.is_empty()
        });
        let mut by_channel: Vec<(u64, Vec<i64>)> =
            creates.answered.iter().map(|(c, a)| (*c, a.iter().map(|t| wall_ms_of(*t)).collect())).collect();
        by_channel.sort_unstable();
        Spoken { answered_ms, creates: by_channel }
    }

    /// Counts what the previous REST holder's requests still count for at Discord before this
    /// replica's first: its record as it handed it over, and, when it lost the lease without
    /// handing over (killed, paused, cut off from the bus), every request it may have sent up
    /// to its lease's end: no request until a second past that end, no create until a create
    /// span past it.
    pub(crate) fn take_over(&self, handover: &RestHandover) {
        if let Some(spoken) = &handover.spoken {
            self.window.lock().unwrap_or_else(|p| p.into_inner()).count_answered(spoken.answered_ms.iter().map(|t| instant_of(*t)));
            for (channel, answered) in &spoken.creates {
                for at in answered {
                    self.create_answered(*channel, instant_of(*at));
                }
            }
        }
        if let Some(ended_ms) = handover.unclean_end_ms {
            let end = instant_of(ended_ms);
            self.window.lock().unwrap_or_else(|p| p.into_inner()).count_answered(std::iter::repeat_n(end, PACED_PER_SECOND as usize));
            let mut creates = self.creates.lock().unwrap_or_else(|p| p.into_inner());
            creates.not_before = creates.not_before.max(end + creates.span);
        }
    }

    /// Waits for the next free slot and takes it; every REST request calls this first and
    /// holds the slot until it is answered. While one waits, context fetches do not take a slot.
    pub(crate) async fn pace(&self) -> Slot<'_> {
        self.waiting.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let slot = self.slot().await;
        self.waiting.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        slot
    }

    /// A slot for a context fetch, on the budget's low-priority share: taken only when the next
    /// slot is free now, no other request waits for one and the last second used fewer than
    /// [`CONTEXT_PER_SECOND`]. A context fetch never holds a slot ahead, so a reply is never
    /// queued behind one.
    pub(crate) async fn pace_context(&self) -> Slot<'_> {
        loop {
            if let Some(slot) = self.slot_now() {
                return slot;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The next slot, if it is free now and the budget is quiet enough for a context fetch.
    fn slot_now(&self) -> Option<Slot<'_>> {
        if self.waiting.load(std::sync::atomic::Ordering::SeqCst) > 0 {
            return None;
        }
        let now = tokio::time::Instant::now();
        let mut next = self.next_slot.lock().unwrap_or_else(|p| p.into_inner());
        if *next > now {
            return None;
        }
        let mut window = self.window.lock().unwrap_or_else(|p| p.into_inner());
        if window.count(now) >= CONTEXT_PER_SECOND {
            return None;
        }
        *next = now + Duration::from_secs(1) / PACED_PER_SECOND;
        window.in_flight += 1;
        Some(Slot(self))
    }

    async fn slot(&self) -> Slot<'_> {
        let slot = {
            let mut next = self.next_slot.lock().unwrap_or_else(|p| p.into_inner());
            let slot = (*next).max(tokio::time::Instant::now());
            *next = slot + Duration::from_secs(1) / PACED_PER_SECOND;
            slot
        };
        tokio::time::sleep_until(slot).await;
        loop {
            let free_at = {
                let now = tokio::time::Instant::now();
                let mut window = self.window.lock().unwrap_or_else(|p| p.into_inner());
                if window.count(now) < PACED_PER_SECOND as usize {
                    window.in_flight += 1;
                    return Slot(self);
                }
                // Full: the oldest answer leaves the second first (or an answer is awaited).
                window.answered.front().map_or(now + Duration::from_millis(20), |t| *t + Duration::from_secs(1))
            };
            tokio::time::sleep_until(free_at).await;
        }
    }

    /// Whether the last second used most of the budget.
    pub(crate) fn crowded(&self) -> bool {
        let mut window = self.window.lock().unwrap_or_else(|p| p.into_inner());
        window.count(tokio::time::Instant::now()) >= CROWDED_PER_SECOND
    }

    /// Waits, up to `at_most`, for the budget to be uncrowded, then for a slot.
    pub(crate) async fn give_way(&self, at_most: Duration) -> Slot<'_> {
        let deadline = tokio::time::Instant::now() + at_most;
        while self.crowded() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.slot().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A context fetch takes the budget's lower share only: past [`CONTEXT_PER_SECOND`] in the
    /// last second it waits while a reply still goes, and it waits while a reply waits for a slot.
    #[tokio::test(start_paused = true)]
    async fn ingest_context_fetches_give_way_to_replies() {
        let budget = RestBudget::new(CREATE_SPAN);
        for _ in 0..CONTEXT_PER_SECOND {
            drop(budget.pace().await);
        }
        let reply = tokio::time::timeout(Duration::from_millis(100), budget.pace()).await;
        assert!(reply.is_ok(), "a reply waited inside the budget");
        drop(reply);
        let context = tokio::time::timeout(Duration::from_millis(300), budget.pace_context()).await;
        assert!(context.is_err(), "a context fetch took a slot while the last second was past its share");
        drop(context);
        // The second gone by: ten context fetches asked for at once, then a reply: the reply is
        // sent before all but the one that already held its slot.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let contexts = (0..10).map(|_| async {
            let _slot = budget.pace_context().await;
            tokio::time::Instant::now()
        });
        let reply = async {
            tokio::task::yield_now().await;
            let _slot = budget.pace().await;
            tokio::time::Instant::now()
        };
        let (contexts, reply) = tokio::join!(futures::future::join_all(contexts), reply);
        let before = contexts.iter().filter(|at| **at < reply).count();
        assert!(before <= 1, "the reply was queued behind {before} context fetches");
        assert!(tokio::time::timeout(Duration::from_secs(2), budget.pace_context()).await.is_ok(), "a quiet budget held a context fetch");
    }
}
