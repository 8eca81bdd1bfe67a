//! The reply outbox and the fenced transaction that settles a turn.
//!
//! A turn's reply, its outcomes, its end and the room's exchange commit
//! together or not at all, under the lane's fence. Whatever the turn posts is
//! an outbox row in that transaction; a relay publishes rows after the commit.
//! So a run that lost its lane (or whose database went away) posts nothing and
//! settles nothing, and its deliveries come back for one new answer.

use std::time::Duration;

use sqlx::{Postgres, Transaction};

use crate::lease::fence;
use crate::turns::validate;
use crate::{Lease, Outcome, Store, StoreError, TurnEnd};

/// One message waiting to be published: its id is also its `Nats-Msg-Id` and the body's
/// idempotency key, so however often it is published Discord sees it once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxRow {
    pub id: String,
    pub turn_id: String,
    pub subject: String,
    pub payload: Vec<u8>,
}

/// A row the relay claimed, with how many times it has been claimed (this one counted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedRow {
    pub row: OutboxRow,
    pub attempts: i32,
}

/// An outbox row as its columns come back: id, turn, subject, payload (gone once sent).
type StoredRow = (String, String, String, Option<Vec<u8>>);

fn row_of((id, turn_id, subject, payload): StoredRow) -> OutboxRow {
    OutboxRow { id, turn_id, subject, payload: payload.unwrap_or_default() }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Everything that ends a turn, written in one fenced transaction.
#[derive(Debug, Clone, Copy)]
pub struct Settlement<'a> {
    pub end: &'a TurnEnd,
    /// One per delivery the turn answers for.
    pub outcomes: &'a [Outcome],
    /// Each outcome's event, in the same order: queued only when its outcome is new.
    pub outcome_events: &'a [OutboxRow],
    /// The delivery that refreshes the room's exchange, when the turn replied or absorbed.
    pub exchange: Option<&'a str>,
    /// What the turn posts, if anything.
    pub post: Option<&'a OutboxRow>,
    /// The memories the run proposed, recorded (and put to the owner) with the turn.
    pub proposals: Option<Proposals<'a>>,
}

/// Memories a run proposed, recorded when its turn settles: each fact once per message the
/// turn answered, so a retried run of the same turn adds no second proposal and no second DM.
#[derive(Clone, Copy)]
pub struct Proposals<'a> {
    pub facts: &'a [String],
    /// Whose words each fact was drawn from (by author id, in the order of `facts`): a forget
    /// of any of them takes the fact with it, and a forget of no one else does.
    pub drawn_from: &'a [Vec<u64>],
    /// The lane they were proposed in.
    pub proposed_in: &'a str,
    /// The delivery the turn answered.
    pub proposed_for: &'a str,
    /// Who builds the owner's DM about a newly recorded proposal, queued in the same
    /// transaction; `None` when nobody is asked.
    pub ask: Option<&'a dyn AskOwner>,
}

/// Builds the owner's DM about a proposal this settlement recorded (its id and fact).
pub trait AskOwner: Send + Sync {
    fn row(&self, memory: i64, fact: &str) -> OutboxRow;
}

impl std::fmt::Debug for Proposals<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proposals")
            .field("facts", &self.facts.len())
            .field("proposed_in", &self.proposed_in)
            .field("proposed_for", &self.proposed_for)
            .field("ask", &self.ask.is_some())
            .finish()
    }
}

/// Records each proposal not yet recorded for its delivery, and queues its DM; returns the
/// ids recorded by this call.
async fn insert_proposals(tx: &mut Transaction<'_, Postgres>, lease: &Lease, p: &Proposals<'_>) -> Result<Vec<i64>, StoreError> {
    let mut recorded = Vec::new();
    for (n, fact) in p.facts.iter().enumerate() {
        let drawn_from: Vec<i64> = p.drawn_from.get(n).map(|ids| ids.iter().map(|&id| id as i64).collect()).unwrap_or_default();
        let id: Option<i64> = sqlx::query_scalar(
            "INSERT INTO self_memory (fact, status, proposed_in, proposed_for, drawn_from) VALUES ($1, 'proposed', $2, $3, $4)
             ON CONFLICT (proposed_for, fact) WHERE proposed_for IS NOT NULL DO NOTHING RETURNING id",
        )
        .bind(fact)
        .bind(p.proposed_in)
        .bind(p.proposed_for)
        .bind(&drawn_from)
        .fetch_optional(&mut **tx)
        .await?;
        let Some(id) = id else { continue };
        if let Some(ask) = p.ask {
            insert_row(tx, lease, &ask.row(id, fact)).await?;
        }
        recorded.push(id);
    }
    Ok(recorded)
}

