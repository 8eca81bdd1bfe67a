//! Everything the loopback Discord remembers.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio::sync::{Notify, broadcast};

use crate::control::NewMessage;
use crate::{LoopbackConfig, model};

/// Discord's epoch, 2015-01-01, in ms since the Unix epoch.
use clankie_proto::time::DISCORD_EPOCH_MS;

pub(crate) fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// A stored attachment's metadata; bytes live in `State::files`.
#[derive(Debug, Clone, Serialize)]
pub struct AttachmentMeta {
    pub id: u64,
    pub filename: String,
    pub content_type: String,
    pub size: u64,
}

/// A message in a channel, by a user or the bot.
#[derive(Debug, Clone, Serialize)]
pub struct StoredMessage {
    pub id: u64,
    pub channel_id: u64,
    pub guild_id: Option<u64>,
    pub author_id: u64,
    pub author_name: String,
    pub bot: bool,
    pub content: String,
    pub mentions_bot: bool,
    pub reply_to: Option<u64>,
    pub attachments: Vec<AttachmentMeta>,
    pub at_ms: i64,
    pub edited: bool,
    /// When it was last edited; 0 when never.
    #[serde(default)]
    pub edited_at_ms: i64,
    pub deleted: bool,
    /// Reactions the bot added (how the sandbox shows each delivery's outcome).
    pub reactions: Vec<String>,
    /// Said aloud in the voice channel, not posted: the sandbox's stand-in for hearing him.
    #[serde(default)]
    pub spoken: bool,
    /// Its action rows of buttons, as Discord's `components`.
    #[serde(default)]
    pub components: Vec<serde_json::Value>,
    /// An ephemeral interaction answer: only its invoker sees it, so it is in no channel listing.
    #[serde(default)]
    pub ephemeral: bool,
}

impl StoredMessage {
    /// A fresh, unedited message with no author yet; callers set who wrote it.
    fn new(
        id: u64,
        channel_id: u64,
        guild_id: Option<u64>,
        content: String,
        reply_to: Option<u64>,
        attachments: Vec<AttachmentMeta>,
        at_ms: i64,
    ) -> Self {
        StoredMessage {
            id,
            channel_id,
            guild_id,
            author_id: 0,
            author_name: String::new(),
            bot: false,
            content,
            mentions_bot: false,
            reply_to,
            attachments,
            at_ms,
            edited: false,
            edited_at_ms: 0,
            deleted: false,
            reactions: Vec::new(),
            spoken: false,
            components: Vec::new(),
            ephemeral: false,
        }
    }
}

/// What the bot posted, as the control API reports it.
#[derive(Debug, Clone, Serialize)]
pub struct Post {
    pub id: u64,
    pub at_ms: i64,
    pub reply_to: Option<u64>,
    pub content: String,
    pub attachments: Vec<String>,
    pub edited: bool,
    pub deleted: bool,
}

#[derive(Default)]
struct GatewaySession {
    seq: u64,
    /// The frames dispatched to it, newest last: what a live connection sends next and a resume
    /// replays, kept to the last [`RESUME_BUFFER`] as Discord keeps a bounded buffer.
    log: std::collections::VecDeque<(u64, String)>,
    /// The shard it identified as: only its guilds' events reach it.
    shard: u32,
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    /// Each DM channel opened (`POST /users/@me/channels`), as (recipient, channel), in order.
    dms_opened: Vec<(u64, u64)>,
    messages: BTreeMap<u64, StoredMessage>,
    /// Each channel's message ids, oldest first, for `messages_kept_per_channel`.
    per_channel: HashMap<u64, std::collections::VecDeque<u64>>,
    typing: HashMap<u64, Vec<i64>>,
    nonces: HashMap<(u64, String), (u64, i64)>,
    /// When `nonces` last let go of those past their window.
    nonces_swept_at: i64,
    sessions: HashMap<String, GatewaySession>,
    /// Uploaded bytes with their content type, served as Discord's CDN would.
    files: HashMap<u64, (String, Vec<u8>)>,
    /// How often each file was fetched, so a test can tell a second download from a cached one.
    downloads: HashMap<u64, u64>,
    identifies: u64,
    /// Identifies that came sooner than 5 s after the last one of their bucket.
    identifies_too_fast: u64,
    /// When each identify bucket last identified.
    identified_at: HashMap<u32, i64>,
    resumes: u64,
    attached: usize,
    /// Connections attached per shard.
    attached_shards: HashMap<u32, usize>,
    /// Frames the next resume replays beyond what the client asked for.
    replay_extra: u64,
}

