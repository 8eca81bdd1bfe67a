//! The guild routes `clankie doctor` reads (the bot's guilds, a guild, its channels, roles and
//! members) and a channel as Discord shapes it, each only for a guild the bot is in.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State as AxState};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::checks::{authorised, fetch_fault, refused};
use crate::state::shapes::error_json;
use crate::state::{Refusal, State};

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
pub(super) async fn my_guilds(AxState(state): AxState<Arc<State>>, headers: HeaderMap) -> Response {
    if let Err(r) = authorised(&state, &headers) {
        return r;
    }
    Json(state.partial_guilds_json()).into_response()
}

/// `GET /guilds/{id}`: the guild (404 10004 for one that does not exist).
pub(super) async fn guild(AxState(state): AxState<Arc<State>>, Path(guild): Path<u64>, headers: HeaderMap) -> Response {
    match guild_route(&state, &headers, guild, true) {
        Ok(()) => Json(state.guild_json(guild)).into_response(),
        Err(r) => r,
    }
}

/// `GET /guilds/{id}/channels`: those the bot can view, as Discord answers since 2026-11-16.
pub(super) async fn guild_channels(AxState(state): AxState<Arc<State>>, Path(guild): Path<u64>, headers: HeaderMap) -> Response {
    match guild_route(&state, &headers, guild, false) {
        Ok(()) => Json(state.guild_channels_json(guild)).into_response(),
        Err(r) => r,
    }
}

/// `GET /guilds/{id}/roles`: the guild's roles.
pub(super) async fn guild_roles(AxState(state): AxState<Arc<State>>, Path(guild): Path<u64>, headers: HeaderMap) -> Response {
    match guild_route(&state, &headers, guild, false) {
        Ok(()) => Json(state.roles_json(guild)).into_response(),
        Err(r) => r,
    }
}

/// `GET /guilds/{id}/members/{user}`: the bot's own member, or one the loopback knows (who
/// posted there, or was given a nickname or roles); 10007 for anyone else.
pub(super) async fn guild_member(
    AxState(state): AxState<Arc<State>>,
    Path((guild, user)): Path<(u64, u64)>,
    headers: HeaderMap,
) -> Response {
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
pub(super) async fn channel(AxState(state): AxState<Arc<State>>, Path(channel): Path<u64>, headers: HeaderMap) -> Response {
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
