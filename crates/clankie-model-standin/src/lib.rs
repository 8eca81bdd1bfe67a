//! A stand-in for an OpenAI-compatible model provider, on loopback.
//!
//! It speaks the real wire protocol (`POST /v1/chat/completions` with
//! `stream: true`, answered as server-sent events) so the real HTTP client is
//! what tests exercise. Each request takes the first queued [`Script`] whose
//! condition matches, or answers `ok` when none does. Every request is
//! recorded, so a test can assert exactly what the model was sent.
//!
//! Scripts are queued in process with [`StandIn::script`] or over HTTP with
//! `POST /control/script`; `GET /control/requests` lists what was recorded;
//! `POST /control/abandon` stops it listening while its open connections hang ([`StandIn::abandon`]);
//! `POST /control/chat_completions` with `{"on": false}` leaves Anthropic's wire the only one
//! that answers ([`StandIn::set_chat_completions`]).
//! It also serves the OpenAI audio routes over the offline speech engines ([`audio`]).
//!
//! One file a job: `script` what a test queues, `recorded` what was sent,
//! `shared` the state both wires admit a request through, `openai` and [`anthropic`] the two
//! model wires over `sse`, `control` the `/control` routes, `routes` the table, and `standin`
//! the handle a test holds.

pub mod anthropic;
pub mod audio;

mod control;
mod openai;
mod recorded;
mod routes;
mod script;
mod shared;
mod sse;
mod standin;

pub use recorded::RecordedRequest;
pub use routes::router;
pub use script::{Reply, Script, ScriptedCall};
pub use shared::Shared;
pub use standin::StandIn;
