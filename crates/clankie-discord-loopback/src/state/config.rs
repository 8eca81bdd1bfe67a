//! What the loopback Discord contains: its guilds, channels and users, the limits it keeps, and
//! whether its voice speaks DAVE. Everything above reads it; it reads nothing of theirs.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::state::limits::Limits;
use crate::state::permission;

/// The DAVE protocol version the loopback speaks.
pub const DAVE_VERSION: u16 = 1;

/// What a (non-voice) guild channel is, as Discord types it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChannelKind {
    /// GUILD_TEXT (0): messages, and threads from them or without.
    #[default]
    Text,
    /// GUILD_ANNOUNCEMENT (5): its threads are ANNOUNCEMENT_THREADs (10), never private.
    Announcement,
    /// GUILD_FORUM (15): no messages of its own, only posts (each a PUBLIC_THREAD) with tags.
    Forum,
}

/// A channel of the loopback guild.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ChannelSpec {
    pub id: u64,
    pub name: String,
    /// A voice channel, whose attached text chat can be written in.
    #[serde(default)]
    pub voice: bool,
    /// Text, announcement or forum; a voice channel ignores it.
    #[serde(default)]
    pub kind: ChannelKind,
    /// A forum's `available_tags` by name, each with a stable id ([`ChannelSpec::tag_id`]).
    #[serde(default)]
    pub tags: Vec<String>,
    /// The guild it belongs to when that is not the main guild: a second community, to show
    /// that nothing he lives in one guild reaches another.
    #[serde(default)]
    pub guild: Option<u64>,
    /// Its permission overwrites as the loopback starts (the control API changes them); their
    /// order does not matter, Discord's computation orders them.
    #[serde(default)]
    pub overwrites: Vec<OverwriteSpec>,
}

impl ChannelSpec {
    /// Discord's channel type: GUILD_VOICE 2, else by [`ChannelKind`] (0, 5 or 15).
    pub fn discord_type(&self) -> u8 {
        match (self.voice, self.kind) {
            (true, _) => 2,
            (false, ChannelKind::Text) => 0,
            (false, ChannelKind::Announcement) => 5,
            (false, ChannelKind::Forum) => 15,
        }
    }

    /// Whether it is a forum (not a voice channel).
    pub fn is_forum(&self) -> bool {
        !self.voice && self.kind == ChannelKind::Forum
    }

    /// The id of the tag `name` of this forum: the forum's id times 100 plus the tag's place
    /// (from 1), so it stays the same across runs. `None` for a tag it does not have.
    pub fn tag_id(&self, name: &str) -> Option<u64> {
        let place = self.tags.iter().position(|t| t == name)?;
        Some(self.id.wrapping_mul(100).wrapping_add(place as u64 + 1))
    }
}

/// One permission overwrite of a channel: a role's (`member: false`, Discord's type 0; the
/// guild's own id is @everyone's) or a member's (type 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverwriteSpec {
    pub id: u64,
    #[serde(default)]
    pub member: bool,
    #[serde(default)]
    pub allow: u64,
    #[serde(default)]
    pub deny: u64,
}

/// A role of a guild. @everyone's id is the guild's own id, as on Discord.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoleSpec {
    pub id: u64,
    pub name: String,
    /// Its permission bits ([`permission`](crate::permission)).
    pub permissions: u64,
    /// The guild it belongs to; `None` is the main guild.
    #[serde(default)]
    pub guild: Option<u64>,
}

/// The bot's managed role in the main guild of the default loopback.
pub const BOT_ROLE: u64 = 150;
/// The bot's managed role in [`OTHER_GUILD`].
pub const OTHER_BOT_ROLE: u64 = 151;
/// The guild owner of the default loopback: a person, not the bot (the owner bypasses every
/// permission, so a bot that owned its guild could never be refused anything).
pub const GUILD_OWNER: u64 = 1_000;

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
    /// Every guild's roles. A guild none of these belongs to gets the defaults: @everyone with
    /// a new server's permissions and a managed bot role with what the invite asks for, so a
    /// config that adds a guild by its channels alone still lets the bot do what it does today.
    #[serde(default)]
    pub roles: Vec<RoleSpec>,
    /// The roles the bot's member has (@everyone aside, which every member has).
    #[serde(default)]
    pub bot_roles: Vec<u64>,
    /// Guilds whose channels exist but the bot was never invited to: Discord refuses it their
    /// channels (50001), lists them nowhere and sends it none of their events.
    #[serde(default)]
    pub absent_guilds: Vec<u64>,
    /// Users who closed their DMs to the bot: a post into a DM with one of them is refused (50007).
    #[serde(default)]
    pub closed_dms: Vec<u64>,
    /// Every guild's owner, who bypasses permissions; a person, so the bot can be refused.
    #[serde(default = "owner")]
    pub owner_id: u64,
    /// How long after it arrived each `/api/v10` request is answered, in ms: Discord's REST as
    /// slow as it can be, for a client to be measured against. 0 answers at once.
    #[serde(default)]
    pub rest_latency_ms: u64,
    /// Frames a live connection may have yet to send before it is cut, as Discord gives up on a
    /// client that stops reading; 100,000 by default.
    #[serde(default = "live_backlog")]
    pub live_backlog_frames: usize,
}

