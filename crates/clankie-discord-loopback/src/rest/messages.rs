//! The message routes of a channel: create (JSON or with files, refused as Discord refuses it),
//! list, fetch, edit, delete, react, typing, and attachment downloads.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, Request, State as AxState};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::Value;

use super::bodies::{channel_body, embeds_of};
use super::checks::{
    access, archived, archived_thread, authorised, authorised_in, fetch_fault, known_access, need, not_text, refused, unknown_message,
};
use crate::state::permission;
use crate::state::shapes::error_json;
use crate::state::{Refusal, State};

/// Discord's limit on message content.
const MAX_CONTENT: usize = 2000;

/// `POST /channels/{c}/messages`: the bot posts (JSON, or multipart with files), refused as
/// Discord refuses it before anything is stored.
pub(super) async fn create_message(AxState(state): AxState<Arc<State>>, Path(channel): Path<u64>, req: Request) -> Response {
    let (perms, body, files) = match channel_body(&state, channel, req).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return (StatusCode::BAD_REQUEST, Json(error_json(50109, "The request body contains invalid JSON."))).into_response();
    };
    if state.is_forum(channel) {
        return not_text();
    }
    // What Discord refuses before anything is stored: posting at all (in a thread Send Messages
    // in Threads, not Send Messages), into a closed DM, files, and a reply (which reads
    // history, refused with a code of its own).
    let send = state.send_permission(channel);
    let mut needed = send;
    if !files.is_empty() {
        needed |= permission::ATTACH_FILES;
    }
    if let Err(r) = need(perms, send) {
        return r;
    }
    if state.dm_closed(channel) {
        return refused(Refusal::DmsClosed);
    }
    if let Err(r) = need(perms, needed) {
        return r;
    }
    if !body["message_reference"].is_null() && perms & permission::READ_MESSAGE_HISTORY == 0 {
        return refused(Refusal::ReplyWithoutHistory);
    }
    let content = body["content"].as_str().unwrap_or_default().to_owned();
    let embeds = embeds_of(&body);
    if content.is_empty() && files.is_empty() && embeds.is_empty() {
        return (StatusCode::BAD_REQUEST, Json(error_json(50006, "Cannot send an empty message"))).into_response();
    }
    if content.chars().count() > MAX_CONTENT {
        return (StatusCode::BAD_REQUEST, Json(error_json(50035, "Invalid Form Body: content must be 2000 or fewer in length.")))
            .into_response();
    }
    let reply_to =
        body["message_reference"]["message_id"].as_str().and_then(|s| s.parse().ok()).or(body["message_reference"]["message_id"].as_u64());
    if let Some(r) = reply_to
        && state.message(r).is_none()
    {
        return (StatusCode::BAD_REQUEST, Json(error_json(50035, "Invalid Form Body: Unknown message"))).into_response();
    }
    let nonce = match &body["nonce"] {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    let enforce = body["enforce_nonce"].as_bool().unwrap_or(false);
    let components = body["components"].as_array().cloned().unwrap_or_default();
    let message = state.bot_message(channel, content, reply_to, nonce.map(|n| (n, enforce)), files, components, embeds);
    Json(state.message_json(&message)).into_response()
}

/// The query of `GET /channels/{c}/messages`.
#[derive(Deserialize)]
pub(super) struct ListQuery {
    limit: Option<usize>,
    before: Option<u64>,
}

/// `GET /channels/{c}/messages`: a page of the channel's messages (`limit` 1 to 100, 50 unsaid)
/// before `before`; none without Read Message History, as Discord answers.
pub(super) async fn list_messages(
    AxState(state): AxState<Arc<State>>,
    Path(channel): Path<u64>,
    Query(q): Query<ListQuery>,
    headers: HeaderMap,
) -> Response {
    let perms = match authorised_in(&state, &headers, channel) {
        Ok(p) => p,
        Err(r) => return r,
    };
    // Without Read Message History Discord answers, but with no messages.
    if perms & permission::READ_MESSAGE_HISTORY == 0 {
        return Json(Value::Array(Vec::new())).into_response();
    }
    let limit = q.limit.unwrap_or(50).clamp(1, 100);
    let list: Vec<Value> = state.channel_messages(channel, q.before, limit).iter().map(|m| state.message_json(m)).collect();
    Json(Value::Array(list)).into_response()
}

