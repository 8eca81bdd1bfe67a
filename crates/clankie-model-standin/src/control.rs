//! The control routes under `/control`: what a test does in process through [`StandIn`](crate::StandIn),
//! over HTTP for a stand-in running in a process of its own.

use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;

use crate::recorded::RecordedRequest;
use crate::script::Script;
use crate::shared::{Shared, abandon};

/// The body of `POST /control/chat_completions`.
#[derive(Deserialize)]
pub(crate) struct Switch {
    /// Whether `/v1/chat/completions` answers.
    on: bool,
}

/// `POST /control/chat_completions`: [`StandIn::set_chat_completions`](crate::StandIn::set_chat_completions) for a stand-in in a process of its own.
pub(crate) async fn chat_completions_route(State(shared): State<Shared>, axum::Json(switch): axum::Json<Switch>) -> StatusCode {
    shared.chat_completions_off.store(!switch.on, std::sync::atomic::Ordering::SeqCst);
    StatusCode::NO_CONTENT
}

/// `POST /control/script`: [`StandIn::script`](crate::StandIn::script) over HTTP.
pub(crate) async fn add_script(State(shared): State<Shared>, axum::Json(script): axum::Json<Script>) -> StatusCode {
    shared.lock().scripts.push(script);
    StatusCode::NO_CONTENT
}

/// `POST /control/abandon`: [`StandIn::abandon`](crate::StandIn::abandon) for a stand-in in a process of its own.
pub(crate) async fn abandon_route(State(shared): State<Shared>) -> StatusCode {
    abandon(&shared).await;
    StatusCode::NO_CONTENT
}

/// `GET /control/requests`: [`StandIn::requests`](crate::StandIn::requests) over HTTP.
pub(crate) async fn list_requests(State(shared): State<Shared>) -> axum::Json<Vec<RecordedRequest>> {
    axum::Json(shared.lock().requests.clone())
}

/// `DELETE /control/requests`: forgets what was recorded, so a test reads only what follows.
pub(crate) async fn clear_requests(State(shared): State<Shared>) -> StatusCode {
    shared.lock().requests.clear();
    StatusCode::NO_CONTENT
}
