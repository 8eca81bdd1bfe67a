//! Edits and deletions reaching a lane: a message still waiting for its turn is changed (or,
//! deleted, never read: it ends `withdrawn`); one the lane already stored is rewritten in the
//! store under the lane's lease. A run that holds the edited message hears it as a correction
//! (`turn.rs`), and the stored entry is rewritten once the run is over.

use clankie_proto::{LaneKey, v1};
use clankie_self::rewrite::{self, Change};
use clankie_store::{Lease, Outcome, StoreError, StoredChange};

use crate::{Captain, Held, prompt};

impl Captain {
    /// Stores each change of `burst` (so a copy of its message admitted later, here or on
    /// another replica, is read as changed), then settles those that need no lease: their
    /// message is not waiting here, nobody holds it, and the lane stored nothing of it. What
    /// is left needs the lease, or goes to the replica that holds the lane.
    pub(super) async fn settle_unheld_changes(&self, lane: &LaneKey, burst: &mut Vec<Held>) {
        let waiting: Vec<u64> = burst.iter().filter(|h| !h.is_change()).map(Held::message_id).collect();
        let mut left = Vec::with_capacity(burst.len());
        for h in std::mem::take(burst) {
            let target = h.ingress.changed_message_id;
            // A thread archived is applied under the lease (taking it makes every replica's warm copy stale).
            if !h.is_change() || h.ingress.change() == v1::MessageChange::ThreadArchived {
                left.push(h);
                continue;
            }
            if let Err(e) = self.store_change(lane, &h).await {
                tracing::warn!(%lane, error = %e, "a change could not be stored; it will come back");
                let _ = h.nak_after(self.inner.config.backoff(h.delivered())).await;
                continue;
            }
            if waiting.contains(&target) {
                left.push(h);
                continue;
            }
            let store = &self.inner.store;
            match store.entries_holding_message(&lane.to_string(), target).await {
                Ok(held) if held.is_empty() => match store.awaits_outcome(&target.to_string()).await {
                    Ok(false) => self.changed(lane, h, 0, false).await,
                    // Admitted and not settled: a replica holds it, waiting or in a run.
                    Ok(true) | Err(_) => left.push(h),
                },
                Ok(_) | Err(_) => left.push(h),
            }
        }
        *burst = left;
    }

    /// Keeps `change` in the store, for any copy of its message that arrives later (until the
    /// retention sweep takes it, at the records' age).
    pub(super) async fn store_change(&self, lane: &LaneKey, change: &Held) -> Result<(), StoreError> {
        let stored = match change.ingress.change() {
            v1::MessageChange::Delete => StoredChange::Delete,
            _ => StoredChange::Edit(prost::Message::encode_to_vec(&change.ingress)),
        };
        let target = change.ingress.changed_message_id.to_string();
        self.inner.store.record_change(lane, &target, change.ingress.author_id, &stored, change.ingress.received_at_ms).await
    }

    /// Reads the stored changes of the messages of `burst` (taken under `lease`): an edit
    /// consumed before this copy arrived (another replica, or before a crash) changes it, and
    /// a deleted one is withdrawn. A lookup that fails leaves the burst as it came.
    pub(super) async fn apply_stored_changes(&self, lease: &Lease, burst: &mut Vec<Held>) {
        let ids: Vec<&str> = burst.iter().filter(|h| !h.is_change()).map(Held::delivery_id).collect();
        let stored = match self.inner.store.changes_among(&ids).await {
            Ok(stored) if !stored.is_empty() => stored,
            _ => return,
        };
        let mut left = Vec::with_capacity(burst.len());
        for mut h in std::mem::take(burst) {
            match stored.iter().find(|(id, _)| id == h.delivery_id()).map(|(_, c)| c) {
                Some(StoredChange::Delete) if !h.is_change() => match self.withdraw(lease, &h).await {
                    Ok(()) => {}
                    Err(e) => {
                        tracing::warn!(lane = %lease.lane, error = %e, "a deleted message could not be withdrawn; it is answered");
                        left.push(h);
                    }
                },
                Some(StoredChange::Edit(bytes)) if !h.is_change() => {
                    if let Ok(change) = <v1::Ingress as prost::Message>::decode(bytes.as_slice()) {
                        edit(&mut h.ingress, &change);
                    }
                    left.push(h);
                }
                _ => left.push(h),
            }
        }
        *burst = left;
    }

