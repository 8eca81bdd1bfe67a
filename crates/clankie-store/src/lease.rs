use std::time::Duration;

use clankie_proto::LaneKey;
use sqlx::{Postgres, Row, Transaction};

use crate::{Store, StoreError};

/// Proof that this replica owns a lane's live run, valid while `epoch` is current.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub lane: LaneKey,
    pub owner: String,
    pub epoch: i64,
    pub expires_at_ms: i64,
}

/// A lane as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneRow {
    pub lane: String,
    pub epoch: i64,
    pub lease_owner: Option<String>,
    pub lease_expires_at_ms: Option<i64>,
    pub captured_actor_id: Option<String>,
    pub captured_message_id: Option<String>,
}

fn millis(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX)
}

impl Store {
    /// Takes the lane's lease for `owner` if nobody holds a live one, bumping the epoch.
    ///
    /// Returns `None` while another owner's lease is unexpired. Taking a lease
    /// always starts a new epoch, so anything the previous holder still has in
    /// flight is fenced off.
    pub async fn acquire_lease(&self, lane: &LaneKey, owner: &str, ttl: Duration) -> Result<Option<Lease>, StoreError> {
        let row = sqlx::query(
            "INSERT INTO lanes (lane, epoch, lease_owner, lease_expires_at)
             VALUES ($1, 1, $2, now() + make_interval(secs => $3::double precision / 1000))
             ON CONFLICT (lane) DO UPDATE
               SET epoch = lanes.epoch + 1,
                   lease_owner = EXCLUDED.lease_owner,
                   lease_expires_at = EXCLUDED.lease_expires_at,
                   updated_at = now()
               WHERE lanes.lease_owner IS NULL OR lanes.lease_expires_at <= now()
             RETURNING epoch, (extract(epoch from lease_expires_at) * 1000)::bigint AS expires_ms",
        )
        .bind(lane.to_string())
        .bind(owner)
        .bind(millis(ttl))
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|r| Lease { lane: *lane, owner: owner.to_owned(), epoch: r.get("epoch"), expires_at_ms: r.get("expires_ms") }))
    }

    /// Takes the lane's lease, trying up to `tries` times `pause` apart while another holder's
    /// lease is live: for a request that waits its turn behind a run in progress. `None` when
    /// the lane stayed busy.
    pub async fn acquire_lease_waiting(
        &self,
        lane: &LaneKey,
        owner: &str,
        ttl: Duration,
        tries: u32,
        pause: Duration,
    ) -> Result<Option<Lease>, StoreError> {
        for _ in 0..tries {
            if let Some(lease) = self.acquire_lease(lane, owner, ttl).await? {
                return Ok(Some(lease));
            }
            tokio::time::sleep(pause).await;
        }
        Ok(None)
    }

    /// Extends a lease that is still current. Fails with [`StoreError::Fenced`] once another replica took the lane.
    pub async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease, StoreError> {
        let expires: Option<i64> = sqlx::query_scalar(
            "UPDATE lanes SET lease_expires_at = now() + make_interval(secs => $3::double precision / 1000), updated_at = now()
             WHERE lane = $1 AND epoch = $2 RETURNING (extract(epoch from lease_expires_at) * 1000)::bigint",
        )
        .bind(lease.lane.to_string())
        .bind(lease.epoch)
        .bind(millis(ttl))
        .fetch_optional(&self.pool)
        .await?;
        match expires {
            Some(expires) => Ok(Lease { expires_at_ms: expires, ..lease.clone() }),
            None => Err(self.fenced_off(lease).await),
        }
    }

    /// Gives the lane up so another replica can take it at once.
    pub async fn release_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        let done =
            sqlx::query("UPDATE lanes SET lease_owner = NULL, lease_expires_at = NULL, updated_at = now() WHERE lane = $1 AND epoch = $2")
                .bind(lease.lane.to_string())
                .bind(lease.epoch)
                .execute(&self.pool)
                .await?;
        if done.rows_affected() == 1 { Ok(()) } else { Err(self.fenced_off(lease).await) }
    }

    /// Records the newest speaker of a lane's live run, so mid-run tools attribute to them.
    pub async fn capture(&self, lease: &Lease, actor_id: u64, message_id: u64) -> Result<(), StoreError> {
        let done = sqlx::query(
            "UPDATE lanes SET captured_actor_id = $3, captured_message_id = $4, updated_at = now() WHERE lane = $1 AND epoch = $2",
        )
        .bind(lease.lane.to_string())
        .bind(lease.epoch)
        .bind(actor_id.to_string())
        .bind(message_id.to_string())
        .execute(&self.pool)
        .await?;
        if done.rows_affected() == 1 { Ok(()) } else { Err(self.fenced_off(lease).await) }
    }

    /// Why a write fenced by its own `WHERE epoch` changed nothing: the lane moved on, or never was.
    async fn fenced_off(&self, lease: &Lease) -> StoreError {
        let lane = lease.lane.to_string();
        match sqlx::query_scalar::<_, i64>("SELECT epoch FROM lanes WHERE lane = $1").bind(&lane).fetch_optional(&self.pool).await {
            Ok(Some(current)) => StoreError::Fenced { lane, held: lease.epoch, current },
            Ok(None) => StoreError::UnknownLane(lane),
            Err(e) => e.into(),
        }
    }

    /// Reads a lane row.
    pub async fn lane(&self, lane: &LaneKey) -> Result<Option<LaneRow>, StoreError> {
        let row = sqlx::query(
            "SELECT lane, epoch, lease_owner, (extract(epoch from lease_expires_at) * 1000)::bigint AS expires_ms,
                    captured_actor_id, captured_message_id
             FROM lanes WHERE lane = $1",
        )
        .bind(lane.to_string())
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|r| LaneRow {
            lane: r.get("lane"),
            epoch: r.get("epoch"),
            lease_owner: r.get("lease_owner"),
            lease_expires_at_ms: r.get("expires_ms"),
            captured_actor_id: r.get("captured_actor_id"),
            captured_message_id: r.get("captured_message_id"),
        }))
    }
}

/// Checks, under a share lock held until the transaction ends, that `lease` is still the lane's current epoch.
pub(crate) async fn fence(tx: &mut Transaction<'_, Postgres>, lease: &Lease) -> Result<(), StoreError> {
    let lane = lease.lane.to_string();
    let current: Option<i64> =
        sqlx::query_scalar("SELECT epoch FROM lanes WHERE lane = $1 FOR SHARE").bind(&lane).fetch_optional(&mut **tx).await?;
    match current {
        None => Err(StoreError::UnknownLane(lane)),
        Some(current) if current != lease.epoch => Err(StoreError::Fenced { lane, held: lease.epoch, current }),
        Some(_) => Ok(()),
    }
}
