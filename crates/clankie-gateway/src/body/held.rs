//! Outbound messages the body holds until it settles them, and the hand-back of those a dropped
//! body left unsettled: data only, so the replica's state can own the hand-back channel.

use clankie_bus::Delivery;
use clankie_proto::v1;
use tokio::sync::mpsc;

/// An outbound message the body holds until it settles it (ack, nak or term). Dropped
/// unsettled, because the REST tenure ended under it, it is handed back: the replica naks
/// every such message in stream order for the next holder to take at once, instead of leaving
/// it to the ack wait while newer messages of its channel are posted first.
pub(crate) struct Held {
    d: Option<Delivery<v1::OutboundMessage>>,
    back: HandBack,
}

impl Held {
    /// Holds a pulled message, counted as held until it is settled or handed back.
    pub(crate) fn new(d: Delivery<v1::OutboundMessage>, back: &HandBack) -> Held {
        back.held.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Held { d: Some(d), back: back.clone() }
    }

    /// The held message, for posting it; only a settled one has none.
    pub(crate) fn delivery(&self) -> &Delivery<v1::OutboundMessage> {
        self.d.as_ref().expect("a held delivery until it is settled")
    }

    /// Takes the message to settle it: from here on a drop does not hand it back as well.
    pub(crate) fn settle(&mut self) -> Option<Delivery<v1::OutboundMessage>> {
        self.d.take()
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(d) = self.d.take() {
            let _ = self.back.tx.send(d);
        }
        self.back.held.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Where unsettled outbound messages go when the body is dropped (see [`Held`]).
#[derive(Clone)]
pub(crate) struct HandBack {
    tx: mpsc::UnboundedSender<Delivery<v1::OutboundMessage>>,
    held: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

/// The receiving end of the hand-back, read when a tenure ends.
pub(crate) struct HandedBack {
    rx: std::sync::Mutex<mpsc::UnboundedReceiver<Delivery<v1::OutboundMessage>>>,
}

impl HandBack {
    /// How many messages are held now: a tenure's end waits for its posters to drop theirs.
    pub(crate) fn held(&self) -> usize {
        self.held.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl HandedBack {
    /// Everything handed back so far, in the order it came back.
    pub(crate) fn take_all(&self) -> Vec<Delivery<v1::OutboundMessage>> {
        let mut back = Vec::new();
        let mut rx = self.rx.lock().unwrap_or_else(|p| p.into_inner());
        while let Ok(d) = rx.try_recv() {
            back.push(d);
        }
        back
    }
}

/// A hand-back channel: the body holds by its sending end, a tenure's end reads the other.
pub(crate) fn hand_back() -> (HandBack, HandedBack) {
    let (tx, rx) = mpsc::unbounded_channel();
    (HandBack { tx, held: Default::default() }, HandedBack { rx: std::sync::Mutex::new(rx) })
}

/// The body's consumer: dropped with the body, it hands back what it pulled and had not yet
/// given out, so those are not left to the ack wait either.
pub(crate) struct Pulled {
    pub consumer: clankie_bus::Consumer<v1::OutboundMessage>,
    pub back: HandBack,
}

impl Drop for Pulled {
    fn drop(&mut self) {
        while let Some(Ok(d)) = futures::FutureExt::now_or_never(self.consumer.next()) {
            let _ = self.back.tx.send(d);
        }
    }
}
