//! Reminders as the captain keeps account of them: what is pending per person and per room,
//! what fired, what was cancelled, and each person's time zone. The schedule itself is
//! nats-server's (the `CLANKIE_SCHEDULES` stream); these rows are what limits, lists, cancels
//! and forgets go by.

use sqlx::Row;

use crate::{Store, StoreError};

/// A reminder as stored.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StoredReminder {
    pub reminder_id: u64,
    /// The lane it runs in (`room:…` or `dm:…`).
    pub lane: String,
    pub guild_id: Option<u64>,
    pub channel_id: u64,
    pub asker_id: u64,
    /// What to remind them of, in their words.
    pub text: String,
    /// A one-off's due time (ms since the epoch); 0 for a repeating check-in.
    pub due_at_ms: i64,
    /// A repeating check-in's cron expression; empty for a one-off.
    pub cron: String,
    pub time_zone: String,
    /// Sent to the asker alone, by DM.
    pub direct: bool,
    pub created_at_ms: i64,
    pub delivery_id: String,
    /// How many times it fired.
    pub fired: i32,
    /// Why it will not fire again (`fired`, `cancelled`); `None` while pending.
    pub ended: Option<String>,
}

/// Whether a reminder was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Added {
    /// Stored now.
    New,
    /// Stored before under this id (a retried turn defining it again).
    Again,
    /// The asker has this many pending already.
    PersonFull(i64),
    /// The room has this many pending already.
    RoomFull(i64),
}

/// The columns [`reminder_of`] reads.
macro_rules! columns {
    () => {
        "reminder_id, lane, guild_id, channel_id, asker_id, text, due_at_ms, cron, time_zone, direct, created_at_ms, delivery_id, fired, ended"
    };
}

fn reminder_of(r: &sqlx::postgres::PgRow) -> Result<StoredReminder, StoreError> {
    Ok(StoredReminder {
        reminder_id: r.try_get::<i64, _>("reminder_id")? as u64,
        lane: r.try_get("lane")?,
        guild_id: r.try_get::<Option<i64>, _>("guild_id")?.map(|g| g as u64),
        channel_id: r.try_get::<i64, _>("channel_id")? as u64,
        asker_id: r.try_get::<i64, _>("asker_id")? as u64,
        text: r.try_get("text")?,
        due_at_ms: r.try_get("due_at_ms")?,
        cron: r.try_get("cron")?,
        time_zone: r.try_get("time_zone")?,
        direct: r.try_get("direct")?,
        created_at_ms: r.try_get("created_at_ms")?,
        delivery_id: r.try_get("delivery_id")?,
        fired: r.try_get("fired")?,
        ended: r.try_get("ended")?,
    })
}

