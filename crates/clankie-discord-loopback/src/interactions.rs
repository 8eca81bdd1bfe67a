//! Interactions as Discord runs them: application commands registered by bulk overwrite
//! (globally or per guild), INTERACTION_CREATE for slash commands and button presses, the
//! callback route with its 3 s deadline (a late or second first answer is refused as Discord
//! refuses it), and the interaction webhook for editing the original answer and following up
//! within 15 minutes. None of these routes count toward the bot's global rate limit.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{FromRef, Path, State as AxState};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{patch, post, put};
use axum::{Json, Router};
use serde_json::{Value, json};

use crate::state::State;
pub use crate::state::interactions::{
    ANSWER_DEADLINE, InteractionError, InteractionRecord, Interactions, PressButton, RunCommand, TOKEN_LIFETIME,
};
use crate::state::interactions::{Open, by_token};
pub use crate::state::shapes::EPHEMERAL;
use crate::state::shapes::{error_json, user_json};

/// A user runs `/clankie <subcommand>`: dispatches INTERACTION_CREATE (type 2). Returns the interaction.
pub(crate) fn run_command(state: &State, c: RunCommand) -> Result<InteractionRecord, InteractionError> {
    let guild = state.guild_of(c.channel_id).map_err(|()| InteractionError::UnknownChannel)?;
    let options: Vec<Value> =
        c.options.iter().map(|(name, value)| json!({ "name": name, "type": option_type(value), "value": value })).collect();
    let (name, options) = match c.subcommand.split_once(' ') {
        // A subcommand group's member, as `voice join`.
        Some((group, sub)) => (group.to_owned(), vec![json!({ "name": sub, "type": 1, "options": options })]),
        None => (c.subcommand.clone(), options),
    };
    let data = json!({
        "id": state.fresh_id().to_string(), "name": "clankie", "type": 1,
        "options": [{ "name": name, "type": if name == "voice" { 2 } else { 1 }, "options": options }],
    });
    Ok(interaction(state, 2, c.channel_id, guild, &c.author, data, None))
}

/// An option's type as Discord names it: 5 for a boolean, 4 for an integer, 3 for the rest (strings).
fn option_type(value: &Value) -> u8 {
    match value {
        Value::Bool(_) => 5,
        Value::Number(_) => 4,
        _ => 3,
    }
}

/// A user presses a button on a message: dispatches INTERACTION_CREATE (type 3).
pub(crate) fn press_button(state: &State, p: PressButton) -> Result<InteractionRecord, InteractionError> {
    let message = state.any_message(p.message_id).ok_or(InteractionError::UnknownMessage)?;
    let has = message
        .components
        .iter()
        .flat_map(|row| row["components"].as_array().cloned().unwrap_or_default())
        .any(|b| b["custom_id"].as_str() == Some(p.custom_id.as_str()));
    if !has {
        return Err(InteractionError::UnknownButton);
    }
    let data = json!({ "custom_id": p.custom_id, "component_type": 2 });
    let json = state.message_json(&message);
    Ok(interaction(state, 3, message.channel_id, message.guild_id, &p.author, data, Some((p.message_id, json))))
}

fn interaction(
    state: &State,
    kind: u8,
    channel: u64,
    guild: Option<u64>,
    author: &str,
    data: Value,
    message: Option<(u64, Value)>,
) -> InteractionRecord {
    let id = state.fresh_id();
    let token = format!("itok-{id:x}");
    let user_id = State::user_id(author);
    let user = user_json(user_id, author, false);
    let mut d = json!({
        "id": id.to_string(), "application_id": state.config.bot_user_id.to_string(), "type": kind,
        "token": token, "version": 1, "channel_id": channel.to_string(), "data": data,
        "entitlements": [], "locale": "en-US", "app_permissions": "0",
    });
    // Discord sends the channel the interaction came from, partially: its id and type.
    let channel_type = match (state.thread(channel), guild) {
        (Some(thread), _) => thread.kind,
        (None, Some(_)) => 0,
        (None, None) => 1,
    };
    d["channel"] = json!({ "id": channel.to_string(), "type": channel_type });
    match guild {
        Some(g) => {
            d["guild_id"] = json!(g.to_string());
            d["authorizing_integration_owners"] = json!({ "0": g.to_string() });
            d["context"] = json!(0);
            // Discord gives an interaction in a guild the member's permissions in its channel.
            let permissions = state.member_permissions(channel, user_id).map(|p| p.to_string());
            d["member"] = json!({
                "user": user, "roles": [], "joined_at": null, "deaf": false, "mute": false, "flags": 0,
                "nick": null, "communication_disabled_until": null, "permissions": permissions,
            });
        }
        None => {
            d["authorizing_integration_owners"] = json!({ "0": "0" });
            d["context"] = json!(1);
            d["user"] = user;
        }
    }
    // A component's interaction answers on the message it is on: that message is its
    // original, which an update (type 6 or 7, then edits of `@original`) changes.
    let mut on = None;
    if let Some((message_id, m)) = message {
        d["message"] = m;
        on = Some(message_id);
    }
    let record = InteractionRecord { id, token, channel_id: channel, user_id, kind, message_id: on, ..Default::default() };
    state.interactions.lock().open.insert(id, Open { record: record.clone(), created: Instant::now() });
    state.dispatch("INTERACTION_CREATE", d);
    record
}

