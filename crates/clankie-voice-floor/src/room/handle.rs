//! The keeper's handle on one room actor: all the keeper holds of a room, so the room's state
//! stays the actor's alone.

use tokio::sync::{mpsc, oneshot, watch};

use clankie_store::RoomLease;
use clankie_voice_body::Connection;

use super::actor::{RoomActor, RoomMsg, RoomParts};
use crate::voice_floor::VoiceError;

/// The keeper's handle on one room actor. Dropping it ends the room, its body and its runs.
pub(crate) struct RoomHandle {
    pub lease: RoomLease,
    /// Set by the room's lease keeping when another replica took the room.
    pub fenced: watch::Receiver<bool>,
    mailbox: mpsc::UnboundedSender<RoomMsg>,
    _actor: clankie_http::Aborting,
}

impl RoomHandle {
    /// Spawns the room's actor, which starts keeping its lease and its body at once.
    pub fn spawn(parts: RoomParts) -> RoomHandle {
        let (mailbox, inbox) = mpsc::unbounded_channel();
        let (fenced_tx, fenced) = watch::channel(false);
        let lease = parts.lease.clone();
        let actor = tokio::spawn(RoomActor::start(parts, fenced_tx).serve(inbox));
        RoomHandle { lease, fenced, mailbox, _actor: clankie_http::Aborting(actor) }
    }

    /// Connects (or reconnects) the room's body.
    pub fn connect(&self, connection: Connection) {
        let _ = self.mailbox.send(RoomMsg::Connect(connection));
    }

    /// Makes the room live: its input consumers open, its stored conversation is read back, and its
    /// session is vouched for at each renewal from now on.
    pub async fn go_live(&self) -> Result<(), VoiceError> {
        let (reply, answer) = oneshot::channel();
        let _ = self.mailbox.send(RoomMsg::Live(reply));
        answer.await.unwrap_or(Err(VoiceError::Gone))
    }

    /// A member's display name, for the utterances they speak.
    pub fn named(&self, user: u64, name: String) {
        let _ = self.mailbox.send(RoomMsg::Named(user, name));
    }

    /// A person was forgotten at `at_ms`: the room drops their lines from its ring, and any
    /// of theirs from before it that reaches the room later.
    pub fn forgotten(&self, user: u64, at_ms: i64) {
        let _ = self.mailbox.send(RoomMsg::Forgotten(user, at_ms));
    }

    /// Whether a part of the room ended without being told to: its actor (a panic, or its body
    /// gone) or its lease keeping (a panic, not a fence). Such a room hears nobody; the keeper
    /// lets go of it and takes it again.
    pub fn broken(&self) -> bool {
        self._actor.0.is_finished() || (self.fenced.has_changed().is_err() && !*self.fenced.borrow())
    }
}
