//! Ingest: a message, edit or deletion normalised, routed (text lane or live voice room) and
//! published with its Discord id, so a resume's replay and a second gateway yield one ingress.

use clankie_bus::MsgId;
use clankie_proto::{Place, Subject, v1};
use twilight_model::channel::Message;
use twilight_model::channel::message::MessageType;
use twilight_model::gateway::payload::incoming::MessageDelete;

use crate::normalise::{self, Route};
use crate::state::Gateway;

impl Gateway {
    /// Passes on that someone is typing, so a lane can wait for the rest of a burst.
    pub(crate) async fn typing_signal(&self, typing: &twilight_model::gateway::payload::incoming::TypingStart) {
        let bot = self.bot_id();
        if typing.user_id.get() == bot {
            return;
        }
        let guild = typing.guild_id.map(|g| g.get());
        let signal = v1::TypingSignal {
            guild_id: guild,
            channel_id: typing.channel_id.get(),
            user_id: typing.user_id.get(),
            at_ms: self.arrivals().stamp(),
        };
        let place = guild.map_or(Place::Dm, Place::Guild);
        if let Err(e) = self.bus().signal(&Subject::SignalTyping { place, channel: signal.channel_id }, &signal).await {
            tracing::debug!(error = %e, "typing signal not passed on");
        }
    }

    /// Normalises, routes and publishes one message. False when it could not be stored (the
    /// shard then resumes from before it); true when it was stored or rightly dropped.
    pub(crate) async fn ingest(&self, message: &Message) -> bool {
        let bot = self.bot_id();
        if bot != 0 && message.author.id.get() == bot {
            return true;
        }
        if let Some(guild) = message.guild_id.map(|g| g.get())
            && !self.admitted(guild)
        {
            self.receipt("gateway.rejected", &message.id.get().to_string(), |r| r.with_id("guild", guild).with_code("guild_not_admitted"))
                .await;
            return true;
        }
        // Conversation only: Discord's system messages (a thread created, a pin) are nobody's words.
        if !matches!(message.kind, MessageType::Regular | MessageType::Reply) {
            return true;
        }
        let stamp = self.arrivals().stamp();
        let gathered = self.gather(message).await;
        let mut ingress = normalise::ingress_named(message, bot, stamp, &gathered.names);
        let mut after_reply = usize::from(message.referenced_message.is_some() && !ingress.quoted.is_empty());
        if let Some(replied) = gathered.replied_to {
            ingress.reply_to_him |= replied.is_him;
            ingress.quoted.insert(0, replied);
            after_reply = 1;
        }
        for (i, q) in gathered.quoted.into_iter().enumerate() {
            ingress.quoted.insert(after_reply + i, q);
        }
        ingress.thread = gathered.thread;
        let forgotten = self.rule_carried(&mut ingress) as i64;
        let links_refused = gathered.links_refused.len() as i64;
        // Nothing of a chain when none is wanted; and a message quoted once, where it first came.
        if self.config().reply_chain_depth == 0 {
            ingress.quoted.retain(|q| q.kind() != v1::QuotedKind::RepliedTo);
        }
        let mut seen = std::collections::HashSet::new();
        let own = message.id.get();
        ingress.quoted.retain(|q| q.message_id == own || seen.insert(q.message_id));
        let live = ingress.guild_id.and_then(|g| self.live_voice_channel(g));
        let id = MsgId::discord_message(message.id.get());
        let (chars, attachments) = (ingress.content.chars().count() as i64, ingress.attachments.len() as i64);
        let (quoted, in_thread) = (ingress.quoted.len() as i64, ingress.thread.is_some());
        let delivery = ingress.delivery_id.clone();
        // A crash here (received, not yet stored) must cost nothing: the session is saved only
        // after the publish, so the resume replays this message.
        clankie_settings::fault::point("gateway.before_publish");
        let (route, published) = match normalise::route(ingress, live) {
            Route::Text(subject, ingress) => ("text", self.publish_patiently(&subject, &ingress, &id).await),
            Route::Room(subject, input) => ("room", self.publish_patiently(&subject, &input, &id).await),
        };
        match published {
            Some(p) => {
                self.receipt("gateway.ingress", &delivery, |r| {
                    r.with_id("channel", message.channel_id.get())
                        .with_code(route)
                        .with_count("chars", chars)
                        .with_count("attachments", attachments)
                        .with_count("quoted", quoted)
                        .with_count("forgotten", forgotten)
                        .with_count("links_refused", links_refused)
                        .with_flag("thread", in_thread)
                        .with_flag("duplicate", p.duplicate)
                })
                .await
            }
            None => {
                tracing::error!("ingress could not be stored; Discord replays it when the shard resumes");
                return false;
            }
        }
        true
    }

