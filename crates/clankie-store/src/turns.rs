use std::time::Duration;

use clankie_proto::{LaneKey, v1};
use sqlx::{Postgres, Row, Transaction};

use crate::lease::fence;
use crate::{Lease, Store, StoreError};

/// An edit or a deletion of a message, as the store keeps it until the message is settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredChange {
    Delete,
    /// The edit's ingress event, encoded.
    Edit(Vec<u8>),
}

/// Whether a turn runs in the lane's durable session or a one-shot one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnMode {
    Durable,
    OneShot,
}

impl TurnMode {
    fn code(self) -> &'static str {
        match self {
            TurnMode::Durable => "durable",
            TurnMode::OneShot => "one_shot",
        }
    }
}

/// The start of a lane turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnStart {
    pub turn_id: String,
    pub mode: TurnMode,
    /// The delivery whose arrival started the run.
    pub owner_delivery_id: String,
}

/// The end of a lane turn: its outcome and content-free counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnEnd {
    pub turn_id: String,
    pub outcome: v1::OutcomeKind,
    pub failure_code: Option<v1::FailureCode>,
    pub model_calls: i32,
    pub input_tokens: i64,
    pub output_tokens: i64,
    /// Of `input_tokens`, those the provider served from its prompt cache.
    pub cached_input_tokens: i64,
    /// Of `output_tokens`, those the provider said were spent reasoning.
    pub reasoning_tokens: i64,
    /// Of `input_tokens`, those written to the provider's prompt cache.
    pub cache_write_input_tokens: i64,
    pub steer_count: i32,
    pub typing_lit: bool,
}

/// Every recorded turn taken together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TurnTotals {
    pub turns: i64,
    pub input_tokens: i64,
    /// Of `input_tokens`, those the provider served from its prompt cache.
    pub cached_input_tokens: i64,
}

/// The one outcome of a delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub delivery_id: String,
    pub turn_id: Option<String>,
    pub kind: v1::OutcomeKind,
    /// Present exactly when `kind` is `Failed`.
    pub failure_code: Option<v1::FailureCode>,
}

/// Whether the exchange of the lane `$lane` settled within the window of `$window_ms`
/// milliseconds, as SQL: false when he never settled a turn there.
macro_rules! exchange_live_sql {
    ($lane:literal, $window_ms:literal) => {
        concat!(
            "COALESCE((SELECT e.last_settled_at > now() - make_interval(secs => ",
            $window_ms,
            "::double precision / 1000) FROM exchanges e WHERE e.lane = ",
            $lane,
            "), false)"
        )
    };
}

/// Whether a turn of the lane `$lane` started within the window and never ended, as SQL.
macro_rules! unsettled_turn_sql {
    ($lane:literal, $window_ms:literal) => {
        concat!(
            "EXISTS (SELECT 1 FROM turns t WHERE t.lane = ",
            $lane,
            " AND t.ended_at IS NULL AND t.started_at > now() - make_interval(secs => ",
            $window_ms,
            "::double precision / 1000))"
        )
    };
}

/// The advisory lock class the flood guard counts an author's admissions under.
const FLOOD_LOCK: i32 = 0x666c_6f6f; // "floo"

/// What the captain needs to decide one text delivery, read by [`Store::ingress_facts`].
#[derive(Debug, Clone)]
pub struct IngressFacts {
    /// The delivery has its outcome: a copy is acked and nothing more.
    pub settled: bool,
    /// Some replica admitted it before: the decision stands.
    pub admitted: bool,
    /// The room's exchange settled within the window, a run holds its lease, or a run died
    /// live there: he is in conversation.
    pub in_conversation: bool,
    /// The owner made the room quiet (`/clankie quiet`) until a time not yet come.
    pub quiet: bool,
    pub owner: crate::OwnerSettings,
    /// His names as the persona has them (name, then aliases; either may be empty), read in
    /// the same statement: a message naming him is admitted without another read.
    pub persona_names: Vec<String>,
}

/// What recording an outcome did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// This call recorded it.
    New,
    /// The delivery already had an outcome, which stands.
    Existing(Outcome),
}

