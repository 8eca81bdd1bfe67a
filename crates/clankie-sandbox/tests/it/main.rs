//! The whole embedded stack, scenario by scenario: loopback Discord → gateway →
//! NATS → captain → gateway → loopback Discord, with real NATS, PostgreSQL and
//! the model stand-in, durations compressed.

mod browser;
mod media;
mod scenarios;
mod voice;

use std::time::Duration;

use clankie_discord_loopback::NewMessage;
use clankie_model_standin::StandIn;
use clankie_sandbox::Sandbox;
use clankie_settings::Settings;
use clankie_testkit::{TestDb, TestDir, TestNats};

pub use clankie_testkit::until;

pub const GENERAL: u64 = 200;

pub struct Rig {
    pub standin: StandIn,
    pub sandbox: Sandbox,
    pub nats_url: String,
    pub attachment_root: std::path::PathBuf,
    _nats: TestNats,
    _db: TestDb,
    _dir: TestDir,
}

impl Rig {
    pub async fn new() -> Rig {
        Rig::with(&[]).await
    }

    pub async fn with(extra: &[(&str, &str)]) -> Rig {
        let (nats, db, dir) = (TestNats::start().unwrap(), TestDb::create().await, TestDir::new());
        let standin = StandIn::start().await.unwrap();
        let mut vars: Vec<(String, String)> = vec![
            ("CLANKIE_NATS_URL".into(), nats.url()),
            ("CLANKIE_DATABASE_URL".into(), db.url().to_owned()),
            ("CLANKIE_STATE_DIR".into(), dir.path().display().to_string()),
            ("CLANKIE_MODEL_BASE_URL".into(), standin.base_url()),
            ("CLANKIE_TYPING_INTERVAL_MS".into(), "200".into()),
            ("CLANKIE_STALL_SILENCE_MS".into(), "2000".into()),
            ("CLANKIE_STALL_TICK_MS".into(), "50".into()),
            ("CLANKIE_LANE_LEASE_TTL_MS".into(), "2000".into()),
            ("CLANKIE_INGRESS_ACK_WAIT_MS".into(), "2000".into()),
            ("CLANKIE_TOOL_CARD_DELAY_MS".into(), "300".into()),
        ];
        vars.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let settings = Settings::from_lookup(|k| vars.iter().rev().find(|(n, _)| n == k).map(|(_, v)| v.clone())).unwrap();
        let sandbox = Sandbox::start(&settings, "127.0.0.1:0".parse().unwrap()).await.unwrap();
        let attachment_root = clankie_settings::attachment_root(&settings);
        assert!(sandbox.discord.wait_for_session(Duration::from_secs(20)).await, "the gateway never attached");
        until("READY", Duration::from_secs(10), || sandbox.gateway.bot_id() != 0).await;
        Rig { standin, sandbox, nats_url: nats.url(), attachment_root, _nats: nats, _db: db, _dir: dir }
    }

    pub fn say(&self, channel: u64, author: &str, content: &str) -> u64 {
        self.sandbox.discord.user_message(NewMessage {
            channel_id: channel,
            author: author.into(),
            content: content.into(),
            ..Default::default()
        })
    }

    /// The outcome the system reported for a user message (as its reaction).
    pub fn outcome(&self, channel: u64, id: u64) -> Option<String> {
        let m = self.sandbox.discord.messages(channel).into_iter().find(|m| m.id == id)?;
        m.reactions.iter().find_map(|r| clankie_proto::v1::OutcomeKind::from_reaction(r)).map(|k| k.code().to_owned())
    }

    pub async fn wait_outcomes(&self, channel: u64, ids: &[u64]) {
        until("outcomes", Duration::from_secs(30), || ids.iter().all(|id| self.outcome(channel, *id).is_some())).await;
    }
}