impl Store {
    /// Stores a pending reminder unless the asker already has `per_person` pending or its lane
    /// `per_room` (0: no bound). Counted and inserted under a lock on the asker, so two turns
    /// of theirs cannot both take the last place; an id stored before is taken as it was.
    pub async fn add_reminder(&self, r: &StoredReminder, per_person: i64, per_room: i64) -> Result<Added, StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('reminders:' || $1::text, 0))")
            .bind(r.asker_id as i64)
            .execute(&mut *tx)
            .await?;
        let known: Option<i64> = sqlx::query_scalar("SELECT reminder_id FROM reminders WHERE reminder_id = $1")
            .bind(r.reminder_id as i64)
            .fetch_optional(&mut *tx)
            .await?;
        if known.is_some() {
            return Ok(Added::Again);
        }
        let (person, room): (i64, i64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE asker_id = $1), count(*) FILTER (WHERE lane = $2)
             FROM reminders WHERE ended IS NULL AND (asker_id = $1 OR lane = $2)",
        )
        .bind(r.asker_id as i64)
        .bind(&r.lane)
        .fetch_one(&mut *tx)
        .await?;
        if per_person > 0 && person >= per_person {
            return Ok(Added::PersonFull(person));
        }
        if per_room > 0 && room >= per_room {
            return Ok(Added::RoomFull(room));
        }
        sqlx::query(
            "INSERT INTO reminders (reminder_id, lane, guild_id, channel_id, asker_id, text, due_at_ms, cron, time_zone, direct,
                                    created_at_ms, delivery_id)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        )
        .bind(r.reminder_id as i64)
        .bind(&r.lane)
        .bind(r.guild_id.map(|g| g as i64))
        .bind(r.channel_id as i64)
        .bind(r.asker_id as i64)
        .bind(&r.text)
        .bind(r.due_at_ms)
        .bind(&r.cron)
        .bind(&r.time_zone)
        .bind(r.direct)
        .bind(r.created_at_ms)
        .bind(&r.delivery_id)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Added::New)
    }

    /// A reminder by id, pending or ended.
    pub async fn reminder(&self, id: u64) -> Result<Option<StoredReminder>, StoreError> {
        let row = sqlx::query(concat!("SELECT ", columns!(), " FROM reminders WHERE reminder_id = $1"))
            .bind(id as i64)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(reminder_of).transpose()
    }

    /// Pending reminders, soonest first (check-ins last): `asker`'s, or everyone's.
    pub async fn pending_reminders(&self, asker: Option<u64>) -> Result<Vec<StoredReminder>, StoreError> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            columns!(),
            " FROM reminders WHERE ended IS NULL AND ($1::bigint IS NULL OR asker_id = $1)
             ORDER BY due_at_ms = 0, due_at_ms, created_at_ms LIMIT 500"
        ))
        .bind(asker.map(|a| a as i64))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(reminder_of).collect()
    }

    /// Notes a firing taken: counted, and a one-off (`last`) ended `fired`. `false` when the
    /// reminder is not stored (cancelled and swept, or forgotten).
    pub async fn reminder_fired(&self, id: u64, at_ms: i64, last: bool) -> Result<bool, StoreError> {
        let n = sqlx::query(
            "UPDATE reminders SET fired = fired + 1, fired_at_ms = $2,
                    ended = CASE WHEN $3 THEN coalesce(ended, 'fired') ELSE ended END,
                    ended_at = CASE WHEN $3 THEN coalesce(ended_at, now()) ELSE ended_at END
             WHERE reminder_id = $1",
        )
        .bind(id as i64)
        .bind(at_ms)
        .bind(last)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(n > 0)
    }

    /// Ends a pending reminder as `cancelled`; `false` when it was not pending.
    pub async fn cancel_reminder(&self, id: u64) -> Result<bool, StoreError> {
        let n = sqlx::query("UPDATE reminders SET ended = 'cancelled', ended_at = now() WHERE reminder_id = $1 AND ended IS NULL")
            .bind(id as i64)
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(n > 0)
    }

    /// Deletes every reminder `user` asked for, and their time zone: a forget leaves none of it.
    /// Returns the ids, whose schedules the caller cancels.
    pub async fn forget_reminders(&self, user: u64) -> Result<Vec<u64>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let ids: Vec<i64> = sqlx::query_scalar("DELETE FROM reminders WHERE asker_id = $1 RETURNING reminder_id")
            .bind(user as i64)
            .fetch_all(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM time_zones WHERE user_id = $1").bind(user as i64).execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(ids.into_iter().map(|i| i as u64).collect())
    }

    /// The time zone `user` set, if any.
    pub async fn time_zone(&self, user: u64) -> Result<Option<String>, StoreError> {
        Ok(sqlx::query_scalar("SELECT zone FROM time_zones WHERE user_id = $1").bind(user as i64).fetch_optional(&self.pool).await?)
    }

    /// Sets `user`'s time zone (an IANA name the caller checked).
    pub async fn set_time_zone(&self, user: u64, zone: &str) -> Result<(), StoreError> {
        sqlx::query("INSERT INTO time_zones (user_id, zone) VALUES ($1, $2) ON CONFLICT (user_id) DO UPDATE SET zone = $2, set_at = now()")
            .bind(user as i64)
            .bind(zone)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}
