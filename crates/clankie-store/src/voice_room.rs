//! Voice room leases: which voice-floor replica keeps each live voice room.

use std::time::Duration;

use crate::{Store, StoreError};

/// Proof that this replica keeps a voice room, valid while `epoch` is current.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoomLease {
    pub guild: u64,
    pub channel: u64,
    pub owner: String,
    pub epoch: i64,
}

impl RoomLease {
    fn key(&self) -> String {
        room_key(self.guild, self.channel)
    }
}

/// One line of a voice room's conversation, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingRow {
    pub delivery_id: String,
    /// `clankie.v1.RoomInputSource` as its number.
    pub source: i32,
    pub author_id: u64,
    pub author_name: String,
    pub is_him: bool,
    pub text: String,
    pub cut_off: bool,
    pub at_ms: i64,
}

fn room_key(guild: u64, channel: u64) -> String {
    format!("{guild}:{channel}")
}

fn millis(ttl: Duration) -> f64 {
    ttl.as_secs_f64() * 1000.0
}

impl Store {
    /// Takes the room for `owner` if nobody holds a live lease on it, bumping the epoch; `None`
    /// while another owner's lease is unexpired.
    pub async fn acquire_room(&self, guild: u64, channel: u64, owner: &str, ttl: Duration) -> Result<Option<RoomLease>, StoreError> {
        let epoch: Option<i64> = sqlx::query_scalar(
            "INSERT INTO voice_rooms (room, epoch, owner, expires_at)
             VALUES ($1, 1, $2, now() + make_interval(secs => $3 / 1000))
             ON CONFLICT (room) DO UPDATE
               SET epoch = voice_rooms.epoch + 1, owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at, updated_at = now()
               WHERE voice_rooms.owner IS NULL OR voice_rooms.expires_at <= now()
             RETURNING epoch",
        )
        .bind(room_key(guild, channel))
        .bind(owner)
        .bind(millis(ttl))
        .fetch_optional(&self.pool)
        .await?;
        Ok(epoch.map(|epoch| RoomLease { guild, channel, owner: owner.to_owned(), epoch }))
    }

    /// Extends a room lease that is still current, in one statement; [`StoreError::Fenced`] once
    /// another replica took the room.
    pub async fn renew_room(&self, lease: &RoomLease, ttl: Duration) -> Result<(), StoreError> {
        let renewed: Option<i64> = sqlx::query_scalar(
            "UPDATE voice_rooms SET expires_at = now() + make_interval(secs => $4 / 1000), updated_at = now()
             WHERE room = $1 AND epoch = $2 AND owner = $3 RETURNING epoch",
        )
        .bind(lease.key())
        .bind(lease.epoch)
        .bind(&lease.owner)
        .bind(millis(ttl))
        .fetch_optional(&self.pool)
        .await?;
        match renewed {
            Some(_) => Ok(()),
            None => Err(self.room_fenced(lease).await),
        }
    }

    /// Gives the room up so another replica can take it at once (a no-op once fenced).
    pub async fn release_room(&self, lease: &RoomLease) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE voice_rooms SET owner = NULL, expires_at = NULL, updated_at = now() WHERE room = $1 AND epoch = $2 AND owner = $3",
        )
        .bind(lease.key())
        .bind(lease.epoch)
        .bind(&lease.owner)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The replica keeping a room and its epoch, if its lease is live.
    pub async fn room_owner(&self, guild: u64, channel: u64) -> Result<Option<(String, i64)>, StoreError> {
        let row: Option<(Option<String>, i64)> =
            sqlx::query_as("SELECT owner, epoch FROM voice_rooms WHERE room = $1 AND expires_at > now()")
                .bind(room_key(guild, channel))
                .fetch_optional(&self.pool)
                .await?;
        Ok(row.and_then(|(owner, epoch)| owner.map(|o| (o, epoch))))
    }

    /// Appends a line to the room's conversation while `lease` is current (one fenced statement).
    pub async fn append_ring(&self, lease: &RoomLease, row: &RingRow) -> Result<(), StoreError> {
        let written = sqlx::query(
            "INSERT INTO voice_ring (room, delivery_id, source, author_id, author_name, is_him, text, cut_off, at_ms)
             SELECT $1, $4, $5, $6, $7, $8, $9, $10, $11
             WHERE EXISTS (SELECT 1 FROM voice_rooms WHERE room = $1 AND epoch = $2 AND owner = $3)",
        )
        .bind(lease.key())
        .bind(lease.epoch)
        .bind(&lease.owner)
        .bind(&row.delivery_id)
        .bind(row.source)
        .bind(row.author_id.to_string())
        .bind(&row.author_name)
        .bind(row.is_him)
        .bind(&row.text)
        .bind(row.cut_off)
        .bind(row.at_ms)
        .execute(&self.pool)
        .await?;
        if written.rows_affected() == 0 {
            return Err(self.room_fenced(lease).await);
        }
        Ok(())
    }

    /// Marks his line for `delivery_id` as cut off, keeping only what he got to say (fenced).
    pub async fn cut_ring(&self, lease: &RoomLease, delivery_id: &str, text: &str) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE voice_ring SET text = $5, cut_off = true
             WHERE room = $1 AND delivery_id = $4 AND is_him
               AND EXISTS (SELECT 1 FROM voice_rooms WHERE room = $1 AND epoch = $2 AND owner = $3)",
        )
        .bind(lease.key())
        .bind(lease.epoch)
        .bind(&lease.owner)
        .bind(delivery_id)
        .bind(text)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The room's newest `limit` lines, oldest first.
    pub async fn ring(&self, guild: u64, channel: u64, limit: i64) -> Result<Vec<RingRow>, StoreError> {
        let rows: Vec<(String, i32, String, String, bool, String, bool, i64)> = sqlx::query_as(
            "SELECT delivery_id, source, author_id, author_name, is_him, text, cut_off, at_ms FROM voice_ring
             WHERE room = $1 ORDER BY seq DESC LIMIT $2",
        )
        .bind(room_key(guild, channel))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .rev()
            .map(|(delivery_id, source, author_id, author_name, is_him, text, cut_off, at_ms)| RingRow {
                delivery_id,
                source,
                author_id: author_id.parse().unwrap_or(0),
                author_name,
                is_him,
                text,
                cut_off,
                at_ms,
            })
            .collect())
    }

    async fn room_fenced(&self, lease: &RoomLease) -> StoreError {
        let current: i64 = sqlx::query_scalar("SELECT epoch FROM voice_rooms WHERE room = $1")
            .bind(lease.key())
            .fetch_optional(&self.pool)
            .await
            .ok()
            .flatten()
            .unwrap_or(lease.epoch);
        StoreError::Fenced { lane: format!("voice-room:{}", lease.key()), held: lease.epoch, current }
    }
}
