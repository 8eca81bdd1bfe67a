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

/// What the sweep must keep however old: an open turn of its lane's current epoch, and an
/// unsent outbox row; both seeded 20 days old, each with the table's guard expression.
const GUARDED: [(&str, &str); 2] = [("turns", "turn_id = 'guard-open-turn'"), ("outbox", "id = 'guard-unsent-reply'")];

fn guarded(table: &str) -> &'static str {
    GUARDED.iter().find(|(t, _)| *t == table).map_or("false", |(_, g)| g)
}

/// Rows of `table` at or after `cutoff` (seconds since the epoch).
async fn rows_since(pool: &sqlx::PgPool, table: &str, at: &str, cutoff: f64) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table} WHERE {at} >= to_timestamp($1)")))
        .bind(cutoff)
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn retention_30_days_swept_with_a_7_day_retention_leave_the_last_7_days_and_every_lane_its_session() {
    let (store, _db) = store().await;
    let pool = store.pool();
    let per_day = per_day();
    clankie_testkit::fill_aged_store(pool, DAYS, per_day, LANES).await;
    // The guarded rows, far older than the retention: an open turn of its lane's current epoch
    // (the lanes are at epoch 1), and a reply the relay has not sent yet.
    sqlx::query(
        "INSERT INTO turns (turn_id, lane, epoch, mode, owner_delivery_id, started_at)
         VALUES ('guard-open-turn', 'room:100:1', 1, 'durable', 'guard-m', now() - interval '20 days')",
    )
    .execute(pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO outbox (id, lane, turn_id, subject, payload, created_at)
         VALUES ('guard-unsent-reply', 'room:100:1', 'guard-open-turn', 'clankie.v1.body.send.200', NULL, now() - interval '20 days')",
    )
    .execute(pool)
    .await
    .unwrap();
    let lanes: Vec<String> = (1..=LANES).map(|l| format!("rooms/room:100:{l}")).collect();
    let mut sessions_before = Vec::new();
    for tree in &lanes {
        sessions_before.push(store.entries_since_compaction(tree).await.unwrap());
    }
    assert!(sessions_before.iter().all(|s| !s.is_empty()), "a lane had no session to keep");
    // Everything newer than the retention, counted against one fixed instant a few minutes
    // inside it (the sweep runs later, so its own boundary lies before this one).
    let cutoff: f64 = sqlx::query_scalar("SELECT extract(epoch from now() - interval '7 days' + interval '5 minutes')::double precision")
        .fetch_one(pool)
        .await
        .unwrap();
    let mut before = Vec::new();
    let mut recent_before = Vec::new();
    for (table, at) in TABLES {
        before.push(rows(pool, table).await);
        recent_before.push(rows_since(pool, table, at, cutoff).await);
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
    for (((table, at), before), recent_before) in TABLES.iter().zip(&before).zip(&recent_before) {
        let after = rows(pool, table).await;
        let recent_after = rows_since(pool, table, at, cutoff).await;
        let oldest_days: Option<f64> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT (extract(epoch from now() - min({at})) / 86400)::double precision FROM {table} WHERE NOT ({})",
            guarded(table)
        )))
        .fetch_one(pool)
        .await
        .unwrap();
        println!(
            "retention: {table}: {before} rows before, {after} after; {recent_before} of the last 7 days before, {recent_after} after; the oldest unguarded {oldest_days:.2?} days old"
        );
        assert!(*recent_before > 0, "{table} had nothing of the last 7 days to keep");
        if *table == "voice_ring" {
            // The ring keeps its newest 2,000 lines a room however young the rest.
            assert!(after <= 2_000, "the ring holds {after} lines, past its bound");
            assert_eq!(recent_after, (*recent_before).min(2_000), "the ring lost lines of the last 7 days within its bound");
        } else {
            assert_eq!(recent_after, *recent_before, "{table} lost rows of the last 7 days");
        }
        if *table == "session_entries" {
            // What a compaction kept stays however old; what it replaced goes once past the retention.
            assert!(after < *before, "nothing a compaction replaced was swept");
            continue;
        }
        assert!(oldest_days.unwrap_or(0.0) <= 7.01, "{table} still holds rows {oldest_days:?} days old");
    }
    for (table, guard) in GUARDED {
        let kept: i64 =
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table} WHERE {guard}"))).fetch_one(pool).await.unwrap();
        assert_eq!(kept, 1, "the sweep took the guarded row of {table} ({guard})");
    }
    for (tree, before) in lanes.iter().zip(&sessions_before) {
        assert_eq!(&store.entries_since_compaction(tree).await.unwrap(), before, "{tree}'s session lost what it needs");
    }
    let gone: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM session_entries WHERE kind <> 'compaction' AND created_at < now() - interval '10 days 1 minute'",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(gone, 0, "entries the compactions replaced are still stored");
}

/// The plans PostgreSQL's `auto_explain` sends back as notices, which sqlx hands to `tracing`
/// under the `sqlx::postgres::notice` target: the plans of the statements the store ran.
struct Plans(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

struct Message<'a>(&'a mut String);

impl tracing::field::Visit for Message<'_> {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "message" {
            self.0.push_str(value);
        }
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0.push_str(&format!("{value:?}"));
        }
    }
}