    /// Publishes an edit or a deletion to the message's text lane, where it corrects what the
    /// lane holds. False when it could not be stored (the shard resumes from before it).
    pub(crate) async fn ingest_change(&self, change: Change<'_>) -> bool {
        let bot = self.bot_id();
        let (guild, code) = match change {
            Change::Edit(m) => (m.guild_id, "edit"),
            Change::Delete(d) => (d.guild_id, "delete"),
            Change::ThreadArchived(t) => (t.guild_id, "thread_archived"),
            Change::ThreadDeleted(d) => (Some(d.guild_id), "thread_deleted"),
        };
        if let Some(guild) = guild.map(|g| g.get())
            && !self.admitted(guild)
        {
            return true;
        }
        // A thread started from this message quotes it as its starter with each of its messages:
        // the kept copy goes, and the next message there fetches the words as they are now.
        match &change {
            Change::Edit(m) => self.places().forget_starter(m.id.get()),
            Change::Delete(d) => self.places().forget_starter(d.id.get()),
            Change::ThreadArchived(_) | Change::ThreadDeleted(_) => {}
        }
        let event = match change {
            // His own messages and other bots' are not conversation he corrects.
            Change::Edit(m) if m.author.bot || (bot != 0 && m.author.id.get() == bot) => return true,
            Change::Edit(m) => match normalise::edit(m, bot, self.arrivals().stamp()) {
                Some(event) => event,
                None => return true,
            },
            Change::Delete(d) => normalise::deletion(d, self.arrivals().stamp()),
            Change::ThreadArchived(t) => normalise::thread_archived(t, self.arrivals().stamp()),
            Change::ThreadDeleted(d) => normalise::thread_deleted(d, self.arrivals().stamp()),
        };
        let subject = Subject::ingress_text(event.guild_id, event.channel_id);
        let Some(p) = self.publish_patiently(&subject, &event, &MsgId::new(event.delivery_id.clone())).await else {
            tracing::error!("a change could not be stored; Discord replays it when the shard resumes");
            return false;
        };
        // A line typed in a live voice room's chat lives in the room's ring too: the room's owner
        // rewrites or drops it there (the text lane above corrects what the store keeps).
        let live = event.guild_id.and_then(|g| self.live_voice_channel(g));
        if live == Some(event.channel_id)
            && let Some((room, input)) = normalise::room_change(&event)
            && self.publish_patiently(&room, &input, &MsgId::new(format!("room:{}", event.delivery_id))).await.is_none()
        {
            tracing::error!("a change could not be passed to the voice room; Discord replays it when the shard resumes");
            return false;
        }
        self.receipt("gateway.change", &event.delivery_id, |r| {
            r.with_id("channel", event.channel_id)
                .with_id("message", event.changed_message_id)
                .with_code(code)
                .with_count("chars", event.content.chars().count() as i64)
                .with_flag("duplicate", p.duplicate)
        })
        .await;
        true
    }

    /// Publishes, retrying for a while if NATS is briefly away.
    async fn publish_patiently<E: clankie_proto::Event>(
        &self,
        subject: &clankie_proto::Subject,
        event: &E,
        id: &MsgId,
    ) -> Option<clankie_bus::Published> {
        // The bus retries transient failures itself; past the patience the shard resumes later
        // instead (a publish still buffered then is deduplicated by its id when it lands).
        match tokio::time::timeout(self.config().publish_patience, self.bus().publish(subject, event, Some(id))).await {
            Ok(Ok(p)) => Some(p),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "publish failed");
                None
            }
            Err(_) => {
                tracing::warn!(patience_ms = self.config().publish_patience.as_millis() as u64, "publish not acknowledged in time");
                None
            }
        }
    }
}

/// An edit or a deletion as the gateway received it.
#[derive(Clone, Copy)]
pub(crate) enum Change<'a> {
    Edit(&'a Message),
    Delete(&'a MessageDelete),
    /// A thread archived: its lane lets its warm session go.
    ThreadArchived(&'a twilight_model::channel::Channel),
    /// A thread deleted with its messages: what waits in its lane is withdrawn.
    ThreadDeleted(&'a twilight_model::gateway::payload::incoming::ThreadDelete),
}
