//! The REST routes under `/api/v10` that the gateway service uses.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRef, FromRequest, Multipart, Path, Query, Request, State as AxState};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post, put};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::state::shapes::error_json;
use crate::state::{State, Upload};

/// Discord's limit on message content.
const MAX_CONTENT: usize = 2000;

/// The largest request body the loopback takes: a message with its files.
pub const MAX_UPLOAD: usize = 50 * 1024 * 1024;

pub(crate) fn routes<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    Arc<State>: FromRef<S>,
{
    Router::new()
        .route("/api/v10/gateway", get(gateway))
        .route("/api/v10/gateway/bot", get(gateway_bot))
        .route("/api/v10/users/@me", get(me))
        .route("/api/v10/applications/@me", get(application))
        .route("/api/v10/channels/{channel}/messages", post(create_message).get(list_messages))
        .route("/api/v10/channels/{channel}/messages/{message}", patch(edit_message).delete(delete_message))
        .route("/api/v10/channels/{channel}/messages/{message}/reactions/{emoji}/@me", put(react))
        .route("/api/v10/channels/{channel}/typing", post(typing))
        .route("/attachments/{id}/{filename}", get(attachment))
}

fn authorised(state: &State, headers: &HeaderMap) -> Result<(), Response> {
    let token = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or_default();
    if token.strip_prefix("Bot ") == Some(state.config.token.as_str()) {
        Ok(())
    } else {
        Err((StatusCode::UNAUTHORIZED, Json(error_json(0, "401: Unauthorized"))).into_response())
    }
}

fn unknown_channel() -> Response {
    (StatusCode::NOT_FOUND, Json(error_json(10003, "Unknown Channel"))).into_response()
}

fn unknown_message() -> Response {
    (StatusCode::NOT_FOUND, Json(error_json(10008, "Unknown Message"))).into_response()
}

async fn gateway(AxState(state): AxState<Arc<State>>) -> Json<Value> {
    Json(json!({
        "url": format!("ws://{}/gateway", state.addr),
        "shards": state.config.shards,
        "session_start_limit": { "total": 1000, "remaining": 1000, "reset_after": 0, "max_concurrency": state.config.max_concurrency },
    }))
}

/// `/gateway/bot` is the bot's own: Discord answers it only for a token it knows (401 else),
/// unlike `/gateway`.
async fn gateway_bot(AxState(state): AxState<Arc<State>>, headers: HeaderMap) -> Response {
    if let Err(r) = authorised(&state, &headers) {
        return r;
    }
    gateway(AxState(state)).await.into_response()
}

async fn me(AxState(state): AxState<Arc<State>>, headers: HeaderMap) -> Response {
    if let Err(r) = authorised(&state, &headers) {
        return r;
    }
    let c = &state.config;
    Json(json!({
        "id": c.bot_user_id.to_string(), "username": c.bot_name, "discriminator": "0", "avatar": null,
        "bot": true, "mfa_enabled": false, "accent_color": null, "banner": null,
    }))
    .into_response()
}

/// The bot's application, as Discord answers `GET /applications/@me`: its id is the bot
/// user's, and its flags say whether Message Content is on for it
/// (`GATEWAY_MESSAGE_CONTENT_LIMITED`, what the portal's switch gives an application in under
/// 100 servers).
async fn application(AxState(state): AxState<Arc<State>>, headers: HeaderMap) -> Response {
    if let Err(r) = authorised(&state, &headers) {
        return r;
    }
    let c = &state.config;
    let id = c.bot_user_id.to_string();
    Json(json!({
        "id": id, "name": c.bot_name, "icon": null, "description": "", "summary": "",
        "bot_public": true, "bot_require_code_grant": false, "verify_key": "0".repeat(64),
        "flags": if c.message_content_intent { 1 << 19 } else { 0 }, "team": null, "rpc_origins": [],
        "bot": { "id": id, "username": c.bot_name, "discriminator": "0", "avatar": null, "bot": true },
    }))
    .into_response()
}

