//! The console's routes: the list the manifests check, and the router that serves each behind
//! the token. The one file that names every view, so the views need not name it.

use axum::Router;
use axum::http::StatusCode;
use axum::response::Html;
use axum::routing::{get, post};

use crate::state::Console;
use crate::{auth, chat, live, usage, views};

/// Every route the console serves, for the manifests and the 401 test. `{id}` stands for a
/// path parameter.
pub const ROUTES: &[(&str, &str)] = &[
    ("GET", "/"),
    ("GET", "/api/lanes"),
    ("GET", "/api/lanes/events"),
    ("GET", "/api/tap"),
    ("GET", "/api/trail/{id}"),
    ("GET", "/api/memory"),
    ("POST", "/api/memory/{id}/approve"),
    ("POST", "/api/memory/{id}/reject"),
    ("POST", "/api/people/{id}/forget"),
    ("GET", "/api/persona"),
    ("PUT", "/api/persona"),
    ("GET", "/api/settings"),
    ("PUT", "/api/settings"),
    ("GET", "/api/voice"),
    ("GET", "/api/figures"),
    ("GET", "/api/reminders"),
    ("GET", "/api/usage"),
    ("GET", "/api/config"),
    ("GET", "/api/chat"),
    ("POST", "/api/chat"),
];

impl Console {
    /// Every route, each behind the token.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/", get(|| async { Html(PAGE) }))
            .route("/api/lanes", get(views::lanes))
            .route("/api/lanes/events", get(live::lane_events))
            .route("/api/tap", get(live::tap))
            .route("/api/trail/{id}", get(views::trail_route))
            .route("/api/memory", get(views::memory))
            .route("/api/memory/{id}/approve", post(views::approve))
            .route("/api/memory/{id}/reject", post(views::reject))
            .route("/api/people/{id}/forget", post(views::forget_user))
            .route("/api/persona", get(views::persona).put(views::set_persona))
            .route("/api/settings", get(views::settings).put(views::set_settings))
            .route("/api/voice", get(views::voice))
            .route("/api/figures", get(views::figures))
            .route("/api/reminders", get(views::reminders))
            .route("/api/usage", get(usage::route))
            .route("/api/config", get(views::config))
            .route("/api/chat", get(chat::thread).post(chat::route))
            .fallback(|| async { (StatusCode::NOT_FOUND, "not found\n") })
            .layer(axum::middleware::from_fn_with_state(self.clone(), auth::require_token))
            .with_state(self.clone())
    }

    /// Serves the console on `listener` until the task is dropped.
    pub async fn serve(self, listener: tokio::net::TcpListener) -> std::io::Result<()> {
        axum::serve(listener, self.router()).await
    }
}

/// The page: every view, plain HTML and a little script.
const PAGE: &str = include_str!("console.html");
