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
    pub(crate) async fn typing_signal(&self, typing: &twilight_model::gateway::payload::incoming::TypingStart, stamp: i64) {
        let bot = self.bot_id();
        if typing.user_id.get() == bot {
            return;
        }
        let guild = typing.guild_id.map(|g| g.get());
        let signal = v1::TypingSignal { guild_id: guild, channel_id: typing.channel_id.get(), user_id: typing.user_id.get(), at_ms: stamp };
        let place = guild.map_or(Place::Dm, Place::Guild);
        if let Err(e) = self.bus().signal(&Subject::SignalTyping { place, channel: signal.channel_id }, &signal).await {
            tracing::debug!(error = %e, "typing signal not passed on");
        }
    }

    /// Normalises, routes and sends one message, with what is known of its context now: what
    /// Discord sent with it and what the places cache holds. Nothing is fetched for it here
    /// (one channel lookup aside, for a message to him in a channel never seen); what is left
    /// to gather is marked, and a lane that admits it asks for it before the turn.
    pub(crate) async fn ingest(&self, message: &Message, stamp: i64) -> Ingested {
        let bot = self.bot_id();
        if bot != 0 && message.author.id.get() == bot {
            return Ingested::Stored;
        }
        if let Some(guild) = message.guild_id.map(|g| g.get())
            && !self.admitted(guild)
        {
            let gateway = self.clone();
            let id = message.id.get().to_string();
            return Ingested::Sent(Box::pin(async move {
                gateway.receipt("gateway.rejected", &id, |r| r.with_id("guild", guild).with_code("guild_not_admitted")).await;
                true
            }));
        }
        // Conversation only: Discord's system messages (a thread created, a pin) are nobody's words.
        if !matches!(message.kind, MessageType::Regular | MessageType::Reply) {
            return Ingested::Stored;
        }
        let gathered = self.gather_known(message, bot).await;
        let mut ingress = normalise::ingress_named(message, bot, stamp, &gathered.names);
        ingress.thread = gathered.thread;
        ingress.context_pending = gathered.pending;
        let forgotten = self.rule_carried(&mut ingress) as i64;
        // Nothing of a chain when none is wanted.
        if self.config().reply_chain_depth == 0 {
            ingress.quoted.retain(|q| q.kind() != v1::QuotedKind::RepliedTo);
        }
        let live = ingress.guild_id.and_then(|g| self.live_voice_channel(g));
        let id = MsgId::discord_message(message.id.get());
        let (chars, attachments) = (ingress.content.chars().count() as i64, ingress.attachments.len() as i64);
        let (quoted, in_thread, pending) = (ingress.quoted.len() as i64, ingress.thread.is_some(), ingress.context_pending);
        let (delivery, channel) = (ingress.delivery_id.clone(), message.channel_id.get());
        // A crash here (received, not yet stored) must cost nothing: the session is saved only
        // after the ack, so the resume replays this message.
        clankie_settings::fault::point("gateway.before_publish");
        let (route, sent) = match normalise::route(ingress, live) {
            Route::Text(subject, ingress) => ("text", self.send_patiently(&subject, &ingress, &id).await),
            Route::Room(subject, input) => ("room", self.send_patiently(&subject, &input, &id).await),
        };
        let Some(ack) = sent else {
            tracing::error!("ingress could not be sent; Discord replays it when the shard resumes");
            return Ingested::Unstored;
        };
        let (gateway, patience) = (self.clone(), self.config().publish_patience);
        Ingested::Sent(Box::pin(async move {
            let Some(published) = acked_within(patience, ack).await else { return false };
            gateway
                .receipt("gateway.ingress", &delivery, |r| {
                    r.with_id("channel", channel)
                        .with_code(route)
                        .with_count("chars", chars)
                        .with_count("attachments", attachments)
                        .with_count("quoted", quoted)
                        .with_count("forgotten", forgotten)
                        .with_flag("thread", in_thread)
                        .with_flag("context_pending", pending)
                        .with_flag("duplicate", published.duplicate)
                })
                .await;
            true
        }))
    }

    /// Sends an event to JetStream within the publish patience, leaving its ack to be awaited.
    async fn send_patiently<E: clankie_proto::Event>(
        &self,
        subject: &clankie_proto::Subject,
        event: &E,
        id: &MsgId,
    ) -> Option<clankie_bus::Ack> {
        match tokio::time::timeout(self.config().publish_patience, self.bus().publish_sent(subject, event, id)).await {
            Ok(Ok(ack)) => Some(ack),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "publish not sent");
                None
            }
            Err(_) => {
                tracing::warn!(patience_ms = self.config().publish_patience.as_millis() as u64, "publish not sent in time");
                None
            }
        }
    }

    /// Publishes an edit or a deletion to the message's text lane, where it corrects what the
    /// lane holds. False when it could not be stored (the shard resumes from before it).
    pub(crate) async fn ingest_change(&self, change: Change<'_>, stamp: i64) -> bool {
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
        // the kept copy takes the new words, or becomes none when the starter is deleted.
        match &change {
            Change::Edit(m) => self.places().starter_edited(m.id.get(), normalise::quoted(m, v1::QuotedKind::ThreadStarter, bot)),
            Change::Delete(d) => self.places().starter_deleted(d.id.get()),
            Change::ThreadArchived(_) | Change::ThreadDeleted(_) => {}
        }
        let event = match change {
            // His own messages and other bots' are not conversation he corrects.
            Change::Edit(m) if m.author.bot || (bot != 0 && m.author.id.get() == bot) => return true,
            Change::Edit(m) => match normalise::edit(m, bot, stamp) {
                Some(event) => event,
                None => return true,
            },
            Change::Delete(d) => normalise::deletion(d, stamp),
            Change::ThreadArchived(t) => normalise::thread_archived(t, stamp),
            Change::ThreadDeleted(d) => normalise::thread_deleted(d, stamp),
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
        // The bus retries transient failures itself; past the patience the shard resumes later.
        let patience = self.config().publish_patience;
        acked_within(patience, self.bus().publish(subject, event, Some(id))).await
    }
}

/// The publish `acked` within `patience`, or `None` (said in the log): past it the shard resumes
/// from before the message, and a publish still buffered then is deduplicated by its id.
async fn acked_within(
    patience: std::time::Duration,
    acked: impl std::future::Future<Output = Result<clankie_bus::Published, clankie_bus::BusError>>,
) -> Option<clankie_bus::Published> {
    match tokio::time::timeout(patience, acked).await {
        Ok(Ok(p)) => Some(p),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "publish failed");
            None
        }
        Err(_) => {
            tracing::warn!(patience_ms = patience.as_millis() as u64, "publish not acknowledged in time");
            None
        }
    }
}

/// What became of a message handed to ingest.
pub(crate) enum Ingested {
    /// Nothing to store (his own, a system message), or stored already.
    Stored,
    /// Sent: the future waits for its ack and receipt, and says whether it was stored.
    Sent(std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send>>),
    /// Not sent: the shard resumes from before it.
    Unstored,
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
