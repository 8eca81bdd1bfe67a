//! The operator console: one small web service, reading NATS and PostgreSQL, that shows a
//! person what every lane is doing and lets the owner talk with him.
//!
//! - [`Console::router`] serves the page and its JSON and server-sent-event routes; every
//!   route, the page included, wants the token ([`auth`]) and answers 401 without it.
//! - Lanes live and the tap are pushed from the bus ([`live`]).
//! - Trails, memory, the persona and owner settings with their versions, voice rooms, figures
//!   and pending reminders are read from the store ([`views`]).
//! - Console chat is the owner's own thread of the one self, `console:<owner>` ([`chat`]).
//! - The bill, in dollars at the configured prices per lane, room and day, as JSON and in the
//!   words `/clankie usage` and `clankie usage` answer with ([`usage`]).
//!
//! This file only wires: the handle and what it holds are in `state`, its start in `start`, its
//! routes in `routes`, its settings in `config`, its error in `error`, voice rooms in `voice`.

pub mod auth;
pub mod chat;
mod config;
pub mod diff;
mod error;
pub mod live;
pub mod prices;
mod routes;
pub mod service;
mod start;
mod state;
pub mod usage;
pub mod views;
mod voice;

pub use config::ConsoleConfig;
pub use error::ConsoleError;
pub use routes::ROUTES;
pub use state::Console;
