//! The events a shard read, handed on in the order read, off the shard's loop: messages,
//! edits and deletions to ingest, place changes to the cache, typing signals and voice on. The
//! session is saved as of each stored message, and the first that cannot be stored stops it.

use std::sync::atomic::Ordering;

use tracing::Instrument;
use twilight_gateway::Event;
use twilight_model::gateway::payload::incoming::MessageDelete;

use super::ingest::Change;
use super::saver::Saver;
use crate::normalise;
use crate::session::SavedSession;
use crate::state::Gateway;

impl Gateway {
    /// Handles queued events in the order the shard read them (a typing signal never overtakes
    /// the message before it), saving the session as of each stored message. The first message
    /// that cannot be stored stops it: `unstored` tells the shard to resume from before it.
    pub(super) async fn publish_queue(
        self,
        saver: Saver,
        mut queue: tokio::sync::mpsc::Receiver<(Event, Option<SavedSession>)>,
        pending: std::sync::Arc<std::sync::atomic::AtomicUsize>,
        unstored: tokio::sync::watch::Sender<bool>,
    ) {
        while let Some((event, mark)) = queue.recv().await {
            match event {
                Event::MessageCreate(message) => {
                    let span = tracing::info_span!(
                        "delivery",
                        otel.name = "gateway.receive",
                        otel.kind = "consumer",
                        delivery_id = message.id.get()
                    );
                    if !self.ingest(&message.0).instrument(span).await {
                        let _ = unstored.send(true);
                        return;
                    }
                    if let Some(mark) = &mark {
                        saver.save(mark);
                    }
                }
                Event::MessageUpdate(message) => {
                    let span = tracing::info_span!("delivery", delivery_id = message.id.get());
                    if !self.ingest_change(Change::Edit(&message.0)).instrument(span).await {
                        let _ = unstored.send(true);
                        return;
                    }
                    if let Some(mark) = &mark {
                        saver.save(mark);
                    }
                }
                Event::MessageDelete(deleted) => {
                    let span = tracing::info_span!("delivery", delivery_id = deleted.id.get());
                    if !self.ingest_change(Change::Delete(&deleted)).instrument(span).await {
                        let _ = unstored.send(true);
                        return;
                    }
                    if let Some(mark) = &mark {
                        saver.save(mark);
                    }
                }
                // A moderator's purge or a ban with history: each id is a deletion of its own
                // (the same delivery id a MESSAGE_DELETE of it would have, so a replay is one).
                Event::MessageDeleteBulk(bulk) => {
                    for id in &bulk.ids {
                        let deleted = MessageDelete { channel_id: bulk.channel_id, guild_id: bulk.guild_id, id: *id };
                        let span = tracing::info_span!("delivery", delivery_id = id.get());
                        if !self.ingest_change(Change::Delete(&deleted)).instrument(span).await {
                            let _ = unstored.send(true);
                            return;
                        }
                    }
                    if let Some(mark) = &mark {
                        saver.save(mark);
                    }
                }
                Event::ThreadCreate(thread) => {
                    self.thread_updated(&thread.0);
                }
                Event::ThreadUpdate(thread) => {
                    if self.thread_updated(&thread.0) {
                        let span = tracing::info_span!("delivery", delivery_id = %normalise::thread_archived(&thread.0, 0).delivery_id);
                        if !self.ingest_change(Change::ThreadArchived(&thread.0)).instrument(span).await {
                            let _ = unstored.send(true);
                            return;
                        }
                    }
                    if let Some(mark) = &mark {
                        saver.save(mark);
                    }
                }
                Event::ThreadDelete(deleted) => {
                    self.places().forget_channel(deleted.id.get());
                    let span = tracing::info_span!("delivery", delivery_id = %normalise::thread_deleted(&deleted, 0).delivery_id);
                    if !self.ingest_change(Change::ThreadDeleted(&deleted)).instrument(span).await {
                        let _ = unstored.send(true);
                        return;
                    }
                    if let Some(mark) = &mark {
                        saver.save(mark);
                    }
                }
                Event::ChannelUpdate(channel) => self.places().forget_channel(channel.id.get()),
                Event::RoleCreate(r) => self.places().forget_guild(r.guild_id.get()),
                Event::RoleUpdate(r) => self.places().forget_guild(r.guild_id.get()),
                Event::RoleDelete(r) => self.places().forget_guild(r.guild_id.get()),
                Event::GuildUpdate(g) => self.places().forget_guild(g.id.get()),
                // Not worth a session save: a resume that replays a typing signal costs nothing.
                Event::TypingStart(typing) => self.typing_signal(&typing).await,
                Event::VoiceStateUpdate(state) => self.voice_state(&state.0).await,
                Event::VoiceServerUpdate(update) => self.voice_server(&update).await,
                _ => {}
            }
            pending.fetch_sub(1, Ordering::SeqCst);
        }
    }
}