pub(crate) struct State {
    pub config: LoopbackConfig,
    pub addr: SocketAddr,
    pub voice: std::sync::Arc<crate::voice::VoiceServer>,
    inner: Mutex<Inner>,
    pub dispatched: broadcast::Sender<()>,
    pub drop_all: broadcast::Sender<()>,
    pub attached_changed: Notify,
    /// Discord's limits as they stand for this loopback's clients.
    pub limits: crate::limits::Keeper,
    /// Registered commands and the interactions dispatched.
    pub interactions: crate::interactions::Interactions,
}

/// Discord's spacing of identifies within one `max_concurrency` bucket.
const IDENTIFY_SPACING_MS: i64 = 5_000;

/// How long a nonce is remembered for enforcement.
const NONCE_WINDOW_MS: i64 = 5 * 60 * 1000;
/// Frames a session keeps for resuming; a resume from before them is refused (op 9), as
/// Discord refuses one it can no longer replay.
const RESUME_BUFFER: usize = 1024;
/// Typing calls kept per channel, newest last: those of the last [`TYPING_KEPT_MS`], at most
/// this many, so a channel's record stops growing within minutes.
const TYPING_KEPT: usize = 4096;
/// How long a typing call is kept for tests to read.
const TYPING_KEPT_MS: i64 = 2 * 60 * 1000;

impl GatewaySession {
    fn push(&mut self, frame: String) {
        self.seq += 1;
        self.log.push_back((self.seq, frame));
        while self.log.len() > RESUME_BUFFER {
            self.log.pop_front();
        }
    }

    /// Whether every frame after `seq` is still kept.
    fn holds_after(&self, seq: u64) -> bool {
        self.log.front().is_none_or(|(first, _)| *first <= seq + 1)
    }
}

