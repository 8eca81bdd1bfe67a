//! The voice server's state: the bot's connection per guild, the people in each voice channel
//! and their streams, what was heard of the bot, the counters, and each channel's DAVE group.
//! The signalling socket, the UDP loop and the people speaking all act through it.

use std::collections::{BTreeMap, HashMap};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde_json::json;
use tokio::net::UdpSocket;
use tokio::sync::mpsc;

use crate::state::config::DaveConfig;
use crate::state::messages::now_ms;
use crate::voice::dave::{BotFrame, DaveError, DaveView, ExternalSenderKey, Group};
use crate::voice::rtp::Cipher;

/// The grammar file of lines voiced on the sandbox page, beside the CA bundle.
pub const SANDBOX_GRAMMAR: &str = "sandbox.gram";
/// A pause this long between the bot's packets ends a heard segment.
pub(super) const SEGMENT_GAP_MS: i64 = 300;

/// Why a voice request was refused.
#[derive(Debug, thiserror::Error)]
pub enum VoiceError {
    #[error("{0} is not in voice channel {1}")]
    NotInChannel(String, u64),
    #[error("he is not connected to voice channel {0}")]
    BotAbsent(u64),
    #[error("unknown voice channel {0}")]
    UnknownChannel(u64),
    #[error("unknown injection kind {0:?} (garbage_json, undersized, unauthenticated, unknown_ssrc, truncated_opus, corrupt_commit)")]
    UnknownKind(String),
    #[error("DAVE: {0}")]
    Dave(String),
    #[error("opus: {0}")]
    Opus(String),
    #[error("certificate: {0}")]
    Cert(String),
    #[error("the roots to trust beside the voice CA, {0}, cannot be read: {1}")]
    Roots(std::path::PathBuf, std::io::Error),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Debian's bundle of the system's trusted roots.
pub const SYSTEM_ROOTS: &str = "/etc/ssl/certs/ca-certificates.crt";

/// A stretch of the bot's audio as the loopback heard it: mono 48 kHz.
#[derive(Debug, Clone, Serialize)]
pub struct HeardSegment {
    pub start_ms: i64,
    pub end_ms: i64,
    #[serde(skip)]
    pub pcm: Vec<i16>,
    pub rate: u32,
}

impl HeardSegment {
    /// Its length as audio, in ms.
    pub fn duration_ms(&self) -> i64 {
        (self.pcm.len() as i64 * 1000) / i64::from(self.rate)
    }
}

/// What the bot's voice socket is sent next, from outside its own task.
pub(super) enum WsOut {
    Text(String),
    Binary(Vec<u8>),
    Close(u16),
}

impl From<BotFrame> for WsOut {
    fn from(f: BotFrame) -> WsOut {
        match f {
            BotFrame::Text(t) => WsOut::Text(t),
            BotFrame::Binary(b) => WsOut::Binary(b),
        }
    }
}

/// The bot's voice connection in one guild.
pub(super) struct Conn {
    pub(super) channel: u64,
    /// The bot's user id, from its Identify.
    pub(super) user: u64,
    /// DAVE was negotiated on this connection.
    pub(super) dave: bool,
    pub(super) session_id: String,
    pub(super) token: String,
    pub(super) ws: Option<mpsc::UnboundedSender<WsOut>>,
    pub(super) bot_udp: Option<SocketAddr>,
    pub(super) cipher: Option<Cipher>,
    pub(super) mode: String,
}

/// A user's outgoing RTP stream.
#[derive(Clone, Copy)]
pub(super) struct Stream {
    pub(super) ssrc: u32,
    pub(super) seq: u16,
    pub(super) ts: u32,
    pub(super) nonce: u32,
}

pub(super) struct Capture {
    pub(super) start_ms: i64,
    pub(super) last_ms: i64,
    pub(super) last_ts: Option<u32>,
    pub(super) pcm: Vec<i16>,
}

#[derive(Default)]
pub(super) struct Inner {
    /// Who is in each voice channel: user id → name.
    pub(super) members: BTreeMap<u64, BTreeMap<u64, String>>,
    /// The bot's voice state per guild: (channel, session id), set by its op 4.
    pub(super) bot_state: HashMap<u64, (u64, String)>,
    /// The current voice server token per guild.
    pub(super) tokens: HashMap<u64, String>,
    pub(super) conns: HashMap<u64, Conn>,
    pub(super) streams: HashMap<(u64, u64), Stream>,
    pub(super) decoders: HashMap<u32, opus2::Decoder>,
    pub(super) captures: HashMap<u64, Capture>,
    pub(super) heard: HashMap<u64, Vec<HeardSegment>>,
    /// Counts of what the server refused or saw, by kind (for tests and the page).
    pub(super) counters: BTreeMap<&'static str, u64>,
    pub(super) next_session: u64,
    /// Every token handed out, so a test can look for one where it must never appear.
    pub(super) issued: Vec<String>,
    /// Every voice state update of his (op 4, or a test's stand-in for it), in order.
    pub(super) moves: Vec<(u64, Option<u64>)>,
    /// Lines voiced from text, for the sandbox's offline transcriber grammar.
    pub(super) phrases: Vec<String>,
    /// Each voice channel's DAVE group.
    pub(super) groups: BTreeMap<u64, Group>,
    /// Per voice channel, the packet loss its people's streams suffer on the way to the bot.
    pub(super) loss: HashMap<u64, Loss>,
}

/// Packets lost on the way to the bot, the way a real network loses them: in short bursts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Loss {
    /// How many packets in a row go missing.
    pub burst: u16,
    /// One burst in this many packets.
    pub every: u16,
}

