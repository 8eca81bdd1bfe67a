//! The gateway sessions as data: each session's dispatched frames (what a live connection sends
//! next and a resume replays), the identify and resume counts, and which shards are attached.
//! The gateway layer serves them over its WebSocket; the state appends to them as events happen.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::{Notify, broadcast};

use crate::state::messages::now_ms;

/// Discord's spacing of identifies within one `max_concurrency` bucket.
const IDENTIFY_SPACING_MS: i64 = 5_000;
/// Frames a session keeps for resuming; a resume from before them is refused (op 9), as
/// Discord refuses one it can no longer replay.
const RESUME_BUFFER: usize = 1024;

#[derive(Default)]
struct GatewaySession {
    seq: u64,
    /// The frames dispatched to it, newest last: what a live connection sends next and a resume
    /// replays, kept to the last [`RESUME_BUFFER`] as Discord keeps a bounded buffer.
    log: VecDeque<(u64, String)>,
    /// The shard it identified as: only its guilds' events reach it.
    shard: u32,
    /// The intents it identified with: an event of an intent not asked for never reaches it.
    intents: u64,
}

/// Gateway intents by bit, as Discord numbers them.
pub mod intent {
    pub const GUILDS: u64 = 1 << 0;
    pub const GUILD_VOICE_STATES: u64 = 1 << 7;
    pub const GUILD_MESSAGES: u64 = 1 << 9;
    pub const GUILD_MESSAGE_TYPING: u64 = 1 << 11;
    pub const DIRECT_MESSAGES: u64 = 1 << 12;
    pub const DIRECT_MESSAGE_TYPING: u64 = 1 << 14;
    pub const MESSAGE_CONTENT: u64 = 1 << 15;
}

/// The intent an event is dispatched under, as Discord gates it; `None` for those every
/// session gets (READY, RESUMED, INTERACTION_CREATE, VOICE_SERVER_UPDATE).
pub fn intent_of(t: &str, in_guild: bool) -> Option<u64> {
    match t {
        "MESSAGE_CREATE" | "MESSAGE_UPDATE" | "MESSAGE_DELETE" | "MESSAGE_DELETE_BULK" => {
            Some(if in_guild { intent::GUILD_MESSAGES } else { intent::DIRECT_MESSAGES })
        }
        "TYPING_START" => Some(if in_guild { intent::GUILD_MESSAGE_TYPING } else { intent::DIRECT_MESSAGE_TYPING }),
        "VOICE_STATE_UPDATE" => Some(intent::GUILD_VOICE_STATES),
        t if t.starts_with("GUILD_") || t.starts_with("CHANNEL_") || t.starts_with("THREAD_") => Some(intent::GUILDS),
        _ => None,
    }
}

/// A guild message as a session without the Message Content intent receives it: Discord
/// empties its content, embeds, attachments and components and drops its poll (a forward's
/// snapshot emptied alike) unless it mentions the bot or is the bot's own.
fn without_content(t: &str, d: &serde_json::Value, bot: u64) -> Option<serde_json::Value> {
    if !matches!(t, "MESSAGE_CREATE" | "MESSAGE_UPDATE") || d["guild_id"].is_null() {
        return None;
    }
    let bot = bot.to_string();
    let mentioned = d["mentions"].as_array().is_some_and(|m| m.iter().any(|u| u["id"] == bot.as_str()));
    if mentioned || d["author"]["id"] == bot.as_str() {
        return None;
    }
    let mut d = d.clone();
    empty(&mut d);
    if let Some(object) = d.as_object_mut() {
        object.remove("poll");
    }
    // A forward's snapshot carries the forwarded message's content: emptied as its own would be.
    if let Some(snapshots) = d.get_mut("message_snapshots").and_then(serde_json::Value::as_array_mut) {
        for snapshot in snapshots {
            empty(&mut snapshot["message"]);
        }
    }
    Some(d)
}

/// Empties what Message Content gates in one message object.
fn empty(d: &mut serde_json::Value) {
    d["content"] = serde_json::json!("");
    for field in ["embeds", "attachments", "components"] {
        if !d[field].is_null() {
            d[field] = serde_json::json!([]);
        }
    }
}

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

#[derive(Default)]
struct Kept {
    sessions: HashMap<String, GatewaySession>,
    identifies: u64,
    /// Identifies that came sooner than 5 s after the last one of their bucket.
    identifies_too_fast: u64,
    /// Identifies closed with a fatal code (a wrong token, a privileged intent not allowed).
    identifies_refused: u64,
    /// When each identify bucket last identified.
    identified_at: HashMap<u32, i64>,
    resumes: u64,
    attached: usize,
    /// Connections attached per shard.
    attached_shards: HashMap<u32, usize>,
    /// Frames the next resume replays beyond what the client asked for.
    replay_extra: u64,
}

/// Every gateway session of the loopback, and the signals its connections wait on.
pub(crate) struct Sessions {
    kept: Mutex<Kept>,
    /// Rung after frames were appended: live connections send what they have not sent yet.
    pub dispatched: broadcast::Sender<()>,
    /// Rung to cut every connection without a close frame.
    pub drop_all: broadcast::Sender<()>,
    attached_changed: Notify,
}

