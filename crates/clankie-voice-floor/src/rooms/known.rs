//! What this replica knows of who is where, from every voice state and server update: what
//! the keeper decides which rooms are wanted from.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use crate::room::Key;

/// What the keeper knows of the guilds' voice channels and of him in them.
#[derive(Default)]
pub(super) struct Known {
    /// Each human's voice channel, by (guild, user).
    pub(super) humans: HashMap<(u64, u64), u64>,
    /// His own voice state per guild: channel (if any), voice session id and his user id.
    pub(super) him: HashMap<u64, (Option<u64>, String, u64)>,
    /// The voice server per guild: endpoint (none while it moved) and token.
    pub(super) servers: HashMap<u64, (Option<String>, String)>,
    /// When each allowed room last became empty (or was summoned while empty).
    pub(super) empty_since: HashMap<Key, Instant>,
    /// Rooms the owner told him to join (`clankie voice join`), until the grace runs out empty.
    pub(super) summoned: HashSet<Key>,
    /// Rooms the owner told him to leave (`clankie voice leave`), until their humans have gone.
    pub(super) dismissed: HashSet<Key>,
    /// The people forgotten, from the audience bucket: each room drops their older lines.
    pub(super) forgotten: clankie_proto::audience::Forgotten,
    /// When this replica last saw him out of each room (his voice state follows shortly).
    pub(super) left_at: HashMap<Key, Instant>,
    /// Rooms whose voice server refused him for want of DAVE, and when.
    pub(super) dave_refused: HashMap<Key, Instant>,
}

impl Known {
    /// Whether he is in the room `key` now, as his voice state has it.
    pub(super) fn him_in(&self, (guild, channel): Key) -> bool {
        matches!(self.him.get(&guild), Some((Some(c), _, _)) if *c == channel)
    }
}
