//! The stand-in's route table: both model wires, the control API and the audio routes over
//! one [`Shared`], so it can be served alone or embedded in another server.

use axum::Router;
use axum::routing::{get, post};

use crate::shared::Shared;
use crate::{anthropic, audio, control, openai};

/// The stand-in's routes over `shared`, for embedding in another server.
pub fn router(shared: Shared) -> Router {
    let audio = audio::routes(shared.audio.clone());
    Router::new()
        .route("/v1/chat/completions", post(openai::completions))
        .route("/v1/messages", post(anthropic::messages))
        .route("/control/clock", post(anthropic::advance_clock))
        .route("/control/script", post(control::add_script))
        .route("/control/requests", get(control::list_requests).delete(control::clear_requests))
        .route("/control/abandon", post(control::abandon_route))
        .route("/control/chat_completions", post(control::chat_completions_route))
        // A request carrying a 25 MB picture as base64 is about 34 MB, as a provider takes it.
        .layer(axum::extract::DefaultBodyLimit::max(64 * 1024 * 1024))
        .with_state(shared)
        .merge(audio)
}
