//! A delivery the captain holds until its outcome is durably recorded.

use std::time::{Duration, Instant};

use clankie_bus::{BusError, Delivery, Progress};
use clankie_proto::{LaneKey, v1};

enum Source {
    Ingress(Delivery<v1::Ingress>),
    Steer(Delivery<v1::Steer>),
    /// Read from the stream for a run that died holding it: the JetStream message itself is
    /// still pending on the dead replica's delivery, comes back after its ack wait, finds its
    /// outcome recorded and is acked then. So acks and naks of this copy do nothing.
    Gathered,
}

/// An admitted delivery and the JetStream message it came on. It is acked
/// only after its outcome is recorded, so a replica that dies holding it
/// loses nothing: JetStream hands it to another replica.
pub struct Held {
    pub ingress: v1::Ingress,
    pub lane: LaneKey,
    /// When this replica received it.
    pub received: Instant,
    /// The trace the message began in: its turn's spans join it.
    pub trace: clankie_bus::TraceContext,
    source: Source,
    /// This replica's claim on the delivery id, released when the held delivery is dropped.
    claim: Option<Claim>,
}

/// The delivery ids one replica holds right now. A JetStream redelivery (or a forwarded copy) of
/// an id already held is the same delivery again: it must not become a second turn or outcome.
///
/// It also keeps each held JetStream message alive: [`InHand::keep_alive`] tells the server
/// every one of them is in progress, from a task of its own that nothing a run, a tool or a
/// media fetch does can hold up.
#[derive(Default, Clone)]
pub struct InHand(std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, Option<Progress>>>>);

impl InHand {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, Option<Progress>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether this replica holds `delivery_id` now.
    pub(crate) fn holds(&self, delivery_id: &str) -> bool {
        self.lock().contains_key(delivery_id)
    }

    /// Claims `held`'s delivery id for it; gives the delivery back when the id is already held.
    pub(crate) fn claim(&self, mut held: Held) -> Result<Held, Box<Held>> {
        let id = held.delivery_id().to_owned();
        {
            let mut map = self.lock();
            if map.contains_key(&id) {
                return Err(Box::new(held));
            }
            map.insert(id.clone(), held.progress());
        }
        held.claim = Some(Claim { in_hand: self.clone(), id });
        Ok(held)
    }

    /// Marks every held delivery in progress, every `every`, until dropped (aborted).
    pub(crate) async fn keep_alive(self, every: Duration) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            let handles: Vec<Progress> = self.lock().values().flatten().cloned().collect();
            for h in handles {
                let _ = h.in_progress().await;
            }
        }
    }
}

struct Claim {
    in_hand: InHand,
    id: String,
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.in_hand.lock().remove(&self.id);
    }
}

/// The span that admitted a delivery (the caller's), so its turn is the admission's child; the
/// message's own trace where nothing is traced here.
fn admitted_in(published: &clankie_bus::TraceContext) -> clankie_bus::TraceContext {
    let current = clankie_bus::TraceContext::current();
    if current.is_empty() { published.clone() } else { current }
}

impl Held {
    pub(crate) fn from_ingress(lane: LaneKey, d: Delivery<v1::Ingress>) -> Held {
        Held {
            ingress: d.event.clone(),
            lane,
            received: Instant::now(),
            trace: admitted_in(&d.trace),
            source: Source::Ingress(d),
            claim: None,
        }
    }

    pub(crate) fn from_steer(lane: LaneKey, ingress: v1::Ingress, d: Delivery<v1::Steer>) -> Held {
        Held { ingress, lane, received: Instant::now(), trace: admitted_in(&d.trace), source: Source::Steer(d), claim: None }
    }

    /// A delivery another replica admitted and died holding, read back from the stream.
    pub(crate) fn gathered(lane: LaneKey, ingress: v1::Ingress, trace: clankie_bus::TraceContext) -> Held {
        Held { ingress, lane, received: Instant::now(), trace, source: Source::Gathered, claim: None }
    }

    fn progress(&self) -> Option<Progress> {
        match &self.source {
            Source::Ingress(d) => Some(d.progress()),
            Source::Steer(d) => Some(d.progress()),
            Source::Gathered => None,
        }
    }

    /// The delivery id (the Discord message id).
    pub fn delivery_id(&self) -> &str {
        &self.ingress.delivery_id
    }

    /// The Discord message id as a number, 0 when it is not one.
    pub fn message_id(&self) -> u64 {
        self.ingress.delivery_id.parse().unwrap_or(0)
    }

    /// Whether this is a reminder come due that goes to its asker alone, by DM.
    pub fn is_direct_reminder(&self) -> bool {
        self.ingress.reminder.as_ref().is_some_and(|r| r.direct)
    }

    /// Whether this is an edit or a deletion of a message sent before, not a message.
    pub fn is_change(&self) -> bool {
        self.ingress.change() != v1::MessageChange::None
    }

    /// Which delivery of its JetStream message this is (1 the first time).
    pub fn delivered(&self) -> i64 {
        match &self.source {
            Source::Ingress(d) => d.delivered,
            Source::Steer(d) => d.delivered,
            Source::Gathered => 1,
        }
    }

    /// Whether another replica already forwarded it here.
    pub fn forwarded(&self) -> bool {
        matches!(self.source, Source::Steer(_))
    }

    pub async fn ack(&self) -> Result<(), BusError> {
        match &self.source {
            Source::Ingress(d) => d.ack().await,
            Source::Steer(d) => d.ack().await,
            Source::Gathered => Ok(()),
        }
    }

    pub async fn nak_after(&self, delay: Duration) -> Result<(), BusError> {
        match &self.source {
            Source::Ingress(d) => d.nak_after(delay).await,
            Source::Steer(d) => d.nak_after(delay).await,
            Source::Gathered => Ok(()),
        }
    }

    pub async fn in_progress(&self) -> Result<(), BusError> {
        match &self.source {
            Source::Ingress(d) => d.in_progress().await,
            Source::Steer(d) => d.in_progress().await,
            Source::Gathered => Ok(()),
        }
    }
}
