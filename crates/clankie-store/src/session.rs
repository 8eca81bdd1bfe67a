use sqlx::Row;
use sqlx::types::Json;

use crate::lease::fence;
use crate::{Lease, Store, StoreError};

/// The columns of [`Entry`], selected from `session_entries`: each read adds its own condition.
macro_rules! select_entries {
    () => {
        "SELECT seq, id, parent_id, kind, body, in_context, epoch FROM session_entries "
    };
}

/// An entry to append to a session tree.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEntry {
    /// Unique within the tree.
    pub id: String,
    /// The entry this one follows; `None` for a root.
    pub parent_id: Option<String>,
    /// What the entry is: user message, assistant message, tool result, compaction summary, ...
    pub kind: String,
    /// The entry itself; the session layer owns its shape.
    pub body: serde_json::Value,
    /// Whether the entry is part of the model's context.
    pub in_context: bool,
}

/// A stored session entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// Global append order.
    pub seq: i64,
    pub id: String,
    pub parent_id: Option<String>,
    pub kind: String,
    pub body: serde_json::Value,
    pub in_context: bool,
    /// The lease epoch that wrote it.
    pub epoch: i64,
}

impl Store {
    /// Appends an entry to `tree` (a tree of the lease's lane), fenced by the lease epoch.
    pub async fn append_entry(&self, lease: &Lease, tree: &str, entry: &NewEntry) -> Result<i64, StoreError> {
        let mut tx = self.pool.begin().await?;
        fence(&mut tx, lease).await?;
        let seq: i64 = sqlx::query_scalar(
            "INSERT INTO session_entries (tree, lane, id, parent_id, kind, body, in_context, epoch)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING seq",
        )
        .bind(tree)
        .bind(lease.lane.to_string())
        .bind(&entry.id)
        .bind(&entry.parent_id)
        .bind(&entry.kind)
        .bind(Json(&entry.body))
        .bind(entry.in_context)
        .bind(lease.epoch)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(seq)
    }

    /// Every entry of a tree in append order.
    pub async fn entries(&self, tree: &str) -> Result<Vec<Entry>, StoreError> {
        let rows = sqlx::query(concat!(select_entries!(), "WHERE tree = $1 ORDER BY seq")).bind(tree).fetch_all(&self.pool).await?;
        entries_of(rows)
    }

    /// The entries of a tree appended after `seq`, in append order: what a session copy that
    /// holds the tree up to `seq` lacks.
    pub async fn entries_after(&self, tree: &str, seq: i64) -> Result<Vec<Entry>, StoreError> {
        let rows = sqlx::query(concat!(select_entries!(), "WHERE tree = $1 AND seq > $2 ORDER BY seq"))
            .bind(tree)
            .bind(seq)
            .fetch_all(&self.pool)
            .await?;
        entries_of(rows)
    }

    /// The entries of a tree a session needs, in append order: from the first entry its newest
    /// compaction kept, and that compaction; everything when it was never compacted. What the
    /// summary replaced stays in the store, unread.
    pub async fn entries_since_compaction(&self, tree: &str) -> Result<Vec<Entry>, StoreError> {
        let rows = sqlx::query(concat!(
            "WITH c AS (SELECT seq, body->>'first_kept_id' AS first_kept FROM session_entries
                        WHERE tree = $1 AND kind = 'compaction' ORDER BY seq DESC LIMIT 1),
                  k AS (SELECT e.seq FROM session_entries e JOIN c ON e.id = c.first_kept WHERE e.tree = $1) ",
            select_entries!(),
            "WHERE tree = $1 AND (seq >= COALESCE((SELECT seq FROM k), (SELECT seq FROM c), 0) OR seq = (SELECT seq FROM c))
             ORDER BY seq",
        ))
        .bind(tree)
        .fetch_all(&self.pool)
        .await?;
        entries_of(rows)
    }

    /// The provider's own message for the failed model call that answered message
    /// `delivery_id` in `lane` (the first answer after it was its failure): what the operator
    /// needs to mend a rejected model name or key. It lives only in the session tree, never in
    /// a receipt or a log; the trail reads it from there.
    pub async fn provider_message(&self, lane: &str, delivery_id: &str) -> Result<Option<String>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT a.body->>'provider_error' FROM session_entries u
             CROSS JOIN LATERAL (SELECT body FROM session_entries a
                                 WHERE a.tree = u.tree AND a.seq > u.seq AND a.kind = 'assistant'
                                 ORDER BY a.seq LIMIT 1) a
             WHERE u.lane = $1 AND u.kind = 'user' AND u.body->>'delivery_id' = $2
               AND a.body->>'provider_error' IS NOT NULL
             ORDER BY u.seq DESC LIMIT 1",
        )
        .bind(lane)
        .bind(delivery_id)
        .fetch_optional(&self.pool)
        .await?)
    }
}

fn entries_of(rows: Vec<sqlx::postgres::PgRow>) -> Result<Vec<Entry>, StoreError> {
    rows.into_iter()
        .map(|r| {
            Ok(Entry {
                seq: r.try_get("seq")?,
                id: r.try_get("id")?,
                parent_id: r.try_get("parent_id")?,
                kind: r.try_get("kind")?,
                body: r.try_get::<Json<serde_json::Value>, _>("body")?.0,
                in_context: r.try_get("in_context")?,
                epoch: r.try_get("epoch")?,
            })
        })
        .collect()
}
