//! What the owner's controls in Discord change in the store: a room made quiet for a while,
//! and the `silent` outcome a delivery there gets without a turn.

use clankie_proto::{LaneKey, v1};

use crate::turns::validate;
use crate::{Outcome, Recorded, Store, StoreError};

impl Store {
    /// Makes `lane` quiet for `for_ms` from the database's now (0 lifts it); returns until
    /// when, in ms since the Unix epoch (0 when lifted).
    pub async fn set_quiet(&self, lane: &LaneKey, for_ms: i64) -> Result<i64, StoreError> {
        let until: Option<i64> = sqlx::query_scalar(
            "INSERT INTO lanes (lane, quiet_until)
             VALUES ($1, CASE WHEN $2 > 0 THEN now() + make_interval(secs => $2::double precision / 1000) END)
             ON CONFLICT (lane) DO UPDATE SET quiet_until = EXCLUDED.quiet_until
             RETURNING (extract(epoch from quiet_until) * 1000)::bigint",
        )
        .bind(lane.to_string())
        .bind(for_ms)
        .fetch_one(&self.pool)
        .await?;
        Ok(until.unwrap_or(0))
    }

    /// The lanes a run holds right now (their lease is live).
    pub async fn running_lanes(&self) -> Result<Vec<String>, StoreError> {
        Ok(sqlx::query_scalar("SELECT lane FROM lanes WHERE lease_owner IS NOT NULL AND lease_expires_at > now() ORDER BY lane")
            .fetch_all(&self.pool)
            .await?)
    }

    /// The lanes quiet now, with until when (ms since the Unix epoch).
    pub async fn quiet_lanes(&self) -> Result<Vec<(String, i64)>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT lane, (extract(epoch from quiet_until) * 1000)::bigint FROM lanes WHERE quiet_until > now() ORDER BY lane",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// Settles a delivery in a quiet room `silent`, without a turn, unless it has an outcome already.
    pub async fn record_quiet(&self, lane: &LaneKey, delivery_id: &str) -> Result<Recorded, StoreError> {
        let outcome = Outcome { delivery_id: delivery_id.to_owned(), turn_id: None, kind: v1::OutcomeKind::Silent, failure_code: None };
        validate(outcome.kind, outcome.failure_code)?;
        let mut tx = self.pool.begin().await?;
        sqlx::query("INSERT INTO lanes (lane) VALUES ($1) ON CONFLICT (lane) DO NOTHING").bind(lane.to_string()).execute(&mut *tx).await?;
        self.insert_outcome(tx, lane, &outcome).await
    }
}
