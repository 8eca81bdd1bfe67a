//! `day`: a day of a large community, compressed, with every service its own process (the
//! gateway over sixteen shards of the loopback Discord, two captains, media, the voice floor,
//! the console), a real nats-server and PostgreSQL, and the model stand-in answering after a
//! think time. The lanes the store holds as the day begins are its scale (1k, 10k, 100k); the
//! message rate is the same at each. It reports, per service, CPU-seconds per 1,000 messages
//! from `/proc` and peak and end RSS; for the whole, PostgreSQL and JetStream bytes per
//! message, messages a second sustained, mention-to-first-word p50 and p99, and every message
//! without its outcome, which must be none.

mod measure;
pub mod plot;
pub mod population;
mod report;

pub use report::{Report, ServiceFigures};

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clankie_discord_loopback::Loopback;
use clankie_model_standin::{Reply, Script, StandIn};
use clankie_testkit::{TestDb, TestDir, TestNats};
use tokio::process::{Child, Command};

use measure::{ProcSample, sample};
use population::{Places, Random, Step};

/// The services a day runs, each a process of its own.
pub const SERVICES: [&str; 6] = ["gateway", "captain-a", "captain-b", "media", "voice-floor", "console"];

/// How big a day, and how fast.
#[derive(Debug, Clone)]
pub struct DayConfig {
    /// Lanes the store holds as the day begins, and the places messages go.
    pub lanes: usize,
    pub messages: usize,
    pub per_second: f64,
    /// How long the model stand-in thinks before its first word.
    pub think_ms: u64,
    pub seed: u64,
    /// How long the last message may wait for its outcome once writing stops.
    pub drain: Duration,
}

impl DayConfig {
    /// CI's day: 1,000 lanes, 2,000 messages at 40 a second.
    pub fn short() -> DayConfig {
        DayConfig { lanes: 1_000, messages: 2_000, per_second: 40.0, think_ms: 300, seed: 7, drain: Duration::from_secs(120) }
    }
}

/// A message sent, for its outcome and its answer's timing.
struct Sent {
    id: u64,
    channel: u64,
    at_ms: i64,
    to_him: bool,
    deleted: bool,
}

/// Scripts the model as one in a busy room: it answers what is asked of it, and stays silent
/// when a live exchange admits chatter not meant for it (silent lets the exchange age out).
fn script_model(standin: &StandIn, config: &DayConfig) {
    let thinking = |text: &str| Reply::Text {
        text: text.into(),
        chunk_chars: 64,
        chunk_delay_ms: 0,
        first_delay_ms: config.think_ms,
        tail_delay_ms: 0,
    };
    for _ in 0..config.messages / 5 {
        standin.script(Script::when_last(population::HIS_NAME, thinking("Sure, noted.")));
    }
    for _ in 0..config.messages / 2 {
        standin.script(Script::any(thinking(clankie_agent::silence::SILENT_TOKEN)));
    }
}

