//! The gateway's real twilight clients against the loopback Discord, with real NATS;
//! the cross-service module adds the real captain, PostgreSQL and the model stand-in.

mod body;
mod ingest;
mod limits;
mod stack;
mod voice;

use std::time::Duration;

use clankie_bus::Bus;
use clankie_discord_loopback::{Loopback, LoopbackConfig, NewMessage};
use clankie_gateway::{Gateway, GatewayConfig};
use clankie_testkit::{TestDir, TestNats};

pub use clankie_testkit::{Recorder, record, until};

pub const GENERAL: u64 = 200;
pub const VOICE_CHAT: u64 = 300;
pub const GUILD: u64 = 100;

pub struct Rig {
    pub nats: TestNats,
    pub dir: TestDir,
    pub discord: Loopback,
    pub bus: Bus,
}

impl Rig {
    pub async fn new() -> Rig {
        let config = LoopbackConfig { heartbeat_interval_ms: 5_000, ..LoopbackConfig::default() };
        let discord = Loopback::serve("127.0.0.1:0".parse().unwrap(), config).await.unwrap();
        let (nats, dir) = (TestNats::start().unwrap(), TestDir::new());
        let settings = clankie_settings::Settings::for_endpoints(&nats.url(), "postgres://unused@127.0.0.1:1/x", dir.path()).unwrap();
        let bus = Bus::connect(&settings, "test").await.unwrap();
        bus.ensure_streams().await.unwrap();
        Rig { nats, dir, discord, bus }
    }

    pub fn gateway_config(&self) -> GatewayConfig {
        GatewayConfig {
            token: self.discord.config().token.clone(),
            api: Some(self.discord.addr().to_string()),
            gateway_url: Some(self.discord.gateway_url()),
            guilds: vec![],
            outcome_reactions: true,
            typing_interval: Duration::from_millis(200),
            typing_max: Duration::from_secs(30),
            state_dir: self.dir.path().join("gateway"),
            history_limit: 10,
            reply_max_pieces: 10,
            replica: "gateway-test".into(),
            publish_patience: Duration::from_secs(20),
            shards: 0,
            shard_lease_ttl: Duration::from_secs(15),
            rest_lease_ttl: Duration::from_secs(5),
        }
    }

    /// Starts a gateway and waits until its shard is identified or resumed.
    pub async fn gateway(&self) -> (Gateway, tokio::task::JoinHandle<()>) {
        self.gateway_with(self.gateway_config()).await
    }

    /// Starts a gateway with `config` and waits until its shard is identified or resumed.
    pub async fn gateway_with(&self, config: GatewayConfig) -> (Gateway, tokio::task::JoinHandle<()>) {
        let settings =
            clankie_settings::Settings::for_endpoints(&self.nats.url(), "postgres://unused@127.0.0.1:1/x", self.dir.path()).unwrap();
        let bus = Bus::connect(&settings, "gateway").await.unwrap();
        let gateway = Gateway::new(bus, config);
        let running = gateway.clone();
        let task = tokio::spawn(async move {
            let _ = running.run().await;
        });
        assert!(self.discord.wait_for_session(Duration::from_secs(20)).await, "the shard never attached");
        until("READY", Duration::from_secs(10), || gateway.bot_id() != 0).await;
        (gateway, task)
    }

    pub fn say(&self, channel: u64, author: &str, content: &str) -> u64 {
        self.discord.user_message(NewMessage { channel_id: channel, author: author.into(), content: content.into(), ..Default::default() })
    }

    pub async fn stream_count(&self, stream: &str) -> u64 {
        let mut s = self.bus.jetstream().get_stream(stream).await.unwrap();
        s.info().await.unwrap().state.messages
    }
}