/// When a room last heard him settle a turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exchange {
    pub last_settled_at_ms: i64,
    pub last_delivery_id: String,
}

pub(crate) fn validate(kind: v1::OutcomeKind, code: Option<v1::FailureCode>) -> Result<(), StoreError> {
    match (kind, code) {
        (v1::OutcomeKind::Unspecified, _) => Err(StoreError::InvalidOutcome("outcome kind is unspecified")),
        (v1::OutcomeKind::Failed, None | Some(v1::FailureCode::Unspecified)) => {
            Err(StoreError::InvalidOutcome("a failed outcome needs a failure code"))
        }
        (v1::OutcomeKind::Failed, Some(_)) | (_, None) => Ok(()),
        (_, Some(_)) => Err(StoreError::InvalidOutcome("only a failed outcome carries a failure code")),
    }
}

impl Store {
    /// Records the start of a turn under the lease.
    pub async fn start_turn(&self, lease: &Lease, turn: &TurnStart) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        fence(&mut tx, lease).await?;
        sqlx::query("INSERT INTO turns (turn_id, lane, epoch, mode, owner_delivery_id) VALUES ($1, $2, $3, $4, $5)")
            .bind(&turn.turn_id)
            .bind(lease.lane.to_string())
            .bind(lease.epoch)
            .bind(turn.mode.code())
            .bind(&turn.owner_delivery_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Records how a turn ended.
    pub async fn finish_turn(&self, lease: &Lease, end: &TurnEnd) -> Result<(), StoreError> {
        validate(end.outcome, end.failure_code)?;
        let mut tx = self.pool.begin().await?;
        fence(&mut tx, lease).await?;
        end_turn(&mut tx, lease, end).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Records a delivery's outcome, once. A second call for the same delivery changes nothing and returns what stands.
    pub async fn record_outcome(&self, lease: &Lease, outcome: &Outcome) -> Result<Recorded, StoreError> {
        validate(outcome.kind, outcome.failure_code)?;
        let mut tx = self.pool.begin().await?;
        fence(&mut tx, lease).await?;
        self.insert_outcome(tx, &lease.lane, outcome).await
    }

    /// Records that a delivery could not be handled at all: `failed` with `code`, outside any
    /// lease (its lane could not be taken or its handling kept failing), unless it already has
    /// an outcome, which stands.
    pub async fn record_unhandled(&self, lane: &LaneKey, delivery_id: &str, code: v1::FailureCode) -> Result<Recorded, StoreError> {
        let outcome =
            Outcome { delivery_id: delivery_id.to_owned(), turn_id: None, kind: v1::OutcomeKind::Failed, failure_code: Some(code) };
        validate(outcome.kind, outcome.failure_code)?;
        let mut tx = self.pool.begin().await?;
        sqlx::query("INSERT INTO lanes (lane) VALUES ($1) ON CONFLICT (lane) DO NOTHING").bind(lane.to_string()).execute(&mut *tx).await?;
        self.insert_outcome(tx, lane, &outcome).await
    }

    /// Inserts `outcome` in `tx` unless the delivery has one, commits, and says which stands.
    pub(crate) async fn insert_outcome(
        &self,
        mut tx: sqlx::Transaction<'_, sqlx::Postgres>,
        lane: &LaneKey,
        outcome: &Outcome,
    ) -> Result<Recorded, StoreError> {
        let inserted = sqlx::query(
            "INSERT INTO deliveries (delivery_id, lane, turn_id, outcome, failure_code) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (delivery_id) DO NOTHING",
        )
        .bind(&outcome.delivery_id)
        .bind(lane.to_string())
        .bind(&outcome.turn_id)
        .bind(outcome.kind.code())
        .bind(outcome.failure_code.map(|c| c.code()))
        .execute(&mut *tx)
        .await?
        .rows_affected();
        tx.commit().await?;
        if inserted == 1 {
            return Ok(Recorded::New);
        }
        let existing = self.outcome(&outcome.delivery_id).await?.ok_or_else(|| StoreError::Corrupt("outcome vanished".into()))?;
        Ok(Recorded::Existing(existing))
    }

    /// Which of `delivery_ids` already have their outcome.
    pub async fn settled_among(&self, delivery_ids: &[&str]) -> Result<Vec<String>, StoreError> {
        let ids: Vec<String> = delivery_ids.iter().map(|s| (*s).to_owned()).collect();
        Ok(sqlx::query_scalar("SELECT delivery_id FROM deliveries WHERE delivery_id = ANY($1)").bind(&ids).fetch_all(&self.pool).await?)
    }

    /// Stores an edit or a deletion of message `delivery_id` (by `author_id`, at `changed_ms`)
    /// before its change is acked. A deletion wins over every edit and drops the edited words;
    /// of two edits the later one is kept.
    pub async fn record_change(
        &self,
        lane: &LaneKey,
        delivery_id: &str,
        author_id: u64,
        change: &StoredChange,
        changed_ms: i64,
    ) -> Result<(), StoreError> {
        let (deleted, edit) = match change {
            StoredChange::Delete => (true, None),
            StoredChange::Edit(bytes) => (false, Some(bytes.as_slice())),
        };
        sqlx::query(
            "INSERT INTO message_changes (delivery_id, lane, author_id, deleted, edit, changed_ms) VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (delivery_id) DO UPDATE SET deleted = true, edit = NULL
               WHERE EXCLUDED.deleted AND NOT message_changes.deleted
             ",
        )
        .bind(delivery_id)
        .bind(lane.to_string())
        .bind(author_id as i64)
        .bind(deleted)
        .bind(edit)
        .bind(changed_ms)
        .execute(&self.pool)
        .await?;
        if !deleted {
            sqlx::query(
                "UPDATE message_changes SET edit = $2, changed_ms = $3
                 WHERE delivery_id = $1 AND NOT deleted AND changed_ms < $3",
            )
            .bind(delivery_id)
            .bind(edit)
            .bind(changed_ms)
            .execute(&self.pool)
            .await?;
        }
        Ok(())
    }

    /// The stored changes of those of `delivery_ids` that have no outcome yet.
    pub async fn changes_among(&self, delivery_ids: &[&str]) -> Result<Vec<(String, StoredChange)>, StoreError> {
        let ids: Vec<String> = delivery_ids.iter().map(|s| (*s).to_owned()).collect();
        let rows: Vec<(String, bool, Option<Vec<u8>>)> = sqlx::query_as(
            "SELECT m.delivery_id, m.deleted, m.edit FROM message_changes m WHERE m.delivery_id = ANY($1)
               AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.delivery_id = m.delivery_id)",
        )
        .bind(&ids)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .filter_map(|(id, deleted, edit)| match (deleted, edit) {
                (true, _) => Some((id, StoredChange::Delete)),
                (false, Some(edit)) => Some((id, StoredChange::Edit(edit))),
                (false, None) => None,
            })
            .collect())
    }