fn owner() -> u64 {
    GUILD_OWNER
}

fn live_backlog() -> usize {
    crate::state::sessions::LIVE_BACKLOG
}

fn on() -> bool {
    true
}

fn one() -> u32 {
    1
}

/// An announcement channel (202, `news`) and a forum (203, `ideas`, tagged `bug`, `idea`,
/// `question`) beside the default rooms: what `clankie run` and the loopback run alone show, so
/// the sandbox page has every kind of room. Tests add their own instead.
pub fn showcase_channels() -> Vec<ChannelSpec> {
    vec![
        ChannelSpec { id: 202, name: "news".into(), kind: ChannelKind::Announcement, ..Default::default() },
        ChannelSpec {
            id: 203,
            name: "ideas".into(),
            kind: ChannelKind::Forum,
            tags: ["bug", "idea", "question"].map(String::from).to_vec(),
            ..Default::default()
        },
    ]
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

    /// The guild a role belongs to.
    pub fn guild_of_role(&self, role: &RoleSpec) -> u64 {
        role.guild.unwrap_or(self.guild_id)
    }

    /// The roles the loopback starts with and the bot's among them: those configured, and for
    /// each guild with none configured, @everyone as a new server has it and a managed bot role
    /// with the invite's permissions (its id the guild's plus 50, or the next free one).
    pub fn roles_with_defaults(&self) -> (Vec<RoleSpec>, Vec<u64>) {
        let (mut roles, mut bot_roles) = (self.roles.clone(), self.bot_roles.clone());
        for guild in self.guilds() {
            if self.roles.iter().any(|r| self.guild_of_role(r) == guild) {
                continue;
            }
            let mut id = guild + 50;
            while roles.iter().any(|r| r.id == id) || id == guild {
                id += 1;
            }
            let (everyone, bot) = default_roles(guild, id, &self.bot_name, guild == self.guild_id);
            roles.extend([everyone, bot]);
            bot_roles.push(id);
        }
        (roles, bot_roles)
    }
}

/// A guild's @everyone and the bot's managed role as Discord makes them when a server is made
/// and the bot is invited with what `clankie invite` asks for.
fn default_roles(guild: u64, bot_role: u64, bot_name: &str, main: bool) -> (RoleSpec, RoleSpec) {
    let g = if main { None } else { Some(guild) };
    (
        RoleSpec { id: guild, name: "@everyone".into(), permissions: permission::DEFAULT_EVERYONE, guild: g },
        RoleSpec { id: bot_role, name: bot_name.into(), permissions: permission::BOT_INVITE, guild: g },
    )
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
                ChannelSpec { id: 200, name: "general".into(), ..Default::default() },
                ChannelSpec { id: 201, name: "lobbies".into(), ..Default::default() },
                ChannelSpec { id: 300, name: "Hangout".into(), voice: true, ..Default::default() },
                ChannelSpec { id: 210, name: "town-square".into(), guild: Some(OTHER_GUILD), ..Default::default() },
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
            roles: {
                let (main, main_bot) = default_roles(100, BOT_ROLE, "Clankie", true);
                let (other, other_bot) = default_roles(OTHER_GUILD, OTHER_BOT_ROLE, "Clankie", false);
                vec![main, main_bot, other, other_bot]
            },
            bot_roles: vec![BOT_ROLE, OTHER_BOT_ROLE],
            absent_guilds: Vec::new(),
            closed_dms: Vec::new(),
            owner_id: GUILD_OWNER,
            rest_latency_ms: 0,
            live_backlog_frames: live_backlog(),
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
    /// DAVE as the `CLANKIE_LOOPBACK_DAVE` value says: on unless `off` (or `false`, `no`, `0`,
    /// the spellings every on/off setting takes).
    pub fn from_setting(value: Option<&str>) -> DaveConfig {
        let on = !value.is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "off" | "false" | "no" | "0"));
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
