//! The REST routes under `/api/v10` that the gateway service uses, refused as Discord refuses
//! them (membership, permissions, closed DMs), and the guild routes `clankie doctor` reads.
//!
//! This file is the route table; each route lives with its kind: `bot` (the bot's own routes),
//! `messages`, `threads`, `guilds`, over `checks` (the token, access and permission checks and
//! Discord's wording of each refusal) and `bodies` (reading a request's body).

mod bodies;
mod bot;
mod checks;
mod guilds;
mod messages;
mod threads;

use std::sync::Arc;

use axum::Router;
use axum::extract::FromRef;
use axum::routing::{get, post, put};

pub use bodies::MAX_UPLOAD;

use crate::state::State;

/// Every REST route, over any router state that hands out the loopback's [`State`].
pub(crate) fn routes<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    Arc<State>: FromRef<S>,
{
    Router::new()
        .route("/api/v10/gateway", get(bot::gateway))
        .route("/api/v10/gateway/bot", get(bot::gateway_bot))
        .route("/api/v10/users/@me", get(bot::me))
        .route("/api/v10/applications/@me", get(bot::application))
        .route("/api/v10/channels/{channel}/messages", post(messages::create_message).get(messages::list_messages))
        .route("/api/v10/channels/{channel}", get(guilds::channel))
        .route(
            "/api/v10/channels/{channel}/messages/{message}",
            get(messages::get_message).patch(messages::edit_message).delete(messages::delete_message),
        )
        .route("/api/v10/channels/{channel}/messages/{message}/threads", post(threads::thread_from_message))
        .route("/api/v10/channels/{channel}/threads", post(threads::thread_without_message))
        .route("/api/v10/channels/{channel}/thread-members/@me", put(threads::join_thread))
        .route("/api/v10/channels/{channel}/messages/{message}/reactions/{emoji}/@me", put(messages::react))
        .route("/api/v10/channels/{channel}/typing", post(messages::typing))
        .route("/api/v10/users/@me/guilds", get(guilds::my_guilds))
        .route("/api/v10/guilds/{guild}", get(guilds::guild))
        .route("/api/v10/guilds/{guild}/channels", get(guilds::guild_channels))
        .route("/api/v10/guilds/{guild}/roles", get(guilds::guild_roles))
        .route("/api/v10/guilds/{guild}/members/{user}", get(guilds::guild_member))
        .route("/attachments/{id}/{filename}", get(messages::attachment))
}
