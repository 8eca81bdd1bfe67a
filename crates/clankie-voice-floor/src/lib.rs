//! The voice floor: live voice rooms and what happens to each line heard in them.
//!
//! The house is keeper → room actor → {ears, floor, run, mouth}. The keeper ([`rooms`]) decides
//! which rooms are wanted and takes their leases; each room it owns is one actor ([`room`]) that
//! owns its lease keeping, its audio body, its transcriber, its ring and its runs. Every room
//! input (typed chat the gateway routes, an utterance's words) enters the actor's one path: the
//! floor decides (a pure function, [`floor`]), the ring keeps the line with its source (only
//! speech reaches transcript subscribers), and for wake, continue or a permitted offer a persona
//! run ([`VoiceFloor`]'s, shared by every room) asks the voice persona for words to say or
//! silence. Silence is a real outcome here: nothing falls through to a text reply. Every receipt
//! carries the delivery id and no words.
//!
//! This root only wires: what the modules share lives in modules of its own ([`VoiceConfig`]'s,
//! [`RingLine`]'s, [`VoiceFloor`]'s and the run's).

mod config;
pub mod floor;
mod ring;
pub mod room;
pub mod rooms;
mod run;
pub mod sentences;
pub mod service;
mod voice_floor;

pub use config::VoiceConfig;
pub use ring::{RingLine, answer_id, heard_of, sentence_id};
pub use voice_floor::{RoomInputs, VoiceError, VoiceFloor};
