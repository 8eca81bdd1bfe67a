//! What a service process costs, read from `/proc` as the kernel counts it, and what the day
//! leaves in PostgreSQL and JetStream.

/// One reading of a process: CPU time so far, resident memory now and at its peak.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcSample {
    /// User and system CPU, in clock ticks.
    pub cpu_ticks: u64,
    pub rss_kib: u64,
    pub peak_rss_kib: u64,
}

/// Reads `/proc/<pid>/stat` (utime and stime, fields 14 and 15) and `/proc/<pid>/status`
/// (VmRSS, VmHWM); `None` once the process is gone.
pub fn sample(pid: u32) -> Option<ProcSample> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces: the fields are counted after its closing parenthesis.
    let after = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = |key: &str| {
        status.lines().find(|l| l.starts_with(key)).and_then(|l| l.split_whitespace().nth(1)).and_then(|v| v.parse().ok()).unwrap_or(0)
    };
    Some(ProcSample { cpu_ticks: ticks, rss_kib: kib("VmRSS:"), peak_rss_kib: kib("VmHWM:") })
}

/// The kernel's clock ticks a second (`getconf CLK_TCK`), 100 where it cannot be asked.
pub fn ticks_per_second() -> u64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100)
}

/// The database's size on disk, as PostgreSQL reports it.
pub async fn database_bytes(pool: &sqlx::PgPool) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar("SELECT pg_database_size(current_database())").fetch_one(pool).await?)
}

/// The bytes every stream holds together.
pub async fn jetstream_bytes(bus: &clankie_bus::Bus) -> anyhow::Result<u64> {
    let mut total = 0;
    for spec in clankie_bus::STREAMS {
        let mut stream = bus.jetstream().get_stream(spec.name).await?;
        total += stream.info().await?.state.bytes;
    }
    Ok(total)
}

/// Each table's bytes on disk (with its TOAST) and each index's, by name, so a day can say
/// where its bytes went.
pub async fn relation_bytes(pool: &sqlx::PgPool) -> anyhow::Result<std::collections::BTreeMap<String, i64>> {
    let rows: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT CASE c.relkind WHEN 'i' THEN 'index' ELSE 'table' END, c.relname::text,
                CASE c.relkind WHEN 'i' THEN pg_relation_size(c.oid) ELSE pg_table_size(c.oid) END
         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = 'public' AND c.relkind IN ('r', 'i')",
    )
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|(kind, name, bytes)| (format!("{kind} {name}"), bytes)).collect())
}

/// Each relation's growth since `before`, a message of `messages`, where it is at least 10
/// bytes a message, largest first.
pub async fn relations_grown(
    pool: &sqlx::PgPool,
    before: &std::collections::BTreeMap<String, i64>,
    messages: f64,
) -> anyhow::Result<Vec<(String, f64)>> {
    let mut grown: Vec<(String, f64)> = relation_bytes(pool)
        .await?
        .into_iter()
        .map(|(name, after)| {
            let grew = after - before.get(&name).copied().unwrap_or(0);
            (name, grew as f64 / messages)
        })
        .filter(|(_, per)| *per >= 10.0)
        .collect();
    grown.sort_by(|a, b| b.1.total_cmp(&a.1));
    Ok(grown)
}

/// How many receipts of each kind the store holds, by kind.
pub async fn receipt_kinds(pool: &sqlx::PgPool) -> anyhow::Result<Vec<(String, i64)>> {
    Ok(sqlx::query_as("SELECT kind, count(*) FROM receipts GROUP BY kind ORDER BY count(*) DESC").fetch_all(pool).await?)
}
