//! A loopback Discord for development and tests, on 127.0.0.1.
//!
//! It speaks Discord's real wire protocols, so the real clients (twilight's
//! gateway shard and HTTP client) are what the tests exercise:
//!
//! - the gateway WebSocket, v10, JSON: Hello, Identify → Ready, Heartbeat →
//!   ack, Resume with replay of missed dispatches → Resumed, Invalid Session;
//! - REST under `/api/v10`: create message (nonce enforcement, replies),
//!   trigger typing, channel messages, one message, edit and delete, reactions,
//!   a channel or thread, starting and joining threads, `gateway/bot`,
//!   `users/@me`, and attachment downloads, all under Discord's
//!   rate limits ([`Limits`]: headers, 429s, the invalid-request ban, the
//!   gateway's command cap);
//! - guild membership and permissions as Discord computes them ([`permission`], roles and
//!   channel overwrites): its refusals (50001, 50013, 50007), the guild routes (`users/@me/guilds`,
//!   `guilds/{id}`, its channels, roles and members, the registered commands), and a
//!   GUILD_CREATE per guild after READY for a session with the GUILDS intent;
//! - threads and forum posts as Discord keeps them ([`Thread`]), and messages shaped as
//!   Discord's: mentions with partial members, replies, stickers, polls, embeds, forwards.
//!
//! A JSON control API on the same port drives it (`/control/...`), and `/`
//! serves the sandbox room page where a person chats as several users.
//!
//! It is built in layers, each importing only those below it: [`state`](crate::state) at the
//! bottom (the guild, messages, sessions, interactions and limits as data); the wire protocols
//! above it (`gateway`, `rest`, `ratelimit`, [`interactions`], [`voice`] with DAVE); the
//! `sandbox` (control API and page) on top; this file only wires them.

mod gateway;
pub mod interactions;
mod ratelimit;
mod rest;
mod sandbox;
mod state;
pub mod voice;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::FromRef;

pub use rest::MAX_UPLOAD;
use state::State;
pub use state::config::{
    BOT_ROLE, ChannelKind, ChannelSpec, DaveConfig, GUILD_OWNER, LoopbackConfig, OTHER_BOT_ROLE, OTHER_GUILD, OverwriteSpec, RoleSpec,
    shard_of, showcase_channels,
};
pub use state::faults::FetchFault;
pub use state::limits::{LimitCounts, Limits};
pub use state::permission;
pub use state::permissions::{base_permissions, channel_permissions};
pub use state::sessions::HeartbeatRecord;
pub use state::threads::{ANNOUNCEMENT_THREAD, PRIVATE_THREAD, PUBLIC_THREAD};
pub use state::{MentionedUser, NewAttachment, NewEmbed, NewMessage, NewPoll, Post, StoredMessage, Thread, ThreadError};
pub use state::{OverwriteError, Refusal};
use voice::VoiceServer;
pub use voice::{DaveCounts, DaveView, Loss};

/// A running loopback Discord.
pub struct Loopback {
    addr: SocketAddr,
    state: Arc<State>,
    voice: Arc<VoiceServer>,
    task: tokio::task::JoinHandle<()>,
}

/// What the routes share: each handler takes the part it needs.
#[derive(Clone)]
struct Shared {
    state: Arc<State>,
    voice: Arc<VoiceServer>,
}

impl FromRef<Shared> for Arc<State> {
    fn from_ref(shared: &Shared) -> Arc<State> {
        shared.state.clone()
    }
}

