//! One shard's connection: configured from the saved session, read until it stops, ends, or a
//! message cannot be stored, and closed for resume; run again from the last stored message.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tracing::Instrument;
use twilight_gateway::{ConfigBuilder, Event, EventTypeFlags, Intents, Session, Shard, ShardId, StreamExt};

use super::saver::{Saver, mark};
use crate::error::GatewayError;
use crate::leases::SharedIdentifyQueue;
use crate::session::SavedSession;
use crate::state::Gateway;

/// How one shard connection ended.
enum Connection {
    /// Shutdown: closed for resume.
    Stopped,
    /// The event stream ended.
    Ended,
    /// A message could not be stored: closed, to resume from the last stored one.
    Unstored,
    /// Discord closed it with a code it will not take back (a wrong token, a privileged intent
    /// not allowed): connecting again would be refused the same way.
    Fatal(u16),
    /// The ingest buffer overflowed: what was taken in is stored, and the shard resumes from
    /// there, so Discord replays what was let go.
    Overflowed,
}

/// An event the shard read, for the publisher: with the session mark a stored one is saved at
/// and the arrival stamp taken as it was read (whatever the publisher's backlog).
pub(crate) struct Read {
    pub event: Event,
    pub mark: Option<SavedSession>,
    pub stamp: i64,
}

/// What a person does about a close Discord will not take back.
pub(crate) fn fatal_close_advice(code: u16) -> &'static str {
    match code {
        4004 => {
            "Discord refused the token (close 4004, authentication failed): copy the bot's token again from the Developer Portal (your application, Bot, Reset Token) into CLANKIE_DISCORD_TOKEN and restart the gateway"
        }
        4014 => {
            "Discord refused the Message Content intent (close 4014, disallowed intents): turn on Message Content Intent in the Developer Portal (your application, Bot, Privileged Gateway Intents) and restart the gateway"
        }
        4013 => {
            "Discord refused the intents asked for (close 4013, invalid intents): run a release of Clankie that matches Discord's gateway"
        }
        4010 | 4011 => {
            "Discord refused the shard layout (close 4010 or 4011): leave CLANKIE_DISCORD_SHARDS unset, so the gateway runs as many shards as Discord asks"
        }
        4012 => "Discord refused the gateway version (close 4012): run a release of Clankie that speaks Discord's current gateway version",
        _ => "Discord closed the gateway for good; look the close code up in Discord's gateway documentation",
    }
}

/// The intents a shard identifies with. GUILDS: the servers he is in (their channels, roles
/// and his member) follow Ready under it, and thread events come under it; Discord's voice docs
/// ask for it too.
fn intents() -> Intents {
    Intents::GUILDS
        | Intents::GUILD_MESSAGES
        | Intents::DIRECT_MESSAGES
        | Intents::MESSAGE_CONTENT
        | Intents::GUILD_VOICE_STATES
        | Intents::GUILD_MESSAGE_TYPING
        | Intents::DIRECT_MESSAGE_TYPING
}

/// The events a shard's loop is handed; twilight skips the rest unparsed.
fn wanted_events() -> EventTypeFlags {
    EventTypeFlags::READY
        | EventTypeFlags::RESUMED
        | EventTypeFlags::MESSAGE_CREATE
        | EventTypeFlags::MESSAGE_UPDATE
        | EventTypeFlags::MESSAGE_DELETE
        | EventTypeFlags::MESSAGE_DELETE_BULK
        | EventTypeFlags::INTERACTION_CREATE
        | EventTypeFlags::TYPING_START
        | EventTypeFlags::VOICE_STATE_UPDATE
        | EventTypeFlags::VOICE_SERVER_UPDATE
        | EventTypeFlags::THREAD_CREATE
        | EventTypeFlags::THREAD_UPDATE
        | EventTypeFlags::THREAD_DELETE
        | EventTypeFlags::CHANNEL_UPDATE
        | EventTypeFlags::ROLE_CREATE
        | EventTypeFlags::ROLE_UPDATE
        | EventTypeFlags::ROLE_DELETE
        | EventTypeFlags::GUILD_UPDATE
        | EventTypeFlags::GUILD_CREATE
}

