//! Read-only views for the operator console: each lane's state at a glance and hourly figures.
//! Ids, codes and counts only, like every receipt.

use sqlx::Row;

use crate::{Store, StoreError};

/// One lane as the console's lanes view shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LaneView {
    pub lane: String,
    pub epoch: i64,
    /// The replica holding the lease now, else the one that ran the lane's last run.
    pub replica: Option<String>,
    /// A turn started and has not ended, under a live lease.
    pub running: bool,
    /// Whether the last run opened its session from the store (`None` before any run).
    pub cold: Option<bool>,
    /// The last ended turn's outcome code (`replied`, `silent`, `failed`).
    pub last_outcome: Option<String>,
    /// When that turn ended, in Unix milliseconds.
    pub last_at_ms: Option<i64>,
    /// Until when the owner made the room quiet (`/clankie quiet`), in Unix milliseconds; `None` when it speaks.
    pub quiet_until_ms: Option<i64>,
    /// Input tokens over the lane's turns, and of them those read from the provider's prompt
    /// cache: what its durable conversation saves.
    pub input_tokens: i64,
    pub cached_input_tokens: i64,
}

/// Figures for one hour.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HourFigures {
    /// The hour's start, in Unix milliseconds.
    pub hour_ms: i64,
    pub turns: i64,
    pub replied: i64,
    pub absorbed: i64,
    pub silent: i64,
    pub failed: i64,
    /// Input and output tokens together.
    pub tokens: i64,
    pub input_tokens: i64,
    /// Of `input_tokens`, those the provider served from its prompt cache.
    pub cached_input_tokens: i64,
    /// Of `input_tokens`, those written to the provider's prompt cache.
    pub cache_write_input_tokens: i64,
}

/// A voice room's lease as it stands.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RoomView {
    /// `<guild>:<channel>`.
    pub room: String,
    /// The voice-floor replica keeping it, if any.
    pub keeper: Option<String>,
    pub epoch: i64,
    /// The keeper's lease is unexpired.
    pub live: bool,
}

