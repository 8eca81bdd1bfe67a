//! The control API's text side: users writing, editing and deleting messages, typing, running
//! commands and pressing buttons; threads, forum posts and channels started, archived, renamed
//! and tagged; and what tests read back (messages, posts, outcomes, limits).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{FromRef, Path, Query, State as AxState};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use clankie_proto::v1::OutcomeKind;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::interactions::{InteractionError, PressButton, RunCommand, press_button, run_command};
use crate::state::limits::LimitCounts;
use crate::state::messages::flexible_id;
use crate::state::threads::NewThread;
use crate::state::{NewAttachment, NewMessage, OverwriteError, State, ThreadError, now_ms};

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
        .route("/control/threads", post(new_thread))
        .route("/control/threads/{id}/archive", post(archive_thread))
        .route("/control/threads/{id}/name", post(rename_thread))
        .route("/control/threads/{id}/tags", post(post_tags))
        .route("/control/channels/{id}/name", post(rename_channel))
        .route("/control/threads/{id}", delete(delete_thread))
        .route("/control/forum-posts", post(forum_post))
        .route("/control/members", post(member))
}

/// The rooms the page lists: the channels (with their kind and a forum's tags), the DMs, and
/// the live threads, each naming its parent.
async fn rooms(AxState(state): AxState<Arc<State>>) -> Json<Value> {
    let c = &state.config;
    // Each channel under its name as it stands (the control API renames them).
    let mut channels = c.channels.clone();
    for channel in &mut channels {
        if let Some(name) = state.channel_name(channel.id) {
            channel.name = name;
        }
    }
    let threads: Vec<Value> = state
        .all_threads()
        .iter()
        .map(|t| json!({ "id": t.id, "parent": t.parent, "name": t.name, "type": t.kind, "archived": t.archived, "owner": t.owner }))
        .collect();
    Json(json!({
        "bot_name": c.bot_name,
        "guild": { "id": c.guild_id, "name": c.guild_name },
        "channels": channels,
        "dm_channels": c.dm_channels,
        "threads": threads,
    }))
}

fn error(status: StatusCode, message: impl std::fmt::Display) -> Response {
    (status, Json(json!({ "error": message.to_string() }))).into_response()
}

async fn new_message(AxState(state): AxState<Arc<State>>, Json(m): Json<NewMessage>) -> Response {
    if state.guild_of(m.channel_id).is_err() {
        return error(StatusCode::NOT_FOUND, "unknown channel");
    }
    if state.is_forum(m.channel_id) {
        return error(StatusCode::BAD_REQUEST, "a forum takes posts (/control/forum-posts), not messages");
    }
    if m.author.trim().is_empty() || m.content.chars().count() > 4000 {
        return error(StatusCode::BAD_REQUEST, "an author is required and content is at most 4000 characters");
    }
    if let Some(f) = m.forward
        && state.message(f).is_none()
    {
        return error(StatusCode::NOT_FOUND, "no message to forward");
    }
    let id = state.user_message(m);
    Json(json!({ "id": id })).into_response()
}

/// A thread started by a user (`POST /control/threads`): from a message, or blank.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct StartThread {
    #[serde(deserialize_with = "flexible_id::one")]
    pub parent: u64,
    #[serde(default, deserialize_with = "flexible_id::maybe")]
    pub from_message: Option<u64>,
    pub name: String,
    #[serde(default)]
    pub private: bool,
    /// Who starts it: the message's author, or the guild's owner, when unsaid.
    #[serde(default)]
    pub author: Option<String>,
}

fn thread_error(e: ThreadError) -> Response {
    let status = match e {
        ThreadError::UnknownChannel(_) | ThreadError::UnknownMessage(_) | ThreadError::UnknownThread(_) => StatusCode::NOT_FOUND,
        _ => StatusCode::BAD_REQUEST,
    };
    error(status, e)
}

async fn new_thread(AxState(state): AxState<Arc<State>>, Json(t): Json<StartThread>) -> Response {
    let name = t.name.trim();
    if name.is_empty() || name.chars().count() > 100 {
        return error(StatusCode::BAD_REQUEST, "a thread's name is 1 to 100 characters");
    }
    let owner = match (&t.author, t.from_message.and_then(|m| state.message(m))) {
        (Some(author), _) if !author.trim().is_empty() => State::user_id(author.trim()),
        (_, Some(m)) => m.author_id,
        _ => state.config.owner_id,
    };
    match state.start_thread(NewThread { parent: t.parent, from_message: t.from_message, name, private: t.private, owner }) {
        Ok(id) => Json(json!({ "id": id })).into_response(),
        Err(e) => thread_error(e),
    }
}

