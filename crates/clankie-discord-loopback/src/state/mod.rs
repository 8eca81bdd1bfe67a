//! Everything the loopback Discord remembers, as data: the bottom layer, owning no protocol.
//!
//! [`State`] holds the guild's messages, files and typing, the gateway sessions' event logs,
//! the interactions and the limits' counters. The wire layers above (gateway, REST, rate
//! limits, interactions, voice) read and change it; it imports nothing of theirs.

pub mod config;
pub mod faults;
mod guilds;
pub mod interactions;
pub mod limits;
mod members;
pub mod messages;
mod people;
pub mod permission;
pub mod permissions;
pub mod sessions;
pub mod shapes;
mod threading;
pub mod threads;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Mutex;

/// Discord's epoch, 2015-01-01, in ms since the Unix epoch.
use clankie_proto::time::DISCORD_EPOCH_MS;

pub use config::LoopbackConfig;
use config::{Site, shard_of};
pub use guilds::{OverwriteError, Refusal};
pub use messages::{AttachmentMeta, MentionedUser, NewAttachment, NewEmbed, NewMessage, NewPoll, Post, StoredMessage};
pub(crate) use messages::{Upload, now_ms};
use sessions::{Sessions, intent};
use shapes::Referenced;
pub use threads::{Thread, ThreadError};

#[derive(Default)]
struct Inner {
    next_id: u64,
    /// Each DM channel opened (`POST /users/@me/channels`), as (recipient, channel), in order.
    dms_opened: Vec<(u64, u64)>,
    /// Whom each DM channel goes to now: the last recipient opened there, or the last user who
    /// wrote in it (the loopback's users share its DM channels).
    dm_recipients: HashMap<u64, u64>,
    messages: BTreeMap<u64, StoredMessage>,
    /// Each channel's message ids, oldest first, for `messages_kept_per_channel`.
    per_channel: HashMap<u64, std::collections::VecDeque<u64>>,
    typing: HashMap<u64, Vec<i64>>,
    nonces: HashMap<(u64, String), (u64, i64)>,
    /// When `nonces` last let go of those past their window.
    nonces_swept_at: i64,
    /// Uploaded bytes with their content type, served as Discord's CDN would.
    files: HashMap<u64, (String, Vec<u8>)>,
    /// How often each file was fetched, so a test can tell a second download from a cached one.
    downloads: HashMap<u64, u64>,
    /// The users the loopback knows and its guilds' members.
    people: people::People,
}

/// The loopback's state. Reads as its [`Site`] (what it contains, where it is) too.
pub(crate) struct State {
    site: Site,
    inner: Mutex<Inner>,
    /// The gateway sessions and the signals their connections wait on.
    pub sessions: Sessions,
    /// Discord's limits as they stand for this loopback's clients.
    pub limits: limits::Keeper,
    /// Registered commands and the interactions dispatched.
    pub interactions: interactions::Interactions,
    /// The roles, overwrites and Message Content switch as they stand (the control API changes them).
    pub grants: permissions::Keeper,
    /// The live threads. Locked after `inner` when both are, never the other way.
    threads: threads::Keeper,
    /// A fault a test armed on the context fetches.
    pub fetch_faults: faults::Keeper,
    /// When the loopback started: when the bot joined its guilds.
    started_ms: i64,
}

impl std::ops::Deref for State {
    type Target = Site;

    fn deref(&self) -> &Site {
        &self.site
    }
}

/// Discord's flag on a message a thread was started from.
const HAS_THREAD: u64 = 1 << 5;

/// How long a nonce is remembered for enforcement.
const NONCE_WINDOW_MS: i64 = 5 * 60 * 1000;
/// Typing calls kept per channel, newest last: those of the last [`TYPING_KEPT_MS`], at most
/// this many, so a channel's record stops growing within minutes.
const TYPING_KEPT: usize = 4096;
/// How long a typing call is kept for tests to read.
const TYPING_KEPT_MS: i64 = 2 * 60 * 1000;

