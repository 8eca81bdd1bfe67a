//! Ingest: this replica's share of the shards, and each shard's event loop.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clankie_bus::{MsgId, now_ms};
use clankie_proto::{Place, ReceiptKind, Subject, v1};
use tracing::Instrument;
use twilight_gateway::{ConfigBuilder, Event, EventTypeFlags, Intents, Session, Shard, ShardId, StreamExt};
use twilight_model::channel::Message;
use twilight_model::channel::message::MessageType;
use twilight_model::gateway::payload::incoming::MessageDelete;

use crate::leases::{self, LeaseError, ShardLeases, SharedIdentifyQueue};
use crate::normalise::{self, Route};
use crate::session::{self, SavedSession};
use crate::{Gateway, GatewayError};
/// Messages read from the shard and not yet stored that the shard may run ahead by; past
/// it, reading waits for the publisher.
const INGEST_QUEUE: usize = 1024;

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
}

/// Whether Discord refused the token: a 401, or twilight's own refusal once any earlier
/// request (a reply posted before this) met one, since it then refuses locally.
fn token_refused(e: &twilight_http::Error) -> bool {
    match e.kind() {
        twilight_http::error::ErrorType::Unauthorized => true,
        twilight_http::error::ErrorType::Response { status, .. } => status.get() == 401,
        _ => false,
    }
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

/// The shard's session as of now: what a restart resumes from.
fn mark(shard: &Shard<SharedIdentifyQueue>) -> Option<SavedSession> {
    let (s, url) = (shard.session()?, shard.resume_url()?);
    Some(SavedSession { session_id: s.id().to_owned(), sequence: s.sequence(), resume_url: url.to_owned() })
}

/// Where one shard's session goes as its messages are stored: the replica's own file (read
/// back on its restart) and the newest mark, which the supervisor writes into the shard's
/// claim so another replica can resume it.
#[derive(Clone)]
struct Saver {
    dir: std::path::PathBuf,
    shard: u32,
    latest: Arc<Mutex<Option<SavedSession>>>,
    /// Rung when the claim should carry the session at once (a new or resumed session).
    flush: Arc<tokio::sync::Notify>,
}

impl Saver {
    fn save(&self, saved: &SavedSession) {
        if let Err(e) = session::save(&self.dir, self.shard, saved) {
            tracing::warn!(error = %e, "shard session not saved; a restart will identify afresh");
        }
        *self.latest.lock().unwrap_or_else(|p| p.into_inner()) = Some(saved.clone());
    }

    fn save_now(&self, saved: &SavedSession) {
        self.save(saved);
        self.flush.notify_one();
    }

    fn latest(&self) -> Option<SavedSession> {
        self.latest.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// A shard this replica runs, under its claim.
struct Running {
    held: leases::Held,
    saver: Saver,
    stop: tokio::sync::watch::Sender<bool>,
    /// Aborted when dropped, so a supervisor that stops takes its shards with it.
    task: clankie_http::Aborting,
}

/// The session a shard starts from: its claim's, or this replica's own file when the file is
/// further along the same session (or the claim carries none).
fn starting_session(claimed: Option<SavedSession>, file: Option<SavedSession>) -> Option<SavedSession> {
    match (claimed, file) {
        (Some(c), Some(f)) if f.session_id == c.session_id && f.sequence > c.sequence => Some(f),
        (Some(c), _) => Some(c),
        (None, f) => f,
    }
}

impl Gateway {
    /// How many shards there are and how many may identify per 5 s: from configuration, else
    /// as Discord recommends (`/gateway/bot`), asked until it answers.
    /// `None` when Discord refused the token (401): the gateway is marked stopped for good.
    async fn shard_plan(&self) -> Option<(u32, u32)> {
        let configured = self.inner.config.shards;
        let mut pause = Duration::from_millis(500);
        loop {
            let asked = match self.inner.http.get().gateway().authed().await {
                Ok(response) => response.model().await.ok(),
                Err(e) if token_refused(&e) => {
                    tracing::error!(
                        "Discord refused the token (401 on /gateway/bot): copy the bot's token again from the Developer Portal (your application, Bot, Reset Token) into CLANKIE_DISCORD_TOKEN and restart the gateway"
                    );
                    self.inner.parts.set_fatal("discord_401");
                    return None;
                }
                Err(_) => None,
            };
            match asked {
                Some(info) => {
                    self.inner.token_accepted.send_replace(true);
                    let total = if configured > 0 { configured } else { info.shards.max(1) };
                    return Some((total, u32::from(info.session_start_limit.max_concurrency).max(1)));
                }
                None if configured > 0 => {
                    tracing::warn!(shards = configured, "/gateway/bot unanswered; identifying one shard per 5 s");
                    return Some((configured, 1));
                }
                None => {
                    tracing::warn!(retry_in_ms = pause.as_millis() as u64, "/gateway/bot unanswered; the shard count is not known yet");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(30));
                }
            }
        }
    }

    /// Runs this replica's share of the shards until shutdown, then hands each back with its
    /// session so another replica resumes it.
    ///
    /// Every third of the lease TTL it renews what it holds (stopping at once any shard whose
    /// claim another replica took), says it is alive, and moves toward its fair share: it hands
    /// back one shard over it, or claims free and expired ones up to it.
    pub(crate) async fn run_shards(&self) -> Result<(), GatewayError> {
        let mut stopping = self.inner.stopping.subscribe();
        let Some((total, max_concurrency)) = self.shard_plan().await else {
            // Stays up and unready, saying why, rather than asking again and again.
            let _ = stopping.wait_for(|s| *s).await;
            return Ok(());
        };
        self.inner.shard_total.store(total, Ordering::SeqCst);
        let config = &self.inner.config;
        let kv = self.inner.bus.key_value(leases::SHARDS_BUCKET, Duration::from_secs(7 * 24 * 3600)).await?;
        let leases = ShardLeases::new(kv.clone(), &config.replica, config.shard_lease_ttl);
        let queue = SharedIdentifyQueue::new(kv, max_concurrency);
        tracing::info!(shards = total, max_concurrency, replica = %config.replica, "sharing the gateway's shards");
        let flush = Arc::new(tokio::sync::Notify::new());
        let mut running: BTreeMap<u32, Running> = BTreeMap::new();
        let mut tick = tokio::time::interval(config.shard_lease_ttl / 3);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut replicas = 1;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = flush.notified() => {}
                _ = stopping.changed() => {
                    for (shard, r) in std::mem::take(&mut running) {
                        self.hand_back(&leases, shard, r).await;
                    }
                    return Ok(());
                }
            }
            self.renew_all(&leases, &mut running).await;
            if self.inner.parts.fatal().is_some() {
                // Discord refused this gateway for good: no shard is claimed again here.
                for (shard, r) in std::mem::take(&mut running) {
                    self.hand_back(&leases, shard, r).await;
                }
                let _ = stopping.wait_for(|s| *s).await;
                return Ok(());
            }
            match leases.announce().await.and(leases.replicas_alive().await) {
                Ok(alive) => replicas = alive.max(1),
                Err(e) => tracing::warn!(error = %e, "replica presence not refreshed"),
            }
            let fair = leases::fair_share(total, replicas) as usize;
            if running.len() > fair
                && let Some(shard) = running.keys().next_back().copied()
                && let Some(r) = running.remove(&shard)
            {
                tracing::info!(shard, replicas, "over the fair share; handing a shard back");
                self.hand_back(&leases, shard, r).await;
            }
            for shard in 0..total {
                if running.len() >= fair {
                    break;
                }
                if running.contains_key(&shard) {
                    continue;
                }
                match leases.claim(shard).await {
                    Ok(Some(held)) => {
                        tracing::info!(shard, epoch = held.claim.epoch, "shard claimed");
                        let r = self.start_shard(shard, total, held, &queue, &flush);
                        running.insert(shard, r);
                    }
                    Ok(None) => {}
                    Err(e) => tracing::warn!(shard, error = %e, "shard claim not tried"),
                }
            }
        }
    }

    /// Renews every claim held; a shard whose claim was taken, or ran out while the bus was
    /// away, or whose connection ended, stops here.
    async fn renew_all(&self, leases: &ShardLeases, running: &mut BTreeMap<u32, Running>) {
        let mut gone = Vec::new();
        for (shard, r) in running.iter_mut() {
            if r.task.0.is_finished() {
                tracing::warn!(shard, "shard connection ended; handing it back");
                gone.push((*shard, true));
                continue;
            }
            match leases.renew(*shard, &mut r.held, r.saver.latest()).await {
                Ok(()) => {}
                Err(LeaseError::Lost(_)) => {
                    tracing::warn!(shard, "shard claim taken by another replica; stopping it here");
                    gone.push((*shard, false));
                }
                Err(e) if r.held.claim.expires_ms <= clankie_bus::now_ms() => {
                    tracing::warn!(shard, error = %e, "shard claim ran out unrenewed; stopping it here");
                    gone.push((*shard, false));
                }
                Err(e) => tracing::warn!(shard, error = %e, "shard claim not renewed yet"),
            }
        }
        for (shard, ours) in gone {
            if let Some(r) = running.remove(&shard) {
                r.task.0.abort();
                self.inner.shard_senders.write().unwrap_or_else(|p| p.into_inner()).remove(&shard);
                if ours {
                    let mut held = r.held;
                    let _ = leases.release(shard, &mut held, r.saver.latest()).await;
                }
            }
        }
    }

    fn start_shard(
        &self,
        shard: u32,
        total: u32,
        held: leases::Held,
        queue: &SharedIdentifyQueue,
        flush: &Arc<tokio::sync::Notify>,
    ) -> Running {
        let dir = self.inner.config.state_dir.clone();
        let start = starting_session(held.claim.session.clone(), session::load(&dir, shard));
        let saver = Saver { dir, shard, latest: Arc::new(Mutex::new(start.clone())), flush: flush.clone() };
        let (stop, stop_rx) = tokio::sync::watch::channel(false);
        let id = ShardId::new(shard, total);
        let run = self.clone().run_shard(id, saver.clone(), stop_rx, queue.clone());
        let task = tokio::spawn(
            async move {
                if let Err(e) = run.await {
                    tracing::error!(error = %e, "shard stopped");
                }
            }
            .instrument(tracing::info_span!("shard", shard)),
        );
        Running { held, saver, stop, task: clankie_http::Aborting(task) }
    }

    /// Closes a shard for resume, then hands its claim back with the session as of the close.
    async fn hand_back(&self, leases: &ShardLeases, shard: u32, mut r: Running) {
        let _ = r.stop.send(true);
        if tokio::time::timeout(Duration::from_secs(8), &mut r.task.0).await.is_err() {
            r.task.0.abort();
        }
        self.inner.shard_senders.write().unwrap_or_else(|p| p.into_inner()).remove(&shard);
        let mut held = r.held;
        match leases.release(shard, &mut held, r.saver.latest()).await {
            Ok(()) => tracing::info!(shard, "shard handed back with its session"),
            Err(e) => tracing::warn!(shard, error = %e, "shard not handed back; it frees itself when its claim runs out"),
        }
    }

    /// Handles queued events in the order the shard read them (a typing signal never overtakes
    /// the message before it), saving the session as of each stored message. The first message
    /// that cannot be stored stops it: `unstored` tells the shard to resume from before it.
    async fn publish_queue(
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
                    self.inner.places.forget_channel(deleted.id.get());
                    let span = tracing::info_span!("delivery", delivery_id = %normalise::thread_deleted(&deleted, 0).delivery_id);
                    if !self.ingest_change(Change::ThreadDeleted(&deleted)).instrument(span).await {
                        let _ = unstored.send(true);
                        return;
                    }
                    if let Some(mark) = &mark {
                        saver.save(mark);
                    }
                }
                Event::ChannelUpdate(channel) => self.inner.places.forget_channel(channel.id.get()),
                Event::RoleCreate(r) => self.inner.places.forget_guild(r.guild_id.get()),
                Event::RoleUpdate(r) => self.inner.places.forget_guild(r.guild_id.get()),
                Event::RoleDelete(r) => self.inner.places.forget_guild(r.guild_id.get()),
                Event::GuildUpdate(g) => self.inner.places.forget_guild(g.id.get()),
                // Not worth a session save: a resume that replays a typing signal costs nothing.
                Event::TypingStart(typing) => self.typing_signal(&typing).await,
                Event::VoiceStateUpdate(state) => self.voice_state(&state.0).await,
                Event::VoiceServerUpdate(update) => self.voice_server(&update).await,
                _ => {}
            }
            pending.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// One shard until it is told to stop: connects, and connects again from the last stored
    /// message whenever one could not be stored.
    async fn run_shard(
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
                Connection::Fatal(code) => {
                    metrics::counter!("clankie_gateway_fatal_closes_total", "code" => code.to_string()).increment(1);
                    tracing::error!(code, "{}", fatal_close_advice(code));
                    self.inner.parts.set_fatal(format!("discord_close_{code}"));
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
        let config = &self.inner.config;
        // GUILDS: the servers he is in (their channels, roles and his member) follow Ready
        // under it, and thread events come under it; Discord's voice docs ask for it too.
        let intents = Intents::GUILDS
            | Intents::GUILD_MESSAGES
            | Intents::DIRECT_MESSAGES
            | Intents::MESSAGE_CONTENT
            | Intents::GUILD_VOICE_STATES
            | Intents::GUILD_MESSAGE_TYPING
            | Intents::DIRECT_MESSAGE_TYPING;
        let mut builder = ConfigBuilder::new(config.token.clone(), intents).queue(queue);
        if let Some(url) = &config.gateway_url {
            builder = builder.proxy_url(url.clone());
        }
        if let Some(saved) = saver.latest() {
            tracing::info!(sequence = saved.sequence, "resuming the saved shard session");
            builder = builder.session(Session::new(saved.sequence, saved.session_id)).resume_url(saved.resume_url);
        }
        // A resumed session sees no READY, so learn who he is from REST as well.
        match self.inner.http.get().current_user().await {
            Ok(response) => match response.model().await {
                Ok(me) => self.inner.bot_id.store(me.id.get(), Ordering::SeqCst),
                Err(_) => tracing::warn!("current user unreadable; waiting for READY"),
            },
            Err(_) => tracing::warn!("current user not fetched; waiting for READY"),
        }
        let mut shard = Shard::with_config(id, builder.build());
        self.inner.shard_senders.write().unwrap_or_else(|p| p.into_inner()).insert(id.number(), shard.sender());
        let wanted = EventTypeFlags::READY
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
            | EventTypeFlags::GUILD_UPDATE;
        // Twilight hands every close frame on; a fatal one's code says what to mend.
        let mut closed_with = None;
        let close = |shard: &mut Shard<SharedIdentifyQueue>| {
            shard.close(twilight_gateway::CloseFrame::RESUME);
        };
        // Messages are stored off the shard's loop, in order, through a bounded queue: the
        // shard keeps reading (and heartbeating) while JetStream is slow, and the session is
        // saved only as far as the last stored message.
        let (queue, queued) = tokio::sync::mpsc::channel(INGEST_QUEUE);
        let pending = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (unstored_tx, mut unstored) = tokio::sync::watch::channel(false);
        let _publisher =
            clankie_http::Aborting(tokio::spawn(self.clone().publish_queue(saver.clone(), queued, pending.clone(), unstored_tx)));
        // Saves the session as of now unless messages read before now are still unstored.
        let save_if_caught_up = |shard: &Shard<SharedIdentifyQueue>| {
            if pending.load(Ordering::SeqCst) == 0
                && let Some(mark) = mark(shard)
            {
                saver.save_now(&mark);
            }
        };
        loop {
            let item = tokio::select! {
                item = shard.next_event(wanted) => item,
                _ = unstored.changed() => {
                    // Never save the session past a message JetStream has not stored.
                    close(&mut shard);
                    let _ = tokio::time::timeout(Duration::from_secs(2), async { while shard.next_event(wanted).await.is_some() {} }).await;
                    return Ok(Connection::Unstored);
                }
                _ = stopping.changed() => {
                    // Let what was read be stored first (bounded), so the saved session is current.
                    let drained = tokio::time::timeout(Duration::from_secs(5), async {
                        while pending.load(Ordering::SeqCst) > 0 && !*unstored.borrow() {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    })
                    .await;
                    if drained.is_ok() {
                        save_if_caught_up(&shard);
                    }
                    close(&mut shard);
                    // Drive the shard until the close frame is out.
                    let _ = tokio::time::timeout(Duration::from_secs(2), async { while shard.next_event(wanted).await.is_some() {} }).await;
                    tracing::info!("shard closed for resume");
                    return Ok(Connection::Stopped);
                }
            };
            let Some(item) = item else {
                if matches!(shard.state(), twilight_gateway::ShardState::FatallyClosed) {
                    return Ok(Connection::Fatal(closed_with.unwrap_or(0)));
                }
                return Ok(Connection::Ended);
            };
            match item {
                Ok(Event::GatewayClose(frame)) => {
                    metrics::gauge!("clankie_gateway_shard_connected", "shard" => id.number().to_string()).set(0.0);
                    closed_with = frame.map(|f| f.code);
                }
                Err(e) => {
                    // The error can quote the payload; log its kind only.
                    tracing::warn!(kind = error_kind(e.kind()), "gateway event skipped");
                }
                Ok(Event::Ready(ready)) => {
                    metrics::gauge!("clankie_gateway_shard_connected", "shard" => id.number().to_string()).set(1.0);
                    self.inner.bot_id.store(ready.user.id.get(), Ordering::SeqCst);
                    let (gateway, app) = (self.clone(), ready.application.id.get());
                    tokio::spawn(async move { gateway.register_commands(app).await });
                    tracing::info!("shard identified");
                    self.inner.identified.send_replace(true);
                    save_if_caught_up(&shard);
                }
                // Answered on a task of its own, never behind the queue: Discord waits 3 s for the first answer.
                Ok(Event::InteractionCreate(interaction)) => {
                    let gateway = self.clone();
                    let span = tracing::info_span!("interaction", interaction_id = interaction.id.get());
                    tokio::spawn(async move { gateway.interaction(interaction.0).await }.instrument(span));
                }
                Ok(Event::Resumed) => {
                    metrics::gauge!("clankie_gateway_shard_connected", "shard" => id.number().to_string()).set(1.0);
                    tracing::info!("shard resumed");
                    save_if_caught_up(&shard);
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
                    | Event::GuildUpdate(_)),
                ) => {
                    pending.fetch_add(1, Ordering::SeqCst);
                    let stored = matches!(
                        event,
                        Event::MessageCreate(_)
                            | Event::MessageUpdate(_)
                            | Event::MessageDelete(_)
                            | Event::MessageDeleteBulk(_)
                            | Event::ThreadUpdate(_)
                            | Event::ThreadDelete(_)
                    );
                    let mark = stored.then(|| mark(&shard)).flatten();
                    if queue.send((event, mark)).await.is_err() {
                        // The publisher stopped at an unstored message; the resume replays this too.
                        pending.fetch_sub(1, Ordering::SeqCst);
                    }
                }
                Ok(_) => {}
            }
        }
    }

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
            at_ms: self.inner.arrivals.stamp(),
        };
        let place = guild.map_or(Place::Dm, Place::Guild);
        if let Err(e) = self.inner.bus.signal(&Subject::SignalTyping { place, channel: signal.channel_id }, &signal).await {
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
        let stamp = self.inner.arrivals.stamp();
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
        if self.inner.config.reply_chain_depth == 0 {
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
            Change::Edit(m) => self.inner.places.forget_starter(m.id.get()),
            Change::Delete(d) => self.inner.places.forget_starter(d.id.get()),
            Change::ThreadArchived(_) | Change::ThreadDeleted(_) => {}
        }
        let event = match change {
            // His own messages and other bots' are not conversation he corrects.
            Change::Edit(m) if m.author.bot || (bot != 0 && m.author.id.get() == bot) => return true,
            Change::Edit(m) => match normalise::edit(m, bot, self.inner.arrivals.stamp()) {
                Some(event) => event,
                None => return true,
            },
            Change::Delete(d) => normalise::deletion(d, self.inner.arrivals.stamp()),
            Change::ThreadArchived(t) => normalise::thread_archived(t, self.inner.arrivals.stamp()),
            Change::ThreadDeleted(d) => normalise::thread_deleted(d, self.inner.arrivals.stamp()),
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
        match tokio::time::timeout(self.inner.config.publish_patience, self.inner.bus.publish(subject, event, Some(id))).await {
            Ok(Ok(p)) => Some(p),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "publish failed");
                None
            }
            Err(_) => {
                tracing::warn!(patience_ms = self.inner.config.publish_patience.as_millis() as u64, "publish not acknowledged in time");
                None
            }
        }
    }

    pub(crate) async fn receipt(&self, kind: &'static str, delivery_id: &str, build: impl FnOnce(v1::Receipt) -> v1::Receipt) {
        let Ok(kind) = ReceiptKind::new(kind) else { return };
        let receipt = build(v1::Receipt::new(&kind, self.inner.bus.service(), delivery_id, now_ms()));
        if let Err(e) = self.inner.bus.publish_receipt(&receipt).await {
            tracing::warn!(error = %e, "receipt not published");
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

fn error_kind(kind: &twilight_gateway::error::ReceiveMessageErrorType) -> &'static str {
    use twilight_gateway::error::ReceiveMessageErrorType as K;
    match kind {
        K::Deserializing { .. } => "deserializing",
        K::Reconnect => "reconnect",
        _ => "other",
    }
}
