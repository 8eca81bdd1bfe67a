//! The room keeper: which voice rooms are wanted, and which replica owns each.
//!
//! The gateway forwards every voice state and voice server update; each replica reads them all
//! (last per subject, so a fresh replica learns who is where). A room is *wanted* while a human
//! is in an allowed voice channel, and for a grace period after the last one leaves. A wanted room
//! is owned by exactly one replica through a room lease with a fencing epoch in PostgreSQL (the
//! `voice_rooms` table; the voice lane itself is the captain's, for `ask_clankie`). The owner
//! spawns the room's actor ([`crate::room`]), asks the gateway for op 4, hands the actor the
//! connection from his voice state and the server update, and announces the room live (the
//! gateway routes attached-chat text by it). When the owner dies its lease runs out and another
//! replica takes the room and reconnects.
//!
//! The keeper's own state and loop are in `keeper`; what it knows of who is where in `known`;
//! which rooms it wants in `wanted`; the life of a room it owns (taken, kept, fenced, restarted,
//! left) in `owned`; what it does with a room's connection reports in `link`. Its settings are
//! `config`'s and the ring's sweeping is `sweep`'s.

mod config;
mod keeper;
mod known;
mod link;
mod owned;
mod sweep;
mod wanted;

pub use config::{RoomConfig, speech_config};
pub use keeper::{RoomError, RoomKeeper};
pub use sweep::sweep_ring;