pub(crate) fn routes<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    Arc<State>: FromRef<S>,
{
    Router::new()
        .route("/api/v10/applications/{app}/commands", put(overwrite_global).get(list_global))
        .route("/api/v10/applications/{app}/guilds/{guild}/commands", put(overwrite_guild).get(list_guild))
        .route("/api/v10/interactions/{id}/{token}/callback", post(callback))
        .route("/api/v10/webhooks/{app}/{token}/messages/@original", patch(edit_original))
        .route("/api/v10/webhooks/{app}/{token}", post(follow_up))
        .route("/api/v10/users/@me/channels", post(open_dm))
}

fn authorised(state: &State, headers: &HeaderMap) -> bool {
    let token = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or_default();
    token.strip_prefix("Bot ") == Some(state.config.token.as_str())
}

fn refused(status: StatusCode, code: u64, message: &str) -> Response {
    (status, Json(error_json(code, message))).into_response()
}

fn overwrite(state: &State, scope: Option<u64>, headers: &HeaderMap, app: u64, body: Value) -> Response {
    if !authorised(state, headers) {
        return refused(StatusCode::UNAUTHORIZED, 0, "401: Unauthorized");
    }
    if app != state.config.bot_user_id || scope.is_some_and(|g| !state.bot_in_guild(g)) {
        return refused(StatusCode::FORBIDDEN, 50001, "Missing Access");
    }
    let Some(set) = body.as_array() else { return refused(StatusCode::BAD_REQUEST, 50035, "Invalid Form Body") };
    let set: Vec<Value> = set
        .iter()
        .map(|c| {
            let mut c = c.clone();
            c["id"] = json!(state.fresh_id().to_string());
            c["application_id"] = json!(app.to_string());
            c["version"] = json!("1");
            c["default_member_permissions"] = c.get("default_member_permissions").cloned().unwrap_or(Value::Null);
            c["type"] = c.get("type").cloned().unwrap_or(json!(1));
            c["description"] = c.get("description").cloned().unwrap_or(json!(""));
            c["options"] = c.get("options").cloned().unwrap_or(json!([]));
            c["nsfw"] = c.get("nsfw").cloned().unwrap_or(json!(false));
            if let Some(g) = scope {
                c["guild_id"] = json!(g.to_string());
            }
            c
        })
        .collect();
    let mut k = state.interactions.lock();
    k.overwrites += 1;
    k.commands.insert(scope, set.clone());
    Json(Value::Array(set)).into_response()
}

async fn overwrite_global(
    AxState(state): AxState<Arc<State>>,
    Path(app): Path<u64>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    overwrite(&state, None, &headers, app, body)
}

async fn overwrite_guild(
    AxState(state): AxState<Arc<State>>,
    Path((app, guild)): Path<(u64, u64)>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    overwrite(&state, Some(guild), &headers, app, body)
}

/// The registered set of a scope as Discord lists it (`GET .../commands`): the application's own
/// (50001 for another's, or in a guild the bot is not in), each as the overwrite answered it.
fn list(state: &State, scope: Option<u64>, headers: &HeaderMap, app: u64) -> Response {
    if !authorised(state, headers) {
        return refused(StatusCode::UNAUTHORIZED, 0, "401: Unauthorized");
    }
    if app != state.config.bot_user_id || scope.is_some_and(|g| !state.bot_in_guild(g)) {
        return refused(StatusCode::FORBIDDEN, 50001, "Missing Access");
    }
    let set = state.interactions.lock().commands.get(&scope).cloned().unwrap_or_default();
    Json(Value::Array(set)).into_response()
}

async fn list_global(AxState(state): AxState<Arc<State>>, Path(app): Path<u64>, headers: HeaderMap) -> Response {
    list(&state, None, &headers, app)
}

async fn list_guild(AxState(state): AxState<Arc<State>>, Path((app, guild)): Path<(u64, u64)>, headers: HeaderMap) -> Response {
    list(&state, Some(guild), &headers, app)
}

fn answer_of(data: &Value, record: &mut InteractionRecord) {
    if let Some(content) = data["content"].as_str() {
        record.content = content.to_owned();
    }
    if let Some(flags) = data["flags"].as_u64() {
        record.ephemeral = flags & EPHEMERAL != 0;
    }
    if let Some(components) = data["components"].as_array() {
        record.components.clone_from(components);
    }
}

