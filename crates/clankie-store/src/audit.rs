//! The stored invariants, counted: what `clankie audit` prints.

use std::time::Duration;

use crate::{Store, StoreError};

/// The invariants' figures over everything recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Audit {
    /// Text deliveries the gateway published (by its `gateway.ingress` receipts).
    pub ingress_deliveries: i64,
    /// Those with their one outcome recorded.
    pub with_outcome: i64,
    /// Those older than the settle bound with no outcome: lost.
    pub without_outcome: i64,
    /// Those younger than the bound with none yet: still in flight.
    pub in_flight: i64,
    /// Replies the gateway posted, one per turn's idempotency key.
    pub replies_posted: i64,
    /// Turns whose reply reached Discord as more than one message.
    pub replies_posted_twice: i64,
    /// Outbox rows older than the settle bound that were never published.
    pub outbox_unsent: i64,
}

impl Store {
    /// Counts the stored invariants: every text delivery older than `settle` has an outcome (the
    /// deliveries table allows at most one), no turn's reply was posted as two messages, and no
    /// outbox row older than `settle` is still unpublished.
    pub async fn audit(&self, settle: Duration) -> Result<Audit, StoreError> {
        let settle_ms = i64::try_from(settle.as_millis()).unwrap_or(i64::MAX);
        let (ingress, with, without, in_flight): (i64, i64, i64, i64) = sqlx::query_as(
            "WITH ingress AS (
                 SELECT delivery_id, min(at) AS first_at FROM receipts
                 WHERE kind = 'gateway.ingress' AND 'text' = ANY(codes) AND delivery_id <> ''
                 GROUP BY delivery_id)
             SELECT count(*),
                    count(d.delivery_id),
                    count(*) FILTER (WHERE d.delivery_id IS NULL AND i.first_at < now() - make_interval(secs => $1::double precision / 1000)),
                    count(*) FILTER (WHERE d.delivery_id IS NULL AND i.first_at >= now() - make_interval(secs => $1::double precision / 1000))
             FROM ingress i LEFT JOIN deliveries d ON d.delivery_id = i.delivery_id",
        )
        .bind(settle_ms)
        .fetch_one(&self.pool)
        .await?;
        let (replies, twice): (i64, i64) = sqlx::query_as(
            "WITH posted AS (
                 SELECT ids->>'key' AS key, count(DISTINCT ids->>'message') AS messages FROM receipts
                 WHERE kind = 'gateway.posted' AND 'reply' = ANY(codes) AND ids ? 'key' AND coalesce(ids->>'message', '0') <> '0'
                 GROUP BY ids->>'key')
             SELECT count(*), count(*) FILTER (WHERE messages > 1) FROM posted",
        )
        .fetch_one(&self.pool)
        .await?;
        let unsent: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM outbox WHERE sent_at IS NULL AND created_at < now() - make_interval(secs => $1::double precision / 1000)",
        )
        .bind(settle_ms)
        .fetch_one(&self.pool)
        .await?;
        Ok(Audit {
            ingress_deliveries: ingress,
            with_outcome: with,
            without_outcome: without,
            in_flight,
            replies_posted: replies,
            replies_posted_twice: twice,
            outbox_unsent: unsent,
        })
    }
}
