//! Nothing grows forever: the sweepers' deletes by age, in bounded batches.
//!
//! Each delete takes at most [`Retention::batch`] rows a statement, chosen through an index,
//! so no sweep holds long locks or competes with the hot paths for more than a moment; a sweep
//! repeats the statement until a batch comes back short. What a lane still needs is never
//! swept: an open turn of the current epoch, the entries its newest compaction kept, an
//! unsent outbox row younger than its age bound. What reading relies on goes together: an
//! abandoned turn's epoch keeps its entries out of every session open only while the turn is
//! stored, so those entries are swept before the turn is.

use std::time::Duration;

use crate::{Store, StoreError};

/// How long each kind of record is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Receipts, by the time they were made.
    pub receipts: Duration,
    /// Deliveries, admissions, turns and sent or given-up outbox rows, once settled.
    pub records: Duration,
    /// Session entries a compaction replaced with its summary.
    pub replaced_entries: Duration,
    /// Rows one statement deletes at most.
    pub batch: i64,
}

/// Rows a sweep deleted, per table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Swept {
    pub receipts: u64,
    pub outbox: u64,
    pub deliveries: u64,
    pub admissions: u64,
    pub turns: u64,
    /// Entries a compaction replaced.
    pub session_entries: u64,
    /// Entries of an abandoned epoch, swept before the open turn that hides them.
    pub abandoned_entries: u64,
    /// Entries of one-shot turn trees (`turns/…`), read only by their own turn.
    pub one_shot_entries: u64,
    /// Stored edits and deletions of messages, past the age a copy of them could still arrive.
    pub message_changes: u64,
    /// Reminders that fired for the last time or were cancelled.
    pub reminders: u64,
}

impl Swept {
    /// All rows deleted.
    pub fn total(&self) -> u64 {
        self.receipts
            + self.outbox
            + self.deliveries
            + self.admissions
            + self.turns
            + self.session_entries
            + self.abandoned_entries
            + self.one_shot_entries
            + self.message_changes
            + self.reminders
    }
}

/// How the voice ring is bounded: by age and by lines per room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingRetention {
    pub age: Duration,
    pub lines_per_room: i64,
    pub batch: i64,
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

