//! The gateway's real twilight clients against the loopback Discord, with real NATS;
//! the cross-service module adds the real captain, PostgreSQL and the model stand-in.

mod body;
mod bounds;
mod ingest;
mod limiter;
mod limits;
mod operator;
mod rest;
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
        Rig::with(LoopbackConfig { heartbeat_interval_ms: 5_000, ..LoopbackConfig::default() }).await
    }

    /// A rig whose loopback Discord is `config`.
    pub async fn with(config: LoopbackConfig) -> Rig {
        let discord = Loopback::serve("127.0.0.1:0".parse().unwrap(), config).await.unwrap();
        let (nats, dir) = (TestNats::start().unwrap(), TestDir::new());
        let settings = clankie_settings::Settings::for_endpoints(&nats.url(), "postgres://unused@127.0.0.1:1/x", dir.path()).unwrap();
        let bus = Bus::connect(&settings, "test").await.unwrap();
        bus.ensure_streams().await.unwrap();
        // What a captain tells every gateway from the owner settings: here, every channel admitted.
        bus.record_admitted_channels(&[]).await.unwrap();
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
            // The stand-in's own message-create window, as Discord's bucket would be learned.
            create_span: Duration::from_millis(self.discord.config().limits.message_create_window_ms),
            reply_chain_depth: 3,
            ingest_buffer: clankie_gateway::INGEST_BUFFER,
            places_kept: clankie_gateway::PLACES_KEPT,
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

    /// The replica holding the REST lease now, if any.
    pub async fn rest_owner(&self) -> Option<String> {
        let kv = self.bus.key_value(clankie_gateway::leases::SHARDS_BUCKET, Duration::from_secs(3600)).await.unwrap();
        clankie_gateway::leases::ShardLeases::new(kv, "probe", Duration::from_secs(1)).rest_owner().await.unwrap()
    }

    pub async fn stream_count(&self, stream: &str) -> u64 {
        let mut s = self.bus.jetstream().get_stream(stream).await.unwrap();
        s.info().await.unwrap().state.messages
    }
}

/// `clankie-gateway` as its own process against the rig, as replica `replica`, with `extra`
/// settings; its log is `<replica>.log` in the rig's directory.
pub fn gateway_process(rig: &Rig, replica: &str, extra: &[(&str, &str)]) -> tokio::process::Child {
    let log = std::fs::File::options().create(true).append(true).open(rig.dir.path().join(format!("{replica}.log"))).unwrap();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_clankie-gateway"));
    cmd.env("CLANKIE_NATS_URL", rig.nats.url())
        .env("CLANKIE_STATE_DIR", rig.dir.path().join(replica))
        .env("CLANKIE_REPLICA_ID", replica)
        .env("CLANKIE_DISCORD_TOKEN", &rig.discord.config().token)
        .env("CLANKIE_DISCORD_API", rig.discord.addr().to_string())
        .env("CLANKIE_DISCORD_GATEWAY_URL", rig.discord.gateway_url())
        .env("CLANKIE_TYPING_INTERVAL_MS", "200")
        // A dead replica's shard and REST lease pass to the next within seconds.
        .env("CLANKIE_SHARD_LEASE_TTL_MS", "2000")
        .env("CLANKIE_REST_LEASE_TTL_MS", "1000")
        .env("CLANKIE_LOG", "warn,clankie_gateway=info");
    for (k, v) in extra {
        cmd.env(k, v);
    }
    cmd.stdout(std::process::Stdio::null()).stderr(log).kill_on_drop(true).spawn().unwrap()
}

/// A reply the captain would publish in `channel` of the main guild, threaded onto `reply_to`
/// (its delivery) when given, else delivered as `key`.
pub fn outbound_reply(channel: u64, reply_to: Option<u64>, key: &str, text: &str) -> clankie_proto::v1::OutboundMessage {
    clankie_proto::v1::OutboundMessage {
        idempotency_key: key.into(),
        kind: clankie_proto::v1::OutboundKind::Reply as i32,
        guild_id: Some(GUILD),
        channel_id: channel,
        reply_to_message_id: reply_to,
        text: text.into(),
        lane: clankie_proto::LaneKey::Room { guild: GUILD, channel }.to_string(),
        delivery_id: reply_to.map_or_else(|| key.to_owned(), |to| to.to_string()),
        ..Default::default()
    }
}
