//! The checks a REST route makes before it acts, in Discord's order (the token, the channel's
//! access, the permissions the action needs), and each refusal as Discord words it.

use axum::Json;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::state::faults::FetchFault;
use crate::state::shapes::error_json;
use crate::state::{Refusal, State};

/// The bot token in `Authorization: Bot …`, as every route but `/gateway` wants it (401 else).
pub(super) fn authorised(state: &State, headers: &HeaderMap) -> Result<(), Response> {
    let token = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or_default();
    if token.strip_prefix("Bot ") == Some(state.config.token.as_str()) {
        Ok(())
    } else {
        Err((StatusCode::UNAUTHORIZED, Json(error_json(0, "401: Unauthorized"))).into_response())
    }
}

/// A refusal as Discord words it: its status and `{"message", "code"}`.
pub(super) fn refused(r: Refusal) -> Response {
    let status = StatusCode::from_u16(r.status()).unwrap_or(StatusCode::FORBIDDEN);
    (status, Json(error_json(r.code(), &r.to_string()))).into_response()
}

/// The bot's permissions in a channel if every channel route may go on there (10003, 50001 else).
pub(super) fn access(state: &State, channel: u64) -> Result<u64, Response> {
    state.channel_access(channel).map_err(refused)
}

/// A channel route as Discord checks it: the token, then the channel's access; the bot's
/// permissions there.
pub(super) fn authorised_in(state: &State, headers: &HeaderMap, channel: u64) -> Result<u64, Response> {
    authorised(state, headers)?;
    access(state, channel)
}

/// Refuses with 50013 unless `perms` hold every bit of `needed`.
pub(super) fn need(perms: u64, needed: u64) -> Result<(), Response> {
    if perms & needed == needed { Ok(()) } else { Err(refused(Refusal::MissingPermissions)) }
}

/// 404 10008: a message the channel does not hold.
pub(super) fn unknown_message() -> Response {
    (StatusCode::NOT_FOUND, Json(error_json(10008, "Unknown Message"))).into_response()
}

/// 400 50083: what Discord answers an action an archived thread does not take.
pub(super) fn archived_thread() -> Response {
    (StatusCode::BAD_REQUEST, Json(error_json(50083, "Thread is archived"))).into_response()
}

/// Whether `channel` is a thread that is archived now.
pub(super) fn archived(state: &State, channel: u64) -> bool {
    state.thread(channel).is_some_and(|t| t.archived)
}

/// 400 50008: a message into a channel that takes none (a forum takes posts).
pub(super) fn not_text() -> Response {
    (StatusCode::BAD_REQUEST, Json(error_json(50008, "Cannot send messages in a non-text channel"))).into_response()
}

/// For the routes that answered an unknown channel with 10008 before: the access check only for
/// a channel that exists (its permissions, `None` for an unknown one, whose message is unknown).
pub(super) fn known_access(state: &State, channel: u64) -> Result<Option<u64>, Response> {
    match state.channel_access(channel) {
        Ok(perms) => Ok(Some(perms)),
        Err(Refusal::UnknownChannel) => Ok(None),
        Err(r) => Err(refused(r)),
    }
}

/// The fault a test armed on the context fetches: the answer waits, or is Discord's refusal.
pub(super) async fn fetch_fault(state: &State) -> Result<(), Response> {
    match state.fetch_faults.meet() {
        Some(FetchFault::Slow(wait)) => {
            tokio::time::sleep(wait).await;
            Ok(())
        }
        Some(FetchFault::Refused) => Err(refused(Refusal::MissingAccess)),
        None => Ok(()),
    }
}