impl Store {
    /// Settles a turn: its end, every outcome and its event, the room's exchange and its post,
    /// in one transaction under the lease's fence. Returns, per outcome, whether this call
    /// recorded it (`false`: the delivery already had one, which stands). A turn that would
    /// post a reply to a delivery already settled commits nothing
    /// ([`StoreError::AlreadySettled`]).
    pub async fn settle_turn(&self, lease: &Lease, s: &Settlement<'_>) -> Result<Vec<bool>, StoreError> {
        validate(s.end.outcome, s.end.failure_code)?;
        for o in s.outcomes {
            validate(o.kind, o.failure_code)?;
        }
        let mut tx = self.pool.begin().await?;
        fence(&mut tx, lease).await?;
        crate::turns::end_turn(&mut tx, lease, s.end).await?;
        let mut new = Vec::with_capacity(s.outcomes.len());
        for (i, o) in s.outcomes.iter().enumerate() {
            let inserted = sqlx::query(
                "INSERT INTO deliveries (delivery_id, lane, turn_id, outcome, failure_code) VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (delivery_id) DO NOTHING",
            )
            .bind(&o.delivery_id)
            .bind(lease.lane.to_string())
            .bind(&o.turn_id)
            .bind(o.kind.code())
            .bind(o.failure_code.map(|c| c.code()))
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if inserted == 1
                && let Some(event) = s.outcome_events.get(i)
            {
                insert_row(&mut tx, lease, event).await?;
            }
            new.push(inserted == 1);
        }
        // The reply answers the turn's first delivery: if that was settled elsewhere meanwhile
        // (its own turn, or given up on), the reply would be a second answer, so nothing commits.
        if s.post.is_some() && new.first() == Some(&false) {
            return Err(StoreError::AlreadySettled(s.outcomes[0].delivery_id.clone()));
        }
        if let Some(delivery_id) = s.exchange {
            crate::turns::touch_exchange(&mut tx, lease, delivery_id).await?;
        }
        if let Some(row) = s.post {
            insert_row(&mut tx, lease, row).await?;
        }
        if let Some(p) = &s.proposals {
            insert_proposals(&mut tx, lease, p).await?;
        }
        tx.commit().await?;
        Ok(new)
    }

    /// Records a run's proposals outside a turn's settlement (a voice handoff), under the
    /// lease's fence; returns the ids this call recorded.
    pub async fn propose_memories(&self, lease: &Lease, p: &Proposals<'_>) -> Result<Vec<i64>, StoreError> {
        let mut tx = self.pool.begin().await?;
        fence(&mut tx, lease).await?;
        let recorded = insert_proposals(&mut tx, lease, p).await?;
        tx.commit().await?;
        Ok(recorded)
    }