impl Default for Sessions {
    fn default() -> Self {
        Sessions {
            kept: Mutex::default(),
            dispatched: broadcast::channel(1024).0,
            drop_all: broadcast::channel(4).0,
            attached_changed: Notify::new(),
        }
    }
}

impl Sessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends one dispatch (`t`, `d`) to every session of `shard`, each under its next sequence.
    /// Callers that store what the event announces hold their own lock across this, so a
    /// connection never sends an event before what it names is there.
    ///
    /// Only to sessions that asked for its intent; a guild message reaches one without the
    /// Message Content intent emptied, as Discord sends it (`bot` is the bot user's id).
    pub fn push(&self, shard: u32, t: &str, d: &serde_json::Value, bot: u64) {
        let needed = intent_of(t, !d["guild_id"].is_null());
        let blank = without_content(t, d, bot);
        let mut kept = self.lock();
        for session in kept.sessions.values_mut().filter(|s| s.shard == shard && needed.is_none_or(|i| s.intents & i != 0)) {
            let d = match &blank {
                Some(blank) if session.intents & intent::MESSAGE_CONTENT == 0 => blank,
                _ => d,
            };
            let frame = serde_json::json!({ "op": 0, "t": t, "s": session.seq + 1, "d": d }).to_string();
            session.push(frame);
        }
    }

    /// Wakes the live connections to send what was appended.
    pub fn ring(&self) {
        let _ = self.dispatched.send(());
    }

    /// Starts a session for `shard` whose READY is `ready`, followed in its log by the dispatches
    /// `after` (GUILD_CREATEs); returns its id and the READY frame (sequence 1). An identify
    /// sooner than 5 s after the last one of its bucket (of `max_concurrency`) is counted as too fast.
    pub fn identify(
        &self,
        shard: u32,
        intents: u64,
        max_concurrency: u32,
        ready: impl FnOnce(&str) -> serde_json::Value,
        after: Vec<(&str, serde_json::Value)>,
    ) -> (String, String) {
        let mut kept = self.lock();
        kept.identifies += 1;
        let now = now_ms();
        let bucket = shard % max_concurrency.max(1);
        if let Some(last) = kept.identified_at.insert(bucket, now)
            && now - last < IDENTIFY_SPACING_MS
        {
            kept.identifies_too_fast += 1;
        }
        let id = format!("loopback-session-{}-{}", kept.identifies, now);
        let frame = serde_json::json!({ "op": 0, "t": "READY", "s": 1, "d": ready(&id) }).to_string();
        let mut session = GatewaySession { seq: 1, log: [(1, frame.clone())].into(), shard, intents };
        for (t, d) in after {
            session.push(serde_json::json!({ "op": 0, "t": t, "s": session.seq + 1, "d": d }).to_string());
        }
        kept.sessions.insert(id.clone(), session);
        (id, frame)
    }

    /// The shard a session identified as.
    pub fn session_shard(&self, session: &str) -> Option<u32> {
        self.lock().sessions.get(session).map(|s| s.shard)
    }

    pub fn identifies(&self) -> u64 {
        self.lock().identifies
    }

    pub fn identifies_too_fast(&self) -> u64 {
        self.lock().identifies_too_fast
    }

    /// Counts an identify refused with a fatal close code.
    pub fn refuse_identify(&self) {
        self.lock().identifies_refused += 1;
    }

    pub fn identifies_refused(&self) -> u64 {
        self.lock().identifies_refused
    }

    pub fn resumes(&self) -> u64 {
        self.lock().resumes
    }

    /// Shards with a connection attached now, each once, in order.
    pub fn attached_shards(&self) -> Vec<u32> {
        let mut shards: Vec<u32> = self.lock().attached_shards.iter().filter(|(_, n)| **n > 0).map(|(s, _)| *s).collect();
        shards.sort_unstable();
        shards
    }

    /// Resumes a session: the frames after `seq`, ending with RESUMED; `None` for an unknown session.
    pub fn resume(&self, session: &str, seq: u64) -> Option<Vec<(u64, String)>> {
        let mut kept = self.lock();
        let extra = std::mem::take(&mut kept.replay_extra);
        let seq = seq.saturating_sub(extra);
        let s = kept.sessions.get_mut(session)?;
        if !s.holds_after(seq) {
            return None;
        }
        let resumed = serde_json::json!({ "op": 0, "t": "RESUMED", "s": s.seq + 1, "d": {} }).to_string();
        s.push(resumed);
        let frames = s.log.iter().filter(|(n, _)| *n > seq).cloned().collect();
        kept.resumes += 1;
        Some(frames)
    }

    /// Frames of a session after `seq`.
    pub fn frames_after(&self, session: &str, seq: u64) -> Vec<(u64, String)> {
        self.lock().sessions.get(session).map(|s| s.log.iter().filter(|(n, _)| *n > seq).cloned().collect()).unwrap_or_default()
    }

    pub fn set_attached(&self, shard: u32, delta: isize) {
        let mut kept = self.lock();
        kept.attached = kept.attached.saturating_add_signed(delta);
        let n = kept.attached_shards.entry(shard).or_default();
        *n = n.saturating_add_signed(delta);
        drop(kept);
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
