//! The sandbox on top of the wire layers: the control API tests and scripts drive the loopback
//! with, and the room page where a person chats as several users.

mod control;
mod voice;

use std::sync::Arc;

use axum::Router;
use axum::extract::FromRef;
use axum::http::header;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;

use crate::state::State;
use crate::voice::VoiceServer;
pub(crate) use voice::synthesize;

/// The sandbox's routes: the page and the control API.
pub(crate) fn routes<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    Arc<State>: FromRef<S>,
    Arc<VoiceServer>: FromRef<S>,
{
    Router::new().route("/", get(page)).merge(control::routes()).merge(voice::routes())
}

async fn page() -> Response {
    ([(header::CACHE_CONTROL, "no-store")], Html(include_str!("sandbox.html"))).into_response()
}
