//! How a gateway replica connects and behaves, read from settings: the one configuration every
//! part (shards, posting, typing, leases) reads, kept apart from the state that holds it.

use std::path::PathBuf;
use std::time::Duration;

use clankie_settings::Settings;

use crate::rest::budget::CREATE_SPAN;

/// How the gateway connects and behaves.
#[derive(Clone)]
pub struct GatewayConfig {
    pub token: String,
    /// host:port of a REST stand-in spoken to over HTTP.
    pub api: Option<String>,
    /// Gateway WebSocket URL override.
    pub gateway_url: Option<String>,
    /// Admitted guilds; empty for all.
    pub guilds: Vec<u64>,
    pub outcome_reactions: bool,
    pub typing_interval: Duration,
    /// The longest a typing loop runs without a stop (a backstop for a captain that died).
    pub typing_max: Duration,
    /// Where shard session state is saved so a restart resumes.
    pub state_dir: PathBuf,
    pub history_limit: u32,
    /// Discord messages one reply may take (`CLANKIE_REPLY_MAX_PIECES`).
    pub reply_max_pieces: usize,
    /// This replica's name (`CLANKIE_REPLICA_ID`): its own consumers are named by it, never by pid.
    pub replica: String,
    /// How long an ingress publish may wait for JetStream before the shard gives the message
    /// back (closes and resumes from before it).
    pub publish_patience: Duration,
    /// Shards in all (`CLANKIE_DISCORD_SHARDS`); 0 asks Discord.
    pub shards: u32,
    /// How long a claim on a shard lasts unrenewed.
    pub shard_lease_ttl: Duration,
    /// How long the REST ownership lasts unrenewed.
    pub rest_lease_ttl: Duration,
    /// The span in which a channel takes 5 creates: Discord's [`CREATE_SPAN`]; a stand-in
    /// with a shorter message-create window sets its own.
    pub create_span: Duration,
    /// How many messages of a reply chain a message is shown with: the one it replies to and
    /// those above it (`CLANKIE_REPLY_CHAIN_DEPTH`).
    pub reply_chain_depth: usize,
    /// Events a shard may have read and not yet handled ([`INGEST_BUFFER`]): the reader never
    /// waits; past this it stops taking events in and, once the backlog is stored, resumes from
    /// the last stored one so Discord replays the rest.
    pub ingest_buffer: usize,
    /// Channels and threads whose facts are kept ([`PLACES_KEPT`]); the least recently used go first.
    pub places_kept: usize,
}

/// The default [`GatewayConfig::ingest_buffer`]: a burst of tens of thousands of messages in a
/// second is held whole (a few KiB each), well inside a replica's memory.
pub const INGEST_BUFFER: usize = 50_000;

/// The default [`GatewayConfig::places_kept`]: the channels and active threads of a large
/// community, at a few hundred bytes each.
pub const PLACES_KEPT: usize = 4_096;

impl std::fmt::Debug for GatewayConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayConfig")
            .field("api", &self.api)
            .field("gateway_url", &self.gateway_url)
            .field("guilds", &self.guilds)
            .finish()
    }
}

impl GatewayConfig {
    /// The gateway's configuration from settings.
    pub fn from_settings(settings: &Settings) -> GatewayConfig {
        GatewayConfig {
            token: settings.discord_token.clone(),
            api: settings.discord_api.clone(),
            gateway_url: settings.discord_gateway_url.clone(),
            guilds: settings.discord_guilds.clone(),
            outcome_reactions: settings.outcome_reactions,
            typing_interval: settings.typing_interval,
            typing_max: settings.stall_silence + Duration::from_secs(60),
            state_dir: settings.state_root.join("gateway"),
            history_limit: settings.history_limit,
            reply_max_pieces: settings.reply_max_pieces,
            replica: settings.replica_id.clone(),
            publish_patience: settings.gateway_publish_patience,
            shards: settings.discord_shards,
            shard_lease_ttl: settings.shard_lease_ttl,
            rest_lease_ttl: settings.rest_lease_ttl,
            create_span: CREATE_SPAN,
            reply_chain_depth: settings.reply_chain_depth,
            ingest_buffer: INGEST_BUFFER,
            places_kept: PLACES_KEPT,
        }
    }
}
