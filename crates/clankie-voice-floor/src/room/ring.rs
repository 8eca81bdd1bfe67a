//! The ring a room keeps: its lines in memory and, under the room's lease, in the store, kept
//! right through edits, deletions, forgets and cuts, and read back as the room block.

use std::collections::HashMap;

use clankie_proto::v1;

use super::actor::RoomActor;
use super::publisher::room_receipt;
use crate::ring::{RingLine, heard_of, sentence_of};

/// Runs a room remembers the sentences and cuts of.
const REMEMBERED_ANSWERS: usize = 16;

impl RoomActor {
    /// An edit or a deletion of a line typed in the room's chat: the ring's line is rewritten or
    /// dropped here, by the room's owner, and its stored copy with it, so the next room block
    /// says what the chat says now. A change never reaches the floor's rules.
    pub(super) fn change_line(&mut self, change: v1::RoomInput) {
        let target = change.changed_message_id.to_string();
        let delete = change.change() == v1::MessageChange::Delete;
        let lines = if delete {
            let before = self.ring.len();
            self.ring.retain(|l| l.delivery_id != target);
            before - self.ring.len()
        } else {
            let mut n = 0;
            for line in self.ring.iter_mut().filter(|l| l.delivery_id == target) {
                line.text = change.text.clone();
                n += 1;
            }
            n
        };
        let (store, floor) = (self.store.clone(), self.floor.clone());
        self.publisher.send("ring", async move {
            let stored = if delete { store.withdraw_ring_lines(&target).await } else { store.edit_ring_lines(&target, &change.text).await };
            if let Err(e) = stored {
                tracing::warn!(error = %e, "a changed line's stored copy was not changed; the room's ring has it right");
            }
            floor
                .receipt("voice.changed", &change, |r| {
                    r.with_code(if delete { "delete" } else { "edit" })
                        .with_id("message", change.changed_message_id)
                        .with_count("ring_lines", lines as i64)
                })
                .await;
        });
    }

    /// A forgotten person's lines leave the ring here, by the room's owner, so no later room
    /// block holds them; their stored copies go after the room's pending writes (one of theirs
    /// may still be on its way to the store). His own lines stay.
    pub(super) fn forget(&mut self, user: u64, at_ms: i64) {
        self.forgotten.record(user, at_ms);
        let before = self.ring.len();
        self.ring.retain(|l| l.is_him || l.author_id != user);
        let dropped = before - self.ring.len();
        let (store, bus, key) = (self.store.clone(), self.bus.clone(), self.key);
        self.publisher.send("ring", async move {
            let stored = store.withdraw_ring_lines_of(user).await;
            if let Err(e) = &stored {
                tracing::warn!(error = %e, "a forgotten person's stored ring lines were not removed; the room's ring has none");
            }
            room_receipt(&bus, &format!("forget:{user}"), "voice.forgotten", key, |r| {
                r.with_id("user", user)
                    .with_count("ring_lines", dropped as i64)
                    .with_count("stored_lines", *stored.as_ref().unwrap_or(&0) as i64)
            });
        });
    }

    /// Sentence `sentence` (a [`crate::sentence_id`]) of one of his answers was stopped by someone
    /// speaking over him after `said` of it (0 for one never played): the ring keeps only the
    /// words the room heard, marked as cut off, whether the answer's line is in it yet or not.
    pub(super) async fn cut_off(&mut self, sentence: &str, said: f64) {
        let Some((answer, n)) = sentence_of(sentence) else { return };
        let cut = self.cuts.entry(answer.to_owned()).or_insert((n, said));
        if (n, said) < *cut {
            *cut = (n, said);
        }
        let (n, said) = *cut;
        forget_oldest(&mut self.cuts);
        let Some(sentences) = self.sentences.get(answer) else { return };
        let kept = heard_of(sentences, n, said);
        let Some(line) = self.ring.iter_mut().rev().find(|l| l.is_him && l.delivery_id == answer) else { return };
        line.text.clone_from(&kept);
        line.cut_off = true;
        // After the line's own row, through the same ordered publisher.
        let (store, lease, answer) = (self.store.clone(), self.lease.clone(), answer.to_owned());
        self.publisher.send("ring", async move {
            if let Err(e) = store.cut_ring(&lease, &answer, &kept).await {
                tracing::warn!(error = %e, "the cut-off line was not stored");
            }
        });
    }

    /// Adds a line to the ring, and to the store under the room's lease, so the conversation
    /// outlives this owner.
    pub(super) async fn push_line(&mut self, line: RingLine) {
        if !line.is_him && self.forgotten.holds(line.author_id, line.at_ms) {
            return;
        }
        let row = clankie_store::RingRow {
            delivery_id: line.delivery_id.clone(),
            source: line.source as i32,
            author_id: line.author_id,
            author_name: line.author_name.clone(),
            is_him: line.is_him,
            text: line.text.clone(),
            cut_off: line.cut_off,
            at_ms: line.at_ms,
        };
        self.ring.push_back(line);
        while self.ring.len() > self.floor.config().ring_size {
            self.ring.pop_front();
        }
        let (store, lease) = (self.store.clone(), self.lease.clone());
        self.publisher.send("ring", async move {
            if let Err(e) = store.append_ring(&lease, &row).await {
                tracing::warn!(error = %e, "a line of the room's conversation was not stored");
            }
        });
    }

    /// The ring as the persona reads it: who said what, typed or said, and what was cut off.
    pub(super) fn room_block(&self) -> String {
        let lines: Vec<clankie_self::blocks::Line<'_>> = self
            .ring
            .iter()
            .map(|line| clankie_self::blocks::Line {
                said: clankie_self::blocks::Said { author_name: &line.author_name, author_id: line.author_id, text: &line.text },
                is_him: line.is_him,
                how: if line.source == v1::RoomInputSource::Text {
                    "typed"
                } else if line.cut_off {
                    "said, cut off"
                } else {
                    "said"
                },
            })
            .collect();
        clankie_self::blocks::room(&lines)
    }
}

/// Keeps a per-answer map to its last [`REMEMBERED_ANSWERS`] (answer ids grow with time).
pub(super) fn forget_oldest<V>(map: &mut HashMap<String, V>) {
    while map.len() > REMEMBERED_ANSWERS {
        let Some(oldest) = map.keys().min().cloned() else { return };
        map.remove(&oldest);
    }
}
