//! The control API tests and scripts drive the loopback with, and the sandbox page.

use std::sync::Arc;

use axum::extract::{Query, State as AxState};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use clankie_proto::v1::OutcomeKind;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::state::State;

/// A file on a new user message.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NewAttachment {
    pub filename: String,
    pub content_type: String,
    /// The bytes as UTF-8 text.
    #[serde(default)]
    pub text: Option<String>,
    /// The bytes, base64-encoded.
    #[serde(default)]
    pub base64: Option<String>,
}

impl NewAttachment {
    pub(crate) fn bytes(&self) -> Vec<u8> {
        match (&self.text, &self.base64) {
            (Some(t), _) => t.as_bytes().to_vec(),
            (None, Some(b)) => decode_base64(b).unwrap_or_default(),
            (None, None) => Vec::new(),
        }
    }
}

/// A message a user writes (`POST /control/messages`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NewMessage {
    pub channel_id: u64,
    /// The author's name; the user id follows from it.
    pub author: String,
    pub content: String,
    /// Mention him even if the content does not say `@<his name>`.
    #[serde(default)]
    pub mention: bool,
    #[serde(default)]
    pub reply_to: Option<u64>,
    #[serde(default)]
    pub attachments: Vec<NewAttachment>,
}

#[derive(Deserialize)]
struct ChannelQuery {
    channel: u64,
}

