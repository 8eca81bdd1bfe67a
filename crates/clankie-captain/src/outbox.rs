//! The captain's side of the reply outbox: outbound messages become rows that
//! commit with the turn, and are published only after that commit.

use std::time::Duration;

use clankie_bus::{Bus, BusError, MsgId};
use clankie_proto::{LaneKey, Subject, v1};
use clankie_store::{OutboxRow, Store};

/// Publishes committed outbox rows. Cheap to clone.
#[derive(Clone)]
pub struct Outbox {
    bus: Bus,
    store: Store,
}

impl Outbox {
    pub fn new(bus: Bus, store: Store) -> Outbox {
        Outbox { bus, store }
    }

    /// The row for an outbound message: its id is the message's idempotency key, which the
    /// body turns into Discord's nonce, so a row published twice still posts once.
    pub fn post(turn_id: &str, out: &v1::OutboundMessage) -> OutboxRow {
        Outbox::row(turn_id, &out.idempotency_key, &Subject::BodySend { channel: out.channel_id }, out)
    }

    /// The row for a delivery's outcome event, published once (its id is the event's `Nats-Msg-Id`).
    pub fn outcome(turn_id: &str, lane: LaneKey, event: &v1::DeliveryOutcome) -> OutboxRow {
        Outbox::row(turn_id, &format!("outcome:{}", event.delivery_id), &Subject::LaneOutcome { lane }, event)
    }

    fn row(turn_id: &str, id: &str, subject: &Subject, event: &impl prost::Message) -> OutboxRow {
        OutboxRow { id: id.to_owned(), turn_id: turn_id.to_owned(), subject: subject.to_string(), payload: event.encode_to_vec() }
    }

    /// Publishes a committed row and marks it sent. A row that fails here stays unsent for
    /// [`Outbox::relay_unsent`] to publish later.
    pub async fn relay(&self, row: &OutboxRow) -> Result<(), BusError> {
        let payload = bytes::Bytes::from(row.payload.clone());
        self.bus.publish_bytes(row.subject.clone(), payload, Some(&MsgId::new(row.id.clone()))).await?;
        if let Err(e) = self.store.mark_sent(&row.id).await {
            tracing::warn!(outbox = %row.id, error = %e, "published outbox row not marked sent; it may be published again (once on Discord)");
        }
        metrics::counter!("clankie_captain_outbox_published_total").increment(1);
        Ok(())
    }

    /// Publishes rows committed more than `older_than` ago and still unsent: their replica
    /// died (or lost the bus) between commit and publish. Returns how many went out.
    pub async fn relay_unsent(&self, older_than: Duration) -> usize {
        let rows = match self.store.unsent(older_than, 100).await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = %e, "outbox not readable; trying again later");
                return 0;
            }
        };
        let mut sent = 0;
        for row in &rows {
            match self.relay(row).await {
                Ok(()) => sent += 1,
                // One row that cannot go out does not hold up the others.
                Err(e) => tracing::warn!(outbox = %row.id, error = %e, "outbox row not published; trying again later"),
            }
        }
        if sent > 0 {
            tracing::info!(sent, "relayed outbox rows a replica committed and never published");
        }
        sent
    }
}
