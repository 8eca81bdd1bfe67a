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
        .route("/control/posts", get(posts))
        .route("/control/typing", get(typing).post(user_typing))
        .route("/control/outcomes", get(outcomes))
        .route("/control/drop", post(drop_connections))
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
