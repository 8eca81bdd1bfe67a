//! The loopback voice server: what songbird's driver talks to.
//!
//! - The voice gateway, v4, as a WebSocket over TLS on 127.0.0.1 (`wss://` is all songbird
//!   speaks). The certificate is made at start by a CA of our own; a client trusts it through
//!   `SSL_CERT_FILE` = [`VoiceServer::ca_bundle`], which also holds the system roots.
//! - Identify → Hello + Ready; Select Protocol → Session Description with
//!   `dave_protocol_version: 1`, then DAVE as Discord speaks it (`dave.rs`: the channel's MLS
//!   group with the loopback as delivery service and external sender, its human users as members
//!   whose audio is end-to-end encrypted); an Identify offering no DAVE gets Hello and close 4017.
//!   [`DaveConfig`] turns it off (`CLANKIE_LOOPBACK_DAVE=off`) for passthrough; heartbeat ACK; Resume → Hello + Resumed; Speaking for the users it voices; Client
//!   Disconnect when a user leaves his channel.
//! - One UDP socket: the 74-byte IP discovery, and RTP in both AEAD `_rtpsize` modes with real
//!   encryption and real Opus at 20 ms frames, sent at real-time pace.
//!
//! What the bot says is cut into [`HeardSegment`]s per channel; what users say is voiced with
//! [`VoiceServer::speak`]. Hostile traffic toward the bot is injected with [`VoiceServer::inject`].

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aes_gcm::Aes256Gcm;
use aes_gcm::aead::{AeadInPlace, KeyInit};
use axum::Router;
use axum::extract::State as AxState;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::response::Response;
use axum::routing::get;
use chacha20poly1305::XChaCha20Poly1305;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::mpsc;

use crate::dave::{BotFrame, DaveView, ExternalSenderKey, Group};
use crate::state::now_ms;

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
        DaveConfig { on, required_version: crate::dave::DAVE_VERSION }
    }
}

impl Default for DaveConfig {
    /// As `CLANKIE_LOOPBACK_DAVE` says: on unless it is `off`.
    fn default() -> Self {
        DaveConfig::from_setting(std::env::var("CLANKIE_LOOPBACK_DAVE").ok().as_deref())
    }
}

/// The grammar file of lines voiced on the sandbox page, beside the CA bundle.
pub const SANDBOX_GRAMMAR: &str = "sandbox.gram";
/// The voice gateway's heartbeat interval, as Hello announces it.
const HEARTBEAT_MS: f64 = 13_750.0;
/// Samples per 20 ms frame at 48 kHz.
const FRAME: usize = 960;
/// A pause this long between the bot's packets ends a heard segment.
const SEGMENT_GAP_MS: i64 = 300;
/// Opus's three-byte silence frame.
const SILENCE: [u8; 3] = [0xF8, 0xFF, 0xFE];
const MODES: [&str; 2] = ["aead_aes256_gcm_rtpsize", "aead_xchacha20_poly1305_rtpsize"];

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

#[derive(Clone)]
enum Cipher {
    Aes(Box<Aes256Gcm>),
    XChaCha(Box<XChaCha20Poly1305>),
}

impl Cipher {
    fn new(mode: &str, key: &[u8]) -> Option<Cipher> {
        match mode {
            "aead_aes256_gcm_rtpsize" => Aes256Gcm::new_from_slice(key).ok().map(|c| Cipher::Aes(Box::new(c))),
            "aead_xchacha20_poly1305_rtpsize" => XChaCha20Poly1305::new_from_slice(key).ok().map(|c| Cipher::XChaCha(Box::new(c))),
            _ => None,
        }
    }

    /// header | ciphertext | 16-byte tag | 4-byte nonce counter; the header is the associated data.
    fn seal(&self, header: &[u8], payload: &[u8], counter: u32) -> Vec<u8> {
        let mut body = payload.to_vec();
        let tag = match self {
            Cipher::Aes(c) => {
                let mut nonce = aes_gcm::Nonce::default();
                nonce[..4].copy_from_slice(&counter.to_be_bytes());
                c.encrypt_in_place_detached(&nonce, header, &mut body).map(|t| t.to_vec())
            }
            Cipher::XChaCha(c) => {
                let mut nonce = chacha20poly1305::XNonce::default();
                nonce[..4].copy_from_slice(&counter.to_be_bytes());
                c.encrypt_in_place_detached(&nonce, header, &mut body).map(|t| t.to_vec())
            }
        };
        let mut out = header.to_vec();
        out.extend_from_slice(&body);
        out.extend_from_slice(&tag.unwrap_or_else(|_| vec![0; 16]));
        out.extend_from_slice(&counter.to_be_bytes());
        out
    }

