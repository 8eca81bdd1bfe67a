//! Rewriting what a lane stored when the words in it change: a message edited or deleted
//! after he read it, a person forgotten. The session tree is otherwise append-only, so every
//! rewrite also appends a `rewrite` entry to the trees it touched: a replica's warm copy that
//! reads it reopens the tree from the store instead of keeping the words in memory.

use sqlx::Row;
use sqlx::types::Json;

use crate::lease::fence;
use crate::{Lease, Store, StoreError};

/// The `session_entries.kind` of the marker a rewrite appends.
pub const REWRITE_KIND: &str = "rewrite";

/// A stored user entry that holds words a rewrite may change.
#[derive(Debug, Clone, PartialEq)]
pub struct HeldWords {
    /// The entry's global sequence number.
    pub seq: i64,
    /// Its id within its tree (what a compaction's `first_kept_id` names).
    pub id: String,
    /// The lane it belongs to, as its key is written.
    pub lane: String,
    pub tree: String,
    pub kind: String,
    pub body: serde_json::Value,
    pub in_context: bool,
}

/// An entry's new self: its kind, body and whether the model sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Rewritten {
    pub seq: i64,
    pub tree: String,
    pub kind: String,
    pub body: serde_json::Value,
    pub in_context: bool,
}

/// What forgetting a person removed outside the session trees: counts, and the DMs that go with the facts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ForgottenRows {
    pub ring_lines: u64,
    pub memories: u64,
    pub experiences: u64,
    /// His replies not yet posted to turns only they started (unsent outbox rows).
    pub unsent_replies: u64,
    /// The owner's DMs about the facts that went (`memory:<id>`), for the streams' erase.
    pub memory_dms: Vec<String>,
}

fn held_words(rows: Vec<sqlx::postgres::PgRow>) -> Result<Vec<HeldWords>, StoreError> {
    rows.into_iter()
        .map(|r| {
            Ok(HeldWords {
                seq: r.try_get("seq")?,
                id: r.try_get("id")?,
                lane: r.try_get("lane")?,
                tree: r.try_get("tree")?,
                kind: r.try_get("kind")?,
                body: r.try_get::<Json<serde_json::Value>, _>("body")?.0,
                in_context: r.try_get("in_context")?,
            })
        })
        .collect()
}

/// The author a lane's history block is stored under: its lines are the lane's own channel's.
pub const HISTORY_AUTHOR: &str = "channel history";

impl Store {
    /// The user entries of `lane` that hold message `message_id`: the message itself (its
    /// `delivery_id`) or a history block with a line of it (its `lines`).
    pub async fn entries_holding_message(&self, lane: &str, message_id: u64) -> Result<Vec<HeldWords>, StoreError> {
        let rows = sqlx::query(
            "SELECT seq, id, lane, tree, kind, body, in_context FROM session_entries
             WHERE lane = $1 AND kind = 'user'
               AND (body->>'delivery_id' = $2 OR body->>'delivery_id' LIKE 'edit:' || $2 || ':%' OR body->'lines' @> $3::jsonb)
             ORDER BY seq",
        )
        .bind(lane)
        .bind(message_id.to_string())
        .bind(Json(serde_json::json!([message_id])))
        .fetch_all(&self.pool)
        .await?;
        held_words(rows)
    }