impl FromRef<Shared> for Arc<VoiceServer> {
    fn from_ref(shared: &Shared) -> Arc<VoiceServer> {
        shared.voice.clone()
    }
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
        let voice = VoiceServer::start(&dir, config.voice_roots.as_deref(), config.dave).await.map_err(std::io::Error::other)?;
        let state = Arc::new(State::new(config, addr));
        let app = router(Shared { state: state.clone(), voice: voice.clone() });
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!(error = %e, "loopback Discord stopped");
            }
        });
        Ok(Loopback { addr, state, voice, task })
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
    pub fn user_message(&self, message: NewMessage) -> u64 {
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
        interactions::run_command(&self.state, command)
    }

    /// A user presses a button on a message (INTERACTION_CREATE).
    pub fn press_button(
        &self,
        press: interactions::PressButton,
    ) -> Result<interactions::InteractionRecord, interactions::InteractionError> {
        interactions::press_button(&self.state, press)
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
        self.state.sessions.identifies()
    }

    /// Identifies refused with a fatal close code (4004 for a wrong token, 4014 for Message
    /// Content asked while the application's switch is off): a client that keeps coming back
    /// after one is looping.
    pub fn identifies_refused(&self) -> u64 {
        self.state.sessions.identifies_refused()
    }

    /// Identifies that came sooner than `max_concurrency` allows (5 s apart per bucket).
    pub fn identifies_too_fast(&self) -> u64 {
        self.state.sessions.identifies_too_fast()
    }

    /// The shards with a gateway connection attached now.
    pub fn attached_shards(&self) -> Vec<u32> {
        self.state.sessions.attached_shards()
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

    /// Makes every `/api/v10` request answered `latency` after it arrived (zero: at once), so a
    /// client meets Discord's REST as slow; limits still count each request at its arrival.
    pub fn set_rest_latency(&self, latency: Duration) {
        self.state.limits.set_rest_latency(latency);
    }

    /// `/api/v10` requests by route kind (method and route template, ids as names:
    /// `GET /channels/{channel}/messages/{message}`) since the start or the last reset.
    pub fn rest_calls(&self) -> std::collections::BTreeMap<String, u64> {
        self.state.limits.calls().0
    }

    /// How many `/api/v10` requests came since the start or the last reset.
    pub fn rest_calls_total(&self) -> u64 {
        self.state.limits.calls().1
    }

    /// Zeroes the REST calls counted, so a phase of a run can be measured alone.
    pub fn reset_rest_calls(&self) {
        self.state.limits.reset_calls();
    }

    /// When each message-create request into `channel` arrived, oldest first (ms since the
    /// epoch): what the bot sent, whether or not it became a post.
    pub fn create_requests(&self, channel: u64) -> Vec<i64> {
        self.state.limits.create_requests(channel)
    }

    /// Arms a fault on `GET /channels/{id}` and `GET /channels/{c}/messages/{m}`, the fetches a
    /// message's context is gathered with; `None` disarms it.
    pub fn set_fetch_fault(&self, fault: Option<FetchFault>) {
        self.state.fetch_faults.arm(fault);
    }

    /// How many of those fetches met an armed fault.
    pub fn fetches_faulted(&self) -> u64 {
        self.state.fetch_faults.met()
    }

    /// How many resumes succeeded.
    pub fn resumes(&self) -> u64 {
        self.state.sessions.resumes()
    }

    /// Every gateway Heartbeat (op 1) the connections sent, oldest first (the last 10,000):
    /// when each was read, how long after the one before, and whether it was acked.
    pub fn heartbeats(&self) -> Vec<HeartbeatRecord> {
        self.state.sessions.heartbeats()
    }

    /// Live connections cut (without a close frame) because they fell further behind than their
    /// session's 1,024 kept frames: Discord never skips frames within a connection.
    pub fn connections_cut_behind(&self) -> u64 {
        self.state.sessions.connections_cut_behind()
    }

    /// Frames appended to any session's log (READY, events, RESUMED) and frames connections
    /// wrote from one (a replay counted again): equal once every connection caught up without
    /// a resume.
    pub fn gateway_frames(&self) -> (u64, u64) {
        self.state.sessions.frame_counts()
    }

    /// Drops every gateway connection without a close frame, as a network cut would.
    pub fn drop_connections(&self) {
        self.state.sessions.drop_connections();
    }

    /// Drops every connection, and makes the resume that follows replay the last `frames` dispatches too.
    pub fn drop_and_replay(&self, frames: u64) {
        self.state.sessions.replay_on_resume(frames);
        self.state.sessions.drop_connections();
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
    pub fn voice(&self) -> &VoiceServer {
        &self.voice
    }

    /// A user joins a voice channel; returns their user id.
    pub fn voice_join(&self, channel: u64, author: &str) -> Result<u64, voice::VoiceError> {
        voice::voice_member(&self.state, &self.voice, channel, author, true)
    }

    /// A user leaves a voice channel; returns their user id.
    pub fn voice_leave(&self, channel: u64, author: &str) -> Result<u64, voice::VoiceError> {
        voice::voice_member(&self.state, &self.voice, channel, author, false)
    }

    /// A user says `pcm` (mono, `rate` Hz) aloud in a voice channel; resolves once it has been
    /// sent at real-time pace and returns the frames that reached his connection.
    pub async fn voice_speak(&self, channel: u64, author: &str, pcm: &[i16], rate: u32) -> Result<u32, voice::VoiceError> {
        voice::voice_speak(&self.state, &self.voice, channel, author, pcm, rate).await
    }

    /// Hostile traffic of `kind` toward his connection in a voice channel.
    pub async fn voice_inject(&self, channel: u64, author: &str, kind: &str) -> Result<(), voice::VoiceError> {
        voice::voice_inject(&self.state, &self.voice, channel, author, kind).await
    }

    /// Discord moves the call: a VOICE_SERVER_UPDATE with a new token (or, with `gone`, a null endpoint).
    pub fn voice_server_update(&self, gone: bool) {
        voice::voice_server_update(&self.state, &self.voice, self.state.config.guild_id, gone);
    }

    /// Speech synthesized with espeak-ng, as `/control/voice/speak` voices text: mono PCM and its rate.
    pub async fn synthesize(text: &str) -> Result<(Vec<i16>, u32), String> {
        sandbox::synthesize(text, None).await
    }

    /// What the bot's op 4 does, for a test that plays the gateway's part: the bot's voice state
    /// moves to `channel` and a server update follows (both dispatched). Returns the session id,
    /// token and endpoint a voice connection is made of.
    pub fn bot_voice(&self, channel: u64) -> Result<(String, String, String), voice::VoiceError> {
        let (guild, _) = voice::voice_guild(&self.state, channel)?;
        let (session, token) = voice::bot_voice(&self.state, &self.voice, guild, Some(channel));
        Ok((session, token, self.voice.endpoint()))
    }

    /// Every voice state update he sent (op 4): guild and channel (`None` to leave), in order.
    pub fn bot_voice_updates(&self) -> Vec<(u64, Option<u64>)> {
        self.voice.moves()
    }

    /// The id a user name maps to.
    pub fn user_id(name: &str) -> u64 {
        State::user_id(name)
    }

    /// Waits until a gateway session is attached, or the timeout passes.
    pub async fn wait_for_session(&self, timeout: Duration) -> bool {
        self.state.sessions.wait_for_session(timeout).await
    }
}

/// Records what he says aloud, for the sandbox page.
#[derive(Clone)]
pub struct Speaker(Arc<State>);

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

fn router(shared: Shared) -> Router {
    let state = shared.state.clone();
    Router::new()
        .merge(gateway::routes())
        .merge(rest::routes().route_layer(axum::middleware::from_fn_with_state(state.clone(), ratelimit::enforce)))
        .merge(sandbox::routes())
        .merge(interactions::routes().route_layer(axum::middleware::from_fn_with_state(state, ratelimit::enforce)))
        // Uploads as big as Discord takes from a bot in a boosted guild, and a test's big attachments.
        .layer(axum::extract::DefaultBodyLimit::max(MAX_UPLOAD))
        .with_state(shared)
}

impl Loopback {
    /// The bot's permissions in a channel as Discord computes them now (a DM's are its own);
    /// `None` for an unknown channel or one of a guild the bot is not in.
    pub fn bot_permissions(&self, channel: u64) -> Option<u64> {
        self.state.bot_permissions(channel)
    }

    /// The bot's guild-wide permissions (@everyone's and its roles'); `None` where it is not a member.
    pub fn bot_guild_permissions(&self, guild: u64) -> Option<u64> {
        self.state.bot_base_permissions(guild)
    }

    /// Sets (replaces) the bot's member overwrite on a guild channel (`allow` = `deny` = 0 removes
    /// it) and dispatches CHANNEL_UPDATE; returns the bot's permissions there now.
    pub fn set_bot_overwrite(&self, channel: u64, allow: u64, deny: u64) -> Result<Option<u64>, OverwriteError> {
        self.state.set_bot_overwrite(channel, allow, deny)
    }

    /// Sets (replaces) a user's member overwrite on a guild channel (`allow` = `deny` = 0 removes
    /// it), as a moderator does; CHANNEL_UPDATE reaches the bot where he views the channel.
    /// Returns the user's permissions there now.
    pub fn set_member_overwrite(&self, channel: u64, user: u64, allow: u64, deny: u64) -> Result<u64, OverwriteError> {
        self.state.set_member_overwrite(channel, user, allow, deny)
    }

    /// A member's permissions in a channel as an interaction there carries them (`member.permissions`):
    /// @everyone's, their roles' and the overwrites, a thread's its parent's; `None` in a DM or an
    /// unknown channel.
    pub fn member_permissions(&self, channel: u64, user: u64) -> Option<u64> {
        self.state.member_permissions(channel, user)
    }

    /// Flips the application's Message Content switch, as the Developer Portal does.
    pub fn set_message_content_intent(&self, on: bool) {
        self.state.set_message_content_intent(on);
    }

    /// The application's Message Content switch as it stands.
    pub fn message_content_intent(&self) -> bool {
        self.state.message_content_intent()
    }

    /// Every DM channel the bot opened, as (recipient, channel), in order: whom each DM went to.
    pub fn dms_opened(&self) -> Vec<(u64, u64)> {
        self.state.dms_opened()
    }

    /// A thread is started in `parent` (a text or announcement channel). From a message there,
    /// the thread's id is the message's and it is a PUBLIC_THREAD (ANNOUNCEMENT_THREAD under an
    /// announcement channel), started by the message's author; without one it has a new id and
    /// is a PUBLIC_THREAD (PRIVATE_THREAD when `private`), started by the guild's owner.
    /// THREAD_CREATE (`newly_created`) reaches the bot if he sees it: a private thread only once
    /// he is a member. Returns its id; 0 when refused ([`Loopback::try_start_thread`] says why).
    pub fn start_thread(&self, parent: u64, from_message: Option<u64>, name: &str, private: bool) -> u64 {
        self.try_start_thread(parent, from_message, name, private).unwrap_or(0)
    }

    /// [`Loopback::start_thread`], with why it was refused: an unknown parent or message, a
    /// channel that takes no such thread, a message that already has one.
    pub fn try_start_thread(&self, parent: u64, from_message: Option<u64>, name: &str, private: bool) -> Result<u64, ThreadError> {
        let owner = from_message.and_then(|m| self.state.message(m)).map_or(self.state.config.owner_id, |m| m.author_id);
        self.state.start_thread(state::threads::NewThread { parent, from_message, name, private, owner })
    }

    /// `author` posts in a forum: a PUBLIC_THREAD named `title` with the named tags'
    /// `applied_tags` (names the forum lacks left out), whose first message (`first`'s content,
    /// attachments, mention and the rest; its `channel_id` ignored) has the thread's id, as
    /// Discord's do. THREAD_CREATE, then MESSAGE_CREATE into the thread. Returns (thread id,
    /// first message id), which are equal; (0, 0) when `forum` is not a forum.
    pub fn create_forum_post(&self, forum: u64, author: &str, title: &str, tags: &[&str], first: NewMessage) -> (u64, u64) {
        self.state.forum_post(forum, Some(author), title, tags, first, Vec::new()).unwrap_or((0, 0))
    }

    /// Archives or unarchives a thread (THREAD_UPDATE with its new `thread_metadata`); false for
    /// an unknown thread. A user's message into an archived thread unarchives it first.
    pub fn set_archived(&self, thread: u64, archived: bool) -> bool {
        self.state.set_archived(thread, archived)
    }

    /// Renames a thread (THREAD_UPDATE with the whole thread when the name changed); false for
    /// an unknown thread or a name not 1 to 100 characters.
    pub fn rename_thread(&self, thread: u64, name: &str) -> bool {
        self.state.rename_thread(thread, name)
    }

    /// Sets a forum post's tags to the named ones of its forum (THREAD_UPDATE with the whole
    /// thread when they changed); false for an unknown thread, one not in a forum, or a tag
    /// name the forum lacks.
    pub fn set_post_tags(&self, thread: u64, tags: &[&str]) -> bool {
        self.state.set_post_tags(thread, tags)
    }

    /// Renames a guild channel (CHANNEL_UPDATE with the channel as `GET /channels/{id}` answers
    /// it, when the name changed); false for a thread, a DM, an unknown channel or a name not 1
    /// to 100 characters.
    pub fn rename_channel(&self, channel: u64, name: &str) -> bool {
        self.state.rename_channel(channel, name)
    }

    /// Deletes a thread (THREAD_DELETE); its routes answer 404 10003 after. False for an unknown thread.
    pub fn delete_thread(&self, thread: u64) -> bool {
        self.state.delete_thread(thread)
    }

    /// A thread as it stands (members, archived state, counts).
    pub fn thread(&self, id: u64) -> Option<Thread> {
        self.state.thread(id)
    }

    /// Every live thread, oldest first.
    pub fn threads(&self) -> Vec<Thread> {
        self.state.all_threads()
    }

    /// Gives `author` a nickname (or none) in the main guild: their messages' partial `member`
    /// and mentions of them carry it. The user becomes known, so `<@id>` mentions them.
    pub fn set_nick(&self, author: &str, nick: Option<&str>) {
        self.state.set_nick(self.state.config.guild_id, author, nick);
    }

    /// Gives `author` these roles in the main guild (the partial `member` of their messages).
    pub fn set_member_roles(&self, author: &str, roles: &[u64]) {
        self.state.set_member_roles(self.state.config.guild_id, author, roles);
    }

    /// [`Loopback::set_nick`] in any guild.
    pub fn set_nick_in(&self, guild: u64, author: &str, nick: Option<&str>) {
        self.state.set_nick(guild, author, nick);
    }

    /// [`Loopback::set_member_roles`] in any guild.
    pub fn set_member_roles_in(&self, guild: u64, author: &str, roles: &[u64]) {
        self.state.set_member_roles(guild, author, roles);
    }
}
