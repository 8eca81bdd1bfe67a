//! The whole embedded stack, scenario by scenario: loopback Discord → gateway →
//! NATS → captain → gateway → loopback Discord, with real NATS, PostgreSQL and
//! the model stand-in, durations compressed.

mod browse;
mod browser;
mod changes;
mod cluster;
mod console;
mod interactions;
mod media;
mod scenarios;
mod supervise;
mod voice;

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
