//! What the loopback Discord contains: its guilds, channels and users, the limits it keeps, and
//! whether its voice speaks DAVE. Everything above reads it; it reads nothing of theirs.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::state::limits::Limits;

/// The DAVE protocol version the loopback speaks.
pub const DAVE_VERSION: u16 = 1;

/// A channel of the loopback guild.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChannelSpec {
    pub id: u64,
    pub name: String,
    /// A voice channel, whose attached text chat can be written in.
    #[serde(default)]
    pub voice: bool,
    /// The guild it belongs to when that is not the main guild: a second community, to show
    /// that nothing he lives in one guild reaches another.
    #[serde(default)]
    pub guild: Option<u64>,
}

/// The second guild of the default loopback, with one text channel (210).
pub const OTHER_GUILD: u64 = 110;

/// What the loopback Discord contains.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LoopbackConfig {
    /// The token clients must present (`Authorization: Bot <token>`).
    pub token: String,
    pub bot_user_id: u64,
    pub bot_name: String,
    pub guild_id: u64,
    pub guild_name: String,
    pub channels: Vec<ChannelSpec>,
    /// DM channel ids (one per sandbox user is enough).
    pub dm_channels: Vec<u64>,
    /// The gateway heartbeat interval it announces in Hello.
    pub heartbeat_interval_ms: u64,
    /// Where the voice server writes its CA bundle (`voice-ca.pem`); a fresh temporary
    /// directory when unset.
    #[serde(default)]
    pub voice_dir: Option<std::path::PathBuf>,
    /// The roots `voice-ca.pem` holds besides the voice CA (a user's own `SSL_CERT_FILE`, say);
    /// the system bundle when unset.
    #[serde(default)]
    pub voice_roots: Option<std::path::PathBuf>,
    /// An OpenAI-compatible speech API (the local speech service's Piper) that voices what a
    /// person says aloud by text; espeak-ng when unset.
    #[serde(default)]
    pub say_aloud_tts: Option<String>,
    /// Gateway shards, as `/gateway/bot` reports them: a guild's events go to shard
    /// `(guild_id >> 22) % shards`, DMs to shard 0.
    #[serde(default = "one")]
    pub shards: u32,
    /// Identifies allowed per 5 s in each bucket (`shard_id % max_concurrency`), as
    /// `/gateway/bot` reports it; one sooner is counted as too fast.
    #[serde(default = "one")]
    pub max_concurrency: u32,
    /// Discord's REST and gateway limits, kept as Discord keeps them (on by default).
    #[serde(default)]
    pub limits: Limits,
    /// DAVE end-to-end encryption on the voice server (on by default, as on Discord).
    #[serde(default)]
    pub dave: DaveConfig,
    /// The newest messages kept per channel, older ones let go; 0 keeps every message, as
    /// Discord does. The sandbox bounds it, so a sandbox left running for hours does not grow.
    #[serde(default)]
    pub messages_kept_per_channel: usize,
    /// The application's Message Content switch in the Developer Portal (on by default): off,
    /// an identify asking for the intent is closed with 4014, as Discord closes it.
    #[serde(default = "on")]
    pub message_content_intent: bool,
}

fn on() -> bool {
    true
}

fn one() -> u32 {
    1
}

/// The shard Discord sends a guild's events to (DMs go to shard 0).
pub fn shard_of(guild: Option<u64>, shards: u32) -> u32 {
    guild.map_or(0, |g| ((g >> 22) % u64::from(shards.max(1))) as u32)
}

impl LoopbackConfig {
    /// Every guild it contains, the main one first.
    pub fn guilds(&self) -> Vec<u64> {
        let mut guilds = vec![self.guild_id];
        for g in self.channels.iter().filter_map(|c| c.guild) {
            if !guilds.contains(&g) {
                guilds.push(g);
            }
        }
        guilds
    }
}

impl Default for LoopbackConfig {
    fn default() -> Self {
        LoopbackConfig {
            token: "loopback-token".into(),
            bot_user_id: 4242,
            bot_name: "Clankie".into(),
            guild_id: 100,
            guild_name: "Loopback".into(),
            channels: vec![
                ChannelSpec { id: 200, name: "general".into(), voice: false, guild: None },
                ChannelSpec { id: 201, name: "lobbies".into(), voice: false, guild: None },
                ChannelSpec { id: 300, name: "Hangout".into(), voice: true, guild: None },
                ChannelSpec { id: 210, name: "town-square".into(), voice: false, guild: Some(OTHER_GUILD) },
            ],
            dm_channels: vec![900],
            heartbeat_interval_ms: 41_250,
            voice_dir: None,
            voice_roots: None,
            message_content_intent: true,
            say_aloud_tts: None,
            shards: 1,
            max_concurrency: 1,
            limits: Limits::default(),
            dave: DaveConfig::default(),
            messages_kept_per_channel: 0,
        }
    }
}

/// Whether the voice server speaks DAVE, and the least version it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DaveConfig {
    /// DAVE on (Discord's rule since March 2026); off answers with passthrough, as before.
    pub on: bool,
    /// The least `max_dave_protocol_version` an Identify must offer, or it is closed with 4017.
    pub required_version: u16,
}

impl DaveConfig {
    /// DAVE as the `CLANKIE_LOOPBACK_DAVE` value says: on unless `off` (or `0`, `false`).
    pub fn from_setting(value: Option<&str>) -> DaveConfig {
        let on = !matches!(value, Some("off" | "0" | "false"));
        DaveConfig { on, required_version: DAVE_VERSION }
    }
}

impl Default for DaveConfig {
    /// As `CLANKIE_LOOPBACK_DAVE` says: on unless it is `off`.
    fn default() -> Self {
        DaveConfig::from_setting(std::env::var("CLANKIE_LOOPBACK_DAVE").ok().as_deref())
    }
}

/// The loopback as its JSON names it: what it contains and the address its links point at.
pub(crate) struct Site {
    pub config: LoopbackConfig,
    pub addr: SocketAddr,
}
