//! The `retention` part: a store aged 30 days and swept to 7, its size before and after, one
//! person forgotten on it, and the hot paths against a store that never held the old rows.

use std::time::{Duration, Instant};

use anyhow::Result;

use clankie_bench::figures::percentile;

/// `retention`, named only: `CLANKIE_BENCH_MESSAGES_PER_DAY` (10,000 unsaid) for 30 days.
pub(crate) async fn report() -> Result<()> {
    let per_day = std::env::var("CLANKIE_BENCH_MESSAGES_PER_DAY").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let aged = retention(per_day).await?;
    println!("retention_messages: {}", aged.messages);
    println!("pg_bytes_per_message: {:.0}", aged.bytes_per_message);
    println!("pg_mib_empty: {:.1}", aged.mib_empty);
    println!("pg_mib_30_days: {:.1}", aged.mib_aged);
    println!("pg_mib_swept_to_7_days: {:.1}", aged.mib_swept);
    println!("sweep_seconds: {:.1}", aged.sweep_s);
    println!("forget_one_person_ms_30_days: {:.0}", aged.forget_ms);
    println!("forget_one_person_lanes: {}", aged.forgotten.lanes);
    println!("forget_one_person_messages: {}", aged.forgotten.messages);
    println!("forget_one_person_answers_withdrawn: {}", aged.forgotten.answers);
    println!("lane_open_p50_ms_fresh_10_days: {:.3}", aged.empty.0);
    println!("lane_open_p50_ms_swept_30_days: {:.3}", aged.swept.0);
    println!("admit_p50_ms_fresh_10_days: {:.3}", aged.empty.1);
    println!("admit_p50_ms_swept_30_days: {:.3}", aged.swept.1);
    Ok(())
}

/// What the retention part measured.
struct Aged {
    messages: i64,
    bytes_per_message: f64,
    mib_empty: f64,
    mib_aged: f64,
    mib_swept: f64,
    sweep_s: f64,
    /// One person forgotten on the 30-day store: how long it took and what it touched.
    forget_ms: f64,
    forgotten: clankie_self::rewrite::Forgotten,
    empty: (f64, f64),
    swept: (f64, f64),
}

/// A store of 30 days at `per_day` messages a day over 200 lanes, swept to 7 days: its size
/// before and after, and the hot paths against a store that only ever held the last 10 days
/// (the sessions the swept store keeps).
async fn retention(per_day: i64) -> Result<Aged> {
    let size = |pool: sqlx::PgPool| async move {
        let bytes: i64 = sqlx::query_scalar("SELECT pg_database_size(current_database())").fetch_one(&pool).await?;
        anyhow::Ok(bytes as f64 / (1 << 20) as f64)
    };
    let (empty_db, aged_db) = (clankie_testkit::TestDb::create().await, clankie_testkit::TestDb::create().await);
    let empty = clankie_store::Store::connect(empty_db.url()).await?;
    empty.migrate().await?;
    let store = clankie_store::Store::connect(aged_db.url()).await?;
    store.migrate().await?;
    let mib_empty = size(store.pool().clone()).await?;
    // The baseline holds what the swept store still needs (each lane's session since its
    // compaction, 10 days ago) and nothing older: the difference is the age alone.
    clankie_testkit::fill_aged_store(empty.pool(), 10, per_day, 200).await;
    let empty_paths = hot_paths(&empty, 500, "fresh").await?;
    eprintln!("retention: filling 30 days of {per_day} messages a day over 200 lanes");
    clankie_testkit::fill_aged_store(store.pool(), 30, per_day, 200).await;
    let mib_aged = size(store.pool().clone()).await?;
    let started = Instant::now();
    let forgotten = clankie_self::rewrite::forget_user(&store, 42, Duration::from_secs(5), |_| {}).await?;
    let forget_ms = started.elapsed().as_secs_f64() * 1e3;
    let week = Duration::from_secs(7 * 86_400);
    let started = Instant::now();
    store.sweep(&clankie_store::Retention { receipts: week, records: week, replaced_entries: week, batch: 5_000 }).await?;
    store.sweep_voice_ring(&clankie_store::RingRetention { age: week, lines_per_room: 2_000, batch: 5_000 }).await?;
    let sweep_s = started.elapsed().as_secs_f64();
    sqlx::query("VACUUM").execute(store.pool()).await?;
    let mib_swept = size(store.pool().clone()).await?;
    let swept_paths = hot_paths(&store, 500, "aged").await?;
    let messages = 30 * per_day;
    Ok(Aged {
        messages,
        bytes_per_message: (mib_aged - mib_empty) * (1 << 20) as f64 / messages as f64,
        mib_empty,
        mib_aged,
        mib_swept,
        sweep_s,
        forget_ms,
        forgotten,
        empty: empty_paths,
        swept: swept_paths,
    })
}

/// Median lane open (its open turns and its session since the compaction) and admission, in
/// ms, over `n` of each on `store`.
async fn hot_paths(store: &clankie_store::Store, n: usize, tag: &str) -> Result<(f64, f64)> {
    let (mut opens, mut admits) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..n {
        let lane = clankie_proto::LaneKey::Room { guild: 100, channel: 1 + (i as u64 * 7) % 200 };
        let started = Instant::now();
        store.abandoned_epochs(&lane).await?;
        store.entries_since_compaction(&format!("rooms/{lane}")).await?;
        opens.push(started.elapsed().as_secs_f64() * 1000.0);
        let started = Instant::now();
        store
            .admit_within_flood(&format!("bench-{tag}-{i}"), &lane, "mentioned", 7 + i as u64, 20, i as u64, clankie_bus::now_ms())
            .await?;
        admits.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    opens.sort_by(f64::total_cmp);
    admits.sort_by(f64::total_cmp);
    Ok((percentile(&opens, 0.5), percentile(&admits, 0.5)))
}
