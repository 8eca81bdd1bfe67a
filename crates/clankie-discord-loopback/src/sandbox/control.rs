//! The control API's text side: users writing, editing and deleting messages, typing, running
//! commands and pressing buttons; and what tests read back (messages, posts, outcomes, limits).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{FromRef, Path, Query, State as AxState};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use clankie_proto::v1::OutcomeKind;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::interactions::{InteractionError, PressButton, RunCommand, press_button, run_command};
use crate::state::limits::LimitCounts;
use crate::state::{NewMessage, OverwriteError, State, now_ms};

/// A query naming one channel.
#[derive(Deserialize)]
pub(super) struct ChannelQuery {
    pub channel: u64,
}

pub(crate) fn routes<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    Arc<State>: FromRef<S>,
{
    Router::new()
        .route("/control/rooms", get(rooms))
        .route("/control/messages", post(new_message).get(messages))
        .route("/control/messages/edit", post(edit_message))
        .route("/control/messages/delete", post(delete_message))
        .route("/control/posts", get(posts))
        .route("/control/typing", get(typing).post(user_typing))
        .route("/control/outcomes", get(outcomes))
        .route("/control/limits", get(limits))
        .route("/control/drop", post(drop_connections))
        .route("/control/interactions/command", post(control_command))
        .route("/control/interactions/button", post(control_button))
        .route("/control/interactions/{id}", get(control_record))
        .route("/control/commands", get(control_commands))
        .route("/control/permissions", post(set_permissions).get(permissions))
        .route("/control/message_content", post(message_content))
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

/// `GET /control/limits`: what Discord's limits counted ([`LimitCounts`]).
async fn limits(AxState(state): AxState<Arc<State>>) -> Json<LimitCounts> {
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
    state.sessions.replay_on_resume(q.replay);
    state.sessions.drop_connections();
    StatusCode::NO_CONTENT
}

fn control_refusal(e: InteractionError) -> Response {
    (StatusCode::NOT_FOUND, Json(json!({ "error": e.to_string() }))).into_response()
}

async fn control_command(AxState(state): AxState<Arc<State>>, Json(c): Json<RunCommand>) -> Response {
    match run_command(&state, c) {
        Ok(r) => Json(json!(r)).into_response(),
        Err(e) => control_refusal(e),
    }
}

async fn control_button(AxState(state): AxState<Arc<State>>, Json(p): Json<PressButton>) -> Response {
    match press_button(&state, p) {
        Ok(r) => Json(json!(r)).into_response(),
        Err(e) => control_refusal(e),
    }
}

async fn control_record(AxState(state): AxState<Arc<State>>, Path(id): Path<u64>) -> Response {
    match state.interactions.record(id) {
        Some(r) => Json(json!(r)).into_response(),
        None => (StatusCode::NOT_FOUND, Json(json!({ "error": "no such interaction" }))).into_response(),
    }
}

async fn control_commands(AxState(state): AxState<Arc<State>>) -> Json<Value> {
    let (overwrites, sets) = state.interactions.registered();
    let sets: BTreeMap<String, Vec<String>> =
        sets.into_iter().map(|(scope, names)| (scope.map_or("global".to_owned(), |g| g.to_string()), names)).collect();
    Json(json!({ "overwrites": overwrites, "sets": sets, "at_ms": now_ms() }))
}

/// The bot's member overwrite on a channel (`POST /control/permissions`); both 0 removes it.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct SetPermissions {
    pub channel: u64,
    #[serde(default)]
    pub allow: u64,
    #[serde(default)]
    pub deny: u64,
}

/// Sets the bot's overwrite, so a refusal can be shown at run time; answers the bot's
/// permissions there now (`null` in a guild it is not in).
async fn set_permissions(AxState(state): AxState<Arc<State>>, Json(p): Json<SetPermissions>) -> Response {
    match state.set_bot_overwrite(p.channel, p.allow, p.deny) {
        Ok(permissions) => Json(json!({ "permissions": permissions })).into_response(),
        Err(e @ OverwriteError::UnknownChannel(_)) => (StatusCode::NOT_FOUND, Json(json!({ "error": e.to_string() }))).into_response(),
        Err(e @ OverwriteError::NotAGuildChannel(_)) => (StatusCode::BAD_REQUEST, Json(json!({ "error": e.to_string() }))).into_response(),
    }
}

/// `GET /control/permissions?channel=`: the bot's permissions in a channel (`null` where it has none).
async fn permissions(AxState(state): AxState<Arc<State>>, Query(q): Query<ChannelQuery>) -> Json<Value> {
    Json(json!({ "permissions": state.bot_permissions(q.channel) }))
}

/// The application's Message Content switch (`POST /control/message_content`).
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct MessageContent {
    pub on: bool,
}

/// Flips the switch as the Developer Portal does: later identifies asking for the intent are
/// closed with 4014 while it is off, and `GET /applications/@me` shows it.
async fn message_content(AxState(state): AxState<Arc<State>>, Json(m): Json<MessageContent>) -> Json<Value> {
    state.set_message_content_intent(m.on);
    Json(json!({ "on": state.message_content_intent() }))
}