    /// Applies the changes of `burst` under the lane's lease and returns its messages, as
    /// changed. A change that could not be applied goes back to JetStream.
    pub(super) async fn apply_changes(&self, lease: &Lease, burst: Vec<Held>) -> Vec<Held> {
        let (changes, mut messages): (Vec<Held>, Vec<Held>) = burst.into_iter().partition(Held::is_change);
        for c in changes {
            if c.ingress.change() == v1::MessageChange::ThreadArchived {
                self.thread_archived(lease, c).await;
                continue;
            }
            let target = c.ingress.changed_message_id;
            let waiting = messages.iter().position(|m| m.message_id() == target);
            match (c.ingress.change(), waiting) {
                (v1::MessageChange::Delete, Some(at)) => {
                    let message = messages.remove(at);
                    match self.withdraw(lease, &message).await {
                        Ok(()) => self.changed_waiting(lease, c).await,
                        Err(e) => {
                            tracing::warn!(lane = %lease.lane, error = %e, "a deleted message could not be withdrawn; it is answered");
                            messages.insert(at, message);
                            let _ = c.nak_after(self.inner.config.backoff(c.delivered())).await;
                        }
                    }
                }
                (_, Some(at)) => {
                    edit(&mut messages[at].ingress, &c.ingress);
                    self.changed_waiting(lease, c).await;
                }
                (_, None) => match self.rewrite_stored(lease, &c).await {
                    // Nothing stored, and the message waits for its outcome elsewhere (another
                    // replica between its turns): it comes back until it can be applied.
                    Ok(0) if self.inner.store.awaits_outcome(&target.to_string()).await.unwrap_or(false) => {
                        let _ = c.nak_after(self.inner.config.backoff(c.delivered())).await;
                    }
                    Ok(n) => self.changed(&lease.lane, c, n, false).await,
                    Err(e) => {
                        tracing::warn!(lane = %lease.lane, error = %e, "a change could not be applied; it will come back");
                        let _ = c.nak_after(self.inner.config.backoff(c.delivered())).await;
                    }
                },
            }
        }
        messages
    }

    /// A change to a message that waited here, applied: the copies of its words a run that
    /// died stored (an abandoned epoch's entries, hidden from every session but still kept)
    /// are rewritten too, so the old words leave the store.
    pub(super) async fn changed_waiting(&self, lease: &Lease, c: Held) {
        match self.rewrite_stored(lease, &c).await {
            Ok(n) => self.changed(&lease.lane, c, n, true).await,
            Err(e) => {
                tracing::warn!(lane = %lease.lane, error = %e, "a change's stored copies could not be rewritten; it will come back");
                let _ = c.nak_after(self.inner.config.backoff(c.delivered())).await;
            }
        }
    }

    /// The thread the lane is was archived: the lane goes cold. This replica lets its warm copy
    /// go, and taking the lease made every other copy stale, so the next message there walks in
    /// cold, with the thread's context and the room's history again.
    async fn thread_archived(&self, lease: &Lease, c: Held) {
        self.inner.warm.lock().unwrap_or_else(|p| p.into_inner()).take(&lease.lane);
        self.receipt("captain.changed", c.delivery_id(), &lease.lane, |r| r.with_code("thread_archived")).await;
        let _ = c.ack().await;
    }

    /// A message deleted before his turn read it: its outcome is `withdrawn`.
    pub(super) async fn withdraw(&self, lease: &Lease, message: &Held) -> Result<(), StoreError> {
        let outcome =
            Outcome { delivery_id: message.delivery_id().to_owned(), turn_id: None, kind: v1::OutcomeKind::Withdrawn, failure_code: None };
        self.inner.store.record_outcome(lease, &outcome).await?;
        self.announce_outcome(&lease.lane, &outcome, |r| r).await;
        let _ = message.ack().await;
        Ok(())
    }