impl State {
    pub fn new(config: LoopbackConfig, addr: SocketAddr, voice: std::sync::Arc<crate::voice::VoiceServer>) -> State {
        let first = ((now_ms() as u64).saturating_sub(DISCORD_EPOCH_MS)) << 22;
        State {
            config,
            addr,
            voice,
            inner: Mutex::new(Inner { next_id: first, ..Default::default() }),
            dispatched: broadcast::channel(1024).0,
            drop_all: broadcast::channel(4).0,
            attached_changed: Notify::new(),
            limits: crate::limits::Keeper::default(),
            interactions: crate::interactions::Interactions::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a DM channel opened with `recipient`.
    pub fn opened_dm(&self, recipient: u64, channel: u64) {
        self.lock().dms_opened.push((recipient, channel));
    }

    /// A new snowflake, later than every earlier one.
    pub(crate) fn fresh_id(&self) -> u64 {
        State::next_id(&mut self.lock())
    }

    /// Dispatches one gateway event (`t`, `d`) to the sessions of its guild's shard.
    pub(crate) fn dispatch_event(&self, t: &str, d: serde_json::Value) {
        self.dispatch(t, d);
    }

    /// A message by id, an ephemeral one included.
    pub(crate) fn any_message(&self, id: u64) -> Option<StoredMessage> {
        self.lock().messages.get(&id).cloned().filter(|m| !m.deleted)
    }

    /// The message an interaction's answer makes; returns its id. Dispatched unless ephemeral.
    pub(crate) fn interaction_message(&self, channel: u64, content: String, components: Vec<serde_json::Value>, ephemeral: bool) -> u64 {
        let guild_id = self.guild_of(channel).unwrap_or(None);
        let mut inner = self.lock();
        let id = State::next_id(&mut inner);
        let message = self.from_bot(StoredMessage {
            components,
            ephemeral,
            ..StoredMessage::new(id, channel, guild_id, content, None, Vec::new(), now_ms())
        });
        if ephemeral {
            self.keep(&mut inner, message);
        } else {
            self.store_and_dispatch(&mut inner, message);
        }
        id
    }

    /// An interaction's answer edited through its webhook.
    pub(crate) fn edit_interaction_message(&self, id: u64, content: String, components: Vec<serde_json::Value>) {
        if let Some(m) = self.lock().messages.get_mut(&id) {
            m.content = content;
            m.components = components;
            m.edited = true;
            m.edited_at_ms = now_ms();
        }
    }

    /// A snowflake: its time is now, as Discord's ids are, and each is above the last.
    fn next_id(inner: &mut Inner) -> u64 {
        let now = ((now_ms() as u64).saturating_sub(DISCORD_EPOCH_MS)) << 22;
        inner.next_id = (inner.next_id + (1 << 12)).max(now);
        inner.next_id
    }

    /// The guild a channel belongs to; `None` for DM channels; `Err` for unknown channels.
    pub fn guild_of(&self, channel: u64) -> Result<Option<u64>, ()> {
        if let Some(c) = self.config.channels.iter().find(|c| c.id == channel) {
            Ok(Some(c.guild.unwrap_or(self.config.guild_id)))
        } else if self.config.dm_channels.contains(&channel) {
            Ok(None)
        } else {
            Err(())
        }
    }

    pub fn user_id(name: &str) -> u64 {
        // A stable id per name, clear of the bot's.
        10_000 + name.bytes().fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b))) % 1_000_000
    }

    /// Stores a user's message and dispatches MESSAGE_CREATE. Returns its id.
    pub fn user_message(&self, m: NewMessage) -> u64 {
        let guild_id = self.guild_of(m.channel_id).unwrap_or(None);
        let mention = format!("@{}", self.config.bot_name.to_lowercase());
        let mentions_bot = m.mention || m.content.to_lowercase().contains(&mention);
        let mut inner = self.lock();
        let id = State::next_id(&mut inner);
        let files = m.attachments.into_iter().map(|a| {
            let bytes = a.bytes();
            (a.filename, a.content_type, bytes)
        });
        let attachments = State::store_files(&mut inner, files);
        let message = StoredMessage {
            author_id: State::user_id(&m.author),
            author_name: m.author,
            bot: false,
            mentions_bot,
            ..StoredMessage::new(id, m.channel_id, guild_id, m.content, m.reply_to, attachments, now_ms())
        };
        self.store_and_dispatch(&mut inner, message);
        id
    }

    /// A user starts typing: dispatches TYPING_START, as Discord does while someone writes.
    pub fn user_typing(&self, channel: u64, author: &str) {
        let guild_id = self.guild_of(channel).unwrap_or(None);
        let mut d = serde_json::json!({
            "channel_id": channel.to_string(),
            "user_id": State::user_id(author).to_string(),
            "timestamp": now_ms() / 1000,
        });
        if let Some(g) = guild_id {
            d["guild_id"] = serde_json::json!(g.to_string());
        }
        self.dispatch("TYPING_START", d);
    }

    /// Dispatches one gateway event to every session of the shard its guild is on.
    fn dispatch(&self, t: &str, d: serde_json::Value) {
        let guild = d["guild_id"].as_str().and_then(|g| g.parse().ok());
        let shard = crate::shard_of(guild, self.config.shards);
        let mut inner = self.lock();
        for session in inner.sessions.values_mut().filter(|s| s.shard == shard) {
            let frame = serde_json::json!({ "op": 0, "t": t, "s": session.seq + 1, "d": d }).to_string();
            session.push(frame);
        }
        drop(inner);
        let _ = self.dispatched.send(());
    }

    fn voice_state_json(guild: u64, channel: Option<u64>, user: u64, name: &str, session_id: &str) -> serde_json::Value {
        serde_json::json!({
            "member": {
                "user": crate::model::user_json(user, name, false),
                "nick": null, "roles": [], "joined_at": null, "deaf": false, "mute": false, "flags": 0,
                "communication_disabled_until": null,
            },
            "guild_id": guild.to_string(),
            "channel_id": channel.map(|c| c.to_string()),
            "user_id": user.to_string(),
            "session_id": session_id,
            "deaf": false, "mute": false, "self_deaf": false, "self_mute": false,
            "self_stream": false, "self_video": false, "suppress": false,
            "request_to_speak_timestamp": null,
        })
    }

    /// The voice channels of the guild a channel belongs to, and that guild; `Err` unless
    /// `channel` is a voice channel.
    pub(crate) fn voice_guild(&self, channel: u64) -> Result<(u64, Vec<u64>), crate::voice::VoiceError> {
        let spec =
            self.config.channels.iter().find(|c| c.id == channel && c.voice).ok_or(crate::voice::VoiceError::UnknownChannel(channel))?;
        let guild = spec.guild.unwrap_or(self.config.guild_id);
        let channels =
            self.config.channels.iter().filter(|c| c.voice && c.guild.unwrap_or(self.config.guild_id) == guild).map(|c| c.id).collect();
        Ok((guild, channels))
    }

    /// A user joins (or leaves) a voice channel: dispatches their VOICE_STATE_UPDATE.
    pub fn voice_member(&self, channel: u64, author: &str, join: bool) -> Result<u64, crate::voice::VoiceError> {
        let (guild, channels) = self.voice_guild(channel)?;
        let user = State::user_id(author);
        self.voice.set_member(guild, &channels, user, author, join.then_some(channel));
        let session = format!("user-voice-{user}");
        self.dispatch("VOICE_STATE_UPDATE", State::voice_state_json(guild, join.then_some(channel), user, author, &session));
        Ok(user)
    }

    /// `author` says `pcm` (mono, `rate` Hz) aloud in a voice channel; returns the frames that
    /// reached his connection.
    pub async fn voice_speak(&self, channel: u64, author: &str, pcm: &[i16], rate: u32) -> Result<u32, crate::voice::VoiceError> {
        let (guild, _) = self.voice_guild(channel)?;
        self.voice.speak(guild, channel, State::user_id(author), author, pcm, rate).await
    }

    /// Hostile traffic of `kind` toward his connection in a voice channel, as `author`'s stream.
    pub async fn voice_inject(&self, channel: u64, author: &str, kind: &str) -> Result<(), crate::voice::VoiceError> {
        let (guild, _) = self.voice_guild(channel)?;
        self.voice.inject(guild, channel, State::user_id(author), kind).await
    }

    /// The bot's op 4: its VOICE_STATE_UPDATE with a fresh session, then (when it joins) a
    /// VOICE_SERVER_UPDATE, as Discord sends them.
    pub fn bot_voice(&self, guild: u64, channel: Option<u64>) -> (String, String) {
        let (session, token) = self.voice.bot_moves(guild, channel);
        self.dispatch(
            "VOICE_STATE_UPDATE",
            State::voice_state_json(guild, channel, self.config.bot_user_id, &self.config.bot_name, &session),
        );
        if channel.is_some() {
            let d = serde_json::json!({ "guild_id": guild.to_string(), "token": token, "endpoint": self.voice.endpoint() });
            self.dispatch("VOICE_SERVER_UPDATE", d);
        }
        (session, token)
    }

    /// A VOICE_SERVER_UPDATE on Discord's initiative: a new token (the call moved), or a null
    /// endpoint (the voice server went away; another update follows).
    pub fn voice_server_update(&self, guild: u64, gone: bool) {
        let token = self.voice.rotate_token(guild);
        let endpoint = if gone { serde_json::Value::Null } else { serde_json::json!(self.voice.endpoint()) };
        self.dispatch("VOICE_SERVER_UPDATE", serde_json::json!({ "guild_id": guild.to_string(), "token": token, "endpoint": endpoint }));
    }

    /// Keeps uploaded bytes, each under an id of its own, and returns their metadata.
    fn store_files(inner: &mut Inner, files: impl IntoIterator<Item = crate::rest::Upload>) -> Vec<AttachmentMeta> {
        files
            .into_iter()
            .map(|(filename, content_type, bytes)| {
                let id = State::next_id(inner);
                let meta = AttachmentMeta { id, filename, content_type, size: bytes.len() as u64 };
                inner.files.insert(id, (meta.content_type.clone(), bytes));
                meta
            })
            .collect()
    }

    /// A message by the bot.
    fn from_bot(&self, message: StoredMessage) -> StoredMessage {
        StoredMessage { author_id: self.config.bot_user_id, author_name: self.config.bot_name.clone(), bot: true, ..message }
    }

    /// Records words he said aloud in a voice channel; nothing is posted or dispatched.
    pub fn spoken(&self, channel: u64, text: String, answering: Option<u64>) {
        let guild_id = self.guild_of(channel).unwrap_or(None);
        let mut inner = self.lock();
        let id = State::next_id(&mut inner);
        let line = self
            .from_bot(StoredMessage { spoken: true, ..StoredMessage::new(id, channel, guild_id, text, answering, Vec::new(), now_ms()) });
        self.keep(&mut inner, line);
    }

    /// Creates a bot message, or returns the one an earlier request with the same nonce created.
    pub fn bot_message(
        &self,
        channel: u64,
        content: String,
        reply_to: Option<u64>,
        nonce: Option<(String, bool)>,
        files: Vec<crate::rest::Upload>,
        components: Vec<serde_json::Value>,
    ) -> StoredMessage {
        let guild_id = self.guild_of(channel).unwrap_or(None);
        let mut inner = self.lock();
        let now = now_ms();
        if let Some((nonce, true)) = &nonce
            && let Some((existing, at)) = inner.nonces.get(&(channel, nonce.clone())).copied()
            && now - at < NONCE_WINDOW_MS
            && let Some(m) = inner.messages.get(&existing)
        {
            return m.clone();
        }
        let id = State::next_id(&mut inner);
        if let Some((nonce, _)) = nonce {
            // A nonce is enforced only within its window: older ones are let go once a window,
            // so the map holds at most two windows' nonces however long the loopback runs.
            if now - inner.nonces_swept_at >= NONCE_WINDOW_MS {
                inner.nonces.retain(|_, (_, at)| now - *at < NONCE_WINDOW_MS);
                inner.nonces_swept_at = now;
            }
            inner.nonces.insert((channel, nonce), (id, now));
        }
        let attachments = State::store_files(&mut inner, files);
        let message =
            self.from_bot(StoredMessage { components, ..StoredMessage::new(id, channel, guild_id, content, reply_to, attachments, now) });
        self.store_and_dispatch(&mut inner, message.clone());
        message
    }

    /// Stores a message, letting the channel's oldest go past `messages_kept_per_channel`.
    fn keep(&self, inner: &mut Inner, message: StoredMessage) {
        let (id, channel) = (message.id, message.channel_id);
        inner.messages.insert(id, message);
        let kept = self.config.messages_kept_per_channel;
        if kept == 0 {
            return;
        }
        let ids = inner.per_channel.entry(channel).or_default();
        ids.push_back(id);
        let gone: Vec<u64> = if ids.len() > kept { ids.drain(..ids.len() - kept).collect() } else { Vec::new() };
        for id in gone {
            inner.messages.remove(&id);
        }
    }

    fn store_and_dispatch(&self, inner: &mut Inner, message: StoredMessage) {
        let referenced = message.reply_to.and_then(|r| inner.messages.get(&r).cloned());
        let json = model::message_json(self, &message, referenced.as_ref());
        let shard = crate::shard_of(message.guild_id, self.config.shards);
        self.keep(inner, message);
        for session in inner.sessions.values_mut().filter(|s| s.shard == shard) {
            let frame = serde_json::json!({ "op": 0, "t": "MESSAGE_CREATE", "s": session.seq + 1, "d": json }).to_string();
            session.push(frame);
        }
        let _ = self.dispatched.send(());
    }

    pub fn message(&self, id: u64) -> Option<StoredMessage> {
        self.lock().messages.get(&id).cloned().filter(|m| !m.deleted)
    }

    pub fn edit(&self, channel: u64, id: u64, content: String) -> Option<StoredMessage> {
        let mut inner = self.lock();
        let m = inner.messages.get_mut(&id).filter(|m| m.channel_id == channel && m.bot && !m.deleted)?;
        m.content = content;
        m.edited = true;
        m.edited_at_ms = now_ms();
        Some(m.clone())
    }

    /// A user edits their message: stores the new content and dispatches MESSAGE_UPDATE with
    /// the whole message, as Discord does. False when there is no such message of a user.
    pub fn user_edit(&self, id: u64, content: String) -> bool {
        let mut inner = self.lock();
        let Some(m) = inner.messages.get_mut(&id).filter(|m| !m.bot && !m.deleted && !m.spoken) else { return false };
        let mention = format!("@{}", self.config.bot_name.to_lowercase());
        m.mentions_bot = m.mentions_bot || content.to_lowercase().contains(&mention);
        m.content = content;
        m.edited = true;
        // Strictly later than any earlier edit: each edit is an event of its own.
        m.edited_at_ms = now_ms().max(m.edited_at_ms + 1);
        let message = m.clone();
        let referenced = message.reply_to.and_then(|r| inner.messages.get(&r).cloned());
        let json = model::message_json(self, &message, referenced.as_ref());
        drop(inner);
        self.dispatch("MESSAGE_UPDATE", json);
        true
    }

    /// A user deletes their message: it leaves the channel and MESSAGE_DELETE is dispatched
    /// with ids only, as Discord does. False when there is no such message.
    pub fn user_delete(&self, id: u64) -> bool {
        let mut inner = self.lock();
        let Some(m) = inner.messages.get_mut(&id).filter(|m| !m.deleted && !m.spoken) else { return false };
        m.deleted = true;
        let mut d = serde_json::json!({ "id": id.to_string(), "channel_id": m.channel_id.to_string() });
        if let Some(g) = m.guild_id {
            d["guild_id"] = serde_json::json!(g.to_string());
        }
        drop(inner);
        self.dispatch("MESSAGE_DELETE", d);
        true
    }

    /// A moderator purges messages of a guild channel (bulk delete, or a ban that deletes
    /// history): each still there leaves it, anyone's, and one MESSAGE_DELETE_BULK names them
    /// all, as Discord sends it. Returns the ids deleted; none in a DM, where Discord has no
    /// bulk delete.
    pub fn bulk_delete(&self, channel: u64, ids: &[u64]) -> Vec<u64> {
        let mut inner = self.lock();
        let mut guild = None;
        let mut deleted = Vec::new();
        for id in ids {
            if let Some(m) = inner.messages.get_mut(id).filter(|m| m.channel_id == channel && !m.deleted && m.guild_id.is_some()) {
                m.deleted = true;
                guild = m.guild_id;
                deleted.push(*id);
            }
        }
        drop(inner);
        if let Some(guild) = guild {
            let ids: Vec<String> = deleted.iter().map(u64::to_string).collect();
            self.dispatch(
                "MESSAGE_DELETE_BULK",
                serde_json::json!({ "ids": ids, "channel_id": channel.to_string(), "guild_id": guild.to_string() }),
            );
        }
        deleted
    }

    pub fn delete(&self, channel: u64, id: u64) -> bool {
        let mut inner = self.lock();
        match inner.messages.get_mut(&id).filter(|m| m.channel_id == channel && !m.deleted) {
            Some(m) => {
                m.deleted = true;
                true
            }
            None => false,
        }
    }

    pub fn react(&self, channel: u64, id: u64, emoji: String) -> bool {
        let mut inner = self.lock();
        match inner.messages.get_mut(&id).filter(|m| m.channel_id == channel && !m.deleted) {
            Some(m) => {
                if !m.reactions.contains(&emoji) {
                    m.reactions.push(emoji);
                }
                true
            }
            None => false,
        }
    }

    pub fn trigger_typing(&self, channel: u64) {
        let mut inner = self.lock();
        let calls = inner.typing.entry(channel).or_default();
        let now = now_ms();
        calls.push(now);
        let old = calls.iter().take_while(|at| now - **at > TYPING_KEPT_MS).count().max(calls.len().saturating_sub(TYPING_KEPT));
        calls.drain(..old);
    }

    /// Messages of a channel, newest first, as Discord lists them.
    pub fn channel_messages(&self, channel: u64, before: Option<u64>, limit: usize) -> Vec<StoredMessage> {
        self.lock()
            .messages
            .values()
            .rev()
            .filter(|m| m.channel_id == channel && !m.deleted && !m.spoken && !m.ephemeral && before.is_none_or(|b| m.id < b))
            .take(limit)
            .cloned()
            .collect()
    }

    /// Every message of a channel, oldest first, deleted ones included (for the sandbox page).
    pub fn all_messages(&self, channel: u64) -> Vec<StoredMessage> {
        self.lock().messages.values().filter(|m| m.channel_id == channel).cloned().collect()
    }

    /// A file as the CDN serves it; counts the download.
    pub fn download(&self, id: u64) -> Option<(String, Vec<u8>)> {
        let mut inner = self.lock();
        let file = inner.files.get(&id).cloned()?;
        *inner.downloads.entry(id).or_default() += 1;
        Some(file)
    }

    pub fn downloads(&self, id: u64) -> u64 {
        self.lock().downloads.get(&id).copied().unwrap_or_default()
    }

    pub fn posts(&self, channel: u64) -> Vec<Post> {
        self.lock()
            .messages
            .values()
            .filter(|m| m.channel_id == channel && m.bot && !m.spoken && !m.ephemeral)
            .map(|m| Post {
                id: m.id,
                at_ms: m.at_ms,
                reply_to: m.reply_to,
                content: m.content.clone(),
                attachments: m.attachments.iter().map(|a| a.filename.clone()).collect(),
                edited: m.edited,
                deleted: m.deleted,
            })
            .collect()
    }

    pub fn typing(&self, channel: u64) -> Vec<i64> {
        self.lock().typing.get(&channel).cloned().unwrap_or_default()
    }

    /// Starts a gateway session for `shard` (its id; the total was checked); returns its id
    /// and the READY frame (sequence 1). An identify sooner than 5 s after the last one of its
    /// bucket is counted as too fast, the limit Discord's `max_concurrency` sets.
    pub fn identify(&self, shard: u32) -> (String, String) {
        let mut inner = self.lock();
        inner.identifies += 1;
        let now = now_ms();
        let bucket = shard % self.config.max_concurrency.max(1);
        if let Some(last) = inner.identified_at.insert(bucket, now)
            && now - last < IDENTIFY_SPACING_MS
        {
            inner.identifies_too_fast += 1;
        }
        let id = format!("loopback-session-{}-{}", inner.identifies, now);
        let ready = model::ready_json(self, &id, shard);
        let frame = serde_json::json!({ "op": 0, "t": "READY", "s": 1, "d": ready }).to_string();
        inner.sessions.insert(id.clone(), GatewaySession { seq: 1, log: [(1, frame.clone())].into(), shard });
        (id, frame)
    }

    /// The shard a session identified as.
    pub fn session_shard(&self, session: &str) -> Option<u32> {
        self.lock().sessions.get(session).map(|s| s.shard)
    }

    pub fn identifies_too_fast(&self) -> u64 {
        self.lock().identifies_too_fast
    }

    /// Shards with a connection attached now, each once, in order.
    pub fn attached_shards(&self) -> Vec<u32> {
        let mut shards: Vec<u32> = self.lock().attached_shards.iter().filter(|(_, n)| **n > 0).map(|(s, _)| *s).collect();
        shards.sort_unstable();
        shards
    }

    /// Resumes a session: the frames after `seq`, ending with RESUMED; `None` for an unknown session.
    pub fn resume(&self, session: &str, seq: u64) -> Option<Vec<(u64, String)>> {
        let mut inner = self.lock();
        let extra = std::mem::take(&mut inner.replay_extra);
        let seq = seq.saturating_sub(extra);
        let s = inner.sessions.get_mut(session)?;
        if !s.holds_after(seq) {
            return None;
        }
        let resumed = serde_json::json!({ "op": 0, "t": "RESUMED", "s": s.seq + 1, "d": {} }).to_string();
        s.push(resumed);
        let frames = s.log.iter().filter(|(n, _)| *n > seq).cloned().collect();
        inner.resumes += 1;
        Some(frames)
    }

    /// Frames of a session after `seq`.
    pub fn frames_after(&self, session: &str, seq: u64) -> Vec<(u64, String)> {
        self.lock().sessions.get(session).map(|s| s.log.iter().filter(|(n, _)| *n > seq).cloned().collect()).unwrap_or_default()
    }

    pub fn identifies(&self) -> u64 {
        self.lock().identifies
    }

    pub fn resumes(&self) -> u64 {
        self.lock().resumes
    }

    pub fn set_attached(&self, shard: u32, delta: isize) {
        let mut inner = self.lock();
        inner.attached = inner.attached.saturating_add_signed(delta);
        let n = inner.attached_shards.entry(shard).or_default();
        *n = n.saturating_add_signed(delta);
        drop(inner);
        self.attached_changed.notify_waiters();
    }

    pub fn drop_connections(&self) {
        let _ = self.drop_all.send(());
    }

    /// Makes the next resume replay `frames` dispatches the client already had, as Discord may.
    pub fn replay_on_resume(&self, frames: u64) {
        self.lock().replay_extra = frames;
    }

    pub async fn wait_for_session(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.attached_changed.notified();
            if self.lock().attached > 0 {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.lock().attached > 0;
            }
        }
    }
}

impl crate::Loopback {
    /// Every DM channel the bot opened, as (recipient, channel), in order: whom each DM went to.
    pub fn dms_opened(&self) -> Vec<(u64, u64)> {
        self.state.lock().dms_opened.clone()
    }
}