impl State {
    pub fn new(config: LoopbackConfig, addr: SocketAddr) -> State {
        let first = ((now_ms() as u64).saturating_sub(DISCORD_EPOCH_MS)) << 22;
        State {
            inner: Mutex::new(Inner { next_id: first, ..Default::default() }),
            sessions: Sessions::with_live_backlog(config.live_backlog_frames),
            limits: limits::Keeper::new(config.rest_latency_ms),
            interactions: interactions::Interactions::default(),
            grants: permissions::Keeper::seeded(&config),
            threads: threads::Keeper::default(),
            fetch_faults: faults::Keeper::default(),
            started_ms: now_ms(),
            site: Site { config, addr },
        }
    }

    /// A message as REST answers it: a reply with the message it answers (`null` when that was
    /// deleted), a thread's starter message with its thread, no partial members.
    pub(crate) fn message_json(&self, m: &StoredMessage) -> serde_json::Value {
        let referenced = m.reply_to.and_then(|r| self.message(r));
        let referenced = referenced.as_ref().map_or(Referenced::Gone, Referenced::Found);
        let mut v = shapes::message_json(&self.site, m, referenced, None);
        if let Some(t) = self.thread(m.id).filter(|t| t.parent == m.channel_id) {
            v["thread"] = self.thread_json(&t);
            v["flags"] = serde_json::json!(v["flags"].as_u64().unwrap_or(0) | HAS_THREAD);
        }
        v
    }

    /// A message as the gateway dispatches it: the author's and each mentioned user's partial
    /// member in a guild; what a reply carries of the message it answers as `referenced` says.
    fn event_json(&self, inner: &Inner, m: &StoredMessage, referenced: Referenced<'_>) -> serde_json::Value {
        let member = |user: u64| m.guild_id.and_then(|g| self.partial_member(&inner.people, g, user));
        shapes::message_json(&self.site, m, referenced, Some(&member))
    }