/// The lane view's query, followed by `$tail` (a filter and an order).
macro_rules! lane_view_sql {
    ($tail:literal) => {
        concat!("
    SELECT l.lane, l.epoch,
           COALESCE(CASE WHEN l.lease_expires_at > now() THEN l.lease_owner END, r.ids->>'replica') AS replica,
           (l.lease_owner IS NOT NULL AND l.lease_expires_at > now() AND t_open.turn_id IS NOT NULL) AS running,
           CASE WHEN r.flags IS NOT NULL THEN COALESCE((r.flags->>'cold')::boolean, false) END AS cold,
           t_end.outcome AS last_outcome,
           (extract(epoch from t_end.ended_at) * 1000)::bigint AS last_at_ms,
           CASE WHEN l.quiet_until > now() THEN (extract(epoch from l.quiet_until) * 1000)::bigint END AS quiet_until_ms,
           tok.input_tokens, tok.cached_input_tokens
    FROM lanes l
    LEFT JOIN LATERAL (SELECT ids, flags FROM receipts WHERE kind = 'captain.run' AND lane = l.lane ORDER BY at DESC, id DESC LIMIT 1) r ON true
    LEFT JOIN LATERAL (SELECT turn_id FROM turns WHERE lane = l.lane AND epoch = l.epoch AND ended_at IS NULL LIMIT 1) t_open ON true
    LEFT JOIN LATERAL (SELECT outcome, ended_at FROM turns WHERE lane = l.lane AND ended_at IS NOT NULL ORDER BY ended_at DESC LIMIT 1) t_end ON true
    LEFT JOIN LATERAL (SELECT COALESCE(sum(input_tokens), 0)::bigint AS input_tokens,
                              COALESCE(sum(cached_input_tokens), 0)::bigint AS cached_input_tokens
                       FROM turns WHERE lane = l.lane) tok ON true ", $tail)
    };
}

fn lane_view(r: &sqlx::postgres::PgRow) -> Result<LaneView, StoreError> {
    Ok(LaneView {
        lane: r.try_get("lane")?,
        epoch: r.try_get("epoch")?,
        replica: r.try_get("replica")?,
        running: r.try_get::<Option<bool>, _>("running")?.unwrap_or(false),
        cold: r.try_get("cold")?,
        last_outcome: r.try_get("last_outcome")?,
        last_at_ms: r.try_get("last_at_ms")?,
        quiet_until_ms: r.try_get("quiet_until_ms")?,
        input_tokens: r.try_get("input_tokens")?,
        cached_input_tokens: r.try_get("cached_input_tokens")?,
    })
}

impl Store {
    /// The `limit` most recently touched lanes, newest first.
    pub async fn lane_views(&self, limit: i64) -> Result<Vec<LaneView>, StoreError> {
        let rows = sqlx::query(lane_view_sql!("ORDER BY l.updated_at DESC LIMIT $1")).bind(limit).fetch_all(&self.pool).await?;
        rows.iter().map(lane_view).collect()
    }

    /// One lane's view; `None` for a lane never seen.
    pub async fn lane_view(&self, lane: &str) -> Result<Option<LaneView>, StoreError> {
        let row = sqlx::query(lane_view_sql!("WHERE l.lane = $1")).bind(lane).fetch_optional(&self.pool).await?;
        row.as_ref().map(lane_view).transpose()
    }

    /// Turns, outcomes by kind and tokens for each of the last `hours` hours, oldest first
    /// (hours with nothing in them included, as zeros).
    pub async fn hourly_figures(&self, hours: i32) -> Result<Vec<HourFigures>, StoreError> {
        let rows = sqlx::query(
            "WITH hours AS (
                 SELECT generate_series(date_trunc('hour', now()) - make_interval(hours => $1 - 1), date_trunc('hour', now()), interval '1 hour') AS h)
             SELECT (extract(epoch from h.h) * 1000)::bigint AS hour_ms,
                    (SELECT count(*) FROM turns t WHERE t.started_at >= h.h AND t.started_at < h.h + interval '1 hour') AS turns,
                    t.tokens, t.input_tokens, t.cached_input_tokens, t.cache_write_input_tokens,
                    (SELECT count(*) FILTER (WHERE d.outcome = 'replied') FROM deliveries d WHERE d.recorded_at >= h.h AND d.recorded_at < h.h + interval '1 hour') AS replied,
                    (SELECT count(*) FILTER (WHERE d.outcome = 'absorbed') FROM deliveries d WHERE d.recorded_at >= h.h AND d.recorded_at < h.h + interval '1 hour') AS absorbed,
                    (SELECT count(*) FILTER (WHERE d.outcome = 'silent') FROM deliveries d WHERE d.recorded_at >= h.h AND d.recorded_at < h.h + interval '1 hour') AS silent,
                    (SELECT count(*) FILTER (WHERE d.outcome = 'failed') FROM deliveries d WHERE d.recorded_at >= h.h AND d.recorded_at < h.h + interval '1 hour') AS failed
             FROM hours h
             CROSS JOIN LATERAL (
                 SELECT COALESCE(sum(t.input_tokens + t.output_tokens), 0)::bigint AS tokens,
                        COALESCE(sum(t.input_tokens), 0)::bigint AS input_tokens,
                        COALESCE(sum(t.cached_input_tokens), 0)::bigint AS cached_input_tokens,
                        COALESCE(sum(t.cache_write_input_tokens), 0)::bigint AS cache_write_input_tokens
                 FROM turns t WHERE t.started_at >= h.h AND t.started_at < h.h + interval '1 hour') t
             ORDER BY h.h",
        )
        .bind(hours.max(1))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(HourFigures {
                    hour_ms: r.try_get("hour_ms")?,
                    turns: r.try_get("turns")?,
                    replied: r.try_get("replied")?,
                    absorbed: r.try_get("absorbed")?,
                    silent: r.try_get("silent")?,
                    failed: r.try_get("failed")?,
                    tokens: r.try_get("tokens")?,
                    input_tokens: r.try_get("input_tokens")?,
                    cached_input_tokens: r.try_get("cached_input_tokens")?,
                    cache_write_input_tokens: r.try_get("cache_write_input_tokens")?,
                })
            })
            .collect()
    }

    /// Voice rooms as their leases stand.
    pub async fn voice_room_views(&self) -> Result<Vec<RoomView>, StoreError> {
        let rows =
            sqlx::query("SELECT room, owner, epoch, (owner IS NOT NULL AND expires_at > now()) AS live FROM voice_rooms ORDER BY room")
                .fetch_all(&self.pool)
                .await?;
        rows.iter()
            .map(|r| {
                Ok(RoomView { room: r.try_get("room")?, keeper: r.try_get("owner")?, epoch: r.try_get("epoch")?, live: r.try_get("live")? })
            })
            .collect()
    }
}