/// `PATCH /channels/{c}/messages/{m}`: the bot edits its message (50083 in an archived thread).
pub(super) async fn edit_message(
    AxState(state): AxState<Arc<State>>,
    Path((channel, message)): Path<(u64, u64)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(r) = authorised(&state, &headers) {
        return r;
    }
    if let Err(r) = known_access(&state, channel) {
        return r;
    }
    if archived(&state, channel) {
        return archived_thread();
    }
    let content = serde_json::from_slice::<Value>(&body).ok().and_then(|v| v["content"].as_str().map(str::to_owned)).unwrap_or_default();
    match state.edit(channel, message, content) {
        Some(m) => Json(state.message_json(&m)).into_response(),
        None => unknown_message(),
    }
}

/// `DELETE /channels/{c}/messages/{m}`: someone else's needs Manage Messages, never in a DM.
pub(super) async fn delete_message(
    AxState(state): AxState<Arc<State>>,
    Path((channel, message)): Path<(u64, u64)>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = authorised(&state, &headers) {
        return r;
    }
    let perms = match known_access(&state, channel) {
        Ok(p) => p,
        Err(r) => return r,
    };
    // Someone else's message: Manage Messages in a guild, never in a DM.
    if let Some(m) = state.message(message).filter(|m| m.channel_id == channel && !m.bot) {
        let refusal = match m.guild_id {
            None => Some(Refusal::InDm),
            Some(_) => need(perms.unwrap_or(0), permission::MANAGE_MESSAGES).err().map(|_| Refusal::MissingPermissions),
        };
        if let Some(r) = refusal {
            return refused(r);
        }
    }
    if state.delete(channel, message) { StatusCode::NO_CONTENT.into_response() } else { unknown_message() }
}

/// `PUT /channels/{c}/messages/{m}/reactions/{emoji}/@me`: the bot reacts.
pub(super) async fn react(
    AxState(state): AxState<Arc<State>>,
    Path((channel, message, emoji)): Path<(u64, u64, String)>,
    headers: HeaderMap,
) -> Response {
    let perms = match authorised_in(&state, &headers, channel) {
        Ok(p) => p,
        Err(r) => return r,
    };
    if archived(&state, channel) {
        return archived_thread();
    }
    // Read Message History always; Add Reactions unless the emoji is already on the message.
    let existing = state.message(message).is_some_and(|m| m.reactions.contains(&emoji));
    let needed = permission::READ_MESSAGE_HISTORY | if existing { 0 } else { permission::ADD_REACTIONS };
    if let Err(r) = need(perms, needed) {
        return r;
    }
    if state.react(channel, message, emoji) { StatusCode::NO_CONTENT.into_response() } else { unknown_message() }
}

/// `POST /channels/{c}/typing`: the bot types, where it may send.
pub(super) async fn typing(AxState(state): AxState<Arc<State>>, Path(channel): Path<u64>, headers: HeaderMap) -> Response {
    let perms = match authorised_in(&state, &headers, channel) {
        Ok(p) => p,
        Err(r) => return r,
    };
    if let Err(r) = need(perms, state.send_permission(channel)) {
        return r;
    }
    state.trigger_typing(channel);
    StatusCode::NO_CONTENT.into_response()
}

/// `GET /attachments/{id}/{filename}`: an uploaded file's bytes, as Discord's CDN serves them.
pub(super) async fn attachment(AxState(state): AxState<Arc<State>>, Path((id, _filename)): Path<(u64, String)>) -> Response {
    match state.download(id) {
        Some((content_type, bytes)) => ([(axum::http::header::CONTENT_TYPE, content_type)], bytes).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// `GET /channels/{c}/messages/{m}`: one message, a reply with the message it answers. Needs
/// Read Message History (50001 without, as Discord answers); 10008 for one not in the channel.
pub(super) async fn get_message(
    AxState(state): AxState<Arc<State>>,
    Path((channel, message)): Path<(u64, u64)>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = authorised(&state, &headers) {
        return r;
    }
    if let Err(r) = fetch_fault(&state).await {
        return r;
    }
    let perms = match access(&state, channel) {
        Ok(p) => p,
        Err(r) => return r,
    };
    if perms & permission::READ_MESSAGE_HISTORY == 0 {
        return refused(Refusal::MissingAccess);
    }
    match state.message(message).filter(|m| m.channel_id == channel && !m.spoken && !m.ephemeral) {
        Some(m) => Json(state.message_json(&m)).into_response(),
        None => unknown_message(),
    }
}
