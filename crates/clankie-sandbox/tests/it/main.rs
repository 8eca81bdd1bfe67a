//! The whole embedded stack, scenario by scenario: loopback Discord → gateway →
//! NATS → captain → gateway → loopback Discord, with real NATS, PostgreSQL and
//! the model stand-in, durations compressed.

mod anthropic;
mod audience;
mod browse;
mod browser;
mod changes;
mod cluster;
mod console;
mod conversations;
mod erase;
mod ingest;
mod interactions;
mod media;
mod scenarios;
mod supervise;
mod usage;
mod voice;
mod voice_trace;

pub use clankie_sandbox::rig::{GENERAL, Rig, until};

/// Session entries whose stored body holds `words` (a person's words, before and after they
/// are forgotten).
pub async fn entries_holding(store: &clankie_store::Store, words: &str) -> i64 {
    sqlx::query_scalar::<_, i64>("SELECT count(*) FROM session_entries WHERE strpos(body::text, $1) > 0")
        .bind(words)
        .fetch_one(store.pool())
        .await
        .expect("session entries are readable")
}

/// How many files under `dir` hold `bytes`.
pub fn files_holding(dir: &std::path::Path, bytes: &[u8]) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .filter_map(Result::ok)
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => files_holding(&e.path(), bytes),
            _ => usize::from(std::fs::read(e.path()).is_ok_and(|b| b.windows(bytes.len()).any(|w| w == bytes))),
        })
        .sum()
}

/// How many events kept in any stream hold `words`.
pub async fn on_the_bus(bus: &clankie_bus::Bus, words: &str) -> usize {
    let mut n = 0;
    for family in clankie_proto::Family::ALL {
        bus.read_family(family, |_, payload| n += usize::from(payload.windows(words.len()).any(|w| w == words.as_bytes()))).await.unwrap();
    }
    n
}

/// The tables with rows that hold `words`, as text or inside a byte column (a stored protobuf
/// event), with how many rows each.
pub async fn rows_holding(store: &clankie_store::Store, words: &str) -> Vec<(String, i64)> {
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'",
    )
    .fetch_all(store.pool())
    .await
    .expect("the tables are listed");
    // A byte column reads as text in hex: `\x…`.
    let hex: String = words.bytes().map(|b| format!("{b:02x}")).collect();
    let mut holding = Vec::new();
    for t in tables {
        let sql = format!("SELECT count(*) FROM \"{t}\" x WHERE strpos(x::text, $1) > 0 OR strpos(x::text, $2) > 0");
        let n: i64 =
            sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).bind(words).bind(&hex).fetch_one(store.pool()).await.expect("a table scan");
        if n > 0 {
            holding.push((t, n));
        }
    }
    holding
}

/// Waits until the store holds an experience `lived` accepts (they are recorded off the
/// stream, after the turn's outcome).
pub async fn experience_recorded(store: &clankie_store::Store, what: &str, lived: impl Fn(&clankie_proto::v1::Experience) -> bool) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    while !store.recent_experiences(None, 50, clankie_bus::now_ms()).await.expect("experiences are readable").iter().any(&lived) {
        assert!(tokio::time::Instant::now() < deadline, "{what} was never recorded");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