pub(crate) fn routes() -> Router<Arc<State>> {
    Router::new()
        .route("/", get(page))
        .route("/control/rooms", get(rooms))
        .route("/control/messages", post(new_message).get(messages))
        .route("/control/messages/edit", post(edit_message))
        .route("/control/messages/delete", post(delete_message))
        .route("/control/posts", get(posts))
        .route("/control/typing", get(typing).post(user_typing))
        .route("/control/outcomes", get(outcomes))
        .route("/control/limits", get(limits))
        .route("/control/drop", post(drop_connections))
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

fn voice_error(e: crate::voice::VoiceError) -> Response {
    use crate::voice::VoiceError as E;
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

fn voice_member(state: &State, m: &VoiceMember, join: bool) -> Response {
    if let Some(r) = bad_author(&m.author) {
        return r;
    }
    match state.voice_member(m.channel_id, &m.author, join) {
        Ok(user) => Json(json!({ "user_id": user })).into_response(),
        Err(e) => voice_error(e),
    }
}

async fn voice_join(AxState(state): AxState<Arc<State>>, Json(m): Json<VoiceMember>) -> Response {
    voice_member(&state, &m, true)
}

async fn voice_leave(AxState(state): AxState<Arc<State>>, Json(m): Json<VoiceMember>) -> Response {
    voice_member(&state, &m, false)
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

async fn voice_speak(AxState(state): AxState<Arc<State>>, Json(m): Json<VoiceSpeak>) -> Response {
    if let Some(r) = bad_author(&m.author) {
        return r;
    }
    let bad = |why: String| (StatusCode::BAD_REQUEST, Json(json!({ "error": why }))).into_response();
    let audio = match (&m.text, &m.wav_base64) {
        (Some(t), None) if !t.trim().is_empty() && t.chars().count() <= MAX_SPOKEN_CHARS => {
            state.voice.remember_phrase(t.trim());
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
    match state.voice_speak(m.channel_id, &m.author, &pcm, rate).await {
        Ok(frames) => Json(json!({ "user_id": user, "frames": frames, "duration_ms": duration_ms })).into_response(),
        Err(e) => voice_error(e),
    }
}

async fn voice_heard(AxState(state): AxState<Arc<State>>, Query(q): Query<ChannelQuery>) -> Json<Value> {
    let segments: Vec<Value> = state
        .voice
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

async fn voice_drop(AxState(state): AxState<Arc<State>>, Query(q): Query<VoiceDropQuery>) -> Response {
    if !(1000..5000).contains(&q.code) {
        return (StatusCode::BAD_REQUEST, Json(json!({ "error": "a close code is 1000 to 4999" }))).into_response();
    }
    let closed = state.voice.drop_socket(q.guild.unwrap_or(state.config.guild_id), q.code);
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

async fn voice_server(AxState(state): AxState<Arc<State>>, Query(q): Query<ServerQuery>) -> Json<Value> {
    state.voice_server_update(q.guild.unwrap_or(state.config.guild_id), q.gone);
    Json(json!({ "sent": true }))
}

async fn voice_inject(AxState(state): AxState<Arc<State>>, Json(m): Json<VoiceInject>) -> Response {
    match state.voice_inject(m.channel_id, &m.author, &m.kind).await {
        Ok(()) => Json(json!({ "sent": m.kind })).into_response(),
        Err(e) => voice_error(e),
    }
}

async fn voice_room(AxState(state): AxState<Arc<State>>, Query(q): Query<ChannelQuery>) -> Json<Value> {
    Json(json!({
        "channel": q.channel,
        "members": state.voice.members(q.channel),
        "bot_connected": state.voice.bot_connected(q.channel),
        "counters": state.voice.counters(),
        "dave": state.voice.dave(q.channel),
    }))
}

async fn page() -> Response {
    ([(header::CACHE_CONTROL, "no-store")], Html(include_str!("sandbox.html"))).into_response()
}

async fn rooms(AxState(state): AxState<Arc<State>>) -> Json<Value> {
    let c = &state.config;
    Json(json!({
        "bot_name": c.bot_name,
        "guild": { "id": c.guild_id, "name": c.guild_name },
        "channels": c.channels,
        "dm_channels": c.dm_channels,
    }))
}

async fn new_message(AxState(state): AxState<Arc<State>>, Json(m): Json<NewMessage>) -> Response {
    if state.guild_of(m.channel_id).is_err() {
        return (StatusCode::NOT_FOUND, Json(json!({ "error": "unknown channel" }))).into_response();
    }
    if m.author.trim().is_empty() || m.content.chars().count() > 4000 {
        return (StatusCode::BAD_REQUEST, Json(json!({ "error": "an author is required and content is at most 4000 characters" })))
            .into_response();
    }
    let id = state.user_message(m);
    Json(json!({ "id": id })).into_response()
}

/// A user's edit of their message (`POST /control/messages/edit`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EditMessage {
    pub id: u64,
    pub content: String,
}

/// A message deleted (`POST /control/messages/delete`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeleteMessage {
    pub id: u64,
}

async fn edit_message(AxState(state): AxState<Arc<State>>, Json(m): Json<EditMessage>) -> Response {
    if m.content.chars().count() > 4000 {
        return (StatusCode::BAD_REQUEST, Json(json!({ "error": "content is at most 4000 characters" }))).into_response();
    }
    if !state.user_edit(m.id, m.content) {
        return (StatusCode::NOT_FOUND, Json(json!({ "error": "no such message of a user" }))).into_response();
    }
    Json(json!({ "id": m.id })).into_response()
}

async fn delete_message(AxState(state): AxState<Arc<State>>, Json(m): Json<DeleteMessage>) -> Response {
    if !state.user_delete(m.id) {
        return (StatusCode::NOT_FOUND, Json(json!({ "error": "no such message" }))).into_response();
    }
    Json(json!({ "id": m.id })).into_response()
}

async fn messages(AxState(state): AxState<Arc<State>>, Query(q): Query<ChannelQuery>) -> Json<Value> {
    Json(json!(state.all_messages(q.channel)))
}

async fn posts(AxState(state): AxState<Arc<State>>, Query(q): Query<ChannelQuery>) -> Json<Value> {
    Json(json!(state.posts(q.channel)))
}

async fn typing(AxState(state): AxState<Arc<State>>, Query(q): Query<ChannelQuery>) -> Json<Value> {
    Json(json!(state.typing(q.channel)))
}

/// Someone starts typing in a channel.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct NewTyping {
    pub channel_id: u64,
    pub author: String,
}

async fn user_typing(AxState(state): AxState<Arc<State>>, Json(t): Json<NewTyping>) -> Response {
    if state.guild_of(t.channel_id).is_err() {
        return (StatusCode::NOT_FOUND, Json(json!({ "error": "unknown channel" }))).into_response();
    }
    if t.author.trim().is_empty() {
        return (StatusCode::BAD_REQUEST, Json(json!({ "error": "an author is required" }))).into_response();
    }
    state.user_typing(t.channel_id, &t.author);
    StatusCode::NO_CONTENT.into_response()
}

/// `GET /control/limits`: what Discord's limits counted ([`crate::LimitCounts`]).
async fn limits(AxState(state): AxState<Arc<State>>) -> Json<crate::LimitCounts> {
    Json(state.limits.counts())
}

async fn outcomes(AxState(state): AxState<Arc<State>>, Query(q): Query<ChannelQuery>) -> Json<Value> {
    let list: Vec<Value> = state
        .all_messages(q.channel)
        .into_iter()
        .filter(|m| !m.bot)
        .filter_map(|m| {
            let outcome = m.reactions.iter().find_map(|r| OutcomeKind::from_reaction(r))?;
            Some(json!({ "message_id": m.id, "outcome": outcome.code() }))
        })
        .collect();
    Json(Value::Array(list))
}

#[derive(Deserialize)]
struct DropQuery {
    /// Dispatches the following resume replays although the client had them.
    #[serde(default)]
    replay: u64,
}

async fn drop_connections(AxState(state): AxState<Arc<State>>, Query(q): Query<DropQuery>) -> StatusCode {
    state.replay_on_resume(q.replay);
    state.drop_connections();
    StatusCode::NO_CONTENT
}

/// Standard base64 (padding optional); `None` on any other character.
fn decode_base64(text: &str) -> Option<Vec<u8>> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let digits: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace() && *b != b'=').map(value).collect::<Option<_>>()?;
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
        let n = chunk.iter().enumerate().fold(0u32, |acc, (i, d)| acc | (u32::from(*d) << (18 - 6 * i)));
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..chunk.len().saturating_sub(1)]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::decode_base64;

    #[test]
    fn base64_decodes_with_and_without_padding() {
        assert_eq!(decode_base64("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(decode_base64("aGVsbG8").unwrap(), b"hello");
        assert_eq!(decode_base64("aGk=").unwrap(), b"hi");
        assert!(decode_base64("a$b").is_none());
    }
}
