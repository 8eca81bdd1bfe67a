//! A loopback Discord for development and tests, on 127.0.0.1.
//!
//! It speaks Discord's real wire protocols, so the real clients (twilight's
//! gateway shard and HTTP client) are what the tests exercise:
//!
//! - the gateway WebSocket, v10, JSON: Hello, Identify → Ready, Heartbeat →
//!   ack, Resume with replay of missed dispatches → Resumed, Invalid Session;
//! - REST under `/api/v10`: create message (nonce enforcement, replies),
//!   trigger typing, channel messages, edit and delete, reactions,
//!   `gateway/bot`, `users/@me`, and attachment downloads, all under Discord's
//!   rate limits ([`Limits`]: headers, 429s, the invalid-request ban, the
//!   gateway's command cap).
//!
//! A JSON control API on the same port drives it (`/control/...`), and `/`
//! serves the sandbox room page where a person chats as several users.

mod control;
mod dave;
pub mod interactions;
mod limits;
mod model;
mod rest;
mod state;
pub mod voice;
mod ws;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use serde::{Deserialize, Serialize};

pub use dave::{DaveCounts, DaveView};
pub use limits::{LimitCounts, Limits};
pub use state::{Post, StoredMessage};
pub use voice::{DaveConfig, Loss};

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
            say_aloud_tts: None,
            shards: 1,
            max_concurrency: 1,
            limits: Limits::default(),
            dave: DaveConfig::default(),
            messages_kept_per_channel: 0,
        }
    }
}

/// A running loopback Discord.
pub struct Loopback {
    addr: SocketAddr,
    state: Arc<state::State>,
    task: tokio::task::JoinHandle<()>,
}