    /// Whether a delivery was admitted and has no outcome yet: some replica holds it, waiting
    /// or in a run, so a change to it is not a no-op.
    pub async fn awaits_outcome(&self, delivery_id: &str) -> Result<bool, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM admissions a WHERE a.delivery_id = $1
               AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.delivery_id = $1))",
        )
        .bind(delivery_id)
        .fetch_one(&self.pool)
        .await?)
    }

    /// The recorded outcome of a delivery, if any.
    pub async fn outcome(&self, delivery_id: &str) -> Result<Option<Outcome>, StoreError> {
        let row = sqlx::query("SELECT turn_id, outcome, failure_code FROM deliveries WHERE delivery_id = $1")
            .bind(delivery_id)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| {
            let kind: String = r.try_get("outcome")?;
            let code: Option<String> = r.try_get("failure_code")?;
            Ok(Outcome {
                delivery_id: delivery_id.to_owned(),
                turn_id: r.try_get("turn_id")?,
                kind: v1::OutcomeKind::from_code(&kind).ok_or_else(|| StoreError::Corrupt(format!("outcome {kind}")))?,
                failure_code: code
                    .map(|c| v1::FailureCode::from_code(&c).ok_or_else(|| StoreError::Corrupt(format!("failure code {c}"))))
                    .transpose()?,
            })
        })
        .transpose()
    }

    /// How many turns were recorded and their input tokens in all; for benches and reports.
    pub async fn turn_totals(&self) -> Result<TurnTotals, StoreError> {
        let row = sqlx::query(
            "SELECT count(*) AS turns, COALESCE(sum(input_tokens), 0)::bigint AS input,
                    COALESCE(sum(cached_input_tokens), 0)::bigint AS cached FROM turns",
        )
        .fetch_one(&self.pool)
        .await?;
        Ok(TurnTotals { turns: row.try_get("turns")?, input_tokens: row.try_get("input")?, cached_input_tokens: row.try_get("cached")? })
    }

    /// Admits a delivery unless its author already has `per_minute` admissions written within a
    /// minute of this one (`written_at_ms`, the message's own time; either side, as admitters
    /// deciding side by side take an author's messages out of order) across all lanes (0 means
    /// no limit): a backlog a slow captain admits in a burst is not a flood. Returns whether this call admitted it;
    /// `false` with [`Store::admission`] still `None` means the flood guard held it back.
    /// Admissions of one author are counted and inserted under a transaction lock on the author
    /// (`pg_advisory_xact_lock`, keyed `(FLOOD_LOCK, author)`), so admitters deciding side by
    /// side, on one replica or several, never overshoot. `stream_seq` is where the delivery
    /// sits in the ingress stream, for a replica that takes the lane over.
    pub async fn admit_within_flood(
        &self,
        delivery_id: &str,
        lane: &LaneKey,
        reason: &str,
        author_id: u64,
        per_minute: u32,
        stream_seq: u64,
        written_at_ms: i64,
    ) -> Result<bool, StoreError> {
        let mut tx = self.pool.begin().await?;
        if per_minute > 0 {
            // The lock's key space is (class, id): FLOOD_LOCK keeps authors apart from any other use.
            sqlx::query("SELECT pg_advisory_xact_lock($1, $2)")
                .bind(FLOOD_LOCK)
                .bind(author_id as i32 ^ (author_id >> 32) as i32)
                .execute(&mut *tx)
                .await?;
        }
        let row = sqlx::query(
            "INSERT INTO admissions (delivery_id, lane, reason, author_id, stream_seq, written_at) \
             SELECT $1, $2, $3, $4, $6, to_timestamp($7 / 1000.0) WHERE $5 = 0 OR (SELECT count(*) FROM admissions \
                 WHERE author_id = $4 AND written_at > to_timestamp($7 / 1000.0) - interval '60 seconds' \
                 AND written_at < to_timestamp($7 / 1000.0) + interval '60 seconds') < $5 \
             ON CONFLICT (delivery_id) DO NOTHING RETURNING 1 AS admitted",
        )
        .bind(delivery_id)
        .bind(lane.to_string())
        .bind(reason)
        .bind(author_id as i64)
        .bind(i64::from(per_minute))
        .bind(i64::try_from(stream_seq).unwrap_or(i64::MAX))
        .bind(written_at_ms as f64)
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(row.is_some())
    }

    /// The lane's deliveries admitted within `window` that have no outcome yet, oldest first,
    /// with their ingress stream sequences: what a run that died holding the lane left behind.
    pub async fn unsettled_admissions(&self, lane: &LaneKey, window: Duration) -> Result<Vec<(String, u64)>, StoreError> {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT a.delivery_id, a.stream_seq FROM admissions a
             WHERE a.lane = $1 AND a.stream_seq IS NOT NULL
               AND a.admitted_at > now() - make_interval(secs => $2::double precision / 1000)
               AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.delivery_id = a.delivery_id)
             ORDER BY a.admitted_at, a.delivery_id",
        )
        .bind(lane.to_string())
        .bind(i64::try_from(window.as_millis()).unwrap_or(i64::MAX))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(|(id, seq)| (id, u64::try_from(seq).unwrap_or(0))).collect())
    }

    /// Epochs of the lane whose turn started and never ended, before the lane's current one:
    /// runs that died or were fenced, whose session entries never became conversation.
    pub async fn abandoned_epochs(&self, lane: &LaneKey) -> Result<Vec<i64>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT t.epoch FROM turns t JOIN lanes l ON l.lane = t.lane
             WHERE t.lane = $1 AND t.ended_at IS NULL AND t.epoch < l.epoch",
        )
        .bind(lane.to_string())
        .fetch_all(&self.pool)
        .await?)
    }

    /// Why a delivery was admitted, if it ever was.
    pub async fn admission(&self, delivery_id: &str) -> Result<Option<String>, StoreError> {
        Ok(sqlx::query_scalar("SELECT reason FROM admissions WHERE delivery_id = $1").bind(delivery_id).fetch_optional(&self.pool).await?)
    }

    /// Marks the room's exchange as just settled (a reply or an absorbed delivery).
    pub async fn refresh_exchange(&self, lease: &Lease, delivery_id: &str) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        fence(&mut tx, lease).await?;
        touch_exchange(&mut tx, lease, delivery_id).await?;
        tx.commit().await?;
        Ok(())
    }

    /// The room's exchange, if he has ever settled a turn there.
    pub async fn exchange(&self, lane: &LaneKey) -> Result<Option<Exchange>, StoreError> {
        let row = sqlx::query(
            "SELECT (extract(epoch from last_settled_at) * 1000)::bigint AS at_ms, last_delivery_id FROM exchanges WHERE lane = $1",
        )
        .bind(lane.to_string())
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| Ok(Exchange { last_settled_at_ms: r.try_get("at_ms")?, last_delivery_id: r.try_get("last_delivery_id")? })).transpose()
    }

    /// Whether a turn of the lane started within `window` and never ended: a run that was
    /// live when its replica died. Its room still counts as in conversation.
    pub async fn unsettled_turn(&self, lane: &LaneKey, window: Duration) -> Result<bool, StoreError> {
        self.lane_within(concat!("SELECT ", unsettled_turn_sql!("$1", "$2")), lane, window).await
    }

    /// Everything admitting text deliveries reads, for a batch of `(delivery_id, lane)` in one
    /// statement, in the batch's order: whether each is settled or admitted already, whether
    /// its room is in conversation, and the owner's settings.
    pub async fn ingress_facts(&self, batch: &[(&str, &LaneKey)], window: Duration) -> Result<Vec<IngressFacts>, StoreError> {
        let homed: Vec<(&str, &LaneKey, &LaneKey)> = batch.iter().map(|(id, lane)| (*id, *lane, *lane)).collect();
        self.ingress_facts_homed(&homed, window).await
    }

    /// [`Store::ingress_facts`] for deliveries whose room follows another's quiet: a thread's
    /// `(delivery_id, lane, home)` reads whether its parent channel's room (`home`) is quiet too.
    pub async fn ingress_facts_homed(
        &self,
        batch: &[(&str, &LaneKey, &LaneKey)],
        window: Duration,
    ) -> Result<Vec<IngressFacts>, StoreError> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<&str> = batch.iter().map(|(id, _, _)| *id).collect();
        let lanes: Vec<String> = batch.iter().map(|(_, lane, _)| lane.to_string()).collect();
        let homes: Vec<String> = batch.iter().map(|(_, _, home)| home.to_string()).collect();
        let rows = sqlx::query(concat!(
            "SELECT EXISTS (SELECT 1 FROM deliveries x WHERE x.delivery_id = d.delivery_id) AS settled,
                    EXISTS (SELECT 1 FROM admissions a WHERE a.delivery_id = d.delivery_id) AS admitted,
                    ",
            exchange_live_sql!("d.lane", "$3"),
            "
                    OR COALESCE((SELECT l.lease_owner IS NOT NULL AND l.lease_expires_at > now() FROM lanes l WHERE l.lane = d.lane), false)
                    OR ",
            unsettled_turn_sql!("d.lane", "$3"),
            " AS in_conversation,
                    COALESCE((SELECT bool_or(l.quiet_until > now()) FROM lanes l WHERE l.lane IN (d.lane, d.home)), false) AS quiet,
                    s.owner_id, s.operators, s.grants, s.guilds, s.channels, s.trusted_dms, s.trusted_rooms, s.sharing, s.version,
                    COALESCE((SELECT array_prepend(p.name, p.aliases) FROM self_persona p WHERE p.id = 1), '{}') AS persona_names
             FROM unnest($1::text[], $2::text[], $4::text[]) WITH ORDINALITY AS d(delivery_id, lane, home, n)
             CROSS JOIN self_settings s WHERE s.id = 1
             ORDER BY d.n",
        ))
        .bind(&ids)
        .bind(&lanes)
        .bind(i64::try_from(window.as_millis()).unwrap_or(i64::MAX))
        .bind(&homes)
        .fetch_all(&self.pool)
        .await?;
        if rows.len() != batch.len() {
            return Err(StoreError::Corrupt(format!("ingress facts: {} rows for {} deliveries", rows.len(), batch.len())));
        }
        let owner = crate::shared_self::owner_settings_from(&rows[0])?;
        rows.iter()
            .map(|r| {
                Ok(IngressFacts {
                    settled: r.try_get("settled")?,
                    admitted: r.try_get("admitted")?,
                    in_conversation: r.try_get("in_conversation")?,
                    quiet: r.try_get("quiet")?,
                    owner: owner.clone(),
                    persona_names: r.try_get("persona_names")?,
                })
            })
            .collect()
    }

    /// Whether the room's exchange settled within `window` of the database's now.
    pub async fn exchange_live(&self, lane: &LaneKey, window: Duration) -> Result<bool, StoreError> {
        self.lane_within(concat!("SELECT ", exchange_live_sql!("$1", "$2")), lane, window).await
    }

    /// A yes-or-no question about one lane (`$1`) and a window in milliseconds (`$2`).
    async fn lane_within(&self, sql: &'static str, lane: &LaneKey, window: Duration) -> Result<bool, StoreError> {
        Ok(sqlx::query_scalar(sql)
            .bind(lane.to_string())
            .bind(i64::try_from(window.as_millis()).unwrap_or(i64::MAX))
            .fetch_one(&self.pool)
            .await?)
    }
}

