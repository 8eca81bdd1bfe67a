//! The captain's side of the reply outbox: outbound messages become rows that
//! commit with the turn, and are published only after that commit.

use std::time::Duration;

use clankie_bus::{Bus, BusError, MsgId, now_ms};
use clankie_proto::{LaneKey, ReceiptKind, Subject, v1};
use clankie_store::{OutboxRow, Store};
use prost::Message as _;

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

    /// One pass of the relay, for rows committed more than `older_than` ago and still unsent
    /// (their replica died, or lost the bus, between commit and publish): rows older than
    /// `max_age` are given up (`outbox_too_old`) rather than posted hours late; the rest are
    /// claimed for this replica and published, and one that has failed [`GIVE_UP_AFTER`]
    /// claims, or whose subject is outside the catalogue, is given up (`outbox_unpublishable`). Each row given up is a
    /// `captain.outbox_gave_up` receipt for its delivery, which the trail shows. Returns how
    /// many went out.
    pub async fn relay_unsent(&self, older_than: Duration, max_age: Duration, replica: &str) -> usize {
        match self.store.give_up_older_than(max_age, TOO_OLD, 100).await {
            Ok(rows) => {
                for row in &rows {
                    self.gave_up(row, TOO_OLD).await;
                }
            }
            Err(e) => tracing::warn!(error = %e, "outbox not readable; trying again later"),
        }
        let claimed = match self.store.claim_unsent(older_than, 100, replica).await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = %e, "outbox not readable; trying again later");
                return 0;
            }
        };
        // Rows committed and still not published past the relay's delay: the outbox backing up.
        metrics::gauge!("clankie_captain_outbox_unsent").set(claimed.len() as f64);
        // Side by side, each attempt bounded: rows that fail cannot make a pass outlast the next.
        let attempts = claimed.iter().map(|claimed| async move {
            let row = &claimed.row;
            if Subject::parse(&row.subject).is_err() {
                // A subject outside the catalogue (a row an older release wrote) never publishes.
                return Err(("subject outside the catalogue".to_owned(), true));
            }
            match tokio::time::timeout(PUBLISH_ATTEMPT, self.relay(row)).await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err((e.to_string(), claimed.attempts >= GIVE_UP_AFTER)),
                Err(_) => Err(("publish not acked in time".to_owned(), claimed.attempts >= GIVE_UP_AFTER)),
            }
        });
        let results = futures::future::join_all(attempts).await;
        let mut sent = 0;
        for (claimed, result) in claimed.iter().zip(results) {
            let row = &claimed.row;
            match result {
                Ok(()) => sent += 1,
                // Its claim keeps it out of the next passes for a while, so it holds up nothing.
                Err((error, false)) => {
                    tracing::warn!(outbox = %row.id, attempts = claimed.attempts, %error, "outbox row not published; trying again later");
                }
                Err((error, true)) => {
                    tracing::warn!(outbox = %row.id, attempts = claimed.attempts, %error, "outbox row cannot be published; given up");
                    match self.store.give_up(&row.id, UNPUBLISHABLE).await {
                        Ok(Some(row)) => self.gave_up(&row, UNPUBLISHABLE).await,
                        Ok(None) => {}
                        Err(e) => tracing::warn!(outbox = %row.id, error = %e, "outbox row not given up; trying again later"),
                    }
                }
            }
        }
        if sent > 0 {
            tracing::info!(sent, "relayed outbox rows a replica committed and never published");
        }
        sent
    }

    /// Says a row was given up: a receipt for the delivery it answered, content-free.
    async fn gave_up(&self, row: &OutboxRow, code: &'static str) {
        metrics::counter!("clankie_captain_outbox_given_up_total", "code" => code).increment(1);
        let payload = bytes::Bytes::from(row.payload.clone());
        let (delivery, lane) = match Subject::parse(&row.subject) {
            Ok(Subject::BodySend { .. }) => v1::OutboundMessage::decode(payload).map(|m| (m.delivery_id, m.lane)).unwrap_or_default(),
            Ok(Subject::LaneOutcome { lane }) => {
                (v1::DeliveryOutcome::decode(payload).map(|o| o.delivery_id).unwrap_or_default(), lane.to_string())
            }
            _ => (String::new(), String::new()),
        };
        let Ok(kind) = ReceiptKind::new("captain.outbox_gave_up") else { return };
        let mut receipt = v1::Receipt::new(&kind, self.bus.service(), &delivery, now_ms())
            .with_id("outbox", row.id.as_str())
            .with_id("turn", row.turn_id.as_str())
            .with_code(code);
        receipt.lane = lane;
        if let Err(e) = self.bus.publish_receipt(&receipt).await {
            tracing::warn!(error = %e, "receipt not published");
        }
    }
}

/// The longest one publish of a relayed row may take before the pass moves on.
const PUBLISH_ATTEMPT: Duration = Duration::from_secs(2);

/// The code of a row given up for its age.
pub const TOO_OLD: &str = "outbox_too_old";
/// The code of a row given up after it failed to publish [`GIVE_UP_AFTER`] times.
pub const UNPUBLISHABLE: &str = "outbox_unpublishable";
/// Claims of a row that fail before it is given up: with claims doubling from a second, about
/// four minutes of trying.
pub const GIVE_UP_AFTER: i32 = 8;
