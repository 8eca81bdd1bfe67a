//! The events a shard read, handed on in the order read, off the shard's loop: messages,
//! edits and deletions to ingest, place changes to the cache, typing signals and voice on. The
//! session is saved as of each stored message, and the first that cannot be stored stops it.
//!
//! Messages are sent to JetStream one after another and their acks awaited many at a time (up
//! to [`ACKS_IN_FLIGHT`]): events sent in turn on one connection are stored in that order, so
//! the order holds while a message costs a send, not a round trip. Anything else that is
//! published (an edit, a deletion, a thread's end, voice) waits until the messages before it
//! are stored, as it did when every message waited.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::StreamExt;
use futures::stream::FuturesOrdered;
use tracing::Instrument;
use twilight_gateway::Event;
use twilight_model::gateway::payload::incoming::MessageDelete;

use super::ingest::{Change, Ingested};
use super::saver::Saver;
use super::socket::{Read, is_stored};
use crate::normalise;
use crate::session::SavedSession;
use crate::state::Gateway;

/// Messages sent and not yet acknowledged by JetStream at most; past it the publisher waits
/// for the oldest ack before it sends the next.
pub(crate) const ACKS_IN_FLIGHT: usize = 256;

/// Stored messages between two writes of the session file; the mark in memory (and the shard's
/// claim) follows every one. A restart resumes at most this far back, and JetStream's
/// duplicate window makes the replay one ingress each.
const SAVES_BETWEEN_WRITES: usize = 64;

/// A message in flight: whether it was stored (or rightly dropped), and the mark to save then.
type InFlight = Pin<Box<dyn Future<Output = (bool, Option<SavedSession>)> + Send>>;

/// The publisher's acks in flight, awaited in the order their messages were read.
struct Acks {
    in_flight: FuturesOrdered<InFlight>,
    saver: Saver,
    pending: Arc<AtomicUsize>,
    drained: Arc<tokio::sync::Notify>,
    unsaved: usize,
}

impl Acks {
    /// One event handled: a mark saved (the file every [`SAVES_BETWEEN_WRITES`], or when the
    /// backlog is empty), and the shard told when nothing is pending.
    fn done(&mut self, mark: Option<SavedSession>) {
        let left = self.pending.fetch_sub(1, Ordering::SeqCst).saturating_sub(1);
        if let Some(mark) = mark {
            self.saver.note(&mark);
            self.unsaved += 1;
        }
        if self.unsaved > 0
            && (self.unsaved >= SAVES_BETWEEN_WRITES || left == 0)
            && let Some(latest) = self.saver.latest()
        {
            self.saver.save(&latest);
            self.unsaved = 0;
        }
        if left == 0 {
            self.drained.notify_one();
        }
    }

    /// The oldest ack: false when its message could not be stored.
    async fn next(&mut self) -> bool {
        match self.in_flight.next().await {
            Some((true, mark)) => {
                self.done(mark);
                true
            }
            Some((false, _)) => false,
            None => true,
        }
    }

    /// Every ack in flight, in order: false at the first message that could not be stored.
    async fn settle(&mut self) -> bool {
        while !self.in_flight.is_empty() {
            if !self.next().await {
                return false;
            }
        }
        true
    }
}

impl Gateway {
    /// Handles queued events in the order the shard read them (a typing signal is sent after
    /// the message before it), saving the session as of each stored message. The first message
    /// that cannot be stored stops it: `unstored` tells the shard to resume from before it.
    pub(super) async fn publish_queue(
        self,
        saver: Saver,
        mut queue: tokio::sync::mpsc::UnboundedReceiver<Read>,
        pending: Arc<AtomicUsize>,
        drained: Arc<tokio::sync::Notify>,
        unstored: tokio::sync::watch::Sender<bool>,
    ) {
        let mut acks = Acks { in_flight: FuturesOrdered::new(), saver, pending, drained, unsaved: 0 };
        loop {
            let read = tokio::select! {
                biased;
                stored = acks.next(), if !acks.in_flight.is_empty() => {
                    if !stored {
                        let _ = unstored.send(true);
                        return;
                    }
                    continue;
                }
                read = queue.recv(), if acks.in_flight.len() < ACKS_IN_FLIGHT => match read {
                    Some(read) => read,
                    None => return,
                },
            };
            if !self.handle(read, &mut acks).await {
                let _ = unstored.send(true);
                return;
            }
        }
    }