    /// The Discord messages of a lane's own channel it holds or waits on: its stored messages,
    /// the lines of its history blocks, and its admitted deliveries not yet settled. What its
    /// messages quote from other channels (a thread's starter, a linked message) is not among
    /// them. A deleted thread takes these with it.
    pub async fn messages_of_lane(&self, lane: &str) -> Result<Vec<u64>, StoreError> {
        let rows: Vec<(String,)> = sqlx::query_as(
            "SELECT body->>'delivery_id' FROM session_entries WHERE lane = $1 AND kind = 'user'
             UNION SELECT jsonb_array_elements_text(body->'lines') FROM session_entries
               WHERE lane = $1 AND kind = 'user' AND body->>'author' = $2 AND jsonb_typeof(body->'lines') = 'array'
             UNION SELECT a.delivery_id FROM admissions a
               WHERE a.lane = $1 AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.delivery_id = a.delivery_id)",
        )
        .bind(lane)
        .bind(HISTORY_AUTHOR)
        .fetch_all(&self.pool)
        .await?;
        let mut ids: Vec<u64> = rows.into_iter().filter_map(|(id,)| id.parse().ok()).collect();
        ids.sort_unstable();
        ids.dedup();
        Ok(ids)
    }

    /// The lanes besides `lane` whose stored entries hold `message_id` as a line (quoted in a
    /// message's context, or a thread's starter): an edit or a deletion of it reaches them too.
    pub async fn other_lanes_quoting(&self, lane: &str, message_id: u64) -> Result<Vec<String>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT DISTINCT lane FROM session_entries WHERE kind = 'user' AND body ? 'lines' AND body->'lines' @> $2::jsonb AND lane <> $1
             ORDER BY lane",
        )
        .bind(lane)
        .bind(Json(serde_json::json!([message_id])))
        .fetch_all(&self.pool)
        .await?)
    }

    /// The lanes that may hold `author_id`'s words: those with a stored entry attributed to
    /// them, and those they were admitted to (a message of theirs a run holds is stored only
    /// when the run settles). Both lookups are indexed.
    pub async fn lanes_of_author(&self, author_id: u64) -> Result<Vec<String>, StoreError> {
        let rows: Vec<(String,)> = sqlx::query_as(
            "SELECT lane FROM session_entries WHERE authors @> ARRAY[$1::BIGINT]
             UNION SELECT lane FROM admissions WHERE author_id = $1 ORDER BY lane",
        )
        .bind(author_id as i64)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(|(l,)| l).collect())
    }

    /// The user entries of `lane` with a block attributed to `author_id` (a message of theirs,
    /// or a history or room block holding a line of theirs), through the authors index.
    pub async fn entries_attributed_to(&self, lane: &str, author_id: u64) -> Result<Vec<HeldWords>, StoreError> {
        let rows = sqlx::query(
            "SELECT seq, id, lane, tree, kind, body, in_context FROM session_entries
             WHERE authors @> ARRAY[$1::BIGINT] AND lane = $2 ORDER BY seq",
        )
        .bind(author_id as i64)
        .bind(lane)
        .fetch_all(&self.pool)
        .await?;
        held_words(rows)
    }

    /// Marks a forget of `author_id` as running, unless one started less than `stale_after`
    /// ago is: true when this caller is the one to run it. Their id is recorded as forgotten
    /// from now on, so their messages stay out of history blocks while it runs.
    pub async fn begin_forget(&self, author_id: u64, stale_after: std::time::Duration) -> Result<bool, StoreError> {
        let taken = sqlx::query(
            "INSERT INTO forgotten_users (author_id, running_since) VALUES ($1, now())
             ON CONFLICT (author_id) DO UPDATE SET running_since = now(), forgotten_at = now()
             WHERE forgotten_users.running_since IS NULL
                OR forgotten_users.running_since < now() - make_interval(secs => $2)
             RETURNING author_id",
        )
        .bind(author_id as i64)
        .bind(stale_after.as_secs_f64())
        .fetch_optional(&self.pool)
        .await?;
        Ok(taken.is_some())
    }

    /// Adds to what the streams' erase of `author_id` still has to find (the turns only they
    /// started, the names they went by) and returns all of it, this forget's and any earlier
    /// one's the bus never finished.
    pub async fn pending_erase(
        &self,
        author_id: u64,
        answered: &[String],
        names: &[String],
    ) -> Result<(Vec<String>, Vec<String>), StoreError> {
        let (answered, names): (Vec<String>, Vec<String>) = sqlx::query_as(
            "UPDATE forgotten_users
             SET erase_answered = ARRAY(SELECT DISTINCT unnest(erase_answered || $2::TEXT[]) ORDER BY 1),
                 erase_names = ARRAY(SELECT DISTINCT unnest(erase_names || $3::TEXT[]) ORDER BY 1)
             WHERE author_id = $1
             RETURNING erase_answered, erase_names",
        )
        .bind(author_id as i64)
        .bind(answered)
        .bind(names)
        .fetch_optional(&self.pool)
        .await?
        .unwrap_or_else(|| (answered.to_vec(), names.to_vec()));
        Ok((answered, names))
    }

    /// The streams' erase of `author_id` succeeded: nothing is pending for it any more.
    pub async fn erase_done(&self, author_id: u64) -> Result<(), StoreError> {
        sqlx::query("UPDATE forgotten_users SET erase_answered = '{}', erase_names = '{}' WHERE author_id = $1")
            .bind(author_id as i64)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Marks the forget of `author_id` begun with [`Store::begin_forget`] as over.
    pub async fn end_forget(&self, author_id: u64) -> Result<(), StoreError> {
        sqlx::query("UPDATE forgotten_users SET running_since = NULL WHERE author_id = $1")
            .bind(author_id as i64)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Every entry of session tree `tree`, in the order it was written: what a forget walks to
    /// learn which of his entries answered whom.
    pub async fn tree_entries(&self, tree: &str) -> Result<Vec<HeldWords>, StoreError> {
        let rows = sqlx::query("SELECT seq, id, lane, tree, kind, body, in_context FROM session_entries WHERE tree = $1 ORDER BY seq")
            .bind(tree)
            .fetch_all(&self.pool)
            .await?;
        held_words(rows)
    }

    /// Replaces entries of the lease's lane in one fenced transaction and appends a `rewrite`
    /// marker to each tree it touched. Returns how many entries changed.
    pub async fn rewrite_entries(&self, lease: &Lease, rewritten: &[Rewritten]) -> Result<u64, StoreError> {
        if rewritten.is_empty() {
            return Ok(0);
        }
        let lane = lease.lane.to_string();
        let mut tx = self.pool.begin().await?;
        fence(&mut tx, lease).await?;
        let mut changed = 0;
        let mut trees: Vec<&str> = Vec::new();
        for r in rewritten {
            changed += sqlx::query("UPDATE session_entries SET kind = $3, body = $4, in_context = $5 WHERE seq = $1 AND lane = $2")
                .bind(r.seq)
                .bind(&lane)
                .bind(&r.kind)
                .bind(Json(&r.body))
                .bind(r.in_context)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            if !trees.contains(&r.tree.as_str()) {
                trees.push(&r.tree);
            }
        }
        for tree in trees {
            sqlx::query(
                "INSERT INTO session_entries (tree, lane, id, parent_id, kind, body, in_context, epoch)
                 VALUES ($1, $2, 'rewrite-' || nextval('session_entries_seq_seq'),
                         (SELECT id FROM session_entries WHERE tree = $1 ORDER BY seq DESC LIMIT 1),
                         $3, $4, false, $5)",
            )
            .bind(tree)
            .bind(&lane)
            .bind(REWRITE_KIND)
            .bind(Json(serde_json::json!({ "type": "note", "text": "entries rewritten" })))
            .bind(lease.epoch)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(changed)
    }

    /// Removes a deleted message's lines from every voice ring. How many went.
    pub async fn withdraw_ring_lines(&self, delivery_id: &str) -> Result<u64, StoreError> {
        Ok(sqlx::query("DELETE FROM voice_ring WHERE delivery_id = $1").bind(delivery_id).execute(&self.pool).await?.rows_affected())
    }

    /// Removes a forgotten person's lines from every voice ring; how many went. A live room
    /// calls it after its own pending writes, so a line it was still storing goes too.
    pub async fn withdraw_ring_lines_of(&self, author_id: u64) -> Result<u64, StoreError> {
        Ok(sqlx::query("DELETE FROM voice_ring WHERE author_id = $1 AND NOT is_him")
            .bind(author_id.to_string())
            .execute(&self.pool)
            .await?
            .rows_affected())
    }

    /// Gives the voice ring's lines of typed message `delivery_id` its edited `text`; how many.
    pub async fn edit_ring_lines(&self, delivery_id: &str, text: &str) -> Result<u64, StoreError> {
        Ok(sqlx::query("UPDATE voice_ring SET text = $2 WHERE delivery_id = $1")
            .bind(delivery_id)
            .bind(text)
            .execute(&self.pool)
            .await?
            .rows_affected())
    }

    /// Records that `author_id` was forgotten (their id only) and removes what of theirs lives
    /// outside the session trees, by provenance: their ring lines, memory drawn from their
    /// words (or, recorded before that was kept, proposed from one of `deliveries`, their
    /// messages, or from a line they spoke), and experiences they took part
    /// in (by id; one recorded before ids were kept, under one of `names`). Memory of anyone
    /// else's making stays, whatever words it shares, and so do a namesake's experiences.
    pub async fn forget_rows(
        &self,
        author_id: u64,
        names: &[String],
        deliveries: &[String],
        answered: &[String],
    ) -> Result<ForgottenRows, StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("INSERT INTO forgotten_users (author_id) VALUES ($1) ON CONFLICT (author_id) DO UPDATE SET forgotten_at = now()")
            .bind(author_id as i64)
            .execute(&mut *tx)
            .await?;
        // A fact goes with the people it was drawn from, and only with them; one recorded
        // before that was kept goes with the delivery it was proposed for.
        let memory_ids: Vec<i64> = sqlx::query_scalar(
            "DELETE FROM self_memory WHERE drawn_from @> ARRAY[$3::bigint]
                OR (drawn_from = '{}' AND (proposed_for = ANY($1)
                    OR proposed_for IN (SELECT delivery_id FROM voice_ring WHERE author_id = $2)))
             RETURNING id",
        )
        .bind(deliveries)
        .bind(author_id.to_string())
        .bind(author_id as i64)
        .fetch_all(&mut *tx)
        .await?;
        let memories = memory_ids.len() as u64;
        // The owner's DM about each of those facts holds its words: one not yet posted goes
        // unsent (the DM's id is `memory:<id>`), and the streams' erase takes the posted copy.
        let memory_dms: Vec<String> = memory_ids.iter().map(|id| format!("memory:{id}")).collect();
        sqlx::query("DELETE FROM outbox WHERE id = ANY($1)").bind(&memory_dms).execute(&mut *tx).await?;
        let ring_lines =
            sqlx::query("DELETE FROM voice_ring WHERE author_id = $1").bind(author_id.to_string()).execute(&mut *tx).await?.rows_affected();
        let experiences = sqlx::query(
            "DELETE FROM self_experiences
             WHERE participant_ids @> ARRAY[$2::bigint] OR (participant_ids = '{}' AND participants && $1)",
        )
        .bind(names)
        .bind(author_id as i64)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        // Their edits waiting for a message's outcome hold their words too; a deletion holds none
        // and stays, so a copy of the message is still withdrawn.
        sqlx::query("UPDATE message_changes SET edit = NULL WHERE author_id = $1 AND edit IS NOT NULL")
            .bind(author_id as i64)
            .execute(&mut *tx)
            .await?;
        // Other people's edits carry their words where they quote them: the words go, the edit stays.
        let edits: Vec<(String, Vec<u8>)> =
            sqlx::query_as("SELECT delivery_id, edit FROM message_changes WHERE author_id <> $1 AND edit IS NOT NULL FOR UPDATE")
                .bind(author_id as i64)
                .fetch_all(&mut *tx)
                .await?;
        for (delivery_id, edit) in edits {
            use prost::Message as _;
            let Ok(mut ingress) = clankie_proto::v1::Ingress::decode(edit.as_slice()) else { continue };
            if clankie_proto::words::forget_carried(&mut ingress, |a, _| a == author_id) == 0 {
                continue;
            }
            sqlx::query("UPDATE message_changes SET edit = $2 WHERE delivery_id = $1")
                .bind(&delivery_id)
                .bind(ingress.encode_to_vec())
                .execute(&mut *tx)
                .await?;
        }
        // His replies to turns only they started, not yet posted, hold his words to them: they
        // are withdrawn like the turn's entries (a sent row keeps no payload).
        let unsent_replies = sqlx::query(
            "DELETE FROM outbox WHERE sent_at IS NULL
               AND turn_id IN (SELECT turn_id FROM deliveries WHERE delivery_id = ANY($1))",
        )
        .bind(answered)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        tx.commit().await?;
        Ok(ForgottenRows { ring_lines, memories, experiences, unsent_replies, memory_dms })
    }

    /// The ring lines of `author_id`, for what a forget must look for elsewhere.
    pub async fn ring_texts_of(&self, author_id: u64) -> Result<Vec<(String, String)>, StoreError> {
        Ok(sqlx::query_as("SELECT author_name, text FROM voice_ring WHERE author_id = $1")
            .bind(author_id.to_string())
            .fetch_all(&self.pool)
            .await?)
    }

    /// When `author_id` was last forgotten (ms since the Unix epoch); `None` if never.
    pub async fn forgotten_at(&self, author_id: u64) -> Result<Option<i64>, StoreError> {
        Ok(sqlx::query_scalar("SELECT (extract(epoch from forgotten_at) * 1000)::bigint FROM forgotten_users WHERE author_id = $1")
            .bind(author_id as i64)
            .fetch_optional(&self.pool)
            .await?)
    }

    /// The people forgotten, with when (ms since the Unix epoch): their messages sent before
    /// then stay out of history blocks.
    pub async fn forgotten_users(&self) -> Result<Vec<(u64, i64)>, StoreError> {
        let rows: Vec<(i64, i64)> =
            sqlx::query_as("SELECT author_id, (extract(epoch from forgotten_at) * 1000)::bigint FROM forgotten_users")
                .fetch_all(&self.pool)
                .await?;
        Ok(rows.into_iter().map(|(a, at)| (a as u64, at)).collect())
    }
}