/// Saves the session as of now unless messages read before now are still unstored.
fn save_if_caught_up(shard: &Shard<SharedIdentifyQueue>, pending: &AtomicUsize, saver: &Saver) {
    if pending.load(Ordering::SeqCst) == 0
        && let Some(mark) = mark(shard)
    {
        saver.save_now(&mark);
    }
}

/// Closes the shard with a resumable frame, then drives it (briefly) until the frame is out.
async fn close_for_resume(shard: &mut Shard<SharedIdentifyQueue>, wanted: EventTypeFlags) {
    shard.close(twilight_gateway::CloseFrame::RESUME);
    let _ = tokio::time::timeout(Duration::from_secs(2), async { while shard.next_event(wanted).await.is_some() {} }).await;
}

/// Shutdown: what was read is stored first (bounded), so the saved session is current, then the
/// shard is closed for resume.
async fn stop_for_resume(
    shard: &mut Shard<SharedIdentifyQueue>,
    wanted: EventTypeFlags,
    pending: &AtomicUsize,
    unstored: &tokio::sync::watch::Receiver<bool>,
    saver: &Saver,
    overflowed: bool,
) {
    // Let what was read be stored first (bounded), so the saved session is current.
    let drained = tokio::time::timeout(Duration::from_secs(5), async {
        while pending.load(Ordering::SeqCst) > 0 && !*unstored.borrow() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    // Past an overflow the shard's session is ahead of what was taken in: the stored mark stands.
    if drained.is_ok() && !overflowed {
        save_if_caught_up(shard, pending, saver);
    }
    // Drive the shard until the close frame is out.
    close_for_resume(shard, wanted).await;
    tracing::info!("shard closed for resume");
}

impl Gateway {
    /// One shard until it is told to stop: connects, and connects again from the last stored
    /// message whenever one could not be stored.
    pub(super) async fn run_shard(
        self,
        id: ShardId,
        saver: Saver,
        stop: tokio::sync::watch::Receiver<bool>,
        queue: SharedIdentifyQueue,
    ) -> Result<(), GatewayError> {
        let mut pause = Duration::from_secs(1);
        loop {
            let connection = self.connect_and_read(id, &saver, stop.clone(), queue.clone()).await;
            // However the connection ended, this replica no longer holds the shard open.
            metrics::gauge!("clankie_gateway_shard_connected", "shard" => id.number().to_string()).set(0.0);
            match connection? {
                Connection::Stopped => return Ok(()),
                Connection::Ended => return Err(GatewayError::Shard("the shard's event stream ended".into())),
                Connection::Overflowed => {
                    tracing::warn!("the ingest buffer overflowed; the shard resumes from the last stored message");
                    continue;
                }
                Connection::Fatal(code) => {
                    metrics::counter!("clankie_gateway_fatal_closes_total", "code" => code.to_string()).increment(1);
                    tracing::error!(code, "{}", fatal_close_advice(code));
                    self.supervised().set_fatal(format!("discord_close_{code}"));
                    return Ok(());
                }
                Connection::Unstored => {
                    // NATS stayed away past the publish patience. The session was saved before the
                    // message that could not be stored, so connecting again resumes from there and
                    // Discord replays it (and whatever came after).
                    tracing::warn!(
                        retry_in_ms = pause.as_millis() as u64,
                        "a message could not be stored; the shard will resume from the last stored one"
                    );
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(30));
                }
            }
        }
    }

    /// One shard connection, from the saved session, read until it stops, ends, or a message
    /// cannot be stored.
    async fn connect_and_read(
        &self,
        id: ShardId,
        saver: &Saver,
        mut stopping: tokio::sync::watch::Receiver<bool>,
        queue: SharedIdentifyQueue,
    ) -> Result<Connection, GatewayError> {
        let config = self.shard_config(saver, queue);
        self.learn_bot_id().await;
        let mut shard = Shard::with_config(id, config);
        self.shard_senders().write().unwrap_or_else(|p| p.into_inner()).insert(id.number(), shard.sender());
        let wanted = wanted_events();
        // Twilight hands every close frame on; a fatal one's code says what to mend.
        let mut closed_with = None;
        // Events are handled off the shard's loop, in order: the shard is read (and heartbeats
        // answered) at the speed Discord sends, whatever JetStream or the publisher does. The
        // buffer is bounded by count: past it, events are let go unread by the publisher, and once
        // it has stored the backlog the shard resumes from the last stored message, so Discord
        // replays them. The session is saved only as far as the last stored message.
        let (queue, queued) = tokio::sync::mpsc::unbounded_channel();
        let pending = Arc::new(AtomicUsize::new(0));
        let drained = Arc::new(tokio::sync::Notify::new());
        let (unstored_tx, mut unstored) = tokio::sync::watch::channel(false);
        let _publisher = clankie_http::Aborting(tokio::spawn(self.clone().publish_queue(
            saver.clone(),
            queued,
            pending.clone(),
            drained.clone(),
            unstored_tx,
        )));
        let buffer = self.config().ingest_buffer.max(1);
        let mut overflowed = false;
        loop {
            let item = tokio::select! {
                item = shard.next_event(wanted) => item,
                _ = unstored.changed() => {
                    // Never save the session past a message JetStream has not stored.
                    close_for_resume(&mut shard, wanted).await;
                    return Ok(Connection::Unstored);
                }
                _ = stopping.changed() => {
                    stop_for_resume(&mut shard, wanted, &pending, &unstored, saver, overflowed).await;
                    return Ok(Connection::Stopped);
                }
                _ = drained.notified(), if overflowed => {
                    if pending.load(Ordering::SeqCst) > 0 {
                        continue;
                    }
                    close_for_resume(&mut shard, wanted).await;
                    return Ok(Connection::Overflowed);
                }
            };
            let Some(item) = item else {
                if matches!(shard.state(), twilight_gateway::ShardState::FatallyClosed) {
                    return Ok(Connection::Fatal(closed_with.unwrap_or(0)));
                }
                return Ok(Connection::Ended);
            };
            let saves = (!overflowed).then_some((&*pending, saver));
            let Some(read) = self.take_in(id, item, &shard, saves, &mut closed_with) else { continue };
            if overflowed || pending.load(Ordering::SeqCst) >= buffer {
                if !overflowed {
                    overflowed = true;
                    metrics::counter!("clankie_gateway_ingest_overflows_total").increment(1);
                    tracing::warn!(buffer, "the ingest buffer is full; events are let go until the backlog is stored, then replayed");
                }
                continue;
            }
            pending.fetch_add(1, Ordering::SeqCst);
            if queue.send(read).is_err() {
                // The publisher stopped at an unstored message; the resume replays this too.
                pending.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }

    /// The shard's configuration: its intents, the gateway URL override, and the saved session
    /// to resume from, if there is one.
    fn shard_config(&self, saver: &Saver, queue: SharedIdentifyQueue) -> twilight_gateway::Config<SharedIdentifyQueue> {
        let config = self.config();
        let mut builder = ConfigBuilder::new(config.token.clone(), intents()).queue(queue);
        if let Some(url) = &config.gateway_url {
            builder = builder.proxy_url(url.clone());
        }
        if let Some(saved) = saver.latest() {
            tracing::info!(sequence = saved.sequence, "resuming the saved shard session");
            builder = builder.session(Session::new(saved.sequence, saved.session_id)).resume_url(saved.resume_url);
        }
        builder.build()
    }

    /// A resumed session sees no READY, so he learns who he is from REST as well.
    async fn learn_bot_id(&self) {
        match self.http().current_user().await {
            Ok(response) => match response.model().await {
                Ok(me) => self.set_bot_id(me.id.get()),
                Err(_) => tracing::warn!("current user unreadable; waiting for READY"),
            },
            Err(_) => tracing::warn!("current user not fetched; waiting for READY"),
        }
    }

    /// Takes in one item the shard read: a close frame's code is kept, READY, RESUMED and
    /// interactions are handled on the spot, and an event for the publisher comes back to be
    /// queued, with the session mark a stored one is saved at. `saves` is `None` past an
    /// overflow: the session is then ahead of what was taken in, and is not saved.
    fn take_in(
        &self,
        id: ShardId,
        item: Result<Event, twilight_gateway::error::ReceiveMessageError>,
        shard: &Shard<SharedIdentifyQueue>,
        saves: Option<(&AtomicUsize, &Saver)>,
        closed_with: &mut Option<u16>,
    ) -> Option<Read> {
        match item {
            Ok(Event::GatewayClose(frame)) => {
                metrics::gauge!("clankie_gateway_shard_connected", "shard" => id.number().to_string()).set(0.0);
                *closed_with = frame.map(|f| f.code);
                None
            }
            Err(e) => {
                // The error can quote the payload; log its kind only.
                tracing::warn!(kind = error_kind(e.kind()), "gateway event skipped");
                None
            }
            Ok(Event::Ready(ready)) => {
                metrics::gauge!("clankie_gateway_shard_connected", "shard" => id.number().to_string()).set(1.0);
                self.set_bot_id(ready.user.id.get());
                let (gateway, app) = (self.clone(), ready.application.id.get());
                tokio::spawn(async move { gateway.register_commands(app).await });
                tracing::info!("shard identified");
                self.mark_identified();
                if let Some((pending, saver)) = saves {
                    save_if_caught_up(shard, pending, saver);
                }
                None
            }
            // Answered on a task of its own, never behind the queue: Discord waits 3 s for the first answer.
            Ok(Event::InteractionCreate(interaction)) => {
                let gateway = self.clone();
                let span = tracing::info_span!("interaction", interaction_id = interaction.id.get());
                tokio::spawn(async move { gateway.interaction(interaction.0).await }.instrument(span));
                None
            }
            Ok(Event::Resumed) => {
                metrics::gauge!("clankie_gateway_shard_connected", "shard" => id.number().to_string()).set(1.0);
                tracing::info!("shard resumed");
                if let Some((pending, saver)) = saves {
                    save_if_caught_up(shard, pending, saver);
                }
                None
            }
            Ok(
                event @ (Event::MessageCreate(_)
                | Event::MessageUpdate(_)
                | Event::MessageDelete(_)
                | Event::MessageDeleteBulk(_)
                | Event::TypingStart(_)
                | Event::VoiceStateUpdate(_)
                | Event::VoiceServerUpdate(_)
                | Event::ThreadCreate(_)
                | Event::ThreadUpdate(_)
                | Event::ThreadDelete(_)
                | Event::ChannelUpdate(_)
                | Event::RoleCreate(_)
                | Event::RoleUpdate(_)
                | Event::RoleDelete(_)
                | Event::GuildUpdate(_)
                | Event::GuildCreate(_)),
            ) => {
                let mark = is_stored(&event).then(|| mark(shard)).flatten();
                Some(Read { event, mark, stamp: self.arrivals().stamp() })
            }
            Ok(_) => None,
        }
    }
}

/// Whether handling `event` stores something in JetStream (a message, a change of one, a
/// thread's end): it carries the session mark saved once it is stored.
pub(super) fn is_stored(event: &Event) -> bool {
    matches!(
        event,
        Event::MessageCreate(_)
            | Event::MessageUpdate(_)
            | Event::MessageDelete(_)
            | Event::MessageDeleteBulk(_)
            | Event::ThreadUpdate(_)
            | Event::ThreadDelete(_)
    )
}

fn error_kind(kind: &twilight_gateway::error::ReceiveMessageErrorType) -> &'static str {
    use twilight_gateway::error::ReceiveMessageErrorType as K;
    match kind {
        K::Deserializing { .. } => "deserializing",
        K::Reconnect => "reconnect",
        _ => "other",
    }
}