/// A thread archived or unarchived (`POST /control/threads/{id}/archive`).
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Archive {
    pub archived: bool,
}

async fn archive_thread(AxState(state): AxState<Arc<State>>, Path(id): Path<u64>, Json(a): Json<Archive>) -> Response {
    if !state.set_archived(id, a.archived) {
        return thread_error(ThreadError::UnknownThread(id));
    }
    Json(json!({ "id": id, "archived": a.archived })).into_response()
}

/// A thread or channel renamed (`POST /control/threads/{id}/name`, `POST /control/channels/{id}/name`).
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Rename {
    pub name: String,
}

/// Renames a thread: THREAD_UPDATE with the whole thread.
async fn rename_thread(AxState(state): AxState<Arc<State>>, Path(id): Path<u64>, Json(r): Json<Rename>) -> Response {
    let name = r.name.trim();
    if state.thread(id).is_none() {
        return thread_error(ThreadError::UnknownThread(id));
    }
    if !state.rename_thread(id, name) {
        return error(StatusCode::BAD_REQUEST, "a thread's name is 1 to 100 characters");
    }
    Json(json!({ "id": id, "name": name })).into_response()
}

/// A forum post's tags set (`POST /control/threads/{id}/tags`), by name.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct PostTags {
    pub tags: Vec<String>,
}

/// Sets a forum post's tags: THREAD_UPDATE with the whole thread.
async fn post_tags(AxState(state): AxState<Arc<State>>, Path(id): Path<u64>, Json(p): Json<PostTags>) -> Response {
    if state.thread(id).is_none() {
        return thread_error(ThreadError::UnknownThread(id));
    }
    let tags: Vec<&str> = p.tags.iter().map(String::as_str).collect();
    if !state.set_post_tags(id, &tags) {
        return error(StatusCode::BAD_REQUEST, "not a forum post, or a tag its forum does not have");
    }
    Json(json!({ "id": id, "tags": p.tags })).into_response()
}

/// Renames a guild channel: CHANNEL_UPDATE with the whole channel.
async fn rename_channel(AxState(state): AxState<Arc<State>>, Path(id): Path<u64>, Json(r): Json<Rename>) -> Response {
    let name = r.name.trim();
    if state.channel_name(id).is_none() {
        return error(StatusCode::NOT_FOUND, "no guild channel of that id (a thread is renamed at /control/threads/{id}/name)");
    }
    if !state.rename_channel(id, name) {
        return error(StatusCode::BAD_REQUEST, "a channel's name is 1 to 100 characters");
    }
    Json(json!({ "id": id, "name": name })).into_response()
}

async fn delete_thread(AxState(state): AxState<Arc<State>>, Path(id): Path<u64>) -> Response {
    if !state.delete_thread(id) {
        return thread_error(ThreadError::UnknownThread(id));
    }
    StatusCode::NO_CONTENT.into_response()
}

/// A user's post in a forum (`POST /control/forum-posts`).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct ForumPost {
    #[serde(deserialize_with = "flexible_id::one")]
    pub forum: u64,
    pub author: String,
    pub title: String,
    /// Tag names; those the forum lacks are left out.
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub content: String,
    #[serde(default)]
    pub mention: bool,
    #[serde(default)]
    pub attachments: Vec<NewAttachment>,
}

async fn forum_post(AxState(state): AxState<Arc<State>>, Json(p): Json<ForumPost>) -> Response {
    let (author, title) = (p.author.trim(), p.title.trim());
    if author.is_empty() || title.is_empty() || title.chars().count() > 100 || p.content.chars().count() > 4000 {
        return error(StatusCode::BAD_REQUEST, "an author and a title (1 to 100 characters) are required, content is at most 4000");
    }
    if p.content.trim().is_empty() && p.attachments.is_empty() {
        return error(StatusCode::BAD_REQUEST, "a post's first message needs content or a file");
    }
    let tags: Vec<&str> = p.tags.iter().map(String::as_str).collect();
    let first = NewMessage { content: p.content.clone(), mention: p.mention, attachments: p.attachments.clone(), ..Default::default() };
    match state.forum_post(p.forum, Some(author), title, &tags, first, Vec::new()) {
        Ok((thread, message)) => Json(json!({ "thread": thread, "message": message })).into_response(),
        Err(e) => thread_error(e),
    }
}

