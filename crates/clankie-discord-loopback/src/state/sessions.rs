//! The gateway sessions as data: each session's dispatched frames (what a live connection sends
//! next and a resume replays), the identify and resume counts, and which shards are attached.
//! The gateway layer serves them over its WebSocket; the state appends to them as events happen.
//! Also what the connections did: their heartbeats, the frames dispatched and sent, and the
//! connections cut for falling behind.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, broadcast};

use crate::state::messages::now_ms;

/// Discord's spacing of identifies within one `max_concurrency` bucket.
const IDENTIFY_SPACING_MS: i64 = 5_000;
/// Frames a session keeps for resuming; a resume from before them is refused (op 9), as
/// Discord refuses one it can no longer replay. A live connection that falls further behind
/// than this is cut, never skipped ahead.
pub(crate) const RESUME_BUFFER: usize = 1024;
/// The default frames a live connection may have yet to send before it is given up on
/// (`LoopbackConfig::live_backlog_frames`): Discord writes each event to a connection as it
/// happens, so a burst waits in the connection's own queue, not in the resume buffer; only a
/// client that stops reading for this long is cut.
pub(crate) const LIVE_BACKLOG: usize = 100_000;
/// Heartbeats kept for tests to read: the last this many, across every connection.
pub(crate) const HEARTBEATS_KEPT: usize = 10_000;

/// One gateway Heartbeat (op 1) as the loopback read it, so a test can tell whether a client
/// kept its interval and whether a busy connection answered it late.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct HeartbeatRecord {
    /// The WebSocket connection it came on (counted from 1 as connections open).
    pub connection: u64,
    /// When the loopback read it (ms since the epoch).
    pub at_ms: i64,
    /// Since this connection's previous heartbeat, or since its Hello for the first.
    pub since_last_ms: i64,
    /// The interval announced in Hello.
    pub interval_ms: u64,
    /// Whether its Heartbeat ACK (op 11) went out.
    pub acked: bool,
}

