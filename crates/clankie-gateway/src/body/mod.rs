//! The body: what the captain asks to be shown in Discord, pulled while this replica holds the
//! REST lease and handed to one poster per channel, so each channel's messages post in order and
//! a long reply never holds another channel up. A tenure's end hands back what it held, in order.
//!
//! - [`post`]: replies, text updates and direct messages, in pieces, resumed after a hand-over.
//! - [`pieces`]: a reply cut into Discord messages, each with its nonce.
//! - [`progress`]: how far each reply got, shared, so a hand-over resumes at the next piece.
//! - [`refusal`]: what Discord's answer to a failed request means for the message.
//! - [`held`]: the messages a poster holds, and the hand-back of those left unsettled.
//! - [`cards`]: the tool card shown while a turn works.
//! - [`reactions`]: outcomes shown as reactions once their reply is out.
//! - [`history`]: recent messages for a cold lane.

pub(crate) mod cards;
pub(crate) mod held;
pub(crate) mod history;
pub(crate) mod pieces;
pub(crate) mod post;
pub(crate) mod progress;
pub(crate) mod reactions;
pub(crate) mod refusal;

use std::collections::HashMap;
use std::time::Duration;

use clankie_bus::ConsumerSpec;
use clankie_proto::{Family, v1};
use tokio::sync::mpsc;

use self::held::{Held, Pulled};
use crate::error::GatewayError;
use crate::state::Gateway;

/// How long an outbound message a gateway took stays its own without word from it. While it
/// posts (a long reply waits on the channel's bucket) it says it is still at work; one that
/// dies holding a reply hands it on after this, and Discord's enforced nonce keeps the pieces
/// it did post from posting twice.
const BODY_ACK_WAIT: Duration = Duration::from_secs(10);
/// Outbound messages pulled at once; each is kept alive while it waits for its channel.
const BODY_PREFETCH: usize = 64;

/// The longest a tenure's end spends naking what it held, in all.
const HAND_BACK_NAKS: Duration = Duration::from_secs(3);
/// How long a tenure's end waits for its posters to be dropped before it hands back what they held.
const HAND_BACK_WAIT: Duration = Duration::from_secs(1);
/// How long a channel's poster waits for more before it ends.
const POSTER_IDLE: Duration = Duration::from_secs(30);

/// An outbound message waiting for its channel's poster; dropping it ends its progress acks.
struct Queued {
    d: Held,
    _done: tokio::sync::oneshot::Sender<()>,
}

impl Gateway {
    /// Pulls outbound messages and hands each to its channel's poster: one task per channel
    /// with messages waiting, which posts them in the order they came, so a long reply in one
    /// channel never holds up another's. Every message pulled is kept alive (progress acks)
    /// from the moment it is pulled until it is acked, queued or posting.
    pub(crate) async fn run_body(&self) -> Result<(), GatewayError> {
        // What a body that panicked held goes back first, in order, before newer messages are pulled.
        self.hand_back_held().await;
        let spec = ConsumerSpec::durable("gateway-body", Family::BodySend).with_ack_wait(BODY_ACK_WAIT).with_prefetch(BODY_PREFETCH, 0);
        let back = self.outbound_hand_back().clone();
        let mut pulled = Pulled { consumer: self.bus().consumer::<v1::OutboundMessage>(spec).await?, back: back.clone() };
        let consumer = &mut pulled.consumer;
        let mut posters: HashMap<u64, mpsc::UnboundedSender<Queued>> = HashMap::new();
        // Owned here: dropping the body (the REST lease lost) ends every poster at once.
        let mut tasks = tokio::task::JoinSet::new();
        loop {
            let d = tokio::select! {
                d = consumer.next() => d?,
                Some(ended) = tasks.join_next(), if !tasks.is_empty() => {
                    // A poster that panicked is the body's panic: its supervisor restarts the
                    // body, and rebuilds the REST client when the limiter was what panicked.
                    if let Err(e) = ended
                        && e.is_panic()
                    {
                        std::panic::resume_unwind(e.into_panic());
                    }
                    continue;
                }
            };
            clankie_settings::fault::panic_once("gateway.body");
            tracing::debug!(stream_sequence = d.stream_sequence, delivered = d.delivered, "outbound message pulled");
            posters.retain(|_, poster| !poster.is_closed());
            let channel = d.event.channel_id;
            let (done, finished) = tokio::sync::oneshot::channel::<()>();
            let progress = d.progress();
            tasks.spawn(async move {
                let _ = progress.while_working(finished, BODY_ACK_WAIT / 3).await;
            });
            let queued = Queued { d: Held::new(d, &back), _done: done };
            let queued = match posters.get(&channel) {
                Some(poster) => match poster.send(queued) {
                    Ok(()) => continue,
                    Err(refused) => refused.0,
                },
                None => queued,
            };
            let (poster, queue) = mpsc::unbounded_channel();
            let _ = poster.send(queued);
            posters.insert(channel, poster);
            tasks.spawn(self.clone().post_in_channel(queue));
        }
    }

    /// One channel's poster: posts what its queue holds, in order, and ends once the queue
    /// has stayed empty for [`POSTER_IDLE`] (closing it first, so nothing sent is left behind).
    async fn post_in_channel(self, mut queue: mpsc::UnboundedReceiver<Queued>) {
        loop {
            let queued = match tokio::time::timeout(POSTER_IDLE, queue.recv()).await {
                Ok(Some(queued)) => queued,
                Ok(None) => return,
                Err(_) => {
                    queue.close();
                    match queue.try_recv() {
                        Ok(queued) => queued,
                        Err(_) => return,
                    }
                }
            };
            let span = tracing::info_span!("delivery", otel.name = "gateway.post", delivery_id = %queued.d.delivery().event.delivery_id);
            queued.d.delivery().traced(&span);
            let Queued { d, _done } = queued;
            tracing::Instrument::instrument(self.deliver(d), span).await;
        }
    }

    /// Naks, in stream order, every outbound message the ended tenure held unsettled, once its
    /// posters have been dropped (briefly waited for): the next holder takes them at once and
    /// posts each channel's in the order they came.
    pub(crate) async fn hand_back_held(&self) {
        let deadline = tokio::time::Instant::now() + HAND_BACK_WAIT;
        while self.outbound_hand_back().held() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let mut back = self.outbound_handed_back().take_all();
        back.sort_by_key(|d| d.stream_sequence);
        // Bounded: with the bus away the rest are left to their ack wait (order is lost then anyway).
        let deadline = tokio::time::Instant::now() + HAND_BACK_NAKS;
        for d in &back {
            match tokio::time::timeout_at(deadline, d.nak_confirmed()).await {
                Ok(Ok(())) => {}
                _ => {
                    tracing::warn!("handing outbound messages back failed; the rest come back after their ack wait");
                    break;
                }
            }
        }
        if !back.is_empty() {
            let sequences: Vec<u64> = back.iter().map(|d| d.stream_sequence).collect();
            tracing::info!(handed_back = back.len(), ?sequences, "outbound messages handed back to the next REST holder, in order");
        }
    }
}
