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
