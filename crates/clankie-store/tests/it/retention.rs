//! An aged store, swept: 30 simulated days of a busy community written straight into the
//! tables, then one sweep with a 7-day retention.

use std::time::Duration;

use clankie_store::{Retention, RingRetention};

use super::store;

/// Messages a simulated day: 1,000 in CI, `CLANKIE_RETENTION_MESSAGES_PER_DAY` (10,000 in the
/// long mode) to change.
fn per_day() -> i64 {
    std::env::var("CLANKIE_RETENTION_MESSAGES_PER_DAY").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000)
}

const DAYS: i64 = 30;
const LANES: i64 = 200;

const TABLES: [(&str, &str); 7] = [
    ("receipts", "at"),
    ("deliveries", "recorded_at"),
    ("admissions", "admitted_at"),
    ("turns", "started_at"),
    ("outbox", "created_at"),
    ("session_entries", "created_at"),
    ("voice_ring", "to_timestamp(at_ms / 1000.0)"),
];

async fn rows(pool: &sqlx::PgPool, table: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table}"))).fetch_one(pool).await.unwrap()
}

#[tokio::test]
async fn retention_30_days_swept_with_a_7_day_retention_leave_the_last_7_days_and_every_lane_its_session() {
    let (store, _db) = store().await;
    let pool = store.pool();
    let per_day = per_day();
    clankie_testkit::fill_aged_store(pool, DAYS, per_day, LANES).await;
    let sample = "rooms/room:100:17";
    let session_before = store.entries_since_compaction(sample).await.unwrap();
    let mut before = Vec::new();
    for (table, _) in TABLES {
        before.push(rows(pool, table).await);
    }
    let bytes_before: i64 = sqlx::query_scalar("SELECT pg_database_size(current_database())").fetch_one(pool).await.unwrap();

    let week = Duration::from_secs(7 * 86_400);
    let started = std::time::Instant::now();
    let swept = store.sweep(&Retention { receipts: week, records: week, replaced_entries: week, batch: 5_000 }).await.unwrap();
    let ring = store.sweep_voice_ring(&RingRetention { age: week, lines_per_room: 2_000, batch: 5_000 }).await.unwrap();
    let took = started.elapsed();
    sqlx::query("VACUUM").execute(pool).await.unwrap();
    let bytes_after: i64 = sqlx::query_scalar("SELECT pg_database_size(current_database())").fetch_one(pool).await.unwrap();

    println!(
        "retention: {DAYS} days of {per_day} messages a day over {LANES} lanes swept to 7 days in {:.1} s ({} rows, ring {ring}); database {} MiB before, {} MiB after",
        took.as_secs_f64(),
        swept.total(),
        bytes_before / (1 << 20),
        bytes_after / (1 << 20)
    );
    for ((table, at), before) in TABLES.iter().zip(&before) {
        let after = rows(pool, table).await;
        let oldest_days: Option<f64> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT (extract(epoch from now() - min({at})) / 86400)::double precision FROM {table}"
        )))
        .fetch_one(pool)
        .await
        .unwrap();
        println!("retention: {table}: {before} rows before, {after} after; the oldest {oldest_days:.2?} days old");
        if *table == "session_entries" {
            // What a compaction kept stays however old; what it replaced goes once past the retention.
            assert!(after < *before, "nothing a compaction replaced was swept");
            continue;
        }
        if *table == "voice_ring" {
            assert!(after <= 2_000, "the ring holds {after} lines, past its bound");
        }
        assert!(oldest_days.unwrap_or(0.0) <= 7.01, "{table} still holds rows {oldest_days:?} days old");
        assert!(after > 0, "{table} lost its last 7 days");
    }
    assert_eq!(store.entries_since_compaction(sample).await.unwrap(), session_before, "a lane's session lost what it needs");
    let gone: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM session_entries WHERE kind <> 'compaction' AND created_at < now() - interval '10 days 1 minute'",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(gone, 0, "entries the compactions replaced are still stored");
}

/// The hot paths stay index lookups however old the store: a lane opening (its open turns, its
/// session since the compaction), an admission, the relay's claim.
#[tokio::test]
async fn retention_the_hot_paths_use_indexes_on_an_aged_store() {
    let (store, _db) = store().await;
    let pool = store.pool();
    clankie_testkit::fill_aged_store(pool, DAYS, per_day(), LANES).await;
    let plans = [
        (
            "the open turns",
            "SELECT t.epoch FROM turns t JOIN lanes l ON l.lane = t.lane WHERE t.lane = 'room:100:17' AND t.ended_at IS NULL AND t.epoch < l.epoch",
        ),
        ("an admission", "SELECT reason FROM admissions WHERE delivery_id = 'm12345'"),
        ("a delivery's outcome", "SELECT outcome FROM deliveries WHERE delivery_id = 'm12345'"),
        (
            "the session since its compaction",
            "SELECT seq FROM session_entries WHERE tree = 'rooms/room:100:17' AND kind = 'compaction' ORDER BY seq DESC LIMIT 1",
        ),
        (
            "the relay's due rows",
            "SELECT id FROM outbox WHERE sent_at IS NULL AND gave_up_at IS NULL AND created_at < now() - interval '5 seconds' ORDER BY created_at LIMIT 100",
        ),
        ("a trail", "SELECT kind FROM receipts WHERE delivery_id = 'm12345' ORDER BY at"),
    ];
    for (what, sql) in plans {
        let plan: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("EXPLAIN {sql}"))).fetch_all(pool).await.unwrap();
        let plan = plan.join("\n");
        println!("retention: {what}:\n{plan}");
        for table in ["turns", "admissions", "deliveries", "session_entries", "outbox", "receipts"] {
            assert!(!plan.contains(&format!("Seq Scan on {table}")), "{what} scans all of {table}:\n{plan}");
        }
    }
}
