//! The state a running stand-in shares between its handle and its routes: the queued scripts,
//! the recorded requests, the gates and switches, so both wires admit a request the same way.

use std::sync::{Arc, Mutex};

use crate::anthropic::cache::PromptCache;
use crate::audio;
use crate::recorded::RecordedRequest;
use crate::script::Reply;

/// The scripts not yet taken and the requests recorded, under one lock.
#[derive(Default)]
pub(crate) struct Inner {
    /// Queued scripts, taken by the first request each matches.
    pub(crate) scripts: Vec<crate::script::Script>,
    /// Every request so far, in arrival order.
    pub(crate) requests: Vec<RecordedRequest>,
}

/// Shared state of a running stand-in.
#[derive(Clone, Default)]
pub struct Shared {
    inner: Arc<Mutex<Inner>>,
    /// Notified on each request, for [`StandIn::wait_for_requests`](crate::StandIn::wait_for_requests).
    pub(crate) arrived: Arc<tokio::sync::Notify>,
    /// Set by [`StandIn::abandon`](crate::StandIn::abandon): the listener is gone and requests are never answered.
    pub(crate) abandoned: Arc<std::sync::atomic::AtomicBool>,
    /// Tells the listener to close its socket.
    pub(crate) abandon: Arc<tokio::sync::Notify>,
    /// Notified by the listener once its socket is closed.
    pub(crate) unbound: Arc<tokio::sync::Notify>,
    /// The audio routes' scripts and grammar.
    pub audio: audio::AudioShared,
    /// The gates opened so far ([`Reply::Gated`]).
    pub(crate) gates: Arc<tokio::sync::watch::Sender<std::collections::BTreeSet<String>>>,
    /// Anthropic's prompt cache, on its own clock.
    pub prompt_cache: PromptCache,
    /// Set by [`StandIn::set_chat_completions`](crate::StandIn::set_chat_completions): `/v1/chat/completions` answers 404 as a route
    /// Anthropic does not serve, so only the Messages wire answers.
    pub(crate) chat_completions_off: Arc<std::sync::atomic::AtomicBool>,
}

impl Shared {
    /// The scripts and requests; a poisoned lock is taken anyway, as a test's panic elsewhere
    /// must not silence the stand-in.
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn take(&self, request: &RecordedRequest) -> Reply {
        let mut inner = self.lock();
        let (text, last) = (request.all_text(), request.last_text());
        let pos = inner.scripts.iter().position(|s| {
            s.when_request_contains.as_ref().is_none_or(|n| text.contains(n.as_str()))
                && s.when_last_message_contains.as_ref().is_none_or(|n| last.contains(n.as_str()))
        });
        match pos {
            Some(i) => inner.scripts.remove(i).reply,
            None => Reply::text("ok"),
        }
    }
}

/// Records `request` and takes its script, waiting out a gate; `None` when the stand-in was
/// abandoned, and the request must never be answered.
pub(crate) async fn admit(shared: &Shared, request: &RecordedRequest) -> Option<Reply> {
    let abandoned = shared.abandoned.load(std::sync::atomic::Ordering::SeqCst);
    let reply = if abandoned { Reply::Empty } else { shared.take(request) };
    shared.lock().requests.push(request.clone());
    shared.arrived.notify_waiters();
    if abandoned {
        return None;
    }
    Some(match reply {
        Reply::Gated { gate, then } => {
            let _ = shared.gates.subscribe().wait_for(|open| open.contains(&gate)).await;
            *then
        }
        reply => reply,
    })
}

/// Marks the stand-in abandoned and returns once its listener is closed.
pub(crate) async fn abandon(shared: &Shared) {
    shared.abandoned.store(true, std::sync::atomic::Ordering::SeqCst);
    shared.abandon.notify_one();
    shared.unbound.notified().await;
}