    /// Queues a post of a live run (a text update) under the lease's fence: a run that lost
    /// its lane queues nothing.
    pub async fn enqueue(&self, lease: &Lease, row: &OutboxRow) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        fence(&mut tx, lease).await?;
        insert_row(&mut tx, lease, row).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Rows committed more than `older_than` ago and not yet marked sent or given up, oldest
    /// first: the ones whose committing replica died before it published them.
    pub async fn unsent(&self, older_than: Duration, limit: i64) -> Result<Vec<OutboxRow>, StoreError> {
        let rows: Vec<StoredRow> = sqlx::query_as(
            "SELECT id, turn_id, subject, payload FROM outbox
             WHERE sent_at IS NULL AND gave_up_at IS NULL AND created_at < now() - make_interval(secs => $1::double precision / 1000)
             ORDER BY created_at LIMIT $2",
        )
        .bind(millis(older_than))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(row_of).collect())
    }

    /// Claims for `replica` up to `limit` of the oldest rows committed more than `older_than`
    /// ago, unsent, not given up and not claimed by anyone now. A claim lasts a second, doubling
    /// with each attempt up to five minutes: a row that will not publish steps out of the way of
    /// newer ones instead of being first in line at every pass, and if its claimant dies another
    /// relay takes it when the claim runs out. Rows locked by another claim are skipped.
    pub async fn claim_unsent(&self, older_than: Duration, limit: i64, replica: &str) -> Result<Vec<ClaimedRow>, StoreError> {
        let rows: Vec<(String, String, String, Option<Vec<u8>>, i32)> = sqlx::query_as(
            "WITH due AS (
                 SELECT id FROM outbox
                 WHERE sent_at IS NULL AND gave_up_at IS NULL
                   AND created_at < now() - make_interval(secs => $1::double precision / 1000)
                   AND (claimed_until IS NULL OR claimed_until < now())
                 ORDER BY created_at LIMIT $2 FOR UPDATE SKIP LOCKED)
             UPDATE outbox o SET claimed_by = $3, attempts = o.attempts + 1,
                    claimed_until = now() + LEAST(make_interval(secs => power(2, LEAST(o.attempts, 16))), interval '5 minutes')
             FROM due WHERE o.id = due.id
             RETURNING o.id, o.turn_id, o.subject, o.payload, o.attempts",
        )
        .bind(millis(older_than))
        .bind(limit)
        .bind(replica)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(id, turn_id, subject, payload, attempts)| ClaimedRow { row: row_of((id, turn_id, subject, payload)), attempts })
            .collect())
    }

    /// Gives up, with `code`, every unsent row committed more than `max_age` ago: a reply
    /// posted that late (after a long outage, say) answers a conversation that has moved on.
    /// The outcomes stand; only the post is dropped. Returns the rows given up, payload and all,
    /// so the caller can say whose they were.
    pub async fn give_up_older_than(&self, max_age: Duration, code: &str, limit: i64) -> Result<Vec<OutboxRow>, StoreError> {
        let rows: Vec<StoredRow> = sqlx::query_as(
            "WITH old AS (SELECT id, turn_id, subject, payload FROM outbox
                          WHERE sent_at IS NULL AND gave_up_at IS NULL
                            AND created_at < now() - make_interval(secs => $1::double precision / 1000)
                          ORDER BY created_at LIMIT $3 FOR UPDATE SKIP LOCKED)
             UPDATE outbox o SET gave_up_at = now(), gave_up_code = $2, payload = NULL FROM old WHERE o.id = old.id
             RETURNING old.id, old.turn_id, old.subject, old.payload",
        )
        .bind(millis(max_age))
        .bind(code)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(row_of).collect())
    }

    /// Gives up one row with `code` (one that never publishes, say); `None` if it was sent or
    /// given up meanwhile.
    pub async fn give_up(&self, id: &str, code: &str) -> Result<Option<OutboxRow>, StoreError> {
        let rows: Vec<StoredRow> = sqlx::query_as(
            "WITH old AS (SELECT id, turn_id, subject, payload FROM outbox WHERE id = $1 AND sent_at IS NULL AND gave_up_at IS NULL FOR UPDATE)
             UPDATE outbox o SET gave_up_at = now(), gave_up_code = $2, payload = NULL FROM old WHERE o.id = old.id
             RETURNING old.id, old.turn_id, old.subject, old.payload",
        )
        .bind(id)
        .bind(code)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().next().map(row_of))
    }

    /// Marks a row published and drops its payload: the words live on in the session tree.
    pub async fn mark_sent(&self, id: &str) -> Result<(), StoreError> {
        sqlx::query("UPDATE outbox SET sent_at = now(), payload = NULL WHERE id = $1 AND sent_at IS NULL")
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}

async fn insert_row(tx: &mut Transaction<'_, Postgres>, lease: &Lease, row: &OutboxRow) -> Result<(), StoreError> {
    sqlx::query("INSERT INTO outbox (id, lane, turn_id, subject, payload) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (id) DO NOTHING")
        .bind(&row.id)
        .bind(lease.lane.to_string())
        .bind(&row.turn_id)
        .bind(&row.subject)
        .bind(&row.payload)
        .execute(&mut **tx)
        .await?;
    Ok(())
}
