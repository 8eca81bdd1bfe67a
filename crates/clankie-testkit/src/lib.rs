//! Fixtures for tests that need real infrastructure.
//!
//! Each test gets its own `nats-server` process ([`TestNats`]) and its own
//! database inside the local PostgreSQL cluster ([`TestDb`]), so tests run in
//! parallel without seeing each other's streams or rows. Nothing is mocked.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use clankie_settings::Settings;
use sqlx::Connection;

pub use clankie_stack::EphemeralNats as TestNats;
pub use clankie_stack::EphemeralNatsCluster as TestNatsCluster;
pub use clankie_stack::EphemeralPostgres as TestPostgres;
pub use clankie_stack::NATS_SERVER_MIN;

pub mod pages;

/// The variable naming a PostgreSQL URL with rights to create databases; the local stack's URL if unset.
pub const TEST_DATABASE_URL: &str = "CLANKIE_TEST_DATABASE_URL";

/// A database created for one test and dropped (forcibly) when the value is dropped.
pub struct TestDb {
    admin_url: String,
    name: String,
    url: String,
}

fn admin_url() -> String {
    std::env::var(TEST_DATABASE_URL).ok().filter(|v| !v.is_empty()).unwrap_or_else(|| {
        Settings::from_env().map(|s| s.database_url).unwrap_or_else(|_| "postgres://clankie@127.0.0.1:55432/clankie".into())
    })
}

fn with_database(url: &str, db: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let root = match base[scheme_end..].find('/') {
        Some(i) => &base[..scheme_end + i],
        None => base,
    };
    match query {
        Some(q) => format!("{root}/{db}?{q}"),
        None => format!("{root}/{db}"),
    }
}

impl TestDb {
    /// Creates an empty database. Panics with a hint when PostgreSQL is not reachable,
    /// because a test without its database cannot say anything useful.
    pub async fn create() -> TestDb {
        TestDb::create_on(&admin_url()).await
    }

    /// Creates an empty database on the server at `admin_url` (a [`TestPostgres`] of the test's own).
    pub async fn create_on(admin_url: &str) -> TestDb {
        static N: AtomicU32 = AtomicU32::new(0);
        let admin_url = admin_url.to_owned();
        let name = format!("clankie_t_{}_{}_{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed), nanos());
        let mut conn = sqlx::PgConnection::connect(&admin_url).await.unwrap_or_else(|e| {
            panic!("PostgreSQL is not reachable at the test database URL ({e}); run `./deploy/local/test`, which starts it, or set {TEST_DATABASE_URL}")
        });
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("CREATE DATABASE {name}: {e}"));
        let url = with_database(&admin_url, &name);
        TestDb { admin_url, name, url }
    }

    /// The URL of this test's database.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A pool on this test's database.
    pub async fn pool(&self) -> sqlx::PgPool {
        sqlx::postgres::PgPoolOptions::new().max_connections(8).connect(&self.url).await.expect("connect to test database")
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let (admin, name) = (self.admin_url.clone(), self.name.clone());
        // Dropping runs inside the test's runtime; a fresh thread and runtime avoid blocking it.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
            rt.block_on(async move {
                let mut conn = sqlx::PgConnection::connect(&admin).await.ok()?;
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))).execute(&mut conn).await.ok()
            })
        })
        .join();
    }
}

fn nanos() -> u32 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0)
}

/// A fresh, empty directory for one test's state; removed when dropped.
pub struct TestDir(PathBuf);

