//! The room's ears: the bounded queue of utterances heard and waiting for the transcriber, so a
//! slow speech engine never grows memory nor answers speech long gone.

use std::collections::VecDeque;
use std::sync::Arc;

use clankie_bus::TraceContext;
use clankie_speech::Audio;

/// One utterance heard, waiting for its words.
pub(super) struct Utterance {
    pub(super) id: String,
    pub(super) speaker: u64,
    pub(super) author_name: String,
    pub(super) audio: Audio,
    /// The spoken turn it begins.
    pub(super) trace: TraceContext,
}

/// The utterances waiting for a room's transcriber, at most `held`: a new one past that drops
/// the oldest. Cheap to clone; the room's actor hears, its transcriber takes.
#[derive(Clone)]
pub(super) struct Ears {
    inner: Arc<(std::sync::Mutex<EarsQueue>, tokio::sync::Notify)>,
}

struct EarsQueue {
    waiting: VecDeque<Utterance>,
    held: usize,
}

impl Ears {
    /// Ears that hold at most `held` utterances (at least one).
    pub(super) fn new(held: usize) -> Ears {
        let queue = EarsQueue { waiting: VecDeque::new(), held: held.max(1) };
        Ears { inner: Arc::new((std::sync::Mutex::new(queue), tokio::sync::Notify::new())) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, EarsQueue> {
        self.inner.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues an utterance; gives back the oldest one it dropped to make room.
    pub(super) fn hear(&self, u: Utterance) -> Option<Utterance> {
        let dropped = {
            let mut q = self.lock();
            q.waiting.push_back(u);
            if q.waiting.len() > q.held { q.waiting.pop_front() } else { None }
        };
        self.inner.1.notify_one();
        dropped
    }

    /// How many wait now.
    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.lock().waiting.len()
    }

    /// The next utterance, oldest first (the transcriber ends with its room, aborted).
    pub(super) async fn next(&self) -> Option<Utterance> {
        loop {
            let notified = self.inner.1.notified();
            if let Some(u) = self.lock().waiting.pop_front() {
                return Some(u);
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod ears_tests {
    use super::*;

    fn utterance(n: usize) -> Utterance {
        Utterance {
            id: format!("utt:{n}"),
            speaker: 7,
            author_name: "ada".into(),
            audio: Audio { pcm: vec![0; 160], rate: 16_000 },
            trace: TraceContext::default(),
        }
    }

    #[tokio::test]
    async fn voice_actor_the_ears_hold_at_most_their_bound_and_drop_the_oldest() {
        let ears = Ears::new(3);
        let mut dropped = Vec::new();
        for n in 0..10 {
            if let Some(old) = ears.hear(utterance(n)) {
                dropped.push(old.id);
            }
            assert!(ears.waiting() <= 3, "{} waiting", ears.waiting());
        }
        assert_eq!(dropped, (0..7).map(|n| format!("utt:{n}")).collect::<Vec<_>>(), "the oldest go first");
        let mut taken = Vec::new();
        for _ in 0..3 {
            taken.push(ears.next().await.expect("an utterance").id);
        }
        assert_eq!(taken, ["utt:7", "utt:8", "utt:9"], "what is kept is the newest, in order");
        assert_eq!(ears.waiting(), 0);
    }
}