/// A member's nickname and roles (`POST /control/members`), in `guild` (the main one when unsaid).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct SetMember {
    pub author: String,
    /// The nickname: absent leaves it, `null` or `""` clears it.
    #[serde(default, deserialize_with = "present")]
    pub nick: Option<Option<String>>,
    /// The roles; absent leaves them as they are.
    #[serde(default)]
    pub roles: Option<Vec<u64>>,
    #[serde(default)]
    pub guild: Option<u64>,
}

/// A field that is there, `null` or not: `Some(None)` for `null`, so absent differs from it.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

async fn member(AxState(state): AxState<Arc<State>>, Json(m): Json<SetMember>) -> Response {
    let author = m.author.trim();
    if author.is_empty() {
        return error(StatusCode::BAD_REQUEST, "an author is required");
    }
    let guild = m.guild.unwrap_or(state.config.guild_id);
    if !state.guild_exists(guild) {
        return error(StatusCode::NOT_FOUND, "unknown guild");
    }
    if let Some(nick) = &m.nick {
        state.set_nick(guild, author, nick.as_deref().map(str::trim).filter(|n| !n.is_empty()));
    }
    if let Some(roles) = &m.roles {
        state.set_member_roles(guild, author, roles);
    }
    Json(json!({ "id": State::user_id(author) })).into_response()
}

/// A user's edit of their message (`POST /control/messages/edit`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EditMessage {
    #[serde(deserialize_with = "flexible_id::one")]
    pub id: u64,
    pub content: String,
}

/// A message deleted (`POST /control/messages/delete`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeleteMessage {
    #[serde(deserialize_with = "flexible_id::one")]
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
    #[serde(deserialize_with = "flexible_id::one")]
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

/// A member overwrite on a channel (`POST /control/permissions`): the bot's, or with `user` that
/// user's (named as they write); both 0 removes it.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct SetPermissions {
    pub channel: u64,
    #[serde(default)]
    pub allow: u64,
    #[serde(default)]
    pub deny: u64,
    #[serde(default)]
    pub user: Option<String>,
}

/// The user a permissions request names, if it names one.
fn named_user(user: Option<&str>) -> Option<u64> {
    user.map(str::trim).filter(|u| !u.is_empty()).map(State::user_id)
}

/// Sets the bot's overwrite, so a refusal can be shown at run time, or a user's, so a command
/// meets a member without some permission; answers the permissions there now of whom it was set
/// for (the bot's `null` in a guild it is not in).
async fn set_permissions(AxState(state): AxState<Arc<State>>, Json(p): Json<SetPermissions>) -> Response {
    let set = match named_user(p.user.as_deref()) {
        Some(user) => state.set_member_overwrite(p.channel, user, p.allow, p.deny).map(Some),
        None => state.set_bot_overwrite(p.channel, p.allow, p.deny),
    };
    match set {
        Ok(permissions) => Json(json!({ "permissions": permissions })).into_response(),
        Err(e @ OverwriteError::UnknownChannel(_)) => (StatusCode::NOT_FOUND, Json(json!({ "error": e.to_string() }))).into_response(),
        Err(e @ OverwriteError::NotAGuildChannel(_)) => (StatusCode::BAD_REQUEST, Json(json!({ "error": e.to_string() }))).into_response(),
    }
}

/// A query for someone's permissions in a channel: the bot's, or the named user's.
#[derive(Deserialize)]
struct PermissionsQuery {
    channel: u64,
    #[serde(default)]
    user: Option<String>,
}

/// `GET /control/permissions?channel=[&user=]`: the bot's (or the user's) permissions in a
/// channel (`null` where there are none).
async fn permissions(AxState(state): AxState<Arc<State>>, Query(q): Query<PermissionsQuery>) -> Json<Value> {
    let permissions = match named_user(q.user.as_deref()) {
        Some(user) => state.member_permissions(q.channel, user),
        None => state.bot_permissions(q.channel),
    };
    Json(json!({ "permissions": permissions }))
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
