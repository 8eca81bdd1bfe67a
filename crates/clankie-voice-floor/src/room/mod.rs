//! One voice room as one task: the room actor.
//!
//! The keeper ([`crate::rooms`]) spawns a room actor when it takes a room's lease and holds only
//! its [`RoomHandle`]; dropping the handle ends the room. The actor owns everything of the room:
//! its lease keeping (a child task, so nothing the actor waits on can hold up a renewal), its
//! audio body (the ears that cut utterances and the mouth that plays his sentences), its
//! transcriber, and once live its input consumers, its ring, its floor state and its persona
//! runs. A run holds the actor's run mailbox, never the room's state: it asks for the room block
//! and reports its end, and the actor writes the ring. A room reopened is a new actor; its runs
//! end with it.
//!
//! The actor's state and loop are in `actor`; each of its jobs has a file of its own: `input`
//! (the one room-input path), `ring` (the ring it keeps), `runs` (starting and ending runs),
//! `reports` (what its body tells it). The tasks it starts are `lease`, `body`, `transcriber`
//! (fed by the `ears`) and `publisher`; `handle` is the keeper's side.

mod actor;
mod body;
mod ears;
mod handle;
mod input;
mod lease;
mod publisher;
mod reports;
mod ring;
mod runs;
mod smart_turn;
mod transcriber;

pub(crate) use actor::{Link, RoomParts};
pub(crate) use handle::RoomHandle;
pub(crate) use publisher::room_receipt;
pub(crate) use smart_turn::turn_detector;

/// A room's (guild, channel): how the keeper, its rooms and their runs name one room.
pub(crate) type Key = (u64, u64);