impl Loss {
    /// Whether the packet with this sequence number goes missing.
    pub(super) fn loses(self, seq: u16) -> bool {
        self.every > 0 && seq % self.every < self.burst
    }
}

/// Lines the sandbox grammar always holds, besides those said on the page.
pub(super) const SANDBOX_PHRASES: [&str; 4] = ["hello clankie", "clankie are you there", "thank you clankie", "good morning everyone"];

impl Inner {
    /// Ends the channel's open capture as a heard segment once it has been quiet for the gap.
    pub(super) fn close_quiet_capture(&mut self, channel: u64, now: i64) {
        if self.captures.get(&channel).is_some_and(|c| now - c.last_ms > SEGMENT_GAP_MS)
            && let Some(c) = self.captures.remove(&channel)
        {
            let segment = HeardSegment { start_ms: c.start_ms, end_ms: c.last_ms, pcm: c.pcm, rate: 48_000 };
            self.heard.entry(channel).or_default().push(segment);
        }
    }
}

/// The loopback's voice server. Shared behind an `Arc` by the HTTP state.
pub struct VoiceServer {
    pub(super) ws_addr: SocketAddr,
    pub(super) dave: DaveConfig,
    pub(super) sender: ExternalSenderKey,
    pub(super) udp: Arc<UdpSocket>,
    pub(super) ca_bundle: PathBuf,
    pub(super) inner: Mutex<Inner>,
    pub(super) tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

pub(super) fn random_u32() -> u32 {
    rand::random()
}

pub(super) fn token() -> String {
    format!("{:016x}{:016x}", rand::random::<u64>(), rand::random::<u64>())
}

impl VoiceServer {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `host:port` as VOICE_SERVER_UPDATE's endpoint carries it.
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.ws_addr.port())
    }

    /// Remembers a line voiced from text and rewrites the sandbox grammar (`sandbox.gram` beside
    /// the CA bundle), so the offline transcriber can hear what sandbox users type to say aloud.
    pub fn remember_phrase(&self, text: &str) {
        let mut inner = self.lock();
        if inner.phrases.iter().any(|p| p == text) {
            return;
        }
        inner.phrases.push(text.to_owned());
        let mut all: Vec<&str> = SANDBOX_PHRASES.to_vec();
        all.extend(inner.phrases.iter().map(String::as_str));
        if let Some(dir) = self.ca_bundle.parent() {
            let _ = std::fs::write(dir.join(SANDBOX_GRAMMAR), clankie_speech::offline::grammar(&all));
        }
    }

    /// The PEM file a voice client points `SSL_CERT_FILE` at.
    pub fn ca_bundle(&self) -> &Path {
        &self.ca_bundle
    }

    /// The UDP address RTP goes to.
    pub fn udp_addr(&self) -> SocketAddr {
        self.udp.local_addr().unwrap_or_else(|_| SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
    }

    pub(super) fn count(inner: &mut Inner, kind: &'static str) {
        *inner.counters.entry(kind).or_default() += 1;
    }

    /// What the server counted, by kind.
    pub fn counters(&self) -> BTreeMap<&'static str, u64> {
        self.lock().counters.clone()
    }

    /// A channel's DAVE group as its members see it (epoch, members, privacy code, counts).
    pub fn dave(&self, channel: u64) -> Option<DaveView> {
        self.lock().groups.get(&channel).map(Group::view)
    }

    /// Whether DAVE is on.
    pub fn dave_config(&self) -> DaveConfig {
        self.dave
    }

    /// Runs one step of `channel`'s DAVE group and sends what it makes to the bot's socket in
    /// that channel. A step that fails is logged and counted; the group carries on.
    pub(super) fn dave_step<F>(&self, inner: &mut Inner, channel: u64, step: F)
    where
        F: FnOnce(&mut Group, &ExternalSenderKey, i64) -> Result<Vec<BotFrame>, DaveError>,
    {
        if !self.dave.on {
            return;
        }
        let group = inner.groups.entry(channel).or_insert_with(|| Group::new(channel));
        let result = step(group, &self.sender, now_ms());
        if group.is_empty() {
            inner.groups.remove(&channel);
        }
        let frames = match result {
            Ok(frames) => frames,
            Err(e) => {
                tracing::warn!(channel, error = %e, "DAVE step failed");
                VoiceServer::count(inner, "dave_step_failed");
                return;
            }
        };
        if let Some(ws) = inner.conns.values().find(|c| c.channel == channel && c.dave).and_then(|c| c.ws.clone()) {
            for frame in frames {
                let _ = ws.send(frame.into());
            }
        }
    }

    /// A binary frame from the bot: op 26 (key package) or op 28 (commit and welcome).
    pub(super) fn bot_binary(&self, guild: u64, frame: &[u8]) {
        let mut inner = self.lock();
        let Some(channel) = inner.conns.get(&guild).filter(|c| c.dave).map(|c| c.channel) else {
            VoiceServer::count(&mut inner, "dave_binary_without_dave");
            return;
        };
        match frame.split_first() {
            Some((26, package)) => self.dave_step(&mut inner, channel, |g, k, now| g.bot_key_package(k, package, now)),
            Some((28, commit)) => self.dave_step(&mut inner, channel, |g, k, now| g.bot_commit_welcome(k, commit, now)),
            _ => VoiceServer::count(&mut inner, "dave_unknown_binary"),
        }
    }

    /// A user enters (`Some(channel)`) or leaves (`None`) the guild's voice; returns the channel
    /// they were in before, if any.
    /// A user entering (`Some(channel)`) or leaving (`None`) the guild's voice. Leaving a
    /// channel he is connected to sends him op 13 (Client Disconnect), so he forgets their SSRC.
    pub(crate) fn set_member(&self, guild: u64, guild_channels: &[u64], user: u64, name: &str, channel: Option<u64>) -> Option<u64> {
        let mut inner = self.lock();
        let mut before = None;
        for c in guild_channels {
            if let Some(m) = inner.members.get_mut(c)
                && m.remove(&user).is_some()
            {
                before = Some(*c);
            }
        }
        if let Some(c) = channel {
            inner.members.entry(c).or_default().insert(user, name.to_owned());
        }
        if let Some(left) = before.filter(|b| Some(*b) != channel) {
            inner.streams.remove(&(left, user));
            let disconnect = json!({ "op": 13, "d": { "user_id": user.to_string() } }).to_string();
            if let Some(ws) = inner.conns.get(&guild).filter(|c| c.channel == left).and_then(|c| c.ws.clone()) {
                let _ = ws.send(WsOut::Text(disconnect));
                VoiceServer::count(&mut inner, "client_disconnect");
            }
            self.dave_step(&mut inner, left, |g, k, now| g.human_leaves(k, user, now));
        }
        if let Some(joined) = channel.filter(|c| Some(*c) != before) {
            self.dave_step(&mut inner, joined, |g, k, now| g.human_joins(k, user, now));
        }
        before
    }

    /// Who is in each of `channels` now: (channel, user id, name).
    pub(crate) fn room_members(&self, channels: &[u64]) -> Vec<(u64, u64, String)> {
        let inner = self.lock();
        channels
            .iter()
            .filter_map(|c| inner.members.get(c).map(|m| (c, m)))
            .flat_map(|(c, m)| m.iter().map(move |(user, name)| (*c, *user, name.clone())))
            .collect()
    }

    /// The bot's voice state in a guild, set by its op 4: (channel, session id).
    pub(crate) fn bot_state(&self, guild: u64) -> Option<(u64, String)> {
        self.lock().bot_state.get(&guild).cloned()
    }

    /// Who is in a voice channel, by name.
    pub fn members(&self, channel: u64) -> Vec<String> {
        self.lock().members.get(&channel).map(|m| m.values().cloned().collect()).unwrap_or_default()
    }

    /// The bot's op 4: a fresh voice session in `channel` (or none), and a server token.
    /// Returns (session id, token) for the dispatches.
    /// His voice state updates so far: (guild, channel or `None` for a leave), in order.
    pub(crate) fn moves(&self) -> Vec<(u64, Option<u64>)> {
        self.lock().moves.clone()
    }

    pub(crate) fn bot_moves(&self, guild: u64, channel: Option<u64>) -> (String, String) {
        let mut inner = self.lock();
        inner.moves.push((guild, channel));
        inner.next_session += 1;
        let session = format!("voice-session-{}-{}", inner.next_session, random_u32());
        let token = token();
        inner.issued.push(token.clone());
        match channel {
            Some(c) => {
                inner.bot_state.insert(guild, (c, session.clone()));
                inner.tokens.insert(guild, token.clone());
            }
            None => {
                inner.bot_state.remove(&guild);
                inner.tokens.remove(&guild);
                if let Some(conn) = inner.conns.remove(&guild) {
                    if let Some(ws) = conn.ws {
                        let _ = ws.send(WsOut::Close(4014));
                    }
                    if conn.dave {
                        self.dave_step(&mut inner, conn.channel, |g, k, now| g.bot_leaves(k, now));
                    }
                }
            }
        }
        (session, token)
    }

    /// A new token for the guild's voice server, as Discord sends when it moves the call.
    pub(crate) fn rotate_token(&self, guild: u64) -> String {
        let token = token();
        let mut inner = self.lock();
        inner.issued.push(token.clone());
        inner.tokens.insert(guild, token.clone());
        token
    }

    /// Every voice token this server has handed out.
    pub fn tokens_issued(&self) -> Vec<String> {
        self.lock().issued.clone()
    }

    /// Whether the bot's voice connection in `channel` is up (encrypted and with a UDP address).
    pub fn bot_connected(&self, channel: u64) -> bool {
        self.lock().conns.values().any(|c| c.channel == channel && c.cipher.is_some() && c.bot_udp.is_some() && c.ws.is_some())
    }

    /// Closes the bot's voice socket in `guild` with `code`. Codes other than 4009 and 4015 end
    /// the voice session too, as Discord's do.
    pub fn drop_socket(&self, guild: u64, code: u16) -> bool {
        let mut inner = self.lock();
        let resumable = matches!(code, 4009 | 4015);
        let Some(conn) = inner.conns.get_mut(&guild) else { return false };
        let sent = conn.ws.take().map(|ws| ws.send(WsOut::Close(code)).is_ok()).unwrap_or(false);
        if !resumable
            && let Some(conn) = inner.conns.remove(&guild)
            && conn.dave
        {
            self.dave_step(&mut inner, conn.channel, |g, k, now| g.bot_leaves(k, now));
        }
        sent
    }

    /// The bot's audio heard in `channel` so far, as segments (the one still open included once
    /// it has been quiet for the segment gap).
    pub fn heard(&self, channel: u64) -> Vec<HeardSegment> {
        let mut inner = self.lock();
        inner.close_quiet_capture(channel, now_ms());
        inner.heard.get(&channel).cloned().unwrap_or_default()
    }

    /// When his audio now playing in `channel` began (ms since the epoch), if it is flowing.
    pub fn speaking_since(&self, channel: u64) -> Option<i64> {
        let inner = self.lock();
        let capture = inner.captures.get(&channel)?;
        (now_ms() - capture.last_ms <= 100).then_some(capture.start_ms)
    }
}

impl Drop for VoiceServer {
    fn drop(&mut self) {
        for task in self.tasks.lock().unwrap_or_else(|p| p.into_inner()).drain(..) {
            task.abort();
        }
    }
}
