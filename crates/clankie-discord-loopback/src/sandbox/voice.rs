//! The control API's voice side: users joining, leaving and speaking in a voice channel (text
//! voiced with Piper or espeak-ng, or a WAV), what was heard of him, socket drops, server moves
//! and hostile traffic.

use std::sync::Arc;

use axum::extract::{FromRef, Query, State as AxState};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::sandbox::control::ChannelQuery;
use crate::state::State;
use crate::state::messages::decode_base64;
use crate::voice::{self, VoiceError, VoiceServer};

pub(crate) fn routes<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    Arc<State>: FromRef<S>,
    Arc<VoiceServer>: FromRef<S>,
{
    Router::new()
        .route("/control/voice/join", post(voice_join))
        .route("/control/voice/leave", post(voice_leave))
        .route("/control/voice/speak", post(voice_speak))
        .route("/control/voice/heard", get(voice_heard))
        .route("/control/voice/drop", post(voice_drop))
        .route("/control/voice/server", post(voice_server))
        .route("/control/voice/inject", post(voice_inject))
        .route("/control/voice/room", get(voice_room))
}

/// A user entering or leaving a voice channel (`POST /control/voice/join|leave`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct VoiceMember {
    pub channel_id: u64,
    pub author: String,
}

/// A user saying something aloud (`POST /control/voice/speak`): `text` is synthesized (with
/// Piper through the configured speech API, else espeak-ng); `wav_base64` is a 16-bit PCM WAV file.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct VoiceSpeak {
    pub channel_id: u64,
    pub author: String,
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub wav_base64: Option<String>,
}

/// Hostile traffic toward the bot (`POST /control/voice/inject`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct VoiceInject {
    pub channel_id: u64,
    /// Whose stream carries it, where one is needed.
    pub author: String,
    /// `garbage_json`, `undersized`, `unauthenticated`, `unknown_ssrc` or `truncated_opus`.
    pub kind: String,
}

fn voice_error(e: VoiceError) -> Response {
    use VoiceError as E;
    let status = match &e {
        E::UnknownChannel(_) => StatusCode::NOT_FOUND,
        E::NotInChannel(..) | E::BotAbsent(_) => StatusCode::CONFLICT,
        E::UnknownKind(_) => StatusCode::BAD_REQUEST,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    (status, Json(json!({ "error": e.to_string() }))).into_response()
}

fn bad_author(author: &str) -> Option<Response> {
    (author.trim().is_empty() || author.chars().count() > 64)
        .then(|| (StatusCode::BAD_REQUEST, Json(json!({ "error": "an author of 1 to 64 characters is required" }))).into_response())
}

fn voice_member(state: &State, server: &VoiceServer, m: &VoiceMember, join: bool) -> Response {
    if let Some(r) = bad_author(&m.author) {
        return r;
    }
    match voice::voice_member(state, server, m.channel_id, &m.author, join) {
        Ok(user) => Json(json!({ "user_id": user })).into_response(),
        Err(e) => voice_error(e),
    }
}

async fn voice_join(
    AxState(state): AxState<Arc<State>>,
    AxState(server): AxState<Arc<VoiceServer>>,
    Json(m): Json<VoiceMember>,
) -> Response {
    voice_member(&state, &server, &m, true)
}

async fn voice_leave(
    AxState(state): AxState<Arc<State>>,
    AxState(server): AxState<Arc<VoiceServer>>,
    Json(m): Json<VoiceMember>,
) -> Response {
    voice_member(&state, &server, &m, false)
}

/// The longest line the loopback voices, so a request cannot tie up a voice stream for long.
const MAX_SPOKEN_CHARS: usize = 600;

/// Synthesizes `text` into mono PCM and its rate: through the OpenAI-compatible speech API at
/// `tts` (the local speech service's Piper) when given, else with espeak-ng.
pub(crate) async fn synthesize(text: &str, tts: Option<&str>) -> Result<(Vec<i16>, u32), String> {
    use clankie_speech::TextToSpeech as _;
    let timeout = std::time::Duration::from_secs(30);
    let audio = match tts {
        Some(base) => clankie_speech::openai::OpenAiSpeaker::new(base, "piper", "joe", None, timeout)
            .map_err(|e| e.to_string())?
            .synthesize(text)
            .await
            .map_err(|e| e.to_string())?,
        None => clankie_speech::offline::Espeak::new(timeout).synthesize(text).await.map_err(|e| e.to_string())?,
    };
    Ok((audio.pcm, audio.rate))
}

async fn voice_speak(
    AxState(state): AxState<Arc<State>>,
    AxState(server): AxState<Arc<VoiceServer>>,
    Json(m): Json<VoiceSpeak>,
) -> Response {
    if let Some(r) = bad_author(&m.author) {
        return r;
    }
    let bad = |why: String| (StatusCode::BAD_REQUEST, Json(json!({ "error": why }))).into_response();
    let audio = match (&m.text, &m.wav_base64) {
        (Some(t), None) if !t.trim().is_empty() && t.chars().count() <= MAX_SPOKEN_CHARS => {
            server.remember_phrase(t.trim());
            synthesize(t, state.config.say_aloud_tts.as_deref()).await
        }
        (None, Some(b)) => match decode_base64(b) {
            Some(bytes) => clankie_pcm::read_wav(&bytes).map_err(|e| e.to_string()),
            None => return bad("wav_base64 is not base64".into()),
        },
        _ => return bad(format!("give exactly one of text (1 to {MAX_SPOKEN_CHARS} characters) or wav_base64")),
    };
    let (pcm, rate) = match audio {
        Ok(a) => a,
        Err(why) => return bad(why),
    };
    if rate == 0 || pcm.len() as u64 > u64::from(rate) * 60 {
        return bad("audio must have a rate and last at most 60 s".into());
    }
    let user = State::user_id(&m.author);
    let duration_ms = pcm.len() as u64 * 1000 / u64::from(rate);
    match voice::voice_speak(&state, &server, m.channel_id, &m.author, &pcm, rate).await {
        Ok(frames) => Json(json!({ "user_id": user, "frames": frames, "duration_ms": duration_ms })).into_response(),
        Err(e) => voice_error(e),
    }
}

async fn voice_heard(AxState(server): AxState<Arc<VoiceServer>>, Query(q): Query<ChannelQuery>) -> Json<Value> {
    let segments: Vec<Value> = server
        .heard(q.channel)
        .iter()
        .map(|s| {
            json!({
                "start_ms": s.start_ms,
                "end_ms": s.end_ms,
                "duration_ms": s.duration_ms(),
                "wav_base64": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, clankie_pcm::wav(&s.pcm, s.rate)),
            })
        })
        .collect();
    Json(json!({ "channel": q.channel, "segments": segments }))
}

