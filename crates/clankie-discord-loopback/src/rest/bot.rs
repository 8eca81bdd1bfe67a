//! The bot's own routes: where the gateway is (`/gateway`, `/gateway/bot`), who the bot is
//! (`/users/@me`) and its application, with the Message Content switch.

use std::sync::Arc;

use axum::Json;
use axum::extract::State as AxState;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::checks::authorised;
use crate::state::State;

/// `GET /gateway`: where the gateway listens, its shards and the identify concurrency.
pub(super) async fn gateway(AxState(state): AxState<Arc<State>>) -> Json<Value> {
    Json(json!({
        "url": format!("ws://{}/gateway", state.addr),
        "shards": state.config.shards,
        "session_start_limit": { "total": 1000, "remaining": 1000, "reset_after": 0, "max_concurrency": state.config.max_concurrency },
    }))
}

/// `/gateway/bot` is the bot's own: Discord answers it only for a token it knows (401 else),
/// unlike `/gateway`.
pub(super) async fn gateway_bot(AxState(state): AxState<Arc<State>>, headers: HeaderMap) -> Response {
    if let Err(r) = authorised(&state, &headers) {
        return r;
    }
    gateway(AxState(state)).await.into_response()
}

/// `GET /users/@me`: the bot user, as the gateway service learns its own id.
pub(super) async fn me(AxState(state): AxState<Arc<State>>, headers: HeaderMap) -> Response {
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
pub(super) async fn application(AxState(state): AxState<Arc<State>>, headers: HeaderMap) -> Response {
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
