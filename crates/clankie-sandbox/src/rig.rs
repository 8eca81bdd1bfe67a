//! A whole embedded stack for one test: its own nats-server, database, state
//! directory and model stand-in, durations compressed. For tests only (feature `rig`).

use std::sync::Arc;
use std::time::Duration;

use clankie_discord_loopback::NewMessage;
use clankie_model_standin::StandIn;
use clankie_settings::Settings;
use clankie_testkit::{TestDb, TestDir, TestNats};

pub use clankie_testkit::until;

use crate::Sandbox;

/// The loopback guild's first text channel.
pub const GENERAL: u64 = 200;

/// A running stack and the test fixtures under it.
pub struct Rig {
    pub standin: StandIn,
    pub sandbox: Sandbox,
    pub nats_url: String,
    pub attachment_root: std::path::PathBuf,
    pub settings: Settings,
    _nats: TestNats,
    _db: TestDb,
    _dir: TestDir,
}

impl Rig {
    /// A stack with the compressed defaults.
    pub async fn new() -> Rig {
        Rig::with(&[]).await
    }

    /// A stack with extra settings on top of the compressed defaults.
    pub async fn with(extra: &[(&str, &str)]) -> Rig {
        Rig::with_clock(extra, None).await
    }

    /// A stack whose captain runs are timed by `clock`.
    pub async fn with_clock(extra: &[(&str, &str)], clock: Option<Arc<dyn clankie_agent::Clock>>) -> Rig {
        Rig::build(extra, clock, Vec::new()).await
    }

    /// A stack whose loopback has `channels` beside its own.
    pub async fn with_channels(extra: &[(&str, &str)], channels: Vec<clankie_discord_loopback::ChannelSpec>) -> Rig {
        Rig::build(extra, None, channels).await
    }

    async fn build(
        extra: &[(&str, &str)],
        clock: Option<Arc<dyn clankie_agent::Clock>>,
        extra_channels: Vec<clankie_discord_loopback::ChannelSpec>,
    ) -> Rig {
        let (nats, db, dir) = (TestNats::start().expect("nats-server"), TestDb::create().await, TestDir::new());
        let standin = StandIn::start().await.expect("model stand-in");
        let mut vars: Vec<(String, String)> = vec![
            ("CLANKIE_NATS_URL".into(), nats.url()),
            ("CLANKIE_DATABASE_URL".into(), db.url().to_owned()),
            ("CLANKIE_STATE_DIR".into(), dir.path().display().to_string()),
            ("CLANKIE_MODEL_BASE_URL".into(), standin.base_url()),
            ("CLANKIE_TYPING_INTERVAL_MS".into(), "200".into()),
            // Long enough that no test races it on a slow or busy machine (a 25 MB picture's
            // turn, a browse, a handoff); a test whose subject is the watchdog sets a short one.
            ("CLANKIE_STALL_SILENCE_MS".into(), "60000".into()),
            ("CLANKIE_STALL_TICK_MS".into(), "50".into()),
            ("CLANKIE_LANE_LEASE_TTL_MS".into(), "2000".into()),
            ("CLANKIE_INGRESS_ACK_WAIT_MS".into(), "2000".into()),
            ("CLANKIE_TOOL_CARD_DELAY_MS".into(), "300".into()),
            ("CLANKIE_CONSOLE_ADDR".into(), "127.0.0.1:0".into()),
        ];
        // A whole suite run on another provider's wire (`anthropic`: the strict Messages API
        // stand-in); a test's own extra still decides.
        if let Ok(provider) = std::env::var("CLANKIE_TEST_MODEL_PROVIDER") {
            vars.push(("CLANKIE_MODEL_PROVIDER".into(), provider));
        }
        vars.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        // A variable given twice takes its last value (an extra overrides a default).
        let var = |k: &str| vars.iter().rev().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        let settings = Settings::from_lookup(var).expect("settings");
        // The rig refreshes typing every 200 ms, forty times Discord's pace; its typing bucket is as much wider.
        let limits = clankie_discord_loopback::Limits { typing_per_5s: 200, ..Default::default() };
        // A rig may turn DAVE off for comparison, as the variable does for `clankie run`.
        let dave = var("CLANKIE_LOOPBACK_DAVE").map(|v| clankie_discord_loopback::DaveConfig::from_setting(Some(&v)));
        let options = crate::SandboxOptions { clock, voice_roots: None, limits: Some(limits), say_aloud_tts: None, dave, extra_channels };
        let sandbox = Sandbox::start_with(&settings, "127.0.0.1:0".parse().expect("addr"), options).await.expect("sandbox");
        let attachment_root = clankie_settings::attachment_root(&settings);
        assert!(sandbox.discord.wait_for_session(Duration::from_secs(20)).await, "the gateway never attached");
        until("READY", Duration::from_secs(10), || sandbox.gateway.bot_id() != 0).await;
        Rig { standin, sandbox, nats_url: nats.url(), attachment_root, settings, _nats: nats, _db: db, _dir: dir }
    }

    /// Kills the stack's nats-server, keeping its store, as an outage would.
    pub fn stop_nats(&mut self) {
        self._nats.stop();
    }

    /// Starts the stack's nats-server again on the same port and store.
    pub fn restart_nats(&mut self) {
        self._nats.restart().expect("nats-server restarts");
    }

    /// Starts one more captain replica named `replica` beside the sandbox's, sharing its bus,
    /// store and model; it runs until the returned task is aborted.
    pub async fn extra_captain(
        &self,
        replica: &str,
    ) -> Result<(clankie_captain::Captain, tokio::task::JoinHandle<()>), crate::SandboxError> {
        let store = clankie_store::Store::connect(&self.settings.database_url).await?;
        let captain = crate::sandbox_captain(&self.settings, store, self.sandbox.discord.addr(), Some(replica), None).await?;
        let running = captain.clone();
        let task = tokio::spawn(async move {
            if let Err(e) = running.run().await {
                tracing::error!(error = %e, "extra captain stopped");
            }
        });
        Ok((captain, task))
    }

    /// A bus connection of the test's own, to watch or publish.
    pub async fn bus(&self) -> clankie_bus::Bus {
        clankie_bus::Bus::connect(&self.settings, "test").await.expect("bus")
    }

    /// Someone writes in a channel; returns the message id.
    pub fn say(&self, channel: u64, author: &str, content: &str) -> u64 {
        self.sandbox.discord.user_message(NewMessage {
            channel_id: channel,
            author: author.into(),
            content: content.into(),
            ..Default::default()
        })
    }

    /// `author` enters a voice channel; waits until the room is live (he joined and the gateway
    /// routes the channel's chat to the voice room).
    pub async fn voice_live(&self, channel: u64, author: &str) {
        self.sandbox.discord.voice_join(channel, author).expect("a voice channel");
        let guild = self.sandbox.discord.config().guild_id;
        until("the live voice session", Duration::from_secs(15), || self.sandbox.gateway.live_voice_channel(guild) == Some(channel)).await;
    }

    /// The outcome the system reported for a user message (as its reaction).
    pub fn outcome(&self, channel: u64, id: u64) -> Option<String> {
        let m = self.sandbox.discord.messages(channel).into_iter().find(|m| m.id == id)?;
        m.reactions.iter().find_map(|r| clankie_proto::v1::OutcomeKind::from_reaction(r)).map(|k| k.code().to_owned())
    }

    /// Waits until every message has an outcome.
    pub async fn wait_outcomes(&self, channel: u64, ids: &[u64]) {
        until("outcomes", Duration::from_secs(30), || ids.iter().all(|id| self.outcome(channel, *id).is_some())).await;
    }
}
