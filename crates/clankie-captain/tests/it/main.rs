//! The captain with real NATS and PostgreSQL processes and the model stand-in, durations compressed.
//!
//! Tests publish ingress as the gateway does and read what the captain
//! publishes. Cold lanes ask the body for channel history over NATS
//! request/reply; `Rig::serve_history` answers those requests the way the
//! gateway's history responder does, with the room's messages so far.

mod anthropic;
mod burst;
mod changes;
mod failures;
mod ingest;
mod metrics;
mod outbox;
mod privileged;
mod real_model;
mod replicas;
mod retention;
mod security;
mod self_file;
mod silence;
mod text_update;
mod warm;

use std::sync::{Arc, Mutex};

use futures::StreamExt;
use std::time::Duration;

use clankie_agent::{Agent, AgentConfig, RetryPolicy, StallPolicy};
use clankie_bus::{Bus, MsgId};
use clankie_captain::{Captain, CaptainConfig};
use clankie_model_standin::StandIn;
use clankie_proto::{Family, Subject, v1};
use clankie_settings::Settings;
use clankie_store::Store;
use clankie_testkit::{TestDb, TestDir, TestNats};
use prost::Message;

use clankie_testkit::record;
pub use clankie_testkit::{Recorder, until};

pub const GUILD: u64 = 100;
pub const CHANNEL: u64 = 200;

/// Everything a captain needs, plus recorders of what it publishes.
pub struct Rig {
    pub nats: TestNats,
    pub db: TestDb,
    pub dir: TestDir,
    pub standin: StandIn,
    pub bus: Bus,
    pub store: Store,
    pub sent: Recorder<v1::OutboundMessage>,
    pub typing: Recorder<v1::TypingAction>,
    pub outcomes: Recorder<v1::DeliveryOutcome>,
    pub receipts: Recorder<v1::Receipt>,
    pub history: Arc<Mutex<Vec<v1::HistoryMessage>>>,
    next_id: std::sync::atomic::AtomicU64,
}

impl Rig {
    pub async fn new() -> Rig {
        Rig::on(TestDb::create().await).await
    }

    /// A rig over `db` (on a PostgreSQL server of the test's own, say).
    pub async fn on(db: TestDb) -> Rig {
        let (nats, dir) = (TestNats::start().unwrap(), TestDir::new());
        let settings = clankie_testkit::settings(&nats, &db, &dir);
        let bus = Bus::connect(&settings, "test").await.unwrap();
        bus.ensure_streams().await.unwrap();
        let store = Store::connect(db.url()).await.unwrap();
        store.migrate().await.unwrap();
        let rig = Rig {
            sent: record(&bus, Family::BodySend).await,
            typing: record(&bus, Family::BodyTyping).await,
            outcomes: record(&bus, Family::LaneOutcome).await,
            receipts: record(&bus, Family::Receipt).await,
            standin: StandIn::start().await.unwrap(),
            history: Arc::new(Mutex::new(Vec::new())),
            next_id: std::sync::atomic::AtomicU64::new(1_000),
            nats,
            db,
            dir,
            bus,
            store,
        };
        bus_flush(&rig.bus).await;
        rig.serve_history().await;
        rig
    }

    /// Settings for a captain process or instance in this rig, durations compressed.
    pub fn settings(&self, replica: &str) -> Vec<(&'static str, String)> {
        vec![
            ("CLANKIE_NATS_URL", self.nats.url()),
            ("CLANKIE_DATABASE_URL", self.db.url().to_owned()),
            ("CLANKIE_STATE_DIR", self.dir.path().display().to_string()),
            ("CLANKIE_REPLICA_ID", replica.to_owned()),
            ("CLANKIE_MODEL_BASE_URL", self.standin.base_url()),
            ("CLANKIE_MODEL_MAX_RETRIES", "1".into()),
            // Long enough that no test races it on a slow or busy machine; a test whose subject
            // is the watchdog sets a short one itself.
            ("CLANKIE_STALL_SILENCE_MS", "30000".into()),
            ("CLANKIE_STALL_TICK_MS", "50".into()),
            ("CLANKIE_LANE_LEASE_TTL_MS", "1000".into()),
            ("CLANKIE_INGRESS_ACK_WAIT_MS", "1000".into()),
            ("CLANKIE_OUTBOX_RELAY_MS", "500".into()),
            ("CLANKIE_EXCHANGE_WINDOW_MS", "1500".into()),
            ("CLANKIE_TOOL_CARD_DELAY_MS", "200".into()),
            ("CLANKIE_SHUTDOWN_GRACE_MS", "10000".into()),
        ]
    }