    /// What a reply's MESSAGE_CREATE or MESSAGE_UPDATE carries of the message it answers.
    fn referenced_in<'a>(inner: &'a Inner, m: &StoredMessage) -> Referenced<'a> {
        match m.reply_to.and_then(|r| inner.messages.get(&r)).filter(|r| !r.deleted) {
            Some(r) => Referenced::Found(r),
            None => Referenced::Gone,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a DM channel opened with `recipient`.
    pub fn opened_dm(&self, recipient: u64, channel: u64) {
        let mut inner = self.lock();
        inner.dms_opened.push((recipient, channel));
        inner.dm_recipients.insert(channel, recipient);
    }

    /// A new snowflake, later than every earlier one.
    pub(crate) fn fresh_id(&self) -> u64 {
        State::next_id(&mut self.lock())
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
            self.store_and_dispatch(&mut inner, message, false);
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

    /// The guild a channel (a thread included) belongs to; `None` for DM channels; `Err` for
    /// unknown channels (a deleted thread among them).
    pub fn guild_of(&self, channel: u64) -> Result<Option<u64>, ()> {
        if let Some(c) = self.config.channels.iter().find(|c| c.id == channel) {
            Ok(Some(c.guild.unwrap_or(self.config.guild_id)))
        } else if self.config.dm_channels.contains(&channel) {
            Ok(None)
        } else if let Some(t) = self.thread(channel) {
            Ok(Some(t.guild))
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
        self.user_message_with_id(m, None)
    }

    /// A user's message under `id` when given (a forum post's first message takes its thread's),
    /// else a new one. Into a thread, what the thread does first ([`State::thread_activity`]) is
    /// dispatched before its MESSAGE_CREATE. Its mentions are resolved as Discord resolves them;
    /// a forward of a message that is no longer there is a plain message.
    pub(crate) fn user_message_with_id(&self, m: NewMessage, id: Option<u64>) -> u64 {
        let guild_id = self.guild_of(m.channel_id).unwrap_or(None);
        let author_id = State::user_id(&m.author);
        let mut inner = self.lock();
        let id = id.unwrap_or_else(|| State::next_id(&mut inner));
        inner.people.know(guild_id, author_id, &m.author);
        let forwarded = m
            .forward
            .and_then(|f| inner.messages.get(&f))
            .filter(|f| !f.deleted && !f.spoken && !f.ephemeral)
            .map(|f| Box::new(StoredMessage { forwarded: None, ..f.clone() }));
        let (content, reply_to) = if forwarded.is_some() { (String::new(), None) } else { (m.content, m.reply_to) };
        let resolved = self.resolve_mentions(&inner.people, guild_id, &content);
        let mention = format!("@{}", self.config.bot_name.to_lowercase());
        let mentions_bot = m.mention || content.to_lowercase().contains(&mention) || resolved.bot;
        let mentioned: Vec<u64> = resolved.users.iter().map(|u| u.id).collect();
        self.thread_activity(m.channel_id, id, author_id, mentions_bot, &mentioned);
        let files = m.attachments.into_iter().map(|a| {
            let bytes = a.bytes();
            (a.filename, a.content_type, bytes)
        });
        let attachments = State::store_files(&mut inner, files);
        if self.config.dm_channels.contains(&m.channel_id) {
            inner.dm_recipients.insert(m.channel_id, author_id);
        }
        let message = StoredMessage {
            author_id,
            author_name: m.author,
            bot: false,
            mentions_bot,
            mentions: resolved.users,
            mention_roles: resolved.roles,
            stickers: m.stickers,
            poll: m.poll,
            embeds: m.embeds,
            forwarded,
            ..StoredMessage::new(id, m.channel_id, guild_id, content, reply_to, attachments, now_ms())
        };
        self.store_and_dispatch(&mut inner, message, m.omit_referenced);
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
    /// Nothing reaches the bot of a guild it is not in or of a channel it cannot view.
    pub(crate) fn dispatch(&self, t: &str, d: serde_json::Value) {
        if !self.bot_sees(t, &d) {
            return;
        }
        let guild = d["guild_id"].as_str().and_then(|g| g.parse().ok());
        let shard = shard_of(guild, self.config.shards);
        self.sessions.push(shard, t, &d, self.config.bot_user_id);
        self.sessions.ring();
    }

    /// Keeps uploaded bytes, each under an id of its own, and returns their metadata.
    fn store_files(inner: &mut Inner, files: impl IntoIterator<Item = Upload>) -> Vec<AttachmentMeta> {
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
    /// Into a thread, what the thread does first ([`State::thread_activity`]: unarchiving, his
    /// joining) is dispatched before its MESSAGE_CREATE.
    #[allow(clippy::too_many_arguments)]
    pub fn bot_message(
        &self,
        channel: u64,
        content: String,
        reply_to: Option<u64>,
        nonce: Option<(String, bool)>,
        files: Vec<Upload>,
        components: Vec<serde_json::Value>,
        embeds: Vec<NewEmbed>,
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
        let resolved = self.resolve_mentions(&inner.people, guild_id, &content);
        let mentioned: Vec<u64> = resolved.users.iter().map(|u| u.id).collect();
        self.thread_activity(channel, id, self.config.bot_user_id, false, &mentioned);
        let attachments = State::store_files(&mut inner, files);
        let message = self.from_bot(StoredMessage {
            components,
            embeds,
            mentions: resolved.users,
            mention_roles: resolved.roles,
            ..StoredMessage::new(id, channel, guild_id, content, reply_to, attachments, now)
        });
        self.store_and_dispatch(&mut inner, message.clone(), false);
        message
    }

    /// The bot's first message of a forum post he made, under the thread's id.
    pub(crate) fn bot_post_with_id(&self, id: u64, content: String, embeds: Vec<NewEmbed>, files: Vec<Upload>) {
        let guild_id = self.guild_of(id).unwrap_or(None);
        let mut inner = self.lock();
        let resolved = self.resolve_mentions(&inner.people, guild_id, &content);
        self.thread_activity(id, id, self.config.bot_user_id, false, &[]);
        let attachments = State::store_files(&mut inner, files);
        let message = self.from_bot(StoredMessage {
            mentions: resolved.users,
            mention_roles: resolved.roles,
            embeds,
            ..StoredMessage::new(id, id, guild_id, content, None, attachments, now_ms())
        });
        self.store_and_dispatch(&mut inner, message, false);
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

    /// Stores a message and dispatches its MESSAGE_CREATE; `omit_referenced` leaves a reply's
    /// `referenced_message` out, as when Discord did not fetch it.
    fn store_and_dispatch(&self, inner: &mut Inner, message: StoredMessage, omit_referenced: bool) {
        let referenced = if omit_referenced { Referenced::Unfetched } else { State::referenced_in(inner, &message) };
        let json = self.event_json(inner, &message, referenced);
        let shard = shard_of(message.guild_id, self.config.shards);
        self.keep(inner, message);
        if !self.bot_sees("MESSAGE_CREATE", &json) {
            return;
        }
        // Under the lock that stored it: no connection sends the event before the message is there.
        self.sessions.push(shard, "MESSAGE_CREATE", &json, self.config.bot_user_id);
        self.sessions.ring();
    }

    pub fn message(&self, id: u64) -> Option<StoredMessage> {
        self.lock().messages.get(&id).cloned().filter(|m| !m.deleted)
    }

    pub fn edit(&self, channel: u64, id: u64, content: String) -> Option<StoredMessage> {
        let mut inner = self.lock();
        let guild = inner.messages.get(&id)?.guild_id;
        let resolved = self.resolve_mentions(&inner.people, guild, &content);
        let m = inner.messages.get_mut(&id).filter(|m| m.channel_id == channel && m.bot && !m.deleted)?;
        m.content = content;
        m.mentions = resolved.users;
        m.mention_roles = resolved.roles;
        m.edited = true;
        m.edited_at_ms = now_ms();
        Some(m.clone())
    }

    /// A user edits their message: stores the new content and dispatches MESSAGE_UPDATE with
    /// the whole message, as Discord does. False when there is no such message of a user.
    pub fn user_edit(&self, id: u64, content: String) -> bool {
        let mut inner = self.lock();
        let Some(guild) = inner.messages.get(&id).map(|m| m.guild_id) else { return false };
        let resolved = self.resolve_mentions(&inner.people, guild, &content);
        let Some(m) = inner.messages.get_mut(&id).filter(|m| !m.bot && !m.deleted && !m.spoken) else { return false };
        let mention = format!("@{}", self.config.bot_name.to_lowercase());
        m.mentions_bot = m.mentions_bot || content.to_lowercase().contains(&mention) || resolved.bot;
        m.mentions = resolved.users;
        m.mention_roles = resolved.roles;
        m.content = content;
        m.edited = true;
        // Strictly later than any earlier edit: each edit is an event of its own.
        m.edited_at_ms = now_ms().max(m.edited_at_ms + 1);
        let message = m.clone();
        let json = self.event_json(&inner, &message, State::referenced_in(&inner, &message));
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

    /// Starts a gateway session for `shard` with `intents`; returns its id and the READY frame.
    /// With the GUILDS intent a GUILD_CREATE per guild of the shard follows READY in the
    /// session's log (`voice_states` gives each guild's), so a resume replays them in order.
    pub fn identify(&self, shard: u32, intents: u64, voice_states: &dyn Fn(u64) -> Vec<serde_json::Value>) -> (String, String) {
        let creates = if intents & intent::GUILDS != 0 { self.guild_creates(shard, voice_states) } else { Vec::new() };
        let after = creates.into_iter().map(|d| ("GUILD_CREATE", d)).collect();
        self.sessions.identify(shard, intents, self.config.max_concurrency, |id| shapes::ready_json(&self.site, id, shard), after)
    }

    /// Every DM channel the bot opened, as (recipient, channel), in order: whom each DM went to.
    pub fn dms_opened(&self) -> Vec<(u64, u64)> {
        self.lock().dms_opened.clone()
    }
}
