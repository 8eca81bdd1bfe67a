//! A delivery the captain holds until its outcome is durably recorded.

use std::time::{Duration, Instant};

use clankie_bus::{BusError, Delivery};
use clankie_proto::{LaneKey, v1};

enum Source {
    Ingress(Delivery<v1::Ingress>),
    Steer(Delivery<v1::Steer>),
}

/// An admitted delivery and the JetStream message it came on. It is acked
/// only after its outcome is recorded, so a replica that dies holding it
/// loses nothing: JetStream hands it to another replica.
pub struct Held {
    pub ingress: v1::Ingress,
    pub lane: LaneKey,
    /// When this replica received it.
    pub received: Instant,
    source: Source,
    /// This replica's claim on the delivery id, released when the held delivery is dropped.
    claim: Option<Claim>,
}

/// The delivery ids one replica holds right now. A JetStream redelivery (or a forwarded copy) of
/// an id already held is the same delivery again: it must not become a second turn or outcome.
#[derive(Default, Clone)]
pub struct InHand(std::sync::Arc<std::sync::Mutex<std::collections::HashSet<String>>>);

impl InHand {
    /// Claims `held`'s delivery id for it; gives the delivery back when the id is already held.
    /// Whether this replica holds `delivery_id` now.
    pub(crate) fn holds(&self, delivery_id: &str) -> bool {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).contains(delivery_id)
    }

    pub(crate) fn claim(&self, mut held: Held) -> Result<Held, Box<Held>> {
        let id = held.delivery_id().to_owned();
        if !self.0.lock().unwrap_or_else(|p| p.into_inner()).insert(id.clone()) {
            return Err(Box::new(held));
        }
        held.claim = Some(Claim { in_hand: self.clone(), id });
        Ok(held)
    }
}

struct Claim {
    in_hand: InHand,
    id: String,
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.in_hand.0.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.id);
    }
}

impl Held {
    pub(crate) fn from_ingress(lane: LaneKey, d: Delivery<v1::Ingress>) -> Held {
        Held { ingress: d.event.clone(), lane, received: Instant::now(), source: Source::Ingress(d), claim: None }
    }

    pub(crate) fn from_steer(lane: LaneKey, ingress: v1::Ingress, d: Delivery<v1::Steer>) -> Held {
        Held { ingress, lane, received: Instant::now(), source: Source::Steer(d), claim: None }
    }

    /// The delivery id (the Discord message id).
    pub fn delivery_id(&self) -> &str {
        &self.ingress.delivery_id
    }

    /// The Discord message id as a number, 0 when it is not one.
    pub fn message_id(&self) -> u64 {
        self.ingress.delivery_id.parse().unwrap_or(0)
    }

    /// Which delivery of its JetStream message this is (1 the first time).
    pub fn delivered(&self) -> i64 {
        match &self.source {
            Source::Ingress(d) => d.delivered,
            Source::Steer(d) => d.delivered,
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
        }
    }

    pub async fn nak_after(&self, delay: Duration) -> Result<(), BusError> {
        match &self.source {
            Source::Ingress(d) => d.nak_after(delay).await,
            Source::Steer(d) => d.nak_after(delay).await,
        }
    }

    pub async fn in_progress(&self) -> Result<(), BusError> {
        match &self.source {
            Source::Ingress(d) => d.in_progress().await,
            Source::Steer(d) => d.in_progress().await,
        }
    }
}
