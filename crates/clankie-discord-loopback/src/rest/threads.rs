//! The thread routes: the bot starts a thread from a message or without one (a forum post in
//! a forum), and joins one, refused as Discord refuses each.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Request, State as AxState};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::bodies::{channel_body, embeds_of};
use super::checks::{access, archived_thread, authorised, authorised_in, need};
use crate::state::permission;
use crate::state::shapes::error_json;
use crate::state::threads::{NewThread, ThreadError};
use crate::state::{NewMessage, State};

/// A thread refusal as Discord words it.
fn thread_refused(e: ThreadError) -> Response {
    let (status, code, message) = match e {
        ThreadError::UnknownChannel(_) | ThreadError::UnknownThread(_) => (StatusCode::NOT_FOUND, 10003, "Unknown Channel"),
        ThreadError::UnknownMessage(_) => (StatusCode::NOT_FOUND, 10008, "Unknown Message"),
        ThreadError::AlreadyStarted(_) => (StatusCode::BAD_REQUEST, 160004, "A thread has already been created for this message"),
        ThreadError::NoThreadsHere(_) | ThreadError::NotAForum(_) | ThreadError::NoPrivateThreads => {
            (StatusCode::BAD_REQUEST, 50024, "Cannot execute action on this channel type")
        }
    };
    (status, Json(error_json(code, message))).into_response()
}

/// The thread's name from a start-thread body (1 to 100 characters), else 50035.
fn thread_name(body: &Value) -> Result<String, Response> {
    match body["name"].as_str() {
        Some(name) if (1..=100).contains(&name.chars().count()) => Ok(name.to_owned()),
        _ => Err((StatusCode::BAD_REQUEST, Json(error_json(50035, "Invalid Form Body: name"))).into_response()),
    }
}

/// `POST /channels/{c}/messages/{m}/threads`: the bot starts a thread from a message (its id
/// the message's); needs Create Public Threads. Answers the thread (201).
pub(super) async fn thread_from_message(
    AxState(state): AxState<Arc<State>>,
    Path((channel, message)): Path<(u64, u64)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let perms = match authorised_in(&state, &headers, channel) {
        Ok(p) => p,
        Err(r) => return r,
    };
    if let Err(r) = need(perms, permission::CREATE_PUBLIC_THREADS | permission::READ_MESSAGE_HISTORY) {
        return r;
    }
    let body = serde_json::from_slice::<Value>(&body).unwrap_or(Value::Null);
    let name = match thread_name(&body) {
        Ok(n) => n,
        Err(r) => return r,
    };
    let new = NewThread { parent: channel, from_message: Some(message), name: &name, private: false, owner: state.config.bot_user_id };
    match state.start_thread(new).map(|id| state.thread(id)) {
        Ok(Some(t)) => (StatusCode::CREATED, Json(state.thread_json(&t))).into_response(),
        Ok(None) => thread_refused(ThreadError::UnknownThread(message)),
        Err(e) => thread_refused(e),
    }
}

/// `POST /channels/{c}/threads`: the bot starts a thread without a message (type 11 or 12 from
/// the body, 12 when unsaid, as Discord defaults), or in a forum a post with its first message
/// (answered with `message`). Answers the thread (201).
pub(super) async fn thread_without_message(AxState(state): AxState<Arc<State>>, Path(channel): Path<u64>, req: Request) -> Response {
    let (perms, body, files) = match channel_body(&state, channel, req).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let body = serde_json::from_slice::<Value>(&body).unwrap_or(Value::Null);
    let name = match thread_name(&body) {
        Ok(n) => n,
        Err(r) => return r,
    };
    let bot = state.config.bot_user_id;
    if state.is_forum(channel) {
        // A forum post: Send Messages starts one there, its first message is the bot's.
        if let Err(r) = need(perms, permission::SEND_MESSAGES | if files.is_empty() { 0 } else { permission::ATTACH_FILES }) {
            return r;
        }
        let tag_ids: Vec<u64> = body["applied_tags"]
            .as_array()
            .map(|t| t.iter().filter_map(|t| t.as_str().and_then(|s| s.parse().ok()).or(t.as_u64())).collect())
            .unwrap_or_default();
        let spec = state.config.channels.iter().find(|c| c.id == channel);
        let tags: Vec<&str> = spec
            .map(|s| s.tags.iter().filter(|t| s.tag_id(t).is_some_and(|id| tag_ids.contains(&id))).map(String::as_str).collect())
            .unwrap_or_default();
        let message = &body["message"];
        let content = message["content"].as_str().unwrap_or_default().to_owned();
        let embeds = embeds_of(message);
        if content.is_empty() && files.is_empty() && embeds.is_empty() {
            return (StatusCode::BAD_REQUEST, Json(error_json(50006, "Cannot send an empty message"))).into_response();
        }
        let first = NewMessage { content, embeds, ..Default::default() };
        return match state.forum_post(channel, None, &name, &tags, first, files) {
            Ok((thread, first)) => {
                let (Some(t), Some(m)) = (state.thread(thread), state.message(first)) else {
                    return thread_refused(ThreadError::UnknownThread(thread));
                };
                let mut v = state.thread_json(&t);
                v["message"] = state.message_json(&m);
                (StatusCode::CREATED, Json(v)).into_response()
            }
            Err(e) => thread_refused(e),
        };
    }
    let private = body["type"].as_u64().is_none_or(|t| t == 12);
    let needed = if private { permission::CREATE_PRIVATE_THREADS } else { permission::CREATE_PUBLIC_THREADS };
    if let Err(r) = need(perms, needed) {
        return r;
    }
    let new = NewThread { parent: channel, from_message: None, name: &name, private, owner: bot };
    match state.start_thread(new).map(|id| state.thread(id)) {
        Ok(Some(t)) => (StatusCode::CREATED, Json(state.thread_json(&t))).into_response(),
        Ok(None) => thread_refused(ThreadError::UnknownThread(channel)),
        Err(e) => thread_refused(e),
    }
}

/// `PUT /channels/{thread}/thread-members/@me`: the bot joins a thread it sees (204; THREAD_MEMBERS_UPDATE
/// and THREAD_CREATE when he was not a member). 50001 for a private thread he was not added
/// to, 50083 for an archived one, 50024 for a channel that is not a thread.
pub(super) async fn join_thread(AxState(state): AxState<Arc<State>>, Path(channel): Path<u64>, headers: HeaderMap) -> Response {
    if let Err(r) = authorised(&state, &headers) {
        return r;
    }
    if let Err(r) = access(&state, channel) {
        return r;
    }
    let Some(thread) = state.thread(channel) else {
        return thread_refused(ThreadError::NoThreadsHere(channel));
    };
    if thread.archived {
        return archived_thread();
    }
    state.bot_joins_thread(channel);
    StatusCode::NO_CONTENT.into_response()
}