async fn callback(AxState(state): AxState<Arc<State>>, Path((id, token)): Path<(u64, String)>, Json(body): Json<Value>) -> Response {
    let kind = body["type"].as_u64().unwrap_or(0) as u8;
    let (message, channel, components) = {
        let mut k = state.interactions.lock();
        let Some(open) = k.open.get_mut(&id).filter(|o| o.record.token == token) else {
            return refused(StatusCode::NOT_FOUND, 10062, "Unknown interaction");
        };
        if open.created.elapsed() > ANSWER_DEADLINE {
            open.record.refused_answers += 1;
            return refused(StatusCode::NOT_FOUND, 10062, "Unknown interaction");
        }
        if open.record.answered_with != 0 {
            open.record.refused_answers += 1;
            return refused(StatusCode::BAD_REQUEST, 40060, "Interaction has already been acknowledged.");
        }
        if !matches!(kind, 4..=7) || (matches!(kind, 6 | 7) && open.record.kind != 3) {
            return refused(StatusCode::BAD_REQUEST, 50035, "Invalid Form Body: unknown callback type");
        }
        open.record.answered_with = kind;
        open.record.answered_after_ms = open.created.elapsed().as_millis() as i64;
        if let Some(data) = body.get("data") {
            answer_of(data, &mut open.record);
        }
        if kind == 7
            && let Some(on) = open.record.message_id
        {
            let (content, components) = (open.record.content.clone(), open.record.components.clone());
            drop(k);
            state.edit_interaction_message(on, content, components);
            return StatusCode::NO_CONTENT.into_response();
        }
        (matches!(kind, 4 | 5), open.record.channel_id, open.record.components.clone())
    };
    if message {
        // Types 4 and 5 make a message in the channel; an ephemeral one only its invoker sees.
        let record = state.interactions.record(id).unwrap_or_default();
        let m = state.interaction_message(channel, record.content.clone(), components, record.ephemeral);
        if let Some(open) = state.interactions.lock().open.get_mut(&id) {
            open.record.message_id = Some(m);
        }
    }
    StatusCode::NO_CONTENT.into_response()
}

async fn edit_original(AxState(state): AxState<Arc<State>>, Path((_app, token)): Path<(u64, String)>, Json(body): Json<Value>) -> Response {
    let (message, content, components) = {
        let mut k = state.interactions.lock();
        let Some(open) = by_token(&mut k, &token) else { return refused(StatusCode::NOT_FOUND, 10015, "Unknown Webhook") };
        if open.record.answered_with == 0 {
            return refused(StatusCode::NOT_FOUND, 10008, "Unknown Message");
        }
        answer_of(&body, &mut open.record);
        (open.record.message_id, open.record.content.clone(), open.record.components.clone())
    };
    if let Some(id) = message {
        state.edit_interaction_message(id, content.clone(), components.clone());
    }
    Json(json!({ "id": message.unwrap_or(0).to_string(), "content": content, "components": components })).into_response()
}

async fn follow_up(AxState(state): AxState<Arc<State>>, Path((_app, token)): Path<(u64, String)>, Json(body): Json<Value>) -> Response {
    let mut k = state.interactions.lock();
    let Some(open) = by_token(&mut k, &token) else { return refused(StatusCode::NOT_FOUND, 10015, "Unknown Webhook") };
    if open.record.answered_with == 0 {
        return refused(StatusCode::NOT_FOUND, 10015, "Unknown Webhook");
    }
    open.record.followups.push(body.clone());
    Json(json!({ "id": state.fresh_id().to_string(), "channel_id": open.record.channel_id.to_string(), "content": body["content"] }))
        .into_response()
}

/// `POST /users/@me/channels`: the DM channel with a user (the loopback has one DM channel).
async fn open_dm(AxState(state): AxState<Arc<State>>, headers: HeaderMap, Json(body): Json<Value>) -> Response {
    if !authorised(&state, &headers) {
        return refused(StatusCode::UNAUTHORIZED, 0, "401: Unauthorized");
    }
    let recipient = body["recipient_id"].as_str().and_then(|r| r.parse::<u64>().ok()).or(body["recipient_id"].as_u64());
    let (Some(recipient), Some(channel)) = (recipient, state.config.dm_channels.first()) else {
        return refused(StatusCode::BAD_REQUEST, 50035, "Invalid Form Body");
    };
    state.opened_dm(recipient, *channel);
    Json(json!({
        "id": channel.to_string(), "type": 1, "last_message_id": null, "flags": 0,
        "recipients": [user_json(recipient, "user", false)],
    }))
    .into_response()
}