impl TestDir {
    /// Creates the directory.
    pub fn new() -> TestDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir =
            std::env::temp_dir().join(format!("clankie-test-{}-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed), nanos()));
        std::fs::create_dir_all(&dir).expect("create test dir");
        TestDir(dir)
    }

    /// Its path.
    pub fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Default for TestDir {
    fn default() -> Self {
        TestDir::new()
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Waits, polling a condition (bounded by `timeout`), until `check` holds; panics naming `what` otherwise.
pub async fn until(what: &str, timeout: std::time::Duration, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + timeout;
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Every event of one family seen on the bus, in arrival order.
#[derive(Clone)]
pub struct Recorder<E>(std::sync::Arc<std::sync::Mutex<Vec<E>>>);

impl<E: Clone> Recorder<E> {
    /// A copy of everything recorded so far.
    pub fn all(&self) -> Vec<E> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Starts recording every event of `family` (a core subscription: it sees publishes as they happen).
pub async fn record<E: clankie_proto::Event>(bus: &clankie_bus::Bus, family: clankie_proto::Family) -> Recorder<E> {
    use futures::StreamExt;
    let recorder = Recorder(std::sync::Arc::new(std::sync::Mutex::new(Vec::new())));
    let mut sub = bus.client().subscribe(family.wildcard()).await.expect("subscribe");
    let sink = recorder.clone();
    tokio::spawn(async move {
        while let Some(msg) = sub.next().await {
            if let Ok(e) = E::decode(msg.payload) {
                sink.0.lock().unwrap_or_else(|p| p.into_inner()).push(e);
            }
        }
    });
    bus.barrier().await.expect("the subscription taken");
    recorder
}

/// Settings for one test: its own NATS, its own database, its own state directory.
pub fn settings(nats: &TestNats, db: &TestDb, state: &TestDir) -> Settings {
    Settings::for_endpoints(&nats.url(), db.url(), state.path()).expect("test settings are valid")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_is_swapped_in_the_url() {
        assert_eq!(with_database("postgres://u@h:1/clankie", "t1"), "postgres://u@h:1/t1");
        assert_eq!(with_database("postgres://u@h:1", "t1"), "postgres://u@h:1/t1");
        assert_eq!(with_database("postgres://u:p@h:1/x?sslmode=disable", "t1"), "postgres://u:p@h:1/t1?sslmode=disable");
    }
}

/// Fills a migrated store's tables as `days` days of `per_day` messages over `lanes` lanes would: each message
/// an admission (from one of a thousand people, author ids 1 to 1000), a delivery and two receipts; every third one a turn with its sent outbox row
/// and two session entries; each lane compacted 10 days ago, keeping what followed; a voice
/// room's ring of a tenth as many lines. For the retention tests and the bench.
pub async fn fill_aged_store(pool: &sqlx::PgPool, days: i64, per_day: i64, lanes: i64) {
    let messages = days * per_day;
    let statements = [
        "INSERT INTO lanes (lane, epoch) SELECT 'room:100:' || l, 1 FROM generate_series(1, $2) l",
        // Message n of the simulation is (n / per_day) days old, spread over that day.
        "INSERT INTO admissions (delivery_id, lane, reason, author_id, admitted_at)
         SELECT 'm' || n, 'room:100:' || (1 + n % $2), 'mentioned', 1 + n % 1000,
                now() - make_interval(secs => (n::double precision / $1) * 86400) FROM generate_series(0, $3 - 1) n",
        "INSERT INTO deliveries (delivery_id, lane, turn_id, outcome, recorded_at)
         SELECT 'm' || n, 'room:100:' || (1 + n % $2), 't' || (n / 3), CASE WHEN n % 3 = 0 THEN 'replied' ELSE 'absorbed' END,
                now() - make_interval(secs => (n::double precision / $1) * 86400) FROM generate_series(0, $3 - 1) n",
        "INSERT INTO receipts (dedup_key, kind, delivery_id, service, lane, at)
         SELECT 'receipts:' || n, CASE WHEN n % 2 = 0 THEN 'gateway.ingress' ELSE 'captain.admitted' END, 'm' || (n / 2), 'test',
                'room:100:' || (1 + (n / 2) % $2), now() - make_interval(secs => ((n / 2)::double precision / $1) * 86400)
         FROM generate_series(0, 2 * $3 - 1) n",
        "INSERT INTO turns (turn_id, lane, epoch, mode, owner_delivery_id, started_at, ended_at, outcome, input_tokens)
         SELECT 't' || (n / 3), 'room:100:' || (1 + n % $2), 1, 'durable', 'm' || n,
                now() - make_interval(secs => (n::double precision / $1) * 86400),
                now() - make_interval(secs => (n::double precision / $1) * 86400) + interval '2 seconds', 'replied', 1500
         FROM generate_series(0, $3 - 1, 3) n",
        "INSERT INTO outbox (id, lane, turn_id, subject, payload, created_at, sent_at)
         SELECT 'reply:t' || (n / 3), 'room:100:' || (1 + n % $2), 't' || (n / 3), 'clankie.v1.body.send.200', NULL,
                now() - make_interval(secs => (n::double precision / $1) * 86400),
                now() - make_interval(secs => (n::double precision / $1) * 86400) + interval '1 second'
         FROM generate_series(0, $3 - 1, 3) n",
        "INSERT INTO session_entries (tree, lane, id, kind, body, epoch, created_at)
         SELECT 'rooms/room:100:' || (1 + n % $2), 'room:100:' || (1 + n % $2), 'e' || n || '-' || k,
                CASE WHEN k = 0 THEN 'user' ELSE 'assistant' END,
                CASE WHEN k = 0
                    THEN jsonb_build_object('type', 'user', 'author', 'p' || (1 + n % 1000), 'delivery_id', 'm' || n,
                        'text', '<message from=\"p' || (1 + n % 1000) || '\" author_id=\"' || (1 + n % 1000) || '\">a line of the room ' || n || '</message>')
                    ELSE jsonb_build_object('type', 'assistant', 'text', 'a line of the room ' || n, 'tool_calls', '[]'::jsonb,
                        'stop_reason', 'stop', 'usage', jsonb_build_object('input_tokens', 1500, 'output_tokens', 40), 'provider_error', NULL)
                END, 1,
                now() - make_interval(secs => (n::double precision / $1) * 86400)
         FROM generate_series($3 - 1 - ($3 - 1) % 3, 0, -3) n, generate_series(0, 1) k ORDER BY n DESC, k",
        // Each lane's compaction, written 10 days ago, keeps its first entry from then on.
        "INSERT INTO session_entries (tree, lane, id, kind, body, epoch, created_at)
         SELECT l.tree, l.lane, 'compaction-' || l.lane, 'compaction',
                jsonb_build_object('type', 'compaction', 'summary', 'what came before', 'first_kept_id',
                  (SELECT id FROM session_entries e WHERE e.tree = l.tree AND e.created_at >= now() - interval '10 days' ORDER BY seq LIMIT 1)),
                1, now() - interval '10 days'
         FROM (SELECT DISTINCT tree, lane FROM session_entries) l",
        "INSERT INTO voice_ring (room, delivery_id, source, author_id, author_name, is_him, text, at_ms)
         SELECT '100:300', 'v' || n, 1, '7', 'ada', false, 'a line said aloud',
                (extract(epoch from now()) * 1000)::bigint - (n::double precision / ($1 / 10) * 86400000)::bigint
         FROM generate_series(0, $3 / 10 - 1) n",
    ];
    for sql in statements {
        // Every statement sees the three numbers as columns of `p`, however many it uses.
        let sql = format!(
            "WITH p AS (SELECT $1::double precision AS per_day, $2::bigint AS lanes, $3::bigint AS messages) {}",
            sql.replace("$1", "(SELECT per_day FROM p)").replace("$2", "(SELECT lanes FROM p)").replace("$3", "(SELECT messages FROM p)")
        );
        sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
            .bind(per_day as f64)
            .bind(lanes)
            .bind(messages)
            .execute(pool)
            .await
            .unwrap_or_else(|e| panic!("{e}: {sql}"));
    }
    sqlx::query("ANALYZE").execute(pool).await.unwrap();
}