impl Loopback {
    /// Serves on `addr` (port 0 for any free port).
    pub async fn serve(addr: SocketAddr, config: LoopbackConfig) -> std::io::Result<Loopback> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let dir = config.voice_dir.clone().unwrap_or_else(|| {
            static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            std::env::temp_dir().join(format!("clankie-loopback-voice-{}-{n}", std::process::id()))
        });
        let voice = voice::VoiceServer::start(&dir, config.voice_roots.as_deref(), config.dave).await.map_err(std::io::Error::other)?;
        let state = Arc::new(state::State::new(config, addr, voice));
        let app = router(state.clone());
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!(error = %e, "loopback Discord stopped");
            }
        });
        Ok(Loopback { addr, state, task })
    }

    /// Serves on a free loopback port with the default guild.
    pub async fn start() -> std::io::Result<Loopback> {
        Loopback::serve(SocketAddr::from(([127, 0, 0, 1], 0)), LoopbackConfig::default()).await
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its configuration.
    pub fn config(&self) -> &LoopbackConfig {
        &self.state.config
    }

    /// The base URL of the sandbox page and control API.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bytes of an attachment as Discord stores it (what a download of it serves), if any.
    pub fn attachment_bytes(&self, id: u64) -> Option<Vec<u8>> {
        self.state.download(id).map(|(_, bytes)| bytes)
    }

    /// The gateway URL clients connect to.
    pub fn gateway_url(&self) -> String {
        format!("ws://{}/gateway", self.addr)
    }

    /// A user writes a message; returns its id.
    pub fn user_message(&self, message: control::NewMessage) -> u64 {
        self.state.user_message(message)
    }

    /// A user edits their message (MESSAGE_UPDATE); false when there is no such message of a user.
    pub fn user_edit(&self, id: u64, content: String) -> bool {
        self.state.user_edit(id, content)
    }

    /// A message is deleted (MESSAGE_DELETE); false when there is no such message.
    pub fn user_delete(&self, id: u64) -> bool {
        self.state.user_delete(id)
    }

    /// A moderator purges messages of a guild channel (MESSAGE_DELETE_BULK); the ids deleted.
    pub fn bulk_delete(&self, channel: u64, ids: &[u64]) -> Vec<u64> {
        self.state.bulk_delete(channel, ids)
    }

    /// A user runs `/clankie <subcommand>` (INTERACTION_CREATE).
    pub fn run_command(
        &self,
        command: interactions::RunCommand,
    ) -> Result<interactions::InteractionRecord, interactions::InteractionError> {
        self.state.run_command(command)
    }

    /// A user presses a button on a message (INTERACTION_CREATE).
    pub fn press_button(
        &self,
        press: interactions::PressButton,
    ) -> Result<interactions::InteractionRecord, interactions::InteractionError> {
        self.state.press_button(press)
    }

    /// An interaction as it stands: its answer, edits and follow-ups.
    pub fn interaction(&self, id: u64) -> Option<interactions::InteractionRecord> {
        self.state.interactions.record(id)
    }

    /// How many bulk overwrites registered commands, and the names per scope (`None`: global).
    pub fn registered_commands(&self) -> (u64, std::collections::BTreeMap<Option<u64>, Vec<String>>) {
        self.state.interactions.registered()
    }

    /// A user starts typing in a channel.
    pub fn user_typing(&self, channel: u64, author: &str) {
        self.state.user_typing(channel, author)
    }

    /// What the bot posted in a channel.
    pub fn posts(&self, channel: u64) -> Vec<Post> {
        self.state.posts(channel)
    }

    /// When the bot triggered typing in a channel (ms since the epoch): those of the two minutes
    /// before its last trigger there.
    pub fn typing(&self, channel: u64) -> Vec<i64> {
        self.state.typing(channel)
    }

    /// How many times an attachment's bytes were downloaded.
    pub fn downloads(&self, attachment: u64) -> u64 {
        self.state.downloads(attachment)
    }

    /// How many gateway sessions were identified (a resume does not count).
    pub fn identifies(&self) -> u64 {
        self.state.identifies()
    }

    /// Identifies that came sooner than `max_concurrency` allows (5 s apart per bucket).
    pub fn identifies_too_fast(&self) -> u64 {
        self.state.identifies_too_fast()
    }

    /// The shards with a gateway connection attached now.
    pub fn attached_shards(&self) -> Vec<u32> {
        self.state.attached_shards()
    }

    /// What the limits counted: 429s by scope, invalid requests, ban refusals, gateway closes.
    pub fn limit_counts(&self) -> LimitCounts {
        self.state.limits.counts()
    }

    /// When each REST request the global budget counts (the bot's, interaction endpoints aside)
    /// arrived, oldest first (ms since the epoch), for checking Discord's limits from what was observed.
    pub fn request_arrivals(&self) -> Vec<i64> {
        self.state.limits.arrivals()
    }

    /// When each message-create request into `channel` arrived, oldest first (ms since the
    /// epoch): what the bot sent, whether or not it became a post.
    pub fn create_requests(&self, channel: u64) -> Vec<i64> {
        self.state.limits.create_requests(channel)
    }

    /// How many resumes succeeded.
    pub fn resumes(&self) -> u64 {
        self.state.resumes()
    }

    /// Drops every gateway connection without a close frame, as a network cut would.
    pub fn drop_connections(&self) {
        self.state.drop_connections();
    }

    /// Drops every connection, and makes the resume that follows replay the last `frames` dispatches too.
    pub fn drop_and_replay(&self, frames: u64) {
        self.state.replay_on_resume(frames);
        self.state.drop_connections();
    }

    /// A handle that records spoken lines, for a task that outlives a borrow of the loopback.
    pub fn speaker(&self) -> Speaker {
        Speaker(self.state.clone())
    }

    /// Records words he said aloud in a voice channel (shown on the sandbox page, never posted).
    pub fn spoken(&self, channel: u64, text: String, answering: Option<u64>) {
        self.state.spoken(channel, text, answering);
    }

    /// Every message of a channel, oldest first (deleted ones marked).
    pub fn messages(&self, channel: u64) -> Vec<StoredMessage> {
        self.state.all_messages(channel)
    }

    /// The voice server: `SSL_CERT_FILE` for voice clients, what the bot said aloud, close codes.
    pub fn voice(&self) -> &voice::VoiceServer {
        &self.state.voice
    }

    /// A user joins a voice channel; returns their user id.
    pub fn voice_join(&self, channel: u64, author: &str) -> Result<u64, voice::VoiceError> {
        self.state.voice_member(channel, author, true)
    }

    /// A user leaves a voice channel; returns their user id.
    pub fn voice_leave(&self, channel: u64, author: &str) -> Result<u64, voice::VoiceError> {
        self.state.voice_member(channel, author, false)
    }

    /// A user says `pcm` (mono, `rate` Hz) aloud in a voice channel; resolves once it has been
    /// sent at real-time pace and returns the frames that reached his connection.
    pub async fn voice_speak(&self, channel: u64, author: &str, pcm: &[i16], rate: u32) -> Result<u32, voice::VoiceError> {
        self.state.voice_speak(channel, author, pcm, rate).await
    }

    /// Hostile traffic of `kind` toward his connection in a voice channel.
    pub async fn voice_inject(&self, channel: u64, author: &str, kind: &str) -> Result<(), voice::VoiceError> {
        self.state.voice_inject(channel, author, kind).await
    }

    /// Discord moves the call: a VOICE_SERVER_UPDATE with a new token (or, with `gone`, a null endpoint).
    pub fn voice_server_update(&self, gone: bool) {
        self.state.voice_server_update(self.state.config.guild_id, gone);
    }

    /// Speech synthesized with espeak-ng, as `/control/voice/speak` voices text: mono PCM and its rate.
    pub async fn synthesize(text: &str) -> Result<(Vec<i16>, u32), String> {
        control::synthesize(text, None).await
    }

    /// What the bot's op 4 does, for a test that plays the gateway's part: the bot's voice state
    /// moves to `channel` and a server update follows (both dispatched). Returns the session id,
    /// token and endpoint a voice connection is made of.
    pub fn bot_voice(&self, channel: u64) -> Result<(String, String, String), voice::VoiceError> {
        let (guild, _) = self.state.voice_guild(channel)?;
        let (session, token) = self.state.bot_voice(guild, Some(channel));
        Ok((session, token, self.state.voice.endpoint()))
    }

    /// Every voice state update he sent (op 4): guild and channel (`None` to leave), in order.
    pub fn bot_voice_updates(&self) -> Vec<(u64, Option<u64>)> {
        self.state.voice.moves()
    }

    /// The id a user name maps to.
    pub fn user_id(name: &str) -> u64 {
        state::State::user_id(name)
    }

    /// Waits until a gateway session is attached, or the timeout passes.
    pub async fn wait_for_session(&self, timeout: Duration) -> bool {
        self.state.wait_for_session(timeout).await
    }
}

/// Records what he says aloud, for the sandbox page.
#[derive(Clone)]
pub struct Speaker(Arc<state::State>);

impl Speaker {
    /// Records one spoken line in a voice channel.
    pub fn say(&self, channel: u64, text: String, answering: Option<u64>) {
        self.0.spoken(channel, text, answering);
    }
}

impl Drop for Loopback {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub use control::{NewAttachment, NewMessage};

/// The largest request body the loopback takes: a message with its files.
pub const MAX_UPLOAD: usize = 50 * 1024 * 1024;

fn router(state: Arc<state::State>) -> Router {
    Router::new()
        .merge(ws::routes())
        .merge(rest::routes().route_layer(axum::middleware::from_fn_with_state(state.clone(), limits::enforce)))
        .merge(control::routes())
        // Its control routes pass the limits untouched (they are not under `/api/v10`).
        .merge(interactions::routes().route_layer(axum::middleware::from_fn_with_state(state.clone(), limits::enforce)))
        // Uploads as big as Discord takes from a bot in a boosted guild, and a test's big attachments.
        .layer(axum::extract::DefaultBodyLimit::max(MAX_UPLOAD))
        .with_state(state)
}