/// Runs one day against the `clankie` binary at `clankie`.
pub async fn run(config: &DayConfig, clankie: &Path) -> Result<Report> {
    let (nats, db, dir) = (TestNats::start()?, TestDb::create().await, TestDir::new());
    let settings = clankie_settings::Settings::for_endpoints(&nats.url(), db.url(), dir.path())?;
    let store = clankie_store::Store::connect(db.url()).await?;
    store.migrate().await?;
    let bus = clankie_bus::Bus::connect(&settings, "bench").await?;
    bus.ensure_streams().await?;
    let places = Places::for_lanes(config.lanes);
    population::seed_lanes(store.pool(), &places).await.context("seeding the lanes")?;
    let discord = Loopback::serve("127.0.0.1:0".parse()?, places.loopback()).await?;
    let standin = StandIn::start().await?;
    script_model(&standin, config);
    let env = Env { nats: nats.url(), db: db.url().to_owned(), dir: dir.path().to_owned(), discord: &discord, model: standin.base_url() };
    let mut children: Vec<(&'static str, Child)> = Vec::new();
    for name in SERVICES {
        children.push((name, env.spawn(clankie, name)?));
    }
    let deadline = Instant::now() + Duration::from_secs(180);
    while discord.attached_shards().len() < population::SHARDS as usize {
        if Instant::now() >= deadline {
            anyhow::bail!("only {:?} of 16 shards attached in 180 s; the services said:\n{}", discord.attached_shards(), logs(dir.path()));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let pids: Vec<(&'static str, u32)> = children.iter().filter_map(|(n, c)| c.id().map(|p| (*n, p))).collect();
    let before: Vec<ProcSample> = pids.iter().map(|(_, p)| sample(*p).unwrap_or_default()).collect();
    let (pg_before, js_before) = (measure::database_bytes(store.pool()).await?, measure::jetstream_bytes(&bus).await?);

    // Halfway through, the store is vacuumed as autovacuum would, so space that rows updated in
    // the first half left is reused by the second; what it holds then (its tables' free space
    // maps made) is the start of steady state, and the messages sent by then are counted.
    let (half_tx, half_rx) = tokio::sync::oneshot::channel::<()>();
    let counted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (pool, sent_by_then) = (store.pool().clone(), counted.clone());
    let midpoint = tokio::spawn(async move {
        half_rx.await?;
        sqlx::query("VACUUM").execute(&pool).await?;
        let bytes = (measure::database_bytes(&pool).await?, measure::relation_bytes(&pool).await?);
        anyhow::Ok((sent_by_then.load(std::sync::atomic::Ordering::SeqCst), bytes.0, bytes.1))
    });
    let started = Instant::now();
    let sent = drive(config, &places, &discord, &standin, (half_tx, &counted)).await;
    let without = settle(&store, &sent, config.drain).await?;
    let took = started.elapsed();

    let after: Vec<ProcSample> = pids.iter().map(|(_, p)| sample(*p).unwrap_or_default()).collect();
    let week = Duration::from_secs(7 * 24 * 3600);
    store.sweep(&clankie_store::Retention { receipts: week, records: week, replaced_entries: week, batch: 5_000 }).await?;
    let pg_after = measure::database_bytes(store.pool()).await?;
    let (sent_at_half, pg_half, relations_half) = midpoint.await??;
    let second_half = sent.len().saturating_sub(sent_at_half).max(1) as f64;
    let pg_by_relation = measure::relations_grown(store.pool(), &relations_half, second_half).await?;
    let receipts_by_kind =
        measure::receipt_kinds(store.pool()).await?.into_iter().map(|(kind, n)| (kind, n as f64 / sent.len() as f64)).collect();
    let js_after = measure::jetstream_bytes(&bus).await?;
    let mut first_words = first_words(&discord, &sent);
    first_words.sort_by(f64::total_cmp);
    let hz = measure::ticks_per_second() as f64;
    let thousands = config.messages as f64 / 1000.0;
    let services = pids
        .iter()
        .zip(before.iter().zip(&after))
        .map(|((name, _), (b, a))| ServiceFigures {
            name,
            cpu_s_per_1000: a.cpu_ticks.saturating_sub(b.cpu_ticks) as f64 / hz / thousands,
            peak_rss_mib: a.peak_rss_kib as f64 / 1024.0,
            end_rss_mib: a.rss_kib as f64 / 1024.0,
        })
        .collect();
    let to_him: Vec<&Sent> = sent.iter().filter(|s| s.to_him && !s.deleted).collect();
    drop(children);
    Ok(Report {
        lanes: config.lanes,
        messages: sent.len(),
        services,
        cpu_resolution_s_per_1000: 2.0 / hz / thousands,
        pg_bytes_per_message: (pg_after - pg_half) as f64 / second_half,
        pg_bytes_per_message_whole_day: (pg_after - pg_before) as f64 / sent.len() as f64,
        pg_by_relation,
        receipts_by_kind,
        jetstream_bytes_per_message: js_after.saturating_sub(js_before) as f64 / sent.len() as f64,
        sustained_per_s: sent.len() as f64 / took.as_secs_f64(),
        first_word_p50_ms: crate::figures::percentile(&first_words, 0.50),
        first_word_p99_ms: crate::figures::percentile(&first_words, 0.99),
        answered: first_words.len(),
        to_him: to_him.len(),
        without_outcome: without,
    })
}

/// The first lines each service wrote, for an error that says why it did not come up.
fn logs(dir: &Path) -> String {
    SERVICES
        .iter()
        .map(|name| {
            let log = std::fs::read_to_string(dir.join(format!("{name}.log"))).unwrap_or_default();
            // What it said first: an error that stops a service is its first words, before its backtrace.
            format!("== {name}\n{}", log.lines().take(4).collect::<Vec<_>>().join("\n"))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// What each service process is started with.
struct Env<'a> {
    nats: String,
    db: String,
    dir: std::path::PathBuf,
    discord: &'a Loopback,
    model: String,
}

impl Env<'_> {
    fn spawn(&self, clankie: &Path, name: &'static str) -> Result<Child> {
        let service = name.trim_end_matches("-a").trim_end_matches("-b");
        let log = std::fs::File::create(self.dir.join(format!("{name}.log")))?;
        let mut cmd = Command::new(clankie);
        cmd.arg(service)
            .env("CLANKIE_NATS_URL", &self.nats)
            .env("CLANKIE_DATABASE_URL", &self.db)
            .env("CLANKIE_STATE_DIR", &self.dir)
            .env("CLANKIE_REPLICA_ID", name)
            .env("CLANKIE_DISCORD_TOKEN", &self.discord.config().token)
            .env("CLANKIE_DISCORD_API", self.discord.addr().to_string())
            .env("CLANKIE_DISCORD_GATEWAY_URL", self.discord.gateway_url())
            .env("CLANKIE_MODEL_BASE_URL", &self.model)
            .env("CLANKIE_OUTCOME_REACTIONS", "true")
            .env("CLANKIE_CONSOLE_ADDR", "127.0.0.1:0")
            .env("CLANKIE_CONSOLE_TOKEN", "day-token")
            .env("CLANKIE_LOG", std::env::var("CLANKIE_BENCH_DAY_LOG").unwrap_or_else(|_| "warn".into()))
            // The bench's own voice CA is nothing the services read.
            .env_remove("SSL_CERT_FILE")
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .kill_on_drop(true);
        // The bench's settings are the bench's: a service reads only its own.
        for (key, _) in std::env::vars().filter(|(k, _)| k.starts_with("CLANKIE_BENCH_")) {
            cmd.env_remove(key);
        }
        Ok(cmd.spawn().with_context(|| format!("starting {name} from {}", clankie.display()))?)
    }
}

/// Writes the day's messages at its rate; returns what was sent.
/// `progress` is told once half the day's messages are sent, and counts every one sent.
async fn drive(
    config: &DayConfig,
    places: &Places,
    discord: &Loopback,
    standin: &StandIn,
    progress: (tokio::sync::oneshot::Sender<()>, &std::sync::atomic::AtomicUsize),
) -> Vec<Sent> {
    let (half, counted) = progress;
    let mut half = Some(half);
    let mut random = Random::new(config.seed);
    let mut sent: Vec<Sent> = Vec::with_capacity(config.messages);
    let mut last_in: HashMap<u64, u64> = HashMap::new();
    let mut burst = None;
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / config.per_second.max(0.1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut i = 0u64;
    while sent.len() < config.messages {
        tick.tick().await;
        i += 1;
        match population::step(i, places, &mut random, sent.len(), &|c| last_in.get(&c).copied(), &mut burst) {
            Step::Say { message, to_him } => {
                let channel = message.channel_id;
                let id = discord.user_message(message);
                last_in.insert(channel, id);
                sent.push(Sent { id, channel, at_ms: clankie_bus::now_ms(), to_him, deleted: false });
                counted.store(sent.len(), std::sync::atomic::Ordering::SeqCst);
            }
            Step::Edit { nth } => {
                discord.user_edit(sent[nth].id, format!("edited {i}"));
            }
            Step::Delete { nth } => {
                if discord.user_delete(sent[nth].id) {
                    sent[nth].deleted = true;
                }
            }
        }
        if i.is_multiple_of(1_000) {
            standin.forget_requests();
        }
        if sent.len() >= config.messages / 2
            && let Some(half) = half.take()
        {
            let _ = half.send(());
        }
    }
    sent
}

/// Waits until every message not deleted has its outcome (a delivery's, or the receipt of its
/// refusal), or `drain` passes; returns how many have none.
async fn settle(store: &clankie_store::Store, sent: &[Sent], drain: Duration) -> Result<usize> {
    let ids: Vec<String> = sent.iter().filter(|s| !s.deleted).map(|s| s.id.to_string()).collect();
    let deadline = Instant::now() + drain;
    loop {
        let settled: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM unnest($1::text[]) AS sent(delivery)
             WHERE EXISTS (SELECT 1 FROM deliveries d WHERE d.delivery_id = sent.delivery)
                OR EXISTS (SELECT 1 FROM receipts r WHERE r.delivery_id = sent.delivery AND r.kind = 'captain.not_admitted')",
        )
        .bind(&ids)
        .fetch_one(store.pool())
        .await?;
        let missing = ids.len() - settled as usize;
        if missing == 0 || Instant::now() >= deadline {
            return Ok(missing);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Each answered message's wait from its sending to his reply's post, in ms.
fn first_words(discord: &Loopback, sent: &[Sent]) -> Vec<f64> {
    let mut posts: HashMap<u64, Vec<clankie_discord_loopback::Post>> = HashMap::new();
    let mut waits = Vec::new();
    for s in sent.iter().filter(|s| s.to_him && !s.deleted) {
        let in_channel = posts.entry(s.channel).or_insert_with(|| discord.posts(s.channel));
        if let Some(p) = in_channel.iter().filter(|p| p.reply_to == Some(s.id)).min_by_key(|p| p.at_ms) {
            waits.push((p.at_ms - s.at_ms) as f64);
        }
    }
    waits
}

/// The bench's `day`: the scales `CLANKIE_BENCH_DAY_LANES` names (`1000,10000,100000`), each
/// `CLANKIE_BENCH_DAY_MESSAGES` messages (20,000) at `CLANKIE_BENCH_DAY_RATE` a second (40);
/// the plot of CPU per 1,000 messages against lanes goes to `CLANKIE_BENCH_DAY_PLOT`
/// (`day.svg` in the working directory).
pub async fn report(clankie: &Path) -> Result<()> {
    let var = |k: &str| std::env::var(k).ok();
    let scales: Vec<usize> = var("CLANKIE_BENCH_DAY_LANES")
        .unwrap_or_else(|| "1000,10000,100000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let messages = var("CLANKIE_BENCH_DAY_MESSAGES").and_then(|v| v.parse().ok()).unwrap_or(20_000);
    let per_second = var("CLANKIE_BENCH_DAY_RATE").and_then(|v| v.parse().ok()).unwrap_or(40.0);
    let mut reports = Vec::new();
    for lanes in scales {
        let config = DayConfig { lanes, messages, per_second, drain: Duration::from_secs(300), ..DayConfig::short() };
        let report = run(&config, clankie).await?;
        for line in report.lines() {
            println!("{line}");
        }
        reports.push(report);
    }
    let path = var("CLANKIE_BENCH_DAY_PLOT").unwrap_or_else(|| "day.svg".into());
    std::fs::write(&path, plot::svg(&reports))?;
    println!("day_plot: {path}");
    for line in plot::verdict(&reports) {
        println!("{line}");
    }
    Ok(())
}