    /// The payload of a sealed packet whose header is `header_len` bytes, if it authenticates.
    fn open(&self, packet: &[u8], header_len: usize) -> Option<Vec<u8>> {
        if packet.len() < header_len + 20 {
            return None;
        }
        let (header, rest) = packet.split_at(header_len);
        let (body, suffix) = rest.split_at(rest.len() - 20);
        let (tag, counter) = suffix.split_at(16);
        let mut plain = body.to_vec();
        let ok = match self {
            Cipher::Aes(c) => {
                let mut nonce = aes_gcm::Nonce::default();
                nonce[..4].copy_from_slice(counter);
                c.decrypt_in_place_detached(&nonce, header, &mut plain, aes_gcm::Tag::from_slice(tag)).is_ok()
            }
            Cipher::XChaCha(c) => {
                let mut nonce = chacha20poly1305::XNonce::default();
                nonce[..4].copy_from_slice(counter);
                c.decrypt_in_place_detached(&nonce, header, &mut plain, chacha20poly1305::Tag::from_slice(tag)).is_ok()
            }
        };
        ok.then_some(plain)
    }
}

enum WsOut {
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
struct Conn {
    channel: u64,
    /// The bot's user id, from its Identify.
    user: u64,
    /// DAVE was negotiated on this connection.
    dave: bool,
    session_id: String,
    token: String,
    ws: Option<mpsc::UnboundedSender<WsOut>>,
    bot_udp: Option<SocketAddr>,
    cipher: Option<Cipher>,
    mode: String,
}

/// A user's outgoing RTP stream.
#[derive(Clone, Copy)]
struct Stream {
    ssrc: u32,
    seq: u16,
    ts: u32,
    nonce: u32,
}

struct Capture {
    start_ms: i64,
    last_ms: i64,
    last_ts: Option<u32>,
    pcm: Vec<i16>,
}

#[derive(Default)]
struct Inner {
    /// Who is in each voice channel: user id → name.
    members: BTreeMap<u64, BTreeMap<u64, String>>,
    /// The bot's voice state per guild: (channel, session id), set by its op 4.
    bot_state: HashMap<u64, (u64, String)>,
    /// The current voice server token per guild.
    tokens: HashMap<u64, String>,
    conns: HashMap<u64, Conn>,
    streams: HashMap<(u64, u64), Stream>,
    decoders: HashMap<u32, opus2::Decoder>,
    captures: HashMap<u64, Capture>,
    heard: HashMap<u64, Vec<HeardSegment>>,
    /// Counts of what the server refused or saw, by kind (for tests and the page).
    counters: BTreeMap<&'static str, u64>,
    next_session: u64,
    /// Every token handed out, so a test can look for one where it must never appear.
    issued: Vec<String>,
    /// Every voice state update of his (op 4, or a test's stand-in for it), in order.
    moves: Vec<(u64, Option<u64>)>,
    /// Lines voiced from text, for the sandbox's offline transcriber grammar.
    phrases: Vec<String>,
    /// Each voice channel's DAVE group.
    groups: BTreeMap<u64, Group>,
    /// Per voice channel, the packet loss its people's streams suffer on the way to the bot.
    loss: HashMap<u64, Loss>,
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
    fn loses(self, seq: u16) -> bool {
        self.every > 0 && seq % self.every < self.burst
    }
}

/// Lines the sandbox grammar always holds, besides those said on the page.
const SANDBOX_PHRASES: [&str; 4] = ["hello clankie", "clankie are you there", "thank you clankie", "good morning everyone"];

impl Inner {
    /// Ends the channel's open capture as a heard segment once it has been quiet for the gap.
    fn close_quiet_capture(&mut self, channel: u64, now: i64) {
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
    ws_addr: SocketAddr,
    dave: DaveConfig,
    sender: ExternalSenderKey,
    udp: Arc<UdpSocket>,
    ca_bundle: PathBuf,
    inner: Mutex<Inner>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

fn random_u32() -> u32 {
    rand::random()
}

fn token() -> String {
    format!("{:016x}{:016x}", rand::random::<u64>(), rand::random::<u64>())
}

impl VoiceServer {
    /// Starts the voice socket and UDP on 127.0.0.1 with a fresh certificate whose CA is
    /// written to `dir/voice-ca.pem`, followed by the roots in `roots` (the system bundle,
    /// [`SYSTEM_ROOTS`], when `None`), so a client trusting that one file still trusts the rest.
    pub async fn start(dir: &Path, roots: Option<&Path>, dave: DaveConfig) -> Result<Arc<VoiceServer>, VoiceError> {
        let (acceptor, ca_pem) = tls_acceptor()?;
        std::fs::create_dir_all(dir)?;
        let ca_bundle = dir.join("voice-ca.pem");
        let mut bundle = ca_pem;
        let others = match roots {
            Some(path) => Some(std::fs::read_to_string(path).map_err(|e| VoiceError::Roots(path.to_owned(), e))?),
            // A machine without the system bundle still trusts the loopback.
            None => std::fs::read_to_string(SYSTEM_ROOTS).ok(),
        };
        if let Some(others) = others {
            bundle.push('\n');
            bundle.push_str(&others);
        }
        std::fs::write(&ca_bundle, bundle)?;
        std::fs::write(dir.join(SANDBOX_GRAMMAR), clankie_speech::offline::grammar(&SANDBOX_PHRASES))?;
        let tcp = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let ws_addr = tcp.local_addr()?;
        let udp = Arc::new(UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).await?);
        let sender = ExternalSenderKey::new().map_err(|e| VoiceError::Dave(e.to_string()))?;
        let server = Arc::new(VoiceServer {
            ws_addr,
            dave,
            sender,
            udp,
            ca_bundle,
            inner: Mutex::new(Inner::default()),
            tasks: Mutex::new(Vec::new()),
        });
        let app = Router::new().route("/", get(upgrade)).with_state(server.clone());
        let http = tokio::spawn(async move {
            if let Err(e) = axum::serve(TlsListener { tcp, acceptor }, app).await {
                tracing::error!(error = %e, "loopback voice socket stopped");
            }
        });
        let udp_task = tokio::spawn(udp_loop(server.clone()));
        server.tasks.lock().unwrap_or_else(|p| p.into_inner()).extend([http, udp_task]);
        Ok(server)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
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

    fn count(inner: &mut Inner, kind: &'static str) {
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
    fn dave_step<F>(&self, inner: &mut Inner, channel: u64, step: F)
    where
        F: FnOnce(&mut Group, &ExternalSenderKey, i64) -> Result<Vec<BotFrame>, crate::dave::DaveError>,
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
    fn bot_binary(&self, guild: u64, frame: &[u8]) {
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

    fn stream(inner: &mut Inner, channel: u64, user: u64) -> Stream {
        *inner.streams.entry((channel, user)).or_insert_with(|| Stream {
            ssrc: random_u32() | 1,
            seq: rand::random(),
            ts: random_u32(),
            nonce: random_u32(),
        })
    }

    /// Announces that `user` speaks on the bot's socket (op 5), mapping the stream's SSRC to them.
    fn announce(&self, guild: u64, channel: u64, user: u64) -> Result<Stream, VoiceError> {
        let mut inner = self.lock();
        let stream = VoiceServer::stream(&mut inner, channel, user);
        let conn = inner.conns.get(&guild).filter(|c| c.channel == channel && c.cipher.is_some()).ok_or(VoiceError::BotAbsent(channel))?;
        let speaking = json!({ "op": 5, "d": { "speaking": 1, "ssrc": stream.ssrc, "user_id": user.to_string(), "delay": 0 } });
        if let Some(ws) = &conn.ws {
            let _ = ws.send(WsOut::Text(speaking.to_string()));
        }
        Ok(stream)
    }

    /// Seals one RTP packet of `user`'s stream and sends it to the bot; false when the bot has no
    /// live connection in the channel right now (the frame is lost, as on a real network).
    async fn send_frame(&self, guild: u64, channel: u64, user: u64, opus: &[u8]) -> bool {
        let (packet, to) = {
            let mut inner = self.lock();
            let mut stream = VoiceServer::stream(&mut inner, channel, user);
            stream.seq = stream.seq.wrapping_add(1);
            stream.ts = stream.ts.wrapping_add(FRAME as u32);
            stream.nonce = stream.nonce.wrapping_add(1);
            inner.streams.insert((channel, user), stream);
            if inner.loss.get(&channel).is_some_and(|l| l.loses(stream.seq)) {
                VoiceServer::count(&mut inner, "rtp_lost");
                return false;
            }
            let Some(conn) = inner.conns.get(&guild).filter(|c| c.channel == channel) else { return false };
            let (Some(cipher), Some(to)) = (conn.cipher.clone(), conn.bot_udp) else { return false };
            let dave = conn.dave;
            // A member of the channel's DAVE group encrypts end to end before the transport does.
            let mut frame = match inner.groups.get_mut(&channel) {
                Some(group) if dave => group.encrypt_from(user, opus),
                _ => opus.to_vec(),
            };
            // Discord's clients pad a few packets in a hundred (RFC 3550 padding, P bit set): so
            // does every 32nd packet here, and a receiver that decodes the padding hears noise.
            let mut header = rtp_header(stream.seq, stream.ts, stream.ssrc);
            if stream.seq % 32 == 7 {
                header[0] |= 0x20;
                frame.extend([0, 0, 3]);
                VoiceServer::count(&mut inner, "rtp_padded");
            }
            (cipher.seal(&header, &frame, stream.nonce), to)
        };
        self.udp.send_to(&packet, to).await.is_ok()
    }

    /// Voices `name` saying `pcm` (mono, `rate` Hz) in `channel`: Speaking, then real Opus at
    /// real-time pace, then five silence frames. Resolves when the last frame is sent; returns
    /// how many frames reached a live connection.
    pub async fn speak(&self, guild: u64, channel: u64, user: u64, name: &str, pcm: &[i16], rate: u32) -> Result<u32, VoiceError> {
        if !self.lock().members.get(&channel).is_some_and(|m| m.contains_key(&user)) {
            return Err(VoiceError::NotInChannel(name.to_owned(), channel));
        }
        self.announce(guild, channel, user)?;
        let at48 = clankie_pcm::resample(pcm, rate, 48_000);
        let mut encoder =
            opus2::Encoder::new(48_000, opus2::Channels::Mono, opus2::Application::Voip).map_err(|e| VoiceError::Opus(e.to_string()))?;
        let mut frames = Vec::new();
        for chunk in at48.chunks(FRAME) {
            let mut frame = chunk.to_vec();
            frame.resize(FRAME, 0);
            frames.push(encoder.encode_vec(&frame, 4000).map_err(|e| VoiceError::Opus(e.to_string()))?);
        }
        frames.extend(std::iter::repeat_n(SILENCE.to_vec(), 5));
        let mut pace = tokio::time::interval(Duration::from_millis(20));
        let mut delivered = 0;
        for frame in &frames {
            pace.tick().await;
            if self.send_frame(guild, channel, user, frame).await {
                delivered += 1;
            }
        }
        Ok(delivered)
    }

    /// Makes the streams of the people in `channel` lose packets on the way to the bot from now
    /// on (`None`: none lost). Their sequence numbers go on, so the bot sees the gaps.
    pub fn set_loss(&self, channel: u64, loss: Option<Loss>) {
        let mut inner = self.lock();
        match loss {
            Some(loss) => inner.loss.insert(channel, loss),
            None => inner.loss.remove(&channel),
        };
    }

    /// Sends one kind of hostile traffic to the bot's connection in `channel`, as `user`'s
    /// stream where a stream is needed.
    pub async fn inject(&self, guild: u64, channel: u64, user: u64, kind: &str) -> Result<(), VoiceError> {
        if kind == "corrupt_commit" {
            let mut inner = self.lock();
            let group = inner.groups.get_mut(&channel).ok_or(VoiceError::BotAbsent(channel))?;
            group.corrupt_next = true;
            VoiceServer::count(&mut inner, "injected_corrupt_commit");
            return Ok(());
        }
        let (to, ws) = {
            let inner = self.lock();
            let conn =
                inner.conns.get(&guild).filter(|c| c.channel == channel && c.cipher.is_some()).ok_or(VoiceError::BotAbsent(channel))?;
            (conn.bot_udp.ok_or(VoiceError::BotAbsent(channel))?, conn.ws.clone())
        };
        match kind {
            "garbage_json" => {
                if let Some(ws) = ws {
                    let _ = ws.send(WsOut::Text("{\"op\": 5, \"d\": {\"speaking\": tru".into()));
                }
            }
            "undersized" => {
                self.udp.send_to(&[0x80, 0x78, 0x00], to).await?;
            }
            "unauthenticated" => {
                let stream = self.announce(guild, channel, user)?;
                let mut packet = rtp_header(stream.seq.wrapping_add(1), stream.ts, stream.ssrc).to_vec();
                packet.extend((0..60).map(|i| (i * 7) as u8));
                self.udp.send_to(&packet, to).await?;
            }
            "unknown_ssrc" => {
                let opus = tone_frame()?;
                let ssrc = random_u32() | 1;
                let (seq, ts, nonce) = (rand::random::<u16>(), random_u32(), random_u32());
                for n in 0..5u16 {
                    let packet = {
                        let inner = self.lock();
                        let Some(cipher) = inner.conns.get(&guild).and_then(|c| c.cipher.clone()) else { break };
                        cipher.seal(
                            &rtp_header(seq.wrapping_add(n), ts.wrapping_add(u32::from(n) * FRAME as u32), ssrc),
                            &opus,
                            nonce.wrapping_add(u32::from(n)),
                        )
                    };
                    self.udp.send_to(&packet, to).await?;
                }
            }
            "truncated_opus" => {
                self.announce(guild, channel, user)?;
                // Inside a short run of good frames (a receiver's jitter buffer plays out only a run):
                // a code-3 packet (TOC's low bits 11) must carry a frame-count byte, and this one ends first.
                let good = tone_frame()?;
                for n in 0..10 {
                    let frame: &[u8] = if n == 5 { &[0xFB] } else { &good };
                    self.send_frame(guild, channel, user, frame).await;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            other => return Err(VoiceError::UnknownKind(other.to_owned())),
        }
        let mut inner = self.lock();
        let label: &'static str = match kind {
            "garbage_json" => "injected_garbage_json",
            "undersized" => "injected_undersized",
            "unauthenticated" => "injected_unauthenticated",
            "unknown_ssrc" => "injected_unknown_ssrc",
            _ => "injected_truncated_opus",
        };
        VoiceServer::count(&mut inner, label);
        Ok(())
    }

    fn hear_rtp(&self, packet: &[u8], from: SocketAddr) {
        let mut inner = self.lock();
        let Some((channel, cipher, dave)) =
            inner.conns.values().find(|c| c.bot_udp == Some(from)).and_then(|c| c.cipher.clone().map(|k| (c.channel, k, c.dave)))
        else {
            VoiceServer::count(&mut inner, "rtp_from_stranger");
            return;
        };
        let csrcs = usize::from(packet[0] & 0x0F);
        let extension = packet[0] & 0x10 != 0;
        let header_len = 12 + 4 * csrcs + if extension { 4 } else { 0 };
        let Some(mut payload) = cipher.open(packet, header_len) else {
            VoiceServer::count(&mut inner, "rtp_unauthenticated");
            return;
        };
        if extension && packet.len() >= 12 + 4 * csrcs + 4 {
            let words = usize::from(u16::from_be_bytes([packet[12 + 4 * csrcs + 2], packet[12 + 4 * csrcs + 3]]));
            payload.drain(..(4 * words).min(payload.len()));
        }
        let ssrc = u32::from_be_bytes([packet[8], packet[9], packet[10], packet[11]]);
        let ts = u32::from_be_bytes([packet[4], packet[5], packet[6], packet[7]]);
        if dave && let Some(group) = inner.groups.get_mut(&channel) {
            // What the loopback records is what a human member of the group could decrypt.
            let Some(plain) = group.hear_bot(payload, now_ms()) else { return };
            payload = plain;
        }
        if payload == SILENCE {
            return;
        }
        let decoder = match inner.decoders.entry(ssrc) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => match opus2::Decoder::new(48_000, opus2::Channels::Stereo) {
                Ok(d) => v.insert(d),
                Err(_) => return,
            },
        };
        let mut out = vec![0i16; 5760 * 2];
        let Ok(n) = decoder.decode(&payload, &mut out, false) else {
            VoiceServer::count(&mut inner, "opus_undecodable");
            return;
        };
        let mono = clankie_pcm::downmix(&out[..n * 2]);
        let now = now_ms();
        inner.close_quiet_capture(channel, now);
        let capture =
            inner.captures.entry(channel).or_insert_with(|| Capture { start_ms: now, last_ms: now, last_ts: None, pcm: Vec::new() });
        if let Some(last) = capture.last_ts {
            // A gap in the timestamps inside a segment is audio that was lost or not sent: silence.
            let gap = ts.wrapping_sub(last) as usize;
            if gap > FRAME && gap < 48_000 {
                capture.pcm.extend(std::iter::repeat_n(0, gap - FRAME));
            }
        }
        capture.last_ts = Some(ts);
        capture.last_ms = now;
        capture.pcm.extend_from_slice(&mono);
        VoiceServer::count(&mut inner, "rtp_heard");
    }
}

impl Drop for VoiceServer {
    fn drop(&mut self) {
        for task in self.tasks.lock().unwrap_or_else(|p| p.into_inner()).drain(..) {
            task.abort();
        }
    }
}

/// One 20 ms Opus frame of a quiet tone.
fn tone_frame() -> Result<Vec<u8>, VoiceError> {
    let mut encoder =
        opus2::Encoder::new(48_000, opus2::Channels::Mono, opus2::Application::Voip).map_err(|e| VoiceError::Opus(e.to_string()))?;
    let tone: Vec<i16> = (0..FRAME).map(|i| ((i as f64 * 0.07).sin() * 6000.0) as i16).collect();
    encoder.encode_vec(&tone, 4000).map_err(|e| VoiceError::Opus(e.to_string()))
}

fn rtp_header(seq: u16, ts: u32, ssrc: u32) -> [u8; 12] {
    let mut h = [0u8; 12];
    h[0] = 0x80;
    h[1] = 0x78;
    h[2..4].copy_from_slice(&seq.to_be_bytes());
    h[4..8].copy_from_slice(&ts.to_be_bytes());
    h[8..12].copy_from_slice(&ssrc.to_be_bytes());
    h
}

async fn udp_loop(server: Arc<VoiceServer>) {
    let mut buf = vec![0u8; 2048];
    loop {
        let Ok((n, from)) = server.udp.recv_from(&mut buf).await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let packet = &buf[..n];
        if n == 74 && packet[0..2] == [0, 1] {
            let mut reply = [0u8; 74];
            reply[0..2].copy_from_slice(&2u16.to_be_bytes());
            reply[2..4].copy_from_slice(&70u16.to_be_bytes());
            reply[4..8].copy_from_slice(&packet[4..8]);
            let ip = from.ip().to_string();
            reply[8..8 + ip.len()].copy_from_slice(ip.as_bytes());
            reply[72..74].copy_from_slice(&from.port().to_be_bytes());
            let _ = server.udp.send_to(&reply, from).await;
        } else if n >= 12 && packet[0] >> 6 == 2 && packet[1] & 0x7F == 0x78 {
            server.hear_rtp(packet, from);
        } else {
            // Keepalives and RTCP from the bot; anything else is noise.
            let mut inner = server.lock();
            VoiceServer::count(&mut inner, if n <= 8 { "keepalive" } else { "other_datagram" });
        }
    }
}

async fn upgrade(ws: WebSocketUpgrade, AxState(server): AxState<Arc<VoiceServer>>) -> Response {
    ws.on_upgrade(move |socket| serve(socket, server))
}

async fn close(socket: &mut WebSocket, code: u16, reason: &str) {
    let _ = socket.send(Message::Close(Some(CloseFrame { code, reason: reason.into() }))).await;
}

fn id_of(v: &Value) -> u64 {
    v.as_u64().or_else(|| v.as_str().and_then(|s| s.parse().ok())).unwrap_or(0)
}

async fn serve(mut socket: WebSocket, server: Arc<VoiceServer>) {
    let (tx, mut rx) = mpsc::unbounded_channel::<WsOut>();
    let mut guild: Option<u64> = None;
    loop {
        tokio::select! {
            incoming = socket.recv() => {
                let Some(Ok(message)) = incoming else { break };
                let text = match message {
                    Message::Text(t) => t.to_string(),
                    Message::Binary(b) => {
                        if let Some(g) = guild {
                            server.bot_binary(g, &b);
                        }
                        continue;
                    }
                    Message::Close(_) => break,
                    _ => continue,
                };
                let Ok(frame) = serde_json::from_str::<Value>(&text) else {
                    let mut inner = server.lock();
                    VoiceServer::count(&mut inner, "client_garbage_json");
                    continue;
                };
                let (out, close_with) = answer(&server, &frame, &tx, &mut guild);
                let mut ok = true;
                for f in out {
                    ok &= socket.send(Message::Text(f.into())).await.is_ok();
                }
                if let Some((code, reason)) = close_with {
                    close(&mut socket, code, reason).await;
                    break;
                }
                if !ok { break; }
            }
            command = rx.recv() => {
                match command {
                    Some(WsOut::Text(t)) => {
                        if socket.send(Message::Text(t.into())).await.is_err() { break; }
                    }
                    Some(WsOut::Binary(b)) => {
                        if socket.send(Message::Binary(b.into())).await.is_err() { break; }
                    }
                    Some(WsOut::Close(code)) => {
                        close(&mut socket, code, "closed by the loopback").await;
                        break;
                    }
                    None => break,
                }
            }
        }
    }
    if let Some(g) = guild {
        let mut inner = server.lock();
        if let Some(conn) = inner.conns.get_mut(&g)
            && conn.ws.as_ref().is_some_and(|w| w.same_channel(&tx))
        {
            conn.ws = None;
        }
    }
}

/// The answer to one frame from the bot: frames to send, and a close to end with.
fn answer(
    server: &VoiceServer,
    frame: &Value,
    tx: &mpsc::UnboundedSender<WsOut>,
    guild: &mut Option<u64>,
) -> (Vec<String>, Option<(u16, &'static str)>) {
    let d = &frame["d"];
    let mut out: Vec<String> = Vec::new();
    match frame["op"].as_u64() {
        Some(0) => {
            let g = id_of(&d["server_id"]);
            let mut inner = server.lock();
            let valid = inner.bot_state.get(&g).is_some_and(|(_, s)| d["session_id"].as_str() == Some(s))
                && inner.tokens.get(&g).is_some_and(|t| d["token"].as_str() == Some(t));
            if !valid {
                VoiceServer::count(&mut inner, "identify_refused");
                return (out, Some((4004, "Authentication failed.")));
            }
            let channel = inner.bot_state[&g].0;
            let offered = d["max_dave_protocol_version"].as_u64().unwrap_or(0);
            if server.dave.on && offered < u64::from(server.dave.required_version) {
                // Discord's rule since March 2026: Hello, then 4017 for a client without DAVE.
                VoiceServer::count(&mut inner, "dave_required_closed");
                out.push(json!({ "op": 8, "d": { "heartbeat_interval": HEARTBEAT_MS } }).to_string());
                return (out, Some((4017, "E2EE/DAVE protocol required.")));
            }
            let ssrc = random_u32() | 1;
            let user = id_of(&d["user_id"]);
            if let Some(old) = inner.conns.insert(
                g,
                Conn {
                    channel,
                    user,
                    dave: false,
                    session_id: d["session_id"].as_str().unwrap_or_default().to_owned(),
                    token: d["token"].as_str().unwrap_or_default().to_owned(),
                    ws: Some(tx.clone()),
                    bot_udp: None,
                    cipher: None,
                    mode: String::new(),
                },
            ) {
                if let Some(ws) = old.ws {
                    // A second identify replaces the first connection, as Discord's does.
                    let _ = ws.send(WsOut::Close(4005));
                }
                if old.dave && old.channel != channel {
                    server.dave_step(&mut inner, old.channel, |g, k, now| g.bot_leaves(k, now));
                }
            }
            VoiceServer::count(&mut inner, "identify");
            *guild = Some(g);
            let port = server.udp_addr().port();
            out.push(json!({ "op": 8, "d": { "heartbeat_interval": HEARTBEAT_MS } }).to_string());
            out.push(json!({ "op": 2, "d": { "ssrc": ssrc, "ip": "127.0.0.1", "port": port, "modes": MODES } }).to_string());
        }
        Some(1) => {
            let Some(g) = *guild else { return (out, Some((4003, "Not authenticated."))) };
            let mode = d["data"]["mode"].as_str().unwrap_or_default().to_owned();
            let ip: Option<IpAddr> = d["data"]["address"].as_str().and_then(|a| a.parse().ok());
            let port = d["data"]["port"].as_u64().and_then(|p| u16::try_from(p).ok());
            let key: [u8; 32] = rand::random();
            let mut inner = server.lock();
            let (Some(conn), Some(cipher), Some(ip), Some(port)) = (inner.conns.get_mut(&g), Cipher::new(&mode, &key), ip, port) else {
                return (out, Some((4016, "Unknown encryption mode.")));
            };
            conn.cipher = Some(cipher);
            let chosen = if mode.starts_with("aead_aes256_gcm") { "selected_aes256_gcm" } else { "selected_xchacha20_poly1305" };
            conn.mode = mode.clone();
            conn.bot_udp = Some(SocketAddr::new(ip, port));
            conn.dave = server.dave.on;
            let (channel, user, dave) = (conn.channel, conn.user, conn.dave);
            VoiceServer::count(&mut inner, chosen);
            let version = if dave { crate::dave::DAVE_VERSION } else { 0 };
            out.push(json!({ "op": 4, "d": { "mode": mode, "secret_key": key.to_vec(), "dave_protocol_version": version } }).to_string());
            if dave {
                // Op 11 and op 25 follow Session Description, through the socket's queue.
                server.dave_step(&mut inner, channel, |g, k, now| g.bot_identifies(k, user, now));
            }
        }
        Some(3) => out.push(json!({ "op": 6, "d": d.clone() }).to_string()),
        Some(op @ (23 | 31)) => {
            let Some(g) = *guild else { return (out, Some((4003, "Not authenticated."))) };
            let transition = d["transition_id"].as_u64().and_then(|t| u16::try_from(t).ok()).unwrap_or(0);
            let mut inner = server.lock();
            if let Some(channel) = inner.conns.get(&g).filter(|c| c.dave).map(|c| c.channel) {
                if op == 23 {
                    server.dave_step(&mut inner, channel, |gr, k, now| gr.bot_ready(k, transition, now));
                } else {
                    VoiceServer::count(&mut inner, "dave_invalid_commit_welcome");
                    server.dave_step(&mut inner, channel, |gr, k, now| gr.bot_invalid(k, transition, now));
                }
            }
        }
        Some(7) => {
            let g = id_of(&d["server_id"]);
            let mut inner = server.lock();
            let resumed = match inner.conns.get_mut(&g) {
                Some(conn) if d["session_id"].as_str() == Some(&conn.session_id) && d["token"].as_str() == Some(&conn.token) => {
                    conn.ws = Some(tx.clone());
                    true
                }
                _ => false,
            };
            if !resumed {
                VoiceServer::count(&mut inner, "resume_refused");
                return (out, Some((4006, "Session is no longer valid.")));
            }
            VoiceServer::count(&mut inner, "resume");
            *guild = Some(g);
            out.push(json!({ "op": 8, "d": { "heartbeat_interval": HEARTBEAT_MS } }).to_string());
            out.push(json!({ "op": 9, "d": null }).to_string());
        }
        _ => {}
    }
    (out, None)
}

/// Accepts TCP connections and completes their TLS handshakes, for `axum::serve`.
struct TlsListener {
    tcp: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((stream, addr)) = self.tcp.accept().await else {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            };
            match tokio::time::timeout(Duration::from_secs(5), self.acceptor.accept(stream)).await {
                Ok(Ok(tls)) => return (tls, addr),
                Ok(Err(e)) => tracing::warn!(error = %e, "voice TLS handshake failed"),
                Err(_) => tracing::warn!("voice TLS handshake timed out"),
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

/// A CA made now, and a certificate for 127.0.0.1 it signed; returns the acceptor and the CA's PEM.
fn tls_acceptor() -> Result<(tokio_rustls::TlsAcceptor, String), VoiceError> {
    let cert_err = |e: rcgen::Error| VoiceError::Cert(e.to_string());
    let ca_key = rcgen::KeyPair::generate().map_err(cert_err)?;
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(cert_err)?;
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(rcgen::DnType::CommonName, "Clankie loopback voice CA");
    let ca = ca_params.self_signed(&ca_key).map_err(cert_err)?;
    let key = rcgen::KeyPair::generate().map_err(cert_err)?;
    let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()]).map_err(cert_err)?;
    params.distinguished_name.push(rcgen::DnType::CommonName, "127.0.0.1");
    let cert = params.signed_by(&key, &ca, &ca_key).map_err(cert_err)?;
    let der_key = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| VoiceError::Cert(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone(), ca.der().clone()], der_key)
        .map_err(|e| VoiceError::Cert(e.to_string()))?;
    Ok((tokio_rustls::TlsAcceptor::from(Arc::new(config)), ca.pem()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identify(session: &str, token: &str, offered: Option<u64>) -> Value {
        let mut d = json!({ "server_id": "100", "session_id": session, "token": token, "user_id": "4242" });
        if let Some(v) = offered {
            d["max_dave_protocol_version"] = json!(v);
        }
        json!({ "op": 0, "d": d })
    }

    #[tokio::test]
    async fn dave_an_identify_offering_no_dave_gets_hello_then_close_4017_and_passthrough_takes_it() {
        let dir = std::env::temp_dir().join(format!("clankie-loopback-dave-unit-{}", std::process::id()));
        let server = VoiceServer::start(&dir, None, DaveConfig { on: true, required_version: 1 }).await.unwrap();
        let (session, token) = server.bot_moves(100, Some(300));
        let (tx, _rx) = mpsc::unbounded_channel();
        for offered in [None, Some(0)] {
            let mut guild = None;
            let (out, close) = answer(&server, &identify(&session, &token, offered), &tx, &mut guild);
            assert_eq!(close.map(|c| c.0), Some(4017), "offering {offered:?}");
            assert_eq!(out.len(), 1, "Hello, then the close");
            assert!(out[0].contains("\"op\":8"), "{out:?}");
        }
        let mut guild = None;
        let (out, close) = answer(&server, &identify(&session, &token, Some(1)), &tx, &mut guild);
        assert!(close.is_none() && out.len() == 2, "DAVE offered: Hello and Ready");
        assert_eq!(server.counters().get("dave_required_closed"), Some(&2));

        let off = VoiceServer::start(&dir.join("off"), None, DaveConfig { on: false, required_version: 1 }).await.unwrap();
        let (session, token) = off.bot_moves(100, Some(300));
        let mut guild = None;
        let (_, close) = answer(&off, &identify(&session, &token, None), &tx, &mut guild);
        assert!(close.is_none(), "with DAVE off a client without it is taken");
        let select = json!({ "op": 1, "d": { "protocol": "udp", "data": { "address": "127.0.0.1", "port": 5000, "mode": MODES[0] } } });
        let (out, _) = answer(&off, &select, &tx, &mut guild);
        assert!(out[0].contains("\"dave_protocol_version\":0"), "passthrough: {}", out[0]);
    }
}