    /// A captain in this process.
    pub async fn captain(&self, replica: &str) -> (Captain, tokio::task::JoinHandle<()>) {
        self.captain_with(replica, &[]).await
    }

    /// A captain in this process with extra settings.
    pub async fn captain_with(&self, replica: &str, extra: &[(&'static str, String)]) -> (Captain, tokio::task::JoinHandle<()>) {
        let mut vars = self.settings(replica);
        vars.extend(extra.iter().cloned());
        let settings = Settings::from_lookup(|k| vars.iter().rev().find(|(n, _)| *n == k).map(|(_, v)| v.clone())).unwrap();
        let bus = Bus::connect(&settings, "captain").await.unwrap();
        let store = Store::connect(&settings.database_url).await.unwrap();
        let model = clankie_agent::model_from_settings(&settings).unwrap();
        let config = AgentConfig {
            stall: StallPolicy { silence: settings.stall_silence, tick: settings.stall_tick },
            retry: RetryPolicy { max_retries: 1, base_delay: Duration::from_millis(10), max_delay: Duration::from_millis(50) },
            ..clankie_agent::config_from_settings(&settings)
        };
        let mut cconfig = CaptainConfig::from_settings(&settings);
        cconfig.history_timeout = Duration::from_millis(500);
        let captain = Captain::new(bus, store, Agent::new(model, config), cconfig);
        let running = captain.clone();
        let task = tokio::spawn(async move {
            let _ = running.run().await;
        });
        (captain, task)
    }

    /// Answers history requests as the gateway body does: the room's messages before the asked-for one.
    async fn serve_history(&self) {
        let mut sub = self.bus.serve(Family::RpcHistory.wildcard(), "body").await.unwrap();
        let bus = self.bus.clone();
        let history = self.history.clone();
        tokio::spawn(async move {
            while let Some(msg) = sub.next().await {
                let Ok(req) = v1::HistoryRequest::decode(msg.payload.clone()) else { continue };
                let all = if req.channel_id == CHANNEL { history.lock().unwrap().clone() } else { Vec::new() };
                let mut before: Vec<_> =
                    all.into_iter().filter(|m| req.before_message_id == 0 || m.message_id < req.before_message_id).collect();
                let keep = before.len().saturating_sub(req.limit as usize);
                let messages = before.split_off(keep);
                let _ = bus.respond(&msg, &v1::HistoryReply { messages, error: String::new() }).await;
            }
        });
        bus_flush(&self.bus).await;
    }

    /// Someone writes in the room: the gateway's ingress, with its dedup id. Returns the message id.
    pub async fn say(&self, author: &str, content: &str, mention: bool) -> u64 {
        let id = self.next_id.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.say_as(id, author, content, mention, Some(GUILD)).await;
        id
    }

    pub async fn say_as(&self, id: u64, author: &str, content: &str, mention: bool, guild: Option<u64>) {
        self.say_on(id, author, content, mention, guild, CHANNEL).await;
    }

    /// A DM on `channel` (a lane of its own, `dm:<channel>`).
    pub async fn say_in(&self, id: u64, author: &str, content: &str, channel: u64) {
        self.say_on(id, author, content, false, None, channel).await;
    }

    async fn say_on(&self, id: u64, author: &str, content: &str, mention: bool, guild: Option<u64>, channel: u64) {
        let ingress = v1::Ingress {
            delivery_id: id.to_string(),
            guild_id: guild,
            channel_id: channel,
            author_id: author_id(author),
            author_name: author.into(),
            content: content.into(),
            mentions_him: mention,
            received_at_ms: clankie_bus::now_ms(),
            ..Default::default()
        };
        // The body's history is the rig's one room; a DM elsewhere is not in it.
        if channel == CHANNEL {
            self.history.lock().unwrap().push(v1::HistoryMessage {
                message_id: id,
                author_id: ingress.author_id,
                author_name: author.into(),
                content: content.into(),
                ..Default::default()
            });
        }
        self.bus.publish(&Subject::ingress_text(guild, channel), &ingress, Some(&MsgId::discord_message(id))).await.unwrap();
    }

    /// A line the body's history holds but that never came as ingress: said while no captain ran.
    pub fn overheard(&self, author: &str, content: &str) {
        let id = self.next_id.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.history.lock().unwrap().push(v1::HistoryMessage {
            message_id: id,
            author_id: author_id(author),
            author_name: author.into(),
            content: content.into(),
            ..Default::default()
        });
    }

    /// His own post in the room, as the body's history shows it; returns its message id.
    pub fn posted_by_him(&self, content: &str) -> u64 {
        let id = self.next_id.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.history.lock().unwrap().push(v1::HistoryMessage {
            message_id: id,
            author_id: 1,
            author_name: "Clankie".into(),
            author_is_bot: true,
            is_him: true,
            content: content.into(),
            ..Default::default()
        });
        id
    }

    /// The author of message `id` edits it to `content` (MESSAGE_UPDATE), as the gateway publishes it.
    pub async fn edit(&self, id: u64, author: &str, content: &str, mention: bool) {
        let at = clankie_bus::now_ms();
        // The body's history shows what Discord shows: the message as edited.
        if let Some(m) = self.history.lock().unwrap().iter_mut().find(|m| m.message_id == id) {
            m.content = content.into();
        }
        self.change(v1::Ingress {
            delivery_id: format!("edit:{id}:{at}"),
            change: v1::MessageChange::Edit as i32,
            author_id: author_id(author),
            author_name: author.into(),
            content: content.into(),
            mentions_him: mention,
            ..self.change_of(id, at)
        })
        .await;
    }

    /// Message `id` is deleted (MESSAGE_DELETE: ids only), as the gateway publishes it.
    pub async fn delete(&self, id: u64) {
        let at = clankie_bus::now_ms();
        self.change(v1::Ingress {
            delivery_id: format!("delete:{id}"),
            change: v1::MessageChange::Delete as i32,
            ..self.change_of(id, at)
        })
        .await;
    }

    fn change_of(&self, id: u64, at: i64) -> v1::Ingress {
        v1::Ingress { guild_id: Some(GUILD), channel_id: CHANNEL, changed_message_id: id, received_at_ms: at, ..Default::default() }
    }

    async fn change(&self, ingress: v1::Ingress) {
        let id = MsgId::new(ingress.delivery_id.clone());
        self.bus.publish(&Subject::ingress_text(Some(GUILD), CHANNEL), &ingress, Some(&id)).await.unwrap();
    }

    pub fn replies(&self) -> Vec<v1::OutboundMessage> {
        self.sent.all().into_iter().filter(|m| m.kind == v1::OutboundKind::Reply as i32).collect()
    }

    pub fn outcome_of(&self, id: u64) -> Vec<v1::DeliveryOutcome> {
        self.outcomes.all().into_iter().filter(|o| o.delivery_id == id.to_string()).collect()
    }

    pub async fn wait_outcomes(&self, ids: &[u64]) {
        self.wait_outcomes_within(ids, Duration::from_secs(20)).await;
    }

    /// Waits for outcomes up to `patience`: a real model on a busy two-core machine takes longer.
    pub async fn wait_outcomes_within(&self, ids: &[u64], patience: Duration) {
        until("outcomes", patience, || ids.iter().all(|id| !self.outcome_of(*id).is_empty())).await;
    }
}

/// A captain as its own process (the `clankie-captain` binary), logging to `<replica>.log` in the rig's directory.
pub fn spawn_captain(rig: &Rig, replica: &str) -> tokio::process::Child {
    spawn_captain_with(rig, replica, &[])
}

/// A captain process with extra settings (a fault point, say).
pub fn spawn_captain_with(rig: &Rig, replica: &str, extra: &[(&str, &str)]) -> tokio::process::Child {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_clankie-captain"));
    for (k, v) in rig.settings(replica) {
        cmd.env(k, v);
    }
    for (k, v) in extra {
        cmd.env(k, v);
    }
    let log = std::fs::File::create(rig.dir.path().join(format!("{replica}.log"))).unwrap();
    cmd.env("CLANKIE_LOG", "warn,clankie_captain=debug")
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .kill_on_drop(true);
    cmd.spawn().unwrap()
}

/// Prints the captain processes' logs when the test fails, so a failure explains itself.
pub struct DumpLogsOnPanic(pub std::path::PathBuf);

impl Drop for DumpLogsOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for replica in ["captain-a", "captain-b"] {
                let log = std::fs::read_to_string(self.0.join(format!("{replica}.log"))).unwrap_or_default();
                eprintln!("===== {replica} =====\n{log}");
            }
        }
    }
}

/// The user id the rig gives an author name.
pub fn author_id(author: &str) -> u64 {
    author.bytes().map(u64::from).sum()
}

async fn bus_flush(bus: &Bus) {
    bus.barrier().await.unwrap();
}

pub fn kind(o: &v1::DeliveryOutcome) -> v1::OutcomeKind {
    v1::OutcomeKind::try_from(o.kind).unwrap_or(v1::OutcomeKind::Unspecified)
}
