//! Why a console request failed, and how that answers the page: a status and a code, the
//! detail kept in the log. Shared by every route, so it lives apart from the crate root.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// Why a console request failed; the page shows the code.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    #[error("store: {0}")]
    Store(#[from] clankie_store::StoreError),
    #[error("bus: {0}")]
    Bus(#[from] clankie_bus::BusError),
    #[error("shared self: {0}")]
    Selfhood(#[from] clankie_self::SelfError),
    #[error("forget: {0}")]
    Forget(#[from] clankie_self::rewrite::ForgetError),
    #[error("console session: {0}")]
    Session(#[from] clankie_agent::AgentError),
    #[error("model: {0}")]
    Model(#[from] clankie_agent::ModelError),
    #[error("{0}")]
    BadRequest(String),
    #[error("not found")]
    NotFound,
    #[error("the console lane is busy; try again")]
    Busy,
}

impl ConsoleError {
    fn code(&self) -> &'static str {
        match self {
            ConsoleError::Store(_) => "store_unavailable",
            ConsoleError::Bus(_) => "bus_unavailable",
            ConsoleError::Selfhood(_) => "self_unavailable",
            ConsoleError::Forget(clankie_self::rewrite::ForgetError::Running) => "forget_running",
            ConsoleError::Forget(_) => "store_unavailable",
            ConsoleError::Session(_) => "session_unavailable",
            ConsoleError::Model(_) => "model_unconfigured",
            ConsoleError::BadRequest(_) => "bad_request",
            ConsoleError::NotFound => "not_found",
            ConsoleError::Busy => "lane_busy",
        }
    }
}

impl IntoResponse for ConsoleError {
    fn into_response(self) -> Response {
        let status = match self {
            ConsoleError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ConsoleError::NotFound => StatusCode::NOT_FOUND,
            ConsoleError::Busy | ConsoleError::Forget(clankie_self::rewrite::ForgetError::Running) => StatusCode::CONFLICT,
            _ => StatusCode::SERVICE_UNAVAILABLE,
        };
        // The detail of a store or bus failure stays in the log; the page gets the code.
        if status == StatusCode::SERVICE_UNAVAILABLE {
            tracing::warn!(error = %self, "console request failed");
        }
        let message = if status == StatusCode::SERVICE_UNAVAILABLE { self.code().to_owned() } else { self.to_string() };
        (status, axum::Json(serde_json::json!({ "error": self.code(), "message": message }))).into_response()
    }
}
