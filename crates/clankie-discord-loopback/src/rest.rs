//! The REST routes under `/api/v10` that the gateway service uses, refused as Discord refuses
//! them (membership, permissions, closed DMs), and the guild routes `clankie doctor` reads.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRef, FromRequest, Multipart, Path, Query, Request, State as AxState};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::state::faults::FetchFault;
use crate::state::permission;
use crate::state::shapes::error_json;
use crate::state::threads::{NewThread, ThreadError};
use crate::state::{NewEmbed, NewMessage, Refusal, State, Upload};

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
        .route("/api/v10/channels/{channel}", get(channel))
        .route("/api/v10/channels/{channel}/messages/{message}", get(get_message).patch(edit_message).delete(delete_message))
        .route("/api/v10/channels/{channel}/messages/{message}/threads", post(thread_from_message))
        .route("/api/v10/channels/{channel}/threads", post(thread_without_message))
        .route("/api/v10/channels/{channel}/thread-members/@me", put(join_thread))
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
/// A channel route as Discord checks it: the token, then the channel's access; the bot's
/// permissions there.
fn authorised_in(state: &State, headers: &HeaderMap, channel: u64) -> Result<u64, Response> {
    authorised(state, headers)?;
    access(state, channel)
}

fn need(perms: u64, needed: u64) -> Result<(), Response> {
    if perms & needed == needed { Ok(()) } else { Err(refused(Refusal::MissingPermissions)) }
}

fn unknown_message() -> Response {
    (StatusCode::NOT_FOUND, Json(error_json(10008, "Unknown Message"))).into_response()
}

/// 400 50083: what Discord answers an action an archived thread does not take.
fn archived_thread() -> Response {
    (StatusCode::BAD_REQUEST, Json(error_json(50083, "Thread is archived"))).into_response()
}

/// Whether `channel` is a thread that is archived now.
fn archived(state: &State, channel: u64) -> bool {
    state.thread(channel).is_some_and(|t| t.archived)
}

/// 400 50008: a message into a channel that takes none (a forum takes posts).
fn not_text() -> Response {
    (StatusCode::BAD_REQUEST, Json(error_json(50008, "Cannot send messages in a non-text channel"))).into_response()
}

/// The rich embeds of a request body, by the fields the loopback keeps.
fn embeds_of(body: &Value) -> Vec<NewEmbed> {
    let field = |e: &Value, k: &str| e[k].as_str().map(str::to_owned);
    body["embeds"]
        .as_array()
        .map(|list| {
            list.iter().map(|e| NewEmbed { title: field(e, "title"), description: field(e, "description"), url: field(e, "url") }).collect()
        })
        .unwrap_or_default()
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

/// A request with a body into `channel`, as Discord checks it: the token, then the channel's
/// access, then the body (JSON, or multipart with files). With the bot's permissions there.
async fn channel_body(state: &Arc<State>, channel: u64, req: Request) -> Result<(u64, Bytes, Vec<Upload>), Response> {
    let perms = authorised_in(state, req.headers(), channel)?;
    let (body, files) = message_body(state, req).await?;
    Ok((perms, body, files))
}

async fn create_message(AxState(state): AxState<Arc<State>>, Path(channel): Path<u64>, req: Request) -> Response {
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
    if archived(&state, channel) {
        return archived_thread();
    }
    let content = serde_json::from_slice::<Value>(&body).ok().and_then(|v| v["content"].as_str().map(str::to_owned)).unwrap_or_default();
    match state.edit(channel, message, content) {
        Some(m) => Json(state.message_json(&m)).into_response(),
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

async fn typing(AxState(state): AxState<Arc<State>>, Path(channel): Path<u64>, headers: HeaderMap) -> Response {
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

/// `GET /guilds/{id}/members/{user}`: the bot's own member, or one the loopback knows (who
/// posted there, or was given a nickname or roles); 10007 for anyone else.
async fn guild_member(AxState(state): AxState<Arc<State>>, Path((guild, user)): Path<(u64, u64)>, headers: HeaderMap) -> Response {
    if let Err(r) = guild_route(&state, &headers, guild, false) {
        return r;
    }
    if user == state.config.bot_user_id {
        return Json(state.bot_member_json(guild)).into_response();
    }
    match state.known_member_json(guild, user) {
        Some(member) => Json(member).into_response(),
        None => (StatusCode::NOT_FOUND, Json(error_json(10007, "Unknown Member"))).into_response(),
    }
}

/// `GET /channels/{id}`: a guild channel, thread or DM as Discord shapes it (10003, 50001).
async fn channel(AxState(state): AxState<Arc<State>>, Path(channel): Path<u64>, headers: HeaderMap) -> Response {
    if let Err(r) = authorised(&state, &headers) {
        return r;
    }
    if let Err(r) = fetch_fault(&state).await {
        return r;
    }
    match state.channel_json_for_bot(channel) {
        Ok(v) => Json(v).into_response(),
        Err(r) => refused(r),
    }
}

/// `GET /channels/{c}/messages/{m}`: one message, a reply with the message it answers. Needs
/// Read Message History (50001 without, as Discord answers); 10008 for one not in the channel.
async fn get_message(AxState(state): AxState<Arc<State>>, Path((channel, message)): Path<(u64, u64)>, headers: HeaderMap) -> Response {
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

/// The fault a test armed on the context fetches: the answer waits, or is Discord's refusal.
async fn fetch_fault(state: &State) -> Result<(), Response> {
    match state.fetch_faults.meet() {
        Some(FetchFault::Slow(wait)) => {
            tokio::time::sleep(wait).await;
            Ok(())
        }
        Some(FetchFault::Refused) => Err(refused(Refusal::MissingAccess)),
        None => Ok(()),
    }
}

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
async fn thread_from_message(
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
async fn thread_without_message(AxState(state): AxState<Arc<State>>, Path(channel): Path<u64>, req: Request) -> Response {
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
async fn join_thread(AxState(state): AxState<Arc<State>>, Path(channel): Path<u64>, headers: HeaderMap) -> Response {
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
