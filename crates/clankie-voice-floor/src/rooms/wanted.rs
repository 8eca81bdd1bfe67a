//! Which rooms the keeper wants, and reconciling its rooms with them: taking the wanted ones
//! nobody owns, keeping its own, and leaving the rest.

use std::collections::HashSet;
use std::time::Instant;

use super::keeper::RoomKeeper;
use crate::room::Key;

impl RoomKeeper {
    /// The rooms he should be in, and the rooms he is in but should leave though nobody owns them.
    ///
    /// A room is wanted while a human is in it; after the last one leaves (or after the owner
    /// summoned him into an empty one) it stays wanted for the grace period. A room the owner
    /// dismissed him from is not wanted until its humans have gone.
    fn wanted(&mut self) -> (HashSet<Key>, HashSet<Key>) {
        let now = Instant::now();
        let (mut wanted, mut clear) = (HashSet::new(), HashSet::new());
        for &key in &self.config.allow {
            if self.known.dave_refused.get(&key).is_some_and(|at| at.elapsed() < self.config.dave_refused_hold) {
                continue;
            }
            let occupied = self.known.humans.iter().any(|(&(g, _), &c)| g == key.0 && c == key.1);
            if self.known.dismissed.contains(&key) {
                if !occupied {
                    self.known.dismissed.remove(&key);
                }
                continue;
            }
            if occupied {
                self.known.empty_since.remove(&key);
                self.known.summoned.remove(&key);
                wanted.insert(key);
                continue;
            }
            let present = self.known.summoned.contains(&key) || self.owned.contains_key(&key) || self.known.him_in(key);
            if !present {
                self.known.empty_since.remove(&key);
                continue;
            }
            let since = *self.known.empty_since.entry(key).or_insert(now);
            if now.duration_since(since) < self.config.grace {
                wanted.insert(key);
            } else {
                self.known.summoned.remove(&key);
                let recently_left = self.known.left_at.get(&key).is_some_and(|at| at.elapsed() < self.config.rejoin_after);
                if !self.owned.contains_key(&key) && self.known.him_in(key) && !recently_left {
                    clear.insert(key);
                }
            }
        }
        // He is in one voice channel per guild: where several are wanted, the one the owner
        // summoned him to, else the one he is in, else the first listed.
        let mut by_guild: std::collections::HashMap<u64, Vec<Key>> = std::collections::HashMap::new();
        for key in self.config.allow.iter().copied().filter(|k| wanted.contains(k)) {
            by_guild.entry(key.0).or_default().push(key);
        }
        for keys in by_guild.into_values().filter(|k| k.len() > 1) {
            let keep = keys
                .iter()
                .copied()
                .find(|k| self.known.summoned.contains(k))
                .or_else(|| keys.iter().copied().find(|k| self.known.him_in(*k)))
                .unwrap_or(keys[0]);
            for key in keys.into_iter().filter(|k| *k != keep) {
                wanted.remove(&key);
            }
        }
        (wanted, clear)
    }

    /// Brings the rooms this replica owns in line with the wanted ones: takes, keeps and leaves.
    pub(super) async fn reconcile(&mut self) {
        // Read before `wanted` lets go of dismissals whose rooms are empty.
        let dismissed = self.known.dismissed.clone();
        let (wanted, clear) = self.wanted();
        for key in wanted.iter().copied().filter(|k| !self.owned.contains_key(k)).collect::<Vec<_>>() {
            self.try_take(key).await;
        }
        // He sits in a room nobody keeps (every owner died, or one was stopped): whoever takes
        // it sees him out.
        for key in clear {
            self.try_take(key).await;
            self.leave(key, "empty").await;
        }
        for key in self.owned.keys().copied().collect::<Vec<_>>() {
            if !self.renew(key).await {
                continue;
            }
            if wanted.contains(&key) {
                self.keep(key).await;
            } else if dismissed.contains(&key) {
                self.leave(key, "dismissed").await;
            } else {
                self.leave(key, "empty").await;
            }
        }
    }
}