/// Ends an open turn inside a fenced transaction.
pub(crate) async fn end_turn(tx: &mut Transaction<'_, Postgres>, lease: &Lease, end: &TurnEnd) -> Result<(), StoreError> {
    if end.outcome == v1::OutcomeKind::Absorbed {
        return Err(StoreError::InvalidOutcome("a turn ends replied, silent or failed; absorbed belongs to deliveries"));
    }
    let updated = sqlx::query(
        "UPDATE turns SET ended_at = now(), outcome = $3, failure_code = $4, model_calls = $5, input_tokens = $6,
             output_tokens = $7, steer_count = $8, typing_lit = $9, cached_input_tokens = $10, reasoning_tokens = $11,
             cache_write_input_tokens = $12
         WHERE turn_id = $1 AND lane = $2 AND ended_at IS NULL",
    )
    .bind(&end.turn_id)
    .bind(lease.lane.to_string())
    .bind(end.outcome.code())
    .bind(end.failure_code.map(|c| c.code()))
    .bind(end.model_calls)
    .bind(end.input_tokens)
    .bind(end.output_tokens)
    .bind(end.steer_count)
    .bind(end.typing_lit)
    .bind(end.cached_input_tokens)
    .bind(end.reasoning_tokens)
    .bind(end.cache_write_input_tokens)
    .execute(&mut **tx)
    .await?;
    if updated.rows_affected() != 1 {
        return Err(StoreError::Corrupt(format!("turn {} is not an open turn of {}", end.turn_id, lease.lane)));
    }
    Ok(())
}

/// Marks the room's exchange settled now, inside a fenced transaction.
pub(crate) async fn touch_exchange(tx: &mut Transaction<'_, Postgres>, lease: &Lease, delivery_id: &str) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO exchanges (lane, last_settled_at, last_delivery_id) VALUES ($1, now(), $2)
         ON CONFLICT (lane) DO UPDATE SET last_settled_at = now(), last_delivery_id = EXCLUDED.last_delivery_id",
    )
    .bind(lease.lane.to_string())
    .bind(delivery_id)
    .execute(&mut **tx)
    .await?;
    Ok(())
}