#[derive(Deserialize)]
struct VoiceDropQuery {
    code: u16,
    #[serde(default)]
    guild: Option<u64>,
}

async fn voice_drop(
    AxState(state): AxState<Arc<State>>,
    AxState(server): AxState<Arc<VoiceServer>>,
    Query(q): Query<VoiceDropQuery>,
) -> Response {
    if !(1000..5000).contains(&q.code) {
        return (StatusCode::BAD_REQUEST, Json(json!({ "error": "a close code is 1000 to 4999" }))).into_response();
    }
    let closed = server.drop_socket(q.guild.unwrap_or(state.config.guild_id), q.code);
    Json(json!({ "closed": closed })).into_response()
}

#[derive(Deserialize)]
struct ServerQuery {
    #[serde(default)]
    guild: Option<u64>,
    /// Send a null endpoint (the voice server went away).
    #[serde(default)]
    gone: bool,
}

async fn voice_server(
    AxState(state): AxState<Arc<State>>,
    AxState(server): AxState<Arc<VoiceServer>>,
    Query(q): Query<ServerQuery>,
) -> Json<Value> {
    voice::voice_server_update(&state, &server, q.guild.unwrap_or(state.config.guild_id), q.gone);
    Json(json!({ "sent": true }))
}

async fn voice_inject(
    AxState(state): AxState<Arc<State>>,
    AxState(server): AxState<Arc<VoiceServer>>,
    Json(m): Json<VoiceInject>,
) -> Response {
    match voice::voice_inject(&state, &server, m.channel_id, &m.author, &m.kind).await {
        Ok(()) => Json(json!({ "sent": m.kind })).into_response(),
        Err(e) => voice_error(e),
    }
}

async fn voice_room(AxState(server): AxState<Arc<VoiceServer>>, Query(q): Query<ChannelQuery>) -> Json<Value> {
    Json(json!({
        "channel": q.channel,
        "members": server.members(q.channel),
        "bot_connected": server.bot_connected(q.channel),
        "counters": server.counters(),
        "dave": server.dave(q.channel),
    }))
}