/// Reads a create-message body: JSON, or multipart with `payload_json` and `files[n]` parts.
async fn message_body(state: &Arc<State>, req: Request) -> Result<(Bytes, Vec<Upload>), Response> {
    let multipart = req.headers().get("content-type").and_then(|v| v.to_str().ok()).is_some_and(|t| t.starts_with("multipart/form-data"));
    let bad = |what: &str| (StatusCode::BAD_REQUEST, Json(error_json(50035, what))).into_response();
    if !multipart {
        return axum::body::to_bytes(req.into_body(), MAX_UPLOAD).await.map(|b| (b, Vec::new())).map_err(|_| bad("body too large"));
    }
    let mut form = Multipart::from_request(req, state).await.map_err(|_| bad("malformed multipart body"))?;
    let (mut json, mut files) = (Bytes::new(), Vec::new());
    while let Ok(Some(field)) = form.next_field().await {
        let name = field.name().unwrap_or_default().to_owned();
        let filename = field.file_name().unwrap_or("file").to_owned();
        let content_type = field.content_type().unwrap_or("application/octet-stream").to_owned();
        let data = field.bytes().await.map_err(|_| bad("malformed multipart part"))?;
        if name == "payload_json" {
            json = data;
        } else if name.starts_with("files[") {
            files.push((filename, content_type, data.to_vec()));
        }
    }
    Ok((json, files))
}

async fn create_message(AxState(state): AxState<Arc<State>>, Path(channel): Path<u64>, req: Request) -> Response {
    if let Err(r) = authorised(&state, req.headers()) {
        return r;
    }
    if state.guild_of(channel).is_err() {
        return unknown_channel();
    }
    let (body, files) = match message_body(&state, req).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return (StatusCode::BAD_REQUEST, Json(error_json(50109, "The request body contains invalid JSON."))).into_response();
    };
    let content = body["content"].as_str().unwrap_or_default().to_owned();
    if content.is_empty() && files.is_empty() {
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
    let message = state.bot_message(channel, content, reply_to, nonce.map(|n| (n, enforce)), files, components);
    let referenced = message.reply_to.and_then(|r| state.message(r));
    Json(state.message_json(&message, referenced.as_ref())).into_response()
}

#[derive(Deserialize)]
struct ListQuery {
    limit: Option<usize>,
    before: Option<u64>,
}

async fn list_messages(
    AxState(state): AxState<Arc<State>>,
    Path(channel): Path<u64>,
    Query(q): Query<ListQuery>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = authorised(&state, &headers) {
        return r;
    }
    if state.guild_of(channel).is_err() {
        return unknown_channel();
    }
    let limit = q.limit.unwrap_or(50).clamp(1, 100);
    let list: Vec<Value> = state.channel_messages(channel, q.before, limit).iter().map(|m| state.message_json(m, None)).collect();
    Json(Value::Array(list)).into_response()
}

async fn edit_message(
    AxState(state): AxState<Arc<State>>,
    Path((channel, message)): Path<(u64, u64)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(r) = authorised(&state, &headers) {
        return r;
    }
    let content = serde_json::from_slice::<Value>(&body).ok().and_then(|v| v["content"].as_str().map(str::to_owned)).unwrap_or_default();
    match state.edit(channel, message, content) {
        Some(m) => Json(state.message_json(&m, None)).into_response(),
        None => unknown_message(),
    }
}

async fn delete_message(AxState(state): AxState<Arc<State>>, Path((channel, message)): Path<(u64, u64)>, headers: HeaderMap) -> Response {
    if let Err(r) = authorised(&state, &headers) {
        return r;
    }
    if state.delete(channel, message) { StatusCode::NO_CONTENT.into_response() } else { unknown_message() }
}

async fn react(
    AxState(state): AxState<Arc<State>>,
    Path((channel, message, emoji)): Path<(u64, u64, String)>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = authorised(&state, &headers) {
        return r;
    }
    if state.react(channel, message, emoji) { StatusCode::NO_CONTENT.into_response() } else { unknown_message() }
}

async fn typing(AxState(state): AxState<Arc<State>>, Path(channel): Path<u64>, headers: HeaderMap) -> Response {
    if let Err(r) = authorised(&state, &headers) {
        return r;
    }
    if state.guild_of(channel).is_err() {
        return unknown_channel();
    }
    state.trigger_typing(channel);
    StatusCode::NO_CONTENT.into_response()
}

async fn attachment(AxState(state): AxState<Arc<State>>, Path((id, _filename)): Path<(u64, String)>) -> Response {
    match state.download(id) {
        Some((content_type, bytes)) => ([(axum::http::header::CONTENT_TYPE, content_type)], bytes).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}
