//! The REST routes under `/api/v10` that the gateway service uses, refused as Discord refuses
//! them (membership, permissions, closed DMs), and the guild routes `clankie doctor` reads.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRef, FromRequest, Multipart, Path, Query, Request, State as AxState};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post, put};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::state::permission;
use crate::state::shapes::error_json;
use crate::state::{Refusal, State, Upload};

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
        .route("/api/v10/users/@me/guilds", get(my_guilds))
        .route("/api/v10/guilds/{guild}", get(guild))
        .route("/api/v10/guilds/{guild}/channels", get(guild_channels))
        .route("/api/v10/guilds/{guild}/roles", get(guild_roles))
        .route("/api/v10/guilds/{guild}/members/{user}", get(guild_member))
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

/// A refusal as Discord words it: its status and `{"message", "code"}`.
fn refused(r: Refusal) -> Response {
    let status = StatusCode::from_u16(r.status()).unwrap_or(StatusCode::FORBIDDEN);
    (status, Json(error_json(r.code(), &r.to_string()))).into_response()
}

/// The bot's permissions in a channel if every channel route may go on there (10003, 50001 else).
fn access(state: &State, channel: u64) -> Result<u64, Response> {
    state.channel_access(channel).map_err(refused)
}

/// Refuses with 50013 unless `perms` hold every bit of `needed`.
fn need(perms: u64, needed: u64) -> Result<(), Response> {
    if perms & needed == needed { Ok(()) } else { Err(refused(Refusal::MissingPermissions)) }
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
        "flags": if state.message_content_intent() { 1 << 19 } else { 0 }, "team": null, "rpc_origins": [],
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
    let perms = match access(&state, channel) {
        Ok(p) => p,
        Err(r) => return r,
    };
    let (body, files) = match message_body(&state, req).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return (StatusCode::BAD_REQUEST, Json(error_json(50109, "The request body contains invalid JSON."))).into_response();
    };
    // What Discord refuses before anything is stored: posting at all, into a closed DM, files,
    // and a reply (which reads history, refused with a code of its own).
    let mut needed = permission::SEND_MESSAGES;
    if !files.is_empty() {
        needed |= permission::ATTACH_FILES;
    }
    if let Err(r) = need(perms, permission::SEND_MESSAGES) {
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
    let perms = match access(&state, channel) {
        Ok(p) => p,
        Err(r) => return r,
    };
    // Without Read Message History Discord answers, but with no messages.
    if perms & permission::READ_MESSAGE_HISTORY == 0 {
        return Json(Value::Array(Vec::new())).into_response();
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
    if let Err(r) = known_access(&state, channel) {
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

async fn react(
    AxState(state): AxState<Arc<State>>,
    Path((channel, message, emoji)): Path<(u64, u64, String)>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = authorised(&state, &headers) {
        return r;
    }
    let perms = match access(&state, channel) {
        Ok(p) => p,
        Err(r) => return r,
    };
    // Read Message History always; Add Reactions unless the emoji is already on the message.
    let existing = state.message(message).is_some_and(|m| m.reactions.contains(&emoji));
    let needed = permission::READ_MESSAGE_HISTORY | if existing { 0 } else { permission::ADD_REACTIONS };
    if let Err(r) = need(perms, needed) {
        return r;
    }
    if state.react(channel, message, emoji) { StatusCode::NO_CONTENT.into_response() } else { unknown_message() }
}

async fn typing(AxState(state): AxState<Arc<State>>, Path(channel): Path<u64>, headers: HeaderMap) -> Response {
    if let Err(r) = authorised(&state, &headers) {
        return r;
    }
    let perms = match access(&state, channel) {
        Ok(p) => p,
        Err(r) => return r,
    };
    if let Err(r) = need(perms, permission::SEND_MESSAGES) {
        return r;
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

/// For the routes that answered an unknown channel with 10008 before: the access check only for
/// a channel that exists (its permissions, `None` for an unknown one, whose message is unknown).
fn known_access(state: &State, channel: u64) -> Result<Option<u64>, Response> {
    match state.channel_access(channel) {
        Ok(perms) => Ok(Some(perms)),
        Err(Refusal::UnknownChannel) => Ok(None),
        Err(r) => Err(refused(r)),
    }
}

/// Where a guild route may go on: the bot's token (401), a guild that exists (404 10004 where
/// `unknown_is_404`, as `GET /guilds/{id}` answers; 50001 for its sub-routes), and the bot a
/// member of it (50001).
fn guild_route(state: &State, headers: &HeaderMap, guild: u64, unknown_is_404: bool) -> Result<(), Response> {
    authorised(state, headers)?;
    if !state.guild_exists(guild) && unknown_is_404 {
        return Err((StatusCode::NOT_FOUND, Json(error_json(10004, "Unknown Guild"))).into_response());
    }
    if !state.bot_in_guild(guild) {
        return Err(refused(Refusal::MissingAccess));
    }
    Ok(())
}

/// `GET /users/@me/guilds`: the guilds the bot is in, never one it was not invited to.
async fn my_guilds(AxState(state): AxState<Arc<State>>, headers: HeaderMap) -> Response {
    if let Err(r) = authorised(&state, &headers) {
        return r;
    }
    Json(state.partial_guilds_json()).into_response()
}

async fn guild(AxState(state): AxState<Arc<State>>, Path(guild): Path<u64>, headers: HeaderMap) -> Response {
    match guild_route(&state, &headers, guild, true) {
        Ok(()) => Json(state.guild_json(guild)).into_response(),
        Err(r) => r,
    }
}

/// `GET /guilds/{id}/channels`: those the bot can view, as Discord answers since 2026-11-16.
async fn guild_channels(AxState(state): AxState<Arc<State>>, Path(guild): Path<u64>, headers: HeaderMap) -> Response {
    match guild_route(&state, &headers, guild, false) {
        Ok(()) => Json(state.guild_channels_json(guild)).into_response(),
        Err(r) => r,
    }
}

async fn guild_roles(AxState(state): AxState<Arc<State>>, Path(guild): Path<u64>, headers: HeaderMap) -> Response {
    match guild_route(&state, &headers, guild, false) {
        Ok(()) => Json(state.roles_json(guild)).into_response(),
        Err(r) => r,
    }
}

/// `GET /guilds/{id}/members/{user}`: the bot's own member; the loopback keeps no other (10007).
async fn guild_member(AxState(state): AxState<Arc<State>>, Path((guild, user)): Path<(u64, u64)>, headers: HeaderMap) -> Response {
    if let Err(r) = guild_route(&state, &headers, guild, false) {
        return r;
    }
    if user != state.config.bot_user_id {
        return (StatusCode::NOT_FOUND, Json(error_json(10007, "Unknown Member"))).into_response();
    }
    Json(state.bot_member_json(guild)).into_response()
}
