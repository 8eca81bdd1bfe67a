//! The gateway: Discord's side of Clankie.
//!
//! - **Shards**: replicas share the shards by lease ([`leases`]), each running its fair
//!   share and handing them over, session and all, on shutdown or when it dies.
//! - **Ingest**: a twilight shard reads MESSAGE_CREATE, [`normalise`]s it and
//!   publishes it with `Nats-Msg-Id = discord:message:<id>`, so resume
//!   replays and duplicate gateways yield one ingress. Text typed into the
//!   chat of the guild's live voice channel goes to the voice room instead.
//! - **Body**: posts what the captain asks (replies split at 2000 characters,
//!   Discord's `nonce` with `enforce_nonce` from the idempotency key), keeps
//!   the typing indicator alive, manages the tool card, answers history
//!   requests for cold lanes, and (in the sandbox) shows outcomes as reactions.
//! - **REST**: one replica at a time speaks Discord's REST API, the one holding the REST
//!   lease ([`rest`]): posting, typing, reactions and history all run there, so one
//!   twilight rate limiter sees every request the bot makes.
//! - **Voice**: voice states and voice server updates of admitted guilds are
//!   forwarded as events; join and leave commands become op 4 on the shard.
//!
//! This root only wires. A replica's shared state and its handle ([`Gateway`]) live in `state`,
//! with the data it holds in modules of their own (`config`, `error`, `rest::client`,
//! `rest::budget`, `typing::loops`, `body::held`, `context::places`); the parts that run on the
//! handle (`shard`, `body`, `rest`, `typing`, `context`, `voice`, `commands`) read it through
//! its methods, so no module imports one that imports it back.

mod body;
pub mod commands;
mod config;
mod context;
pub mod doctor;
mod error;
pub mod invite;
pub mod leases;
pub mod normalise;
mod receipt;
mod rest;
mod run;
pub mod service;
pub mod session;
mod shard;
mod state;
mod typing;
mod voice;

pub use config::{GatewayConfig, INGEST_BUFFER, PLACES_KEPT};
pub use context::GATHER_PATIENCE;
pub use error::GatewayError;
pub use state::Gateway;