impl tracing::Subscriber for Plans {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        metadata.target() == "sqlx::postgres::notice"
    }

    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }

    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}

    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}

    fn event(&self, event: &tracing::Event<'_>) {
        let mut text = String::new();
        event.record(&mut Message(&mut text));
        self.0.lock().unwrap().push(text);
    }

    fn enter(&self, _: &tracing::span::Id) {}

    fn exit(&self, _: &tracing::span::Id) {}
}

/// One of the store's calls, to run while the plans are caught.
type Call<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + 'a>>;

/// The hot paths stay index lookups however old the store: a lane opening (its open turns, its
/// session since the compaction), an admission, the relay's claim, and a forget's lookups of
/// one person's lanes and entries (by author id, not a scan of every entry's text). The plans are those of the
/// store's own statements, as it runs them, caught by `auto_explain`.
#[tokio::test]
async fn retention_the_hot_paths_use_indexes_on_an_aged_store() {
    let (store, db) = store().await;
    let pool = store.pool();
    clankie_testkit::fill_aged_store(pool, DAYS, per_day(), LANES).await;
    // Every new session of this database explains each statement it runs to its client.
    let name: String = sqlx::query_scalar("SELECT current_database()").fetch_one(pool).await.unwrap();
    for setting in ["session_preload_libraries = 'auto_explain'", "auto_explain.log_min_duration = 0", "auto_explain.log_level = 'notice'"]
    {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("ALTER DATABASE {name} SET {setting}"))).execute(pool).await.unwrap();
    }
    let explained = clankie_store::Store::connect(db.url()).await.unwrap();
    let plans = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let _subscriber = tracing::subscriber::set_default(Plans(plans.clone()));
    let lane: clankie_proto::LaneKey = "room:100:17".parse().unwrap();
    let relay = "retention-test";
    let paths: [(&str, &str, Call<'_>); 8] = [
        ("the open turns", "turns", Box::pin(async { explained.abandoned_epochs(&lane).await.map(drop).unwrap() })),
        ("an admission", "admissions", Box::pin(async { explained.admission("m12345").await.map(drop).unwrap() })),
        ("a delivery's outcome", "deliveries", Box::pin(async { explained.outcome("m12345").await.map(drop).unwrap() })),
        (
            "the session since its compaction",
            "session_entries",
            Box::pin(async { explained.entries_since_compaction("rooms/room:100:17").await.map(drop).unwrap() }),
        ),
        (
            "the relay's due rows",
            "outbox",
            Box::pin(async { explained.claim_unsent(Duration::from_secs(5), 100, relay).await.map(drop).unwrap() }),
        ),
        ("a trail", "receipts", Box::pin(async { explained.receipts_for_delivery("m12345").await.map(drop).unwrap() })),
        ("a person's lanes, to forget them", "admissions", Box::pin(async { explained.lanes_of_author(42).await.map(drop).unwrap() })),
        (
            "a person's entries in a lane, to forget them",
            "session_entries",
            Box::pin(async { explained.entries_attributed_to("room:100:17", 42).await.map(drop).unwrap() }),
        ),
    ];
    for (what, reads, call) in paths {
        plans.lock().unwrap().clear();
        call.await;
        let caught = plans.lock().unwrap().join("\n---\n");
        println!("retention: {what}:\n{caught}");
        assert!(
            caught.contains("Query Text:") && caught.contains(reads),
            "no plan of the store's statement reading {reads} was caught for {what}"
        );
        for table in ["turns", "admissions", "deliveries", "session_entries", "outbox", "receipts"] {
            assert!(!caught.contains(&format!("Seq Scan on {table}")), "{what} scans all of {table}:\n{caught}");
        }
    }
}

/// A one-shot turn's tree (`turns/<lane>~<delivery>`) is read by its own turn only; past the
/// retention it goes whole, while a young one and the lane's durable tree stay.
#[tokio::test]
async fn retention_one_shot_turn_trees_are_swept_by_age() {
    let (store, _db) = store().await;
    let pool = store.pool();
    sqlx::query("INSERT INTO lanes (lane, epoch) VALUES ('room:1:2', 1)").execute(pool).await.unwrap();
    for (tree, id, age_days) in
        [("turns/room:1:2~m1", "a", 20), ("turns/room:1:2~m1", "b", 20), ("turns/room:1:2~m2", "a", 1), ("rooms/room:1:2", "a", 20)]
    {
        sqlx::query(
            "INSERT INTO session_entries (tree, lane, id, kind, body, epoch, created_at)
             VALUES ($1, 'room:1:2', $2, 'message', '{}'::jsonb, 1, now() - make_interval(days => $3))",
        )
        .bind(tree)
        .bind(id)
        .bind(age_days)
        .execute(pool)
        .await
        .unwrap();
    }
    let week = Duration::from_secs(7 * 86_400);
    let swept = store.sweep(&Retention { receipts: week, records: week, replaced_entries: week, batch: 1 }).await.unwrap();
    let left: Vec<(String, String)> =
        sqlx::query_as("SELECT tree, id FROM session_entries ORDER BY tree, id").fetch_all(pool).await.unwrap();
    assert_eq!(left, vec![("rooms/room:1:2".to_owned(), "a".to_owned()), ("turns/room:1:2~m2".to_owned(), "a".to_owned())], "{swept:?}");
    assert_eq!(swept.one_shot_entries, 2);
}
