//! Interactions as Discord runs them: application commands registered by bulk overwrite
//! (globally or per guild), INTERACTION_CREATE for slash commands and button presses, the
//! callback route with its 3 s deadline (a late or second first answer is refused as Discord
//! refuses it), and the interaction webhook for editing the original answer and following up
//! within 15 minutes. None of these routes count toward the bot's global rate limit.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Path, State as AxState};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{patch, post, put};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::model::{error_json, user_json};
use crate::state::{State, now_ms};

/// How long Discord waits for an interaction's first answer.
pub const ANSWER_DEADLINE: Duration = Duration::from_secs(3);
/// How long an interaction's token works for follow-ups and edits.
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(15 * 60);
/// The flag that shows an answer to the invoker alone.
pub const EPHEMERAL: u64 = 1 << 6;

/// One interaction as the control API reports it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct InteractionRecord {
    pub id: u64,
    pub token: String,
    pub channel_id: u64,
    pub user_id: u64,
    /// 2 for a command, 3 for a button.
    pub kind: u8,
    /// The callback type of the accepted first answer (4, 5, 6, 7), 0 while unanswered.
    pub answered_with: u8,
    /// Milliseconds from dispatch to the accepted first answer.
    pub answered_after_ms: i64,
    /// First answers refused: too late, or after one was accepted.
    pub refused_answers: u32,
    /// The answer as it stands: the callback's data, then any edit of the original.
    pub content: String,
    pub ephemeral: bool,
    pub components: Vec<Value>,
    /// Follow-up messages, in order.
    pub followups: Vec<Value>,
    /// The message the answer made (types 4 and 5), or for a button the message it is on.
    pub message_id: Option<u64>,
}

struct Open {
    record: InteractionRecord,
    created: Instant,
}

#[derive(Default)]
struct Kept {
    /// The registered command sets: `None` is the global one.
    commands: BTreeMap<Option<u64>, Vec<Value>>,
    overwrites: u64,
    open: HashMap<u64, Open>,
}

/// The loopback's interactions.
#[derive(Default)]
pub struct Interactions(Mutex<Kept>);

impl Interactions {
    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many bulk overwrites were made, and the command names registered per scope.
    pub fn registered(&self) -> (u64, BTreeMap<Option<u64>, Vec<String>>) {
        let k = self.lock();
        let names = k
            .commands
            .iter()
            .map(|(scope, set)| (*scope, set.iter().filter_map(|c| c["name"].as_str().map(str::to_owned)).collect()))
            .collect();
        (k.overwrites, names)
    }

    /// The interaction as it stands.
    pub fn record(&self, id: u64) -> Option<InteractionRecord> {
        self.lock().open.get(&id).map(|o| o.record.clone())
    }
}

/// A slash command a user runs (`POST /control/interactions/command`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunCommand {
    pub channel_id: u64,
    pub author: String,
    /// The subcommand of `/clankie`: `status`, `memory`, `voice`, `quiet`, `forget-me`.
    pub subcommand: String,
    /// Its options, by name: strings and integers.
    #[serde(default)]
    pub options: BTreeMap<String, Value>,
}

/// A button a user presses (`POST /control/interactions/button`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PressButton {
    pub message_id: u64,
    pub custom_id: String,
    pub author: String,
}

/// Why a control request could not become an interaction.
#[derive(Debug, thiserror::Error)]
pub enum InteractionError {
    #[error("unknown channel")]
    UnknownChannel,
    #[error("no such message")]
    UnknownMessage,
    #[error("the message has no button with that custom id")]
    UnknownButton,
}

impl State {
    /// A user runs `/clankie <subcommand>`: dispatches INTERACTION_CREATE (type 2). Returns the interaction.
    pub fn run_command(&self, c: RunCommand) -> Result<InteractionRecord, InteractionError> {
        let guild = self.guild_of(c.channel_id).map_err(|()| InteractionError::UnknownChannel)?;
        let options: Vec<Value> = c
            .options
            .iter()
            .map(|(name, value)| json!({ "name": name, "type": if value.is_number() { 4 } else { 3 }, "value": value }))
            .collect();
        let (name, options) = match c.subcommand.split_once(' ') {
            // A subcommand group's member, as `voice join`.
            Some((group, sub)) => (group.to_owned(), vec![json!({ "name": sub, "type": 1, "options": options })]),
            None => (c.subcommand.clone(), options),
        };
        let data = json!({
            "id": self.fresh_id().to_string(), "name": "clankie", "type": 1,
            "options": [{ "name": name, "type": if name == "voice" { 2 } else { 1 }, "options": options }],
        });
        Ok(self.interaction(2, c.channel_id, guild, &c.author, data, None))
    }