impl Store {
    /// One sweep of the text tables by `retention`.
    pub async fn sweep(&self, retention: &Retention) -> Result<Swept, StoreError> {
        let (records, batch) = (secs(retention.records), retention.batch.max(1));
        // Before the turns: once its open turn is gone, an abandoned epoch's entries would read
        // as conversation (a dead run's input and unposted answer).
        let abandoned_entries = self
            .sweep_with(
                "DELETE FROM session_entries WHERE seq IN (
                   SELECT e.seq FROM turns t JOIN lanes l ON l.lane = t.lane
                   JOIN session_entries e ON e.lane = t.lane AND e.epoch = t.epoch
                   WHERE t.started_at < now() - make_interval(secs => $1) AND t.ended_at IS NULL AND t.epoch < l.epoch
                   LIMIT $2)",
                records,
                batch,
            )
            .await?;
        let reminders = self.sweep_ended_reminders(records, batch).await?;
        Ok(Swept {
            abandoned_entries,
            reminders,
            message_changes: self
                .sweep_with(
                    "DELETE FROM message_changes WHERE delivery_id IN (SELECT delivery_id FROM message_changes
                       WHERE changed_at < now() - make_interval(secs => $1) LIMIT $2)",
                    records,
                    batch,
                )
                .await?,
            one_shot_entries: self
                .sweep_with(
                    "DELETE FROM session_entries WHERE seq IN (SELECT seq FROM session_entries
                       WHERE tree LIKE 'turns/%' AND created_at < now() - make_interval(secs => $1) LIMIT $2)",
                    records,
                    batch,
                )
                .await?,
            receipts: self
                .sweep_with(
                    "DELETE FROM receipts WHERE id IN (SELECT id FROM receipts WHERE at < now() - make_interval(secs => $1) LIMIT $2)",
                    secs(retention.receipts),
                    batch,
                )
                .await?,
            outbox: self
                .sweep_with(
                    "DELETE FROM outbox WHERE id IN (SELECT id FROM outbox WHERE created_at < now() - make_interval(secs => $1)
                       AND (sent_at IS NOT NULL OR gave_up_at IS NOT NULL) LIMIT $2)",
                    records,
                    batch,
                )
                .await?,
            deliveries: self
                .sweep_with(
                    "DELETE FROM deliveries WHERE delivery_id IN (SELECT delivery_id FROM deliveries
                       WHERE recorded_at < now() - make_interval(secs => $1) LIMIT $2)",
                    records,
                    batch,
                )
                .await?,
            admissions: self
                .sweep_with(
                    "DELETE FROM admissions WHERE delivery_id IN (SELECT delivery_id FROM admissions
                       WHERE admitted_at < now() - make_interval(secs => $1) LIMIT $2)",
                    records,
                    batch,
                )
                .await?,
            // An open turn that old died with its run long ago; its lane's epoch has moved on. It
            // goes only once no entry of its epoch is left (a turn that aged past the cutoff
            // after the entries' sweep above waits for the next sweep).
            turns: self
                .sweep_with(
                    "DELETE FROM turns WHERE turn_id IN (SELECT t.turn_id FROM turns t JOIN lanes l ON l.lane = t.lane
                       WHERE t.started_at < now() - make_interval(secs => $1)
                         AND (t.ended_at IS NOT NULL
                              OR (t.epoch < l.epoch
                                  AND NOT EXISTS (SELECT 1 FROM session_entries e WHERE e.lane = t.lane AND e.epoch = t.epoch)))
                       LIMIT $2)",
                    records,
                    batch,
                )
                .await?,
            session_entries: self
                .sweep_with(
                    "DELETE FROM session_entries WHERE seq IN (
                       SELECT e.seq FROM session_entries e
                       JOIN LATERAL (SELECT c.body->>'first_kept_id' AS first_kept FROM session_entries c
                                     WHERE c.tree = e.tree AND c.kind = 'compaction' ORDER BY c.seq DESC LIMIT 1) c ON true
                       JOIN session_entries k ON k.tree = e.tree AND k.id = c.first_kept
                       WHERE e.created_at < now() - make_interval(secs => $1) AND e.seq < k.seq AND e.kind <> 'compaction'
                       LIMIT $2)",
                    secs(retention.replaced_entries),
                    batch,
                )
                .await?,
        })
    }

    /// One sweep of the voice ring: lines older than its age, and beyond its lines per room.
    pub async fn sweep_voice_ring(&self, retention: &RingRetention) -> Result<u64, StoreError> {
        let batch = retention.batch.max(1);
        let mut swept = 0;
        loop {
            let aged = sqlx::query(
                "DELETE FROM voice_ring WHERE (room, seq) IN (SELECT room, seq FROM voice_ring
                   WHERE at_ms < (extract(epoch from now() - make_interval(secs => $1)) * 1000)::bigint LIMIT $2)",
            )
            .bind(secs(retention.age))
            .bind(batch)
            .execute(&self.pool)
            .await?
            .rows_affected();
            let crowded = sqlx::query(
                "DELETE FROM voice_ring WHERE (room, seq) IN (
                   SELECT room, seq FROM (SELECT room, seq, row_number() OVER (PARTITION BY room ORDER BY seq DESC) AS newer
                                          FROM voice_ring) r WHERE newer > $1 LIMIT $2)",
            )
            .bind(retention.lines_per_room.max(1))
            .bind(batch)
            .execute(&self.pool)
            .await?
            .rows_affected();
            swept += aged + crowded;
            if aged < batch as u64 && crowded < batch as u64 {
                return Ok(swept);
            }
        }
    }

    /// Runs `sql` (a batched delete taking the age in seconds and the batch size) until a
    /// batch comes back short.
    /// Reminders that fired for the last time or were cancelled, once `age_secs` old.
    async fn sweep_ended_reminders(&self, age_secs: f64, batch: i64) -> Result<u64, StoreError> {
        self.sweep_with(
            "DELETE FROM reminders WHERE reminder_id IN (SELECT reminder_id FROM reminders
               WHERE ended IS NOT NULL AND ended_at < now() - make_interval(secs => $1) LIMIT $2)",
            age_secs,
            batch,
        )
        .await
    }

    async fn sweep_with(&self, sql: &'static str, age_secs: f64, batch: i64) -> Result<u64, StoreError> {
        let mut swept = 0;
        loop {
            let n = sqlx::query(sql).bind(age_secs).bind(batch).execute(&self.pool).await?.rows_affected();
            swept += n;
            if n < batch as u64 {
                return Ok(swept);
            }
        }
    }
}