    /// One event read: a message is sent and its ack left in flight; anything else that is
    /// published waits for the messages before it. False when something could not be stored.
    async fn handle(&self, Read { event, mark, stamp }: Read, acks: &mut Acks) -> bool {
        if let Event::MessageCreate(message) = &event {
            let span =
                tracing::info_span!("delivery", otel.name = "gateway.receive", otel.kind = "consumer", delivery_id = message.id.get());
            match self.ingest(&message.0, stamp).instrument(span.clone()).await {
                Ingested::Stored => acks.in_flight.push_back(Box::pin(std::future::ready((true, mark)))),
                Ingested::Sent(ack) => acks.in_flight.push_back(Box::pin(async move { (ack.instrument(span).await, mark) })),
                Ingested::Unstored => return false,
            }
            return true;
        }
        let publishes = is_stored(&event) || matches!(event, Event::VoiceStateUpdate(_) | Event::VoiceServerUpdate(_));
        if publishes && !acks.settle().await {
            return false;
        }
        if !self.handle_other(event, stamp).await {
            return false;
        }
        acks.done(mark);
        true
    }

    /// Lets a guild's kept roles and owner go; handled, so true.
    fn guild_changed(&self, guild: twilight_model::id::Id<twilight_model::id::marker::GuildMarker>) -> bool {
        self.places().forget_guild(guild.get());
        true
    }

    /// Everything but a new message, handled in its turn. False when it could not be stored.
    async fn handle_other(&self, event: Event, stamp: i64) -> bool {
        match event {
            Event::MessageUpdate(message) => {
                let span = tracing::info_span!("delivery", delivery_id = message.id.get());
                self.ingest_change(Change::Edit(&message.0), stamp).instrument(span).await
            }
            Event::MessageDelete(deleted) => {
                let span = tracing::info_span!("delivery", delivery_id = deleted.id.get());
                self.ingest_change(Change::Delete(&deleted), stamp).instrument(span).await
            }
            // A moderator's purge or a ban with history: each id is a deletion of its own
            // (the same delivery id a MESSAGE_DELETE of it would have, so a replay is one).
            Event::MessageDeleteBulk(bulk) => {
                for id in &bulk.ids {
                    let deleted = MessageDelete { channel_id: bulk.channel_id, guild_id: bulk.guild_id, id: *id };
                    let span = tracing::info_span!("delivery", delivery_id = id.get());
                    if !self.ingest_change(Change::Delete(&deleted), stamp).instrument(span).await {
                        return false;
                    }
                }
                true
            }
            Event::ThreadCreate(thread) => {
                self.thread_updated(&thread.0);
                true
            }
            Event::ThreadUpdate(thread) => {
                if self.thread_updated(&thread.0) {
                    let span = tracing::info_span!("delivery", delivery_id = %normalise::thread_archived(&thread.0, 0).delivery_id);
                    return self.ingest_change(Change::ThreadArchived(&thread.0), stamp).instrument(span).await;
                }
                true
            }
            Event::ThreadDelete(deleted) => {
                self.places().forget_channel(deleted.id.get());
                let span = tracing::info_span!("delivery", delivery_id = %normalise::thread_deleted(&deleted, 0).delivery_id);
                self.ingest_change(Change::ThreadDeleted(&deleted), stamp).instrument(span).await
            }
            Event::ChannelUpdate(channel) => {
                self.channel_updated(&channel.0);
                true
            }
            Event::GuildCreate(guild) => {
                self.guild_seen(&guild);
                true
            }
            // A guild's roles or owner changed: fetched again when next needed.
            Event::RoleCreate(r) => self.guild_changed(r.guild_id),
            Event::RoleUpdate(r) => self.guild_changed(r.guild_id),
            Event::RoleDelete(r) => self.guild_changed(r.guild_id),
            Event::GuildUpdate(g) => self.guild_changed(g.id),
            // Not worth a session save: a resume that replays a typing signal costs nothing.
            Event::TypingStart(typing) => {
                self.typing_signal(&typing, stamp).await;
                true
            }
            Event::VoiceStateUpdate(state) => {
                self.voice_state(&state.0).await;
                true
            }
            Event::VoiceServerUpdate(update) => {
                self.voice_server(&update).await;
                true
            }
            _ => true,
        }
    }
}