/// What a live connection sends next from its session's log.
#[derive(Debug)]
pub(crate) enum Next {
    /// Frames in order after where it stands, at most as many as asked; `more` when others
    /// wait behind them.
    Frames { frames: Vec<(u64, String)>, more: bool },
    /// The log no longer holds every frame after where it stands: it fell too far behind.
    Behind,
}

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
    /// How far its live connection has sent, while one is attached: frames after it are kept
    /// (up to [`LIVE_BACKLOG`]) whatever the resume buffer's bound.
    live_sent: Option<u64>,
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
    fn push(&mut self, frame: String, live_backlog: usize) {
        self.seq += 1;
        self.log.push_back((self.seq, frame));
        while self.log.len() > RESUME_BUFFER {
            let unsent = self.live_sent.is_some_and(|sent| self.log.front().is_some_and(|(n, _)| *n > sent));
            if unsent && self.log.len() <= live_backlog {
                break;
            }
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
    /// The last [`HEARTBEATS_KEPT`] heartbeats, oldest first.
    heartbeats: VecDeque<HeartbeatRecord>,
}

/// Every gateway session of the loopback, and the signals its connections wait on.
pub(crate) struct Sessions {
    kept: Mutex<Kept>,
    /// Rung after frames were appended: live connections send what they have not sent yet.
    pub dispatched: broadcast::Sender<()>,
    /// Rung to cut every connection without a close frame.
    pub drop_all: broadcast::Sender<()>,
    attached_changed: Notify,
    /// Connections opened so far: the next one's number.
    connections: AtomicU64,
    /// Frames appended to any session's log (READY, events, RESUMED).
    frames_dispatched: AtomicU64,
    /// Frames connections wrote from a session's log (a replay counted again).
    frames_sent: AtomicU64,
    /// Live connections cut because their session's log no longer held what they had to send next.
    cut_behind: AtomicU64,
    /// Frames a live connection may have yet to send before it is cut.
    live_backlog: usize,
}

impl Sessions {
    /// Sessions whose live connections may fall `live_backlog` frames behind before they are cut.
    pub(crate) fn with_live_backlog(live_backlog: usize) -> Sessions {
        Sessions { live_backlog, ..Sessions::default() }
    }
}

impl Default for Sessions {
    fn default() -> Self {
        Sessions {
            kept: Mutex::default(),
            dispatched: broadcast::channel(1024).0,
            drop_all: broadcast::channel(4).0,
            attached_changed: Notify::new(),
            connections: AtomicU64::new(0),
            frames_dispatched: AtomicU64::new(0),
            frames_sent: AtomicU64::new(0),
            cut_behind: AtomicU64::new(0),
            live_backlog: LIVE_BACKLOG,
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
        let mut appended = 0;
        for session in kept.sessions.values_mut().filter(|s| s.shard == shard && needed.is_none_or(|i| s.intents & i != 0)) {
            let d = match &blank {
                Some(blank) if session.intents & intent::MESSAGE_CONTENT == 0 => blank,
                _ => d,
            };
            let frame = serde_json::json!({ "op": 0, "t": t, "s": session.seq + 1, "d": d }).to_string();
            session.push(frame, self.live_backlog);
            appended += 1;
        }
        self.frames_dispatched.fetch_add(appended, Ordering::Relaxed);
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
        let mut session = GatewaySession { seq: 1, log: [(1, frame.clone())].into(), shard, intents, live_sent: None };
        for (t, d) in after {
            session.push(serde_json::json!({ "op": 0, "t": t, "s": session.seq + 1, "d": d }).to_string(), self.live_backlog);
        }
        self.frames_dispatched.fetch_add(session.seq, Ordering::Relaxed);
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

    /// Resumes a session: appends RESUMED to its log and returns where the connection stands
    /// in it (the frames after that are what it replays, RESUMED last); `None` for an unknown
    /// session or one whose log no longer holds every frame after `seq`.
    pub fn resume(&self, session: &str, seq: u64) -> Option<u64> {
        let mut kept = self.lock();
        let extra = std::mem::take(&mut kept.replay_extra);
        let seq = seq.saturating_sub(extra);
        let live_backlog = self.live_backlog;
        let s = kept.sessions.get_mut(session)?;
        // Only the resume buffer replays, whatever a lagging connection's queue still held.
        if !s.holds_after(seq) || s.seq.saturating_sub(seq) > RESUME_BUFFER as u64 {
            return None;
        }
        let resumed = serde_json::json!({ "op": 0, "t": "RESUMED", "s": s.seq + 1, "d": {} }).to_string();
        s.push(resumed, live_backlog);
        kept.resumes += 1;
        drop(kept);
        self.frames_dispatched.fetch_add(1, Ordering::Relaxed);
        Some(seq)
    }

    /// The next frames of a session after `seq`, at most `max` of them, or [`Next::Behind`]
    /// when some after `seq` are gone from its log (Discord never skips within a live
    /// connection). An unknown session has nothing to send.
    pub fn next_frames(&self, session: &str, seq: u64, max: usize) -> Next {
        let kept = self.lock();
        let Some(s) = kept.sessions.get(session) else { return Next::Frames { frames: Vec::new(), more: false } };
        if !s.holds_after(seq) {
            return Next::Behind;
        }
        let mut after = s.log.iter().filter(|(n, _)| *n > seq);
        let frames: Vec<(u64, String)> = after.by_ref().take(max).cloned().collect();
        Next::Frames { frames, more: after.next().is_some() }
    }

    /// A new WebSocket connection's number, counted from 1.
    pub fn connect(&self) -> u64 {
        self.connections.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Records one heartbeat, letting the oldest go past [`HEARTBEATS_KEPT`].
    pub fn heartbeat(&self, record: HeartbeatRecord) {
        let mut kept = self.lock();
        if kept.heartbeats.len() >= HEARTBEATS_KEPT {
            kept.heartbeats.pop_front();
        }
        kept.heartbeats.push_back(record);
    }

    /// The heartbeats kept, oldest first.
    pub fn heartbeats(&self) -> Vec<HeartbeatRecord> {
        self.lock().heartbeats.iter().copied().collect()
    }

    /// Notes how far the live connection of `session` has sent (`None`: none is attached now).
    pub fn live_at(&self, session: &str, sent: Option<u64>) {
        if let Some(s) = self.lock().sessions.get_mut(session) {
            s.live_sent = sent;
        }
    }

    /// Counts `n` frames a connection wrote from its session's log.
    pub fn sent(&self, n: u64) {
        self.frames_sent.fetch_add(n, Ordering::Relaxed);
    }

    /// Frames appended to any session's log, and frames connections wrote from one.
    pub fn frame_counts(&self) -> (u64, u64) {
        (self.frames_dispatched.load(Ordering::Relaxed), self.frames_sent.load(Ordering::Relaxed))
    }

    /// Counts a live connection cut for falling behind its session's log.
    pub fn cut_behind(&self) {
        self.cut_behind.fetch_add(1, Ordering::Relaxed);
    }

    /// Live connections cut for falling behind their session's log.
    pub fn connections_cut_behind(&self) -> u64 {
        self.cut_behind.load(Ordering::Relaxed)
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
