//! The loopback voice server: what songbird's driver talks to.
//!
//! - The voice gateway, v4, as a WebSocket over TLS on 127.0.0.1 (`wss://` is all songbird
//!   speaks). The certificate is made at start by a CA of our own; a client trusts it through
//!   `SSL_CERT_FILE` = [`VoiceServer::ca_bundle`], which also holds the system roots.
//! - Identify → Hello + Ready; Select Protocol → Session Description with
//!   `dave_protocol_version: 1`, then DAVE as Discord speaks it (`dave`: the channel's MLS
//!   group with the loopback as delivery service and external sender, its human users as members
//!   whose audio is end-to-end encrypted); an Identify offering no DAVE gets Hello and close 4017.
//!   [`DaveConfig`] turns it off (`CLANKIE_LOOPBACK_DAVE=off`) for passthrough; heartbeat ACK; Resume → Hello + Resumed; Speaking for the users it voices; Client
//!   Disconnect when a user leaves his channel.
//! - One UDP socket: the 74-byte IP discovery, and RTP in both AEAD `_rtpsize` modes with real
//!   encryption and real Opus at 20 ms frames, sent at real-time pace.
//!
//! What the bot says is cut into [`HeardSegment`]s per channel; what users say is voiced with
//! [`VoiceServer::speak`]. Hostile traffic toward the bot is injected with [`VoiceServer::inject`].

mod dave;
mod rtp;
mod server;
mod signalling;
mod speaking;
mod tls;
mod udp;

use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::routing::get;
use tokio::net::{TcpListener, UdpSocket};

use crate::state::State;
pub use crate::state::config::DaveConfig;
use crate::state::shapes::voice_state_json;
use dave::ExternalSenderKey;
pub use dave::{DaveCounts, DaveView};
pub use server::{HeardSegment, Loss, SANDBOX_GRAMMAR, SYSTEM_ROOTS, VoiceError, VoiceServer};
use server::{Inner, SANDBOX_PHRASES};
use signalling::upgrade;
use tls::{TlsListener, tls_acceptor};
use udp::udp_loop;

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
}

/// The voice channels of the guild a channel belongs to, and that guild; `Err` unless
/// `channel` is a voice channel.
pub(crate) fn voice_guild(state: &State, channel: u64) -> Result<(u64, Vec<u64>), VoiceError> {
    let spec = state.config.channels.iter().find(|c| c.id == channel && c.voice).ok_or(VoiceError::UnknownChannel(channel))?;
    let guild = spec.guild.unwrap_or(state.config.guild_id);
    let channels =
        state.config.channels.iter().filter(|c| c.voice && c.guild.unwrap_or(state.config.guild_id) == guild).map(|c| c.id).collect();
    Ok((guild, channels))
}

/// Who is in the guild's voice channels now, the bot included, as GUILD_CREATE's `voice_states`.
pub(crate) fn guild_voice_states(state: &State, voice: &VoiceServer, guild: u64) -> Vec<serde_json::Value> {
    let channels: Vec<u64> =
        state.config.channels.iter().filter(|c| c.voice && c.guild.unwrap_or(state.config.guild_id) == guild).map(|c| c.id).collect();
    let mut states: Vec<serde_json::Value> = voice
        .room_members(&channels)
        .into_iter()
        .map(|(channel, user, name)| voice_state_json(guild, Some(channel), user, &name, &format!("user-voice-{user}")))
        .collect();
    if let Some((channel, session)) = voice.bot_state(guild) {
        states.push(voice_state_json(guild, Some(channel), state.config.bot_user_id, &state.config.bot_name, &session));
    }
    states
}

/// A user joins (or leaves) a voice channel: dispatches their VOICE_STATE_UPDATE.
pub(crate) fn voice_member(state: &State, voice: &VoiceServer, channel: u64, author: &str, join: bool) -> Result<u64, VoiceError> {
    let (guild, channels) = voice_guild(state, channel)?;
    let user = State::user_id(author);
    voice.set_member(guild, &channels, user, author, join.then_some(channel));
    let session = format!("user-voice-{user}");
    state.dispatch("VOICE_STATE_UPDATE", voice_state_json(guild, join.then_some(channel), user, author, &session));
    Ok(user)
}

/// `author` says `pcm` (mono, `rate` Hz) aloud in a voice channel; returns the frames that
/// reached his connection.
pub(crate) async fn voice_speak(
    state: &State,
    voice: &VoiceServer,
    channel: u64,
    author: &str,
    pcm: &[i16],
    rate: u32,
) -> Result<u32, VoiceError> {
    let (guild, _) = voice_guild(state, channel)?;
    voice.speak(guild, channel, State::user_id(author), author, pcm, rate).await
}

/// Hostile traffic of `kind` toward his connection in a voice channel, as `author`'s stream.
pub(crate) async fn voice_inject(state: &State, voice: &VoiceServer, channel: u64, author: &str, kind: &str) -> Result<(), VoiceError> {
    let (guild, _) = voice_guild(state, channel)?;
    voice.inject(guild, channel, State::user_id(author), kind).await
}

/// The bot's op 4: its VOICE_STATE_UPDATE with a fresh session, then (when it joins) a
/// VOICE_SERVER_UPDATE, as Discord sends them.
pub(crate) fn bot_voice(state: &State, voice: &VoiceServer, guild: u64, channel: Option<u64>) -> (String, String) {
    let (session, token) = voice.bot_moves(guild, channel);
    state.dispatch("VOICE_STATE_UPDATE", voice_state_json(guild, channel, state.config.bot_user_id, &state.config.bot_name, &session));
    if channel.is_some() {
        let d = serde_json::json!({ "guild_id": guild.to_string(), "token": token, "endpoint": voice.endpoint() });
        state.dispatch("VOICE_SERVER_UPDATE", d);
    }
    (session, token)
}

/// A VOICE_SERVER_UPDATE on Discord's initiative: a new token (the call moved), or a null
/// endpoint (the voice server went away; another update follows).
pub(crate) fn voice_server_update(state: &State, voice: &VoiceServer, guild: u64, gone: bool) {
    let token = voice.rotate_token(guild);
    let endpoint = if gone { serde_json::Value::Null } else { serde_json::json!(voice.endpoint()) };
    state.dispatch("VOICE_SERVER_UPDATE", serde_json::json!({ "guild_id": guild.to_string(), "token": token, "endpoint": endpoint }));
}
