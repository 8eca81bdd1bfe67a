//! What the keeper does with a room's connection reports: receipts, a pause before asking
//! again after a failure, and letting go of a room whose server wants DAVE.

use std::time::{Duration, Instant};

use super::keeper::RoomKeeper;
use crate::room::{Key, Link};

impl RoomKeeper {
    /// A room's report of its connection, heard only from the room's current epoch.
    pub(super) async fn link(&mut self, key: Key, epoch: i64, link: Link) {
        if self.owned.get(&key).is_none_or(|o| o.room.lease.epoch != epoch) {
            return;
        }
        match link {
            Link::Connected => {
                if let Some(owned) = self.owned.get_mut(&key) {
                    owned.failures = 0;
                    owned.retry_at = None;
                }
                self.receipt("voice.connection", key, epoch, |r| r.with_code("connected")).await;
            }
            Link::Resumed => self.receipt("voice.connection", key, epoch, |r| r.with_code("resumed")).await,
            Link::Dropped(reason) => {
                tracing::warn!(guild = key.0, channel = key.1, %reason, "voice driver disconnected; asking for op 4 again");
                self.failed(key, false);
                self.receipt("voice.connection", key, epoch, |r| r.with_code("disconnected")).await;
            }
            Link::Failed(why) => {
                tracing::warn!(guild = key.0, channel = key.1, error = %why, "voice connection failed; asking for op 4 again after a pause");
                self.failed(key, true);
                self.receipt("voice.connection", key, epoch, |r| r.with_code("failed")).await;
            }
            Link::DaveRequired => {
                // Asking again cannot help: the voice server wants what this build lacks.
                let hold = self.config.dave_refused_hold;
                tracing::error!(
                    guild = key.0,
                    channel = key.1,
                    hold_s = hold.as_secs(),
                    "the voice server requires DAVE end-to-end encryption at a version this build does not offer (close 4017); leaving the room alone"
                );
                self.receipt("voice.connection", key, epoch, |r| r.with_code("failed").with_code("dave_required")).await;
                self.known.dave_refused.insert(key, Instant::now());
                self.leave(key, "dave_required").await;
            }
            Link::Dave(state) => {
                self.receipt("voice.connection", key, epoch, |r| {
                    let r = r
                        .with_code("dave")
                        .with_count("dave_protocol_version", i64::from(state.protocol_version))
                        .with_count("dave_epoch", i64::try_from(state.epoch).unwrap_or(i64::MAX))
                        .with_count("dave_transitions", i64::try_from(state.transitions).unwrap_or(i64::MAX));
                    match &state.privacy_code {
                        Some(code) => r.with_id("dave_privacy_code", code),
                        None => r,
                    }
                })
                .await;
            }
        }
    }

    /// The connection is gone: the next `keep` asks for op 4 (at once after a drop; after a
    /// doubling pause, up to 30 s, after connects that fail) and connects with what it brings.
    fn failed(&mut self, key: Key, backoff: bool) {
        let Some(owned) = self.owned.get_mut(&key) else { return };
        if let Some(connection) = owned.connection.take() {
            owned.failed = Some(connection);
        }
        owned.asked = None;
        if backoff {
            owned.failures += 1;
            let pause = Duration::from_secs(1) * 2u32.saturating_pow(owned.failures.saturating_sub(1).min(5));
            owned.retry_at = Some(Instant::now() + pause.min(Duration::from_secs(30)));
        }
    }
}
