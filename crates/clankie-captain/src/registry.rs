//! The registry of lanes with an actor on this replica: a held delivery goes to its lane's
//! actor, started on first need; a copy of one already held goes nowhere.

use tokio::sync::mpsc;
use tracing::Instrument;

use crate::{Captain, Held};

impl Captain {
    /// Hands a delivery to its lane's actor, starting one if the lane has none here.
    ///
    /// A copy of a delivery this replica already holds (JetStream redelivered it while its run
    /// was slow to settle, or a forwarded steer crossed a redelivery) is not handed on: it is
    /// marked in progress so JetStream waits, and the held original settles and acks the one
    /// stream message both stand for.
    pub(crate) fn dispatch(&self, held: Held) {
        let held = match self.inner.in_hand.claim(held) {
            Ok(held) => held,
            Err(copy) => {
                tracing::debug!(delivery_id = copy.delivery_id(), "a copy of a held delivery; the original answers for it");
                metrics::counter!("clankie_captain_held_copies_total").increment(1);
                tokio::spawn(async move {
                    let _ = copy.in_progress().await;
                });
                return;
            }
        };
        let lane = held.lane;
        let mut lanes = self.inner.lanes.lock().unwrap_or_else(|p| p.into_inner());
        let held = match lanes.get(&lane) {
            Some(tx) => match tx.send(held) {
                Ok(()) => return,
                Err(mpsc::error::SendError(h)) => h,
            },
            None => held,
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let _ = tx.send(held);
        lanes.insert(lane, tx);
        let captain = self.clone();
        tokio::spawn(captain.lane_actor(lane, rx).instrument(tracing::info_span!("lane", %lane)));
    }
}