    /// A user presses a button on a message: dispatches INTERACTION_CREATE (type 3).
    pub fn press_button(&self, p: PressButton) -> Result<InteractionRecord, InteractionError> {
        let message = self.any_message(p.message_id).ok_or(InteractionError::UnknownMessage)?;
        let has = message
            .components
            .iter()
            .flat_map(|row| row["components"].as_array().cloned().unwrap_or_default())
            .any(|b| b["custom_id"].as_str() == Some(p.custom_id.as_str()));
        if !has {
            return Err(InteractionError::UnknownButton);
        }
        let data = json!({ "custom_id": p.custom_id, "component_type": 2 });
        let json = crate::model::message_json(self, &message, None);
        Ok(self.interaction(3, message.channel_id, message.guild_id, &p.author, data, Some((p.message_id, json))))
    }

    fn interaction(
        &self,
        kind: u8,
        channel: u64,
        guild: Option<u64>,
        author: &str,
        data: Value,
        message: Option<(u64, Value)>,
    ) -> InteractionRecord {
        let id = self.fresh_id();
        let token = format!("itok-{id:x}");
        let user_id = State::user_id(author);
        let user = user_json(user_id, author, false);
        let mut d = json!({
            "id": id.to_string(), "application_id": self.config.bot_user_id.to_string(), "type": kind,
            "token": token, "version": 1, "channel_id": channel.to_string(), "data": data,
            "entitlements": [], "locale": "en-US", "app_permissions": "0",
        });
        match guild {
            Some(g) => {
                d["guild_id"] = json!(g.to_string());
                d["authorizing_integration_owners"] = json!({ "0": g.to_string() });
                d["context"] = json!(0);
                d["member"] = json!({
                    "user": user, "roles": [], "joined_at": null, "deaf": false, "mute": false, "flags": 0,
                    "nick": null, "communication_disabled_until": null,
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
        self.interactions.lock().open.insert(id, Open { record: record.clone(), created: Instant::now() });
        self.dispatch_event("INTERACTION_CREATE", d);
        record
    }
}

pub(crate) fn routes() -> Router<Arc<State>> {
    Router::new()
        .route("/api/v10/applications/{app}/commands", put(overwrite_global))
        .route("/api/v10/applications/{app}/guilds/{guild}/commands", put(overwrite_guild))
        .route("/api/v10/interactions/{id}/{token}/callback", post(callback))
        .route("/api/v10/webhooks/{app}/{token}/messages/@original", patch(edit_original))
        .route("/api/v10/webhooks/{app}/{token}", post(follow_up))
        .route("/api/v10/users/@me/channels", post(open_dm))
        .route("/control/interactions/command", post(control_command))
        .route("/control/interactions/button", post(control_button))
        .route("/control/interactions/{id}", axum::routing::get(control_record))
        .route("/control/commands", axum::routing::get(control_commands))
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
    if app != state.config.bot_user_id {
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

/// The interaction a webhook token belongs to, while its token lives.
fn by_token<'a>(k: &'a mut Kept, token: &str) -> Option<&'a mut Open> {
    k.open.values_mut().find(|o| o.record.token == token && o.created.elapsed() < TOKEN_LIFETIME)
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

fn control_refusal(e: InteractionError) -> Response {
    (StatusCode::NOT_FOUND, Json(json!({ "error": e.to_string() }))).into_response()
}

async fn control_command(AxState(state): AxState<Arc<State>>, Json(c): Json<RunCommand>) -> Response {
    match state.run_command(c) {
        Ok(r) => Json(json!(r)).into_response(),
        Err(e) => control_refusal(e),
    }
}

async fn control_button(AxState(state): AxState<Arc<State>>, Json(p): Json<PressButton>) -> Response {
    match state.press_button(p) {
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