    /// Rewrites the entries of the lease's lane that hold the changed message; how many changed.
    async fn rewrite_stored(&self, lease: &Lease, c: &Held) -> Result<u64, StoreError> {
        let target = c.ingress.changed_message_id;
        let held = self.inner.store.entries_holding_message(&lease.lane.to_string(), target).await?;
        let change = match c.ingress.change() {
            v1::MessageChange::Edit => {
                let pictures = c.ingress.attachments.iter().filter(|a| a.content_type.starts_with("image/")).count();
                let shown = pictures.min(self.inner.config.bounds.attachments_per_message);
                Change::Edit { block: prompt::message(&c.ingress, shown), text: c.ingress.content.clone() }
            }
            _ => Change::Delete,
        };
        let rewrites: Vec<_> = held.iter().filter_map(|e| rewrite::changed(e, target, &change)).collect();
        let n = self.inner.store.rewrite_entries(lease, &rewrites).await?;
        // This replica's copy holds the old words; other replicas' copies reopen on the store's mark.
        if n > 0 {
            self.inner.warm.lock().unwrap_or_else(|p| p.into_inner()).take(&lease.lane);
        }
        Ok(n)
    }

    /// The change is applied: a deleted message leaves the voice rings too; then the receipt, and the ack.
    pub(super) async fn changed(&self, lane: &LaneKey, c: Held, rewritten: u64, waiting: bool) {
        let delete = c.ingress.change() == v1::MessageChange::Delete;
        let mut ring_lines = 0;
        if delete {
            match self.inner.store.withdraw_ring_lines(&c.ingress.changed_message_id.to_string()).await {
                Ok(n) => ring_lines = n,
                Err(e) => {
                    tracing::warn!(%lane, error = %e, "a deleted message's ring lines could not be removed; it will come back");
                    let _ = c.nak_after(self.inner.config.backoff(c.delivered())).await;
                    return;
                }
            }
        }
        if !self.pass_on_to_quoting_lanes(lane, &c).await {
            let _ = c.nak_after(self.inner.config.backoff(c.delivered())).await;
            return;
        }
        self.receipt("captain.changed", c.delivery_id(), lane, |r| {
            r.with_code(if delete { "delete" } else { "edit" })
                .with_id("message", c.ingress.changed_message_id)
                .with_count("rewritten_entries", rewritten as i64)
                .with_count("ring_lines", ring_lines as i64)
                .with_flag("waiting", waiting)
        })
        .await;
        let _ = c.ack().await;
    }
}

impl Captain {
    /// A change to a message other lanes quote (a thread's starter in its parent, a linked
    /// message, a reply chain reaching across a thread) goes to each of them too, as a change
    /// of its own (`<delivery>@<lane>`), so each rewrites its copy under its own lease. Only
    /// the change as Discord sent it is passed on: a copy passes nothing further. False when
    /// it could not be passed on (it comes back).
    async fn pass_on_to_quoting_lanes(&self, lane: &LaneKey, c: &Held) -> bool {
        if c.delivery_id().contains('@') {
            return true;
        }
        let target = c.ingress.changed_message_id;
        let lanes = match self.inner.store.other_lanes_quoting(&lane.to_string(), target).await {
            Ok(lanes) => lanes,
            Err(e) => {
                tracing::warn!(%lane, error = %e, "the lanes quoting a changed message could not be read; the change will come back");
                return false;
            }
        };
        for other in lanes {
            let (guild, channel) = match other.parse::<LaneKey>() {
                Ok(LaneKey::Room { guild, channel }) => (Some(guild), channel),
                Ok(LaneKey::Dm { channel }) => (None, channel),
                _ => continue,
            };
            let copy = v1::Ingress {
                delivery_id: format!("{}@{other}", c.delivery_id()),
                guild_id: guild,
                channel_id: channel,
                ..c.ingress.clone()
            };
            let subject = clankie_proto::Subject::ingress_text(guild, channel);
            if let Err(e) = self.inner.bus.publish(&subject, &copy, Some(&clankie_bus::MsgId::new(copy.delivery_id.clone()))).await {
                tracing::warn!(%lane, error = %e, "a change could not be passed to a lane quoting its message; it will come back");
                return false;
            }
        }
        true
    }
}

/// A waiting message as its author edited it.
pub(super) fn edit(message: &mut v1::Ingress, change: &v1::Ingress) {
    message.content.clone_from(&change.content);
    message.author_name.clone_from(&change.author_name);
    message.mentions_him = change.mentions_him;
    message.attachments.clone_from(&change.attachments);
}
