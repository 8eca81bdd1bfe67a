//! Voice rooms: which are live, which replica owns each, and the audio body that owner runs.
//!
//! The gateway forwards every voice state and voice server update; each replica reads them all
//! (last per subject, so a fresh replica learns who is where). A room is *wanted* while a human
//! is in an allowed voice channel, and for a grace period after the last one leaves. A wanted room
//! is owned by exactly one replica through a room lease with a fencing epoch in PostgreSQL (the
//! `voice_rooms` table; the voice lane itself is the captain's, for `ask_clankie`); the owner asks the gateway for op 4, connects its
//! [`Body`] from his voice state and the server update, announces the room live (the gateway
//! routes attached-chat text by it), and hears the room's input. When the owner dies its lease
//! runs out and another replica takes the room and reconnects.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clankie_bus::{Bus, BusError, ConsumerSpec, MsgId, now_ms};
use clankie_proto::{Family, LaneKey, ReceiptKind, Subject, v1};
use clankie_speech::{Audio, SpeechConfig, SpeechToText, TextToSpeech};
use clankie_store::{RoomLease, Store, StoreError};
use clankie_voice_body::{Body, BodyConfig, BodyEvent, Connection};
use tokio::sync::mpsc;

use crate::VoiceFloor;

/// How rooms are kept.
#[derive(Debug, Clone)]
pub struct RoomConfig {
    /// The voice channels he may join, as (guild, channel).
    pub allow: Vec<(u64, u64)>,
    /// How long he stays after the last human left.
    pub grace: Duration,
    /// The room lease's time to live; renewed at a third of it.
    pub lease_ttl: Duration,
    /// This replica's name, the lease owner.
    pub replica: String,
    /// How the audio body cuts speech.
    pub body: BodyConfig,
    /// How long to wait for his voice state after asking for op 4 before asking again.
    pub rejoin_after: Duration,
    /// The speech engines: OpenAI-compatible where configured, offline otherwise.
    pub speech: SpeechConfig,
    /// Utterances of one room transcribed at once.
    pub transcriptions: usize,
}

impl RoomConfig {
    /// The keeper's configuration from settings.
    pub fn from_settings(settings: &clankie_settings::Settings) -> RoomConfig {
        RoomConfig {
            allow: settings.voice_rooms.clone(),
            grace: settings.voice_grace,
            lease_ttl: settings.voice_lease_ttl,
            replica: settings.replica_id.clone(),
            body: BodyConfig {
                speech_start: settings.voice_speech_start,
                end_of_speech: settings.voice_end_of_turn,
                pre_roll: settings.voice_pre_roll,
                longest_segment: settings.voice_max_utterance,
                barge_in: settings.barge_in,
                ..BodyConfig::default()
            },
            rejoin_after: Duration::from_secs(3),
            speech: speech_config(settings),
            transcriptions: settings.voice_transcriptions,
        }
    }
}

/// The speech engines' configuration from settings; the offline transcriber learns his names.
pub fn speech_config(settings: &clankie_settings::Settings) -> SpeechConfig {
    SpeechConfig {
        stt_base_url: settings.stt_base_url.clone(),
        stt_model: settings.stt_model.clone(),
        stt_api_key: settings.stt_api_key.clone(),
        stt_grammar: settings.stt_grammar.clone(),
        tts_base_url: settings.tts_base_url.clone(),
        tts_model: settings.tts_model.clone(),
        tts_voice: settings.tts_voice.clone(),
        tts_api_key: settings.tts_api_key.clone(),
        timeout: settings.speech_timeout,
        extra_words: clankie_speech::offline::his_names(),
    }
}

type Key = (u64, u64);

enum BodyCommand {
    Connect(Connection),
    Say(v1::Speak),
    Leave,
}

enum RoomEvent {
    Body(BodyEvent),
    ConnectFailed(String),
    /// One of his lines was played out, cut off by someone speaking, or could not be spoken.
    Playback {
        delivery_id: String,
        code: &'static str,
        played_ms: i64,
        audio_ms: i64,
    },
}

/// A room this replica owns.
struct Owned {
    lease: RoomLease,
    /// Set by the room's lease keeper when another replica took the room.
    fenced: tokio::sync::watch::Receiver<bool>,
    /// Whether the room is live: its keeper then vouches for the live session at each renewal.
    vouching: Arc<std::sync::atomic::AtomicBool>,
    /// The room's lease keeper, a task of its own: nothing the keeper's loop waits on (a slow
    /// bus, a receipt) can hold up a renewal.
    _keeper: clankie_http::Aborting,
    commands: mpsc::UnboundedSender<BodyCommand>,
    /// Utterances heard, to the room's transcriber.
    ears: mpsc::UnboundedSender<Utterance>,
    connection: Option<Connection>,
    /// The connection that last failed or dropped: not tried again; a fresh op 4 brings new ones.
    failed: Option<Connection>,
    /// Consecutive failures, for the backoff before asking again.
    failures: u32,
    /// Not before this is op 4 asked for again after a failure.
    retry_at: Option<Instant>,
    asked: Option<Instant>,
    live: bool,
    inputs: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Owned {
    fn drop(&mut self) {
        let _ = self.commands.send(BodyCommand::Leave);
        if let Some(inputs) = self.inputs.take() {
            inputs.abort();
        }
    }
}

#[derive(Default)]
struct Known {
    /// Each human's voice channel, by (guild, user).
    humans: HashMap<(u64, u64), u64>,
    /// His own voice state per guild: channel (if any), voice session id and his user id.
    him: HashMap<u64, (Option<u64>, String, u64)>,
    /// The voice server per guild: endpoint (none while it moved) and token.
    servers: HashMap<u64, (Option<String>, String)>,
    /// When each allowed room last became empty (or was summoned while empty).
    empty_since: HashMap<Key, Instant>,
    /// Rooms the owner told him to join (`clankie voice join`), until the grace runs out empty.
    summoned: HashSet<Key>,
    /// Rooms the owner told him to leave (`clankie voice leave`), until their humans have gone.
    dismissed: HashSet<Key>,
    /// When this replica last saw him out of each room (his voice state follows shortly).
    left_at: HashMap<Key, Instant>,
}

impl Known {
    fn him_in(&self, (guild, channel): Key) -> bool {
        matches!(self.him.get(&guild), Some((Some(c), _, _)) if *c == channel)
    }
}

/// Why the room keeper stopped.
#[derive(Debug, thiserror::Error)]
pub enum RoomError {
    #[error(transparent)]
    Bus(#[from] BusError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("speech engines: {0}")]
    Speech(#[from] clankie_speech::SpeechError),
}

/// Keeps this replica's share of the voice rooms.
pub struct RoomKeeper {
    bus: Bus,
    store: Store,
    floor: Arc<VoiceFloor>,
    config: RoomConfig,
    stt: Arc<dyn SpeechToText>,
    tts: Arc<dyn TextToSpeech>,
    /// Display names by (guild, user), from their voice states.
    names: HashMap<(u64, u64), String>,
    known: Known,
    owned: HashMap<Key, Owned>,
    events_tx: mpsc::UnboundedSender<(Key, i64, RoomEvent)>,
    events: mpsc::UnboundedReceiver<(Key, i64, RoomEvent)>,
}

impl RoomKeeper {
    /// A keeper for `floor`'s rooms; fails only when an engine cannot be set up.
    pub fn new(bus: Bus, store: Store, floor: Arc<VoiceFloor>, config: RoomConfig) -> Result<RoomKeeper, RoomError> {
        let (events_tx, events) = mpsc::unbounded_channel();
        let (stt, tts) = clankie_speech::engines(&config.speech)?;
        Ok(RoomKeeper {
            bus,
            store,
            floor,
            config,
            stt,
            tts,
            names: HashMap::new(),
            known: Known::default(),
            owned: HashMap::new(),
            events_tx,
            events,
        })
    }

    /// Reads voice states and server updates and keeps rooms until the bus fails. Each replica
    /// reads every state afresh: its consumers are its own, recreated at start.
    pub async fn run(&mut self) -> Result<(), RoomError> {
        let replica = &self.config.replica;
        let members_name = format!("voice-floor-members-{replica}");
        let servers_name = format!("voice-floor-servers-{replica}");
        let commands_name = format!("voice-floor-commands-{replica}");
        let mut commands =
            self.bus.consumer::<v1::VoiceCommand>(ConsumerSpec::durable(commands_name, Family::VoiceCommand).deliver_new().fresh()).await?;
        let mut members = self
            .bus
            .consumer::<v1::VoiceMember>(ConsumerSpec::durable(members_name, Family::VoiceMember).last_per_subject().fresh())
            .await?;
        let mut servers = self
            .bus
            .consumer::<v1::VoiceServer>(ConsumerSpec::durable(servers_name, Family::VoiceServer).last_per_subject().fresh())
            .await?;
        let mut tick = tokio::time::interval((self.config.lease_ttl / 4).max(Duration::from_millis(100)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                d = members.next() => {
                    let d = d?;
                    self.member(&d.event);
                    let _ = d.ack().await;
                }
                d = servers.next() => {
                    let d = d?;
                    let s = &d.event;
                    self.known.servers.insert(s.guild_id, (s.endpoint.clone().filter(|e| !e.is_empty()), s.token.clone()));
                    let _ = d.ack().await;
                }
                d = commands.next() => {
                    let d = d?;
                    self.owner_command(&d.event);
                    let _ = d.ack().await;
                }
                Some((key, epoch, event)) = self.events.recv() => self.room_event(key, epoch, event).await,
                _ = tick.tick() => {}
            }
            self.reconcile().await;
        }
    }

    fn member(&mut self, m: &v1::VoiceMember) {
        if !m.display_name.is_empty() {
            self.names.insert((m.guild_id, m.user_id), m.display_name.clone());
        }
        if m.is_him {
            self.known.him.insert(m.guild_id, (m.channel_id, m.session_id.clone(), m.user_id));
            return;
        }
        match m.channel_id {
            Some(c) => self.known.humans.insert((m.guild_id, m.user_id), c),
            None => self.known.humans.remove(&(m.guild_id, m.user_id)),
        };
    }

    /// The owner's own join or leave (`clankie voice`); the keeper's commands are its own echo.
    fn owner_command(&mut self, command: &v1::VoiceCommand) {
        if command.reason != "owner" {
            return;
        }
        match command.channel_id {
            Some(channel) => {
                let key = (command.guild_id, channel);
                if self.config.allow.contains(&key) {
                    self.known.dismissed.remove(&key);
                    self.known.summoned.insert(key);
                    self.known.empty_since.insert(key, Instant::now());
                } else {
                    tracing::warn!(
                        guild = key.0,
                        channel = key.1,
                        "the owner asked him into a voice channel CLANKIE_VOICE_ROOMS does not allow"
                    );
                }
            }
            None => {
                for key in self.config.allow.iter().copied().filter(|k| k.0 == command.guild_id) {
                    self.known.summoned.remove(&key);
                    self.known.dismissed.insert(key);
                }
            }
        }
    }

    /// The rooms he should be in, and the rooms he is in but should leave though nobody owns them.
    ///
    /// A room is wanted while a human is in it; after the last one leaves (or after the owner
    /// summoned him into an empty one) it stays wanted for the grace period. A room the owner
    /// dismissed him from is not wanted until its humans have gone.
    fn wanted(&mut self) -> (HashSet<Key>, HashSet<Key>) {
        let now = Instant::now();
        let (mut wanted, mut clear) = (HashSet::new(), HashSet::new());
        for &key in &self.config.allow {
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
        (wanted, clear)
    }

    async fn reconcile(&mut self) {
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
            } else {
                self.leave(key, "empty").await;
            }
        }
    }

    async fn try_take(&mut self, key: Key) {
        let lease = match self.store.acquire_room(key.0, key.1, &self.config.replica, self.config.lease_ttl).await {
            Ok(Some(lease)) => lease,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %e, guild = key.0, channel = key.1, "voice room lease unavailable");
                return;
            }
        };
        tracing::info!(guild = key.0, channel = key.1, epoch = lease.epoch, "voice room taken");
        let (commands, rx) = mpsc::unbounded_channel();
        tokio::spawn(body_task(key, lease.epoch, self.config.body, self.tts.clone(), rx, self.events_tx.clone()));
        let (ears, heard) = mpsc::unbounded_channel();
        tokio::spawn(transcriber(self.bus.clone(), self.stt.clone(), key, self.config.transcriptions, heard));
        let (fenced_tx, fenced) = tokio::sync::watch::channel(false);
        let vouching = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let keeper = tokio::spawn(keep_room_lease(
            self.store.clone(),
            self.bus.clone(),
            lease.clone(),
            self.config.lease_ttl,
            vouching.clone(),
            fenced_tx,
        ));
        self.receipt("voice.room", key, lease.epoch, |r| r.with_code("owned").with_count("epoch", lease.epoch)).await;
        self.owned.insert(
            key,
            Owned {
                lease,
                fenced,
                vouching,
                _keeper: clankie_http::Aborting(keeper),
                commands,
                ears,
                connection: None,
                failed: None,
                failures: 0,
                retry_at: None,
                asked: None,
                live: false,
                inputs: None,
            },
        );
    }

    /// Whether the room is still this replica's: false once its lease keeper saw it fenced.
    async fn renew(&mut self, key: Key) -> bool {
        let Some(owned) = self.owned.get(&key) else { return false };
        if !*owned.fenced.borrow() {
            return true;
        }
        let epoch = owned.lease.epoch;
        tracing::warn!(guild = key.0, channel = key.1, epoch, "voice room fenced: another replica owns it now");
        self.lose(key).await;
        self.receipt("voice.room", key, epoch, |r| r.with_code("fenced")).await;
        false
    }

    /// Forgets a room without asking the gateway for anything: the new owner holds it now.
    async fn lose(&mut self, key: Key) {
        if let Some(owned) = self.owned.remove(&key) {
            self.floor.close_room(key.0, key.1);
            drop(owned);
        }
    }

    async fn keep(&mut self, key: Key) {
        let (guild, channel) = key;
        let him = self.known.him.get(&guild).cloned();
        let server = self.known.servers.get(&guild).cloned();
        let Some(owned) = self.owned.get_mut(&key) else { return };
        let epoch = owned.lease.epoch;
        let joined = matches!(&him, Some((Some(c), _, _)) if *c == channel);
        let unusable =
            owned.connection.is_none() && (server.as_ref().is_none_or(|(endpoint, _)| endpoint.is_none()) || owned.failed.is_some());
        let waiting = owned.retry_at.is_some_and(|at| Instant::now() < at);
        if (!joined || unusable) && !waiting {
            // Not in the channel, no voice server known, or only a connection that failed: ask
            // for op 4, now and then again.
            if owned.asked.is_none_or(|at| at.elapsed() >= self.config.rejoin_after) {
                owned.asked = Some(Instant::now());
                let reason = if owned.live { "rejoin" } else { "human_joined" };
                self.command(guild, Some(channel), reason, epoch).await;
            }
            if !joined {
                return;
            }
        }
        if self.owned.get(&key).is_some_and(|o| !o.live) {
            let inputs = match self.floor.room_inputs(guild, channel).await {
                Ok(inputs) => inputs,
                Err(e) => {
                    tracing::warn!(error = %e, guild, channel, "voice room input not opened yet; the room is not announced");
                    return;
                }
            };
            let Some(owned) = self.owned.get_mut(&key) else { return };
            owned.live = true;
            // What the room decides to say reaches this owner's body.
            let (mouth, mut said) = mpsc::unbounded_channel::<v1::Speak>();
            let commands = owned.commands.clone();
            tokio::spawn(async move {
                while let Some(speak) = said.recv().await {
                    if commands.send(BodyCommand::Say(speak)).is_err() {
                        return;
                    }
                }
            });
            let lease = owned.lease.clone();
            self.floor.open_room(guild, channel, Some(mouth), Some(lease)).await;
            let floor = self.floor.clone();
            owned.inputs = Some(tokio::spawn(async move {
                if let Err(e) = floor.serve_room(inputs).await {
                    tracing::error!(error = %e, guild, channel, "voice room input stopped");
                }
            }));
            owned.vouching.store(true, std::sync::atomic::Ordering::SeqCst);
            vouch_for(&self.bus, key, epoch, self.config.lease_ttl);
            self.floor.joined(guild, channel).await;
            self.receipt("voice.room", key, epoch, |r| r.with_code("live")).await;
        }
        let (Some((Some(_), session_id, user_id)), Some((Some(endpoint), token))) = (him, server) else { return };
        let connection = Connection { guild_id: guild, channel_id: channel, user_id, session_id, endpoint, token };
        let Some(owned) = self.owned.get_mut(&key) else { return };
        // After a failure, only a fresh op 4's session and token are worth a try (they come as two
        // events; a half-new connection would be refused).
        let stale = owned.failed.as_ref().is_some_and(|f| f.session_id == connection.session_id || f.token == connection.token);
        if owned.connection.as_ref() != Some(&connection) && !stale {
            owned.failed = None;
            owned.connection = Some(connection.clone());
            let _ = owned.commands.send(BodyCommand::Connect(connection));
        }
    }

    async fn leave(&mut self, key: Key, reason: &'static str) {
        let Some(owned) = self.owned.remove(&key) else { return };
        let (guild, channel) = key;
        let epoch = owned.lease.epoch;
        self.command(guild, None, reason, epoch).await;
        if owned.live {
            let session = v1::VoiceSession {
                guild_id: guild,
                channel_id: None,
                session_id: format!("voice-{guild}-{channel}-{epoch}"),
                updated_at_ms: now_ms(),
                live_until_ms: 0,
            };
            if let Err(e) = self.bus.publish(&Subject::VoiceSession { guild }, &session, None).await {
                tracing::warn!(error = %e, "voice session end not announced");
            }
            self.floor.close_room(guild, channel);
            self.floor.left(guild, channel).await;
        }
        if let Err(e) = self.store.release_room(&owned.lease).await {
            tracing::warn!(error = %e, "voice room lease not released; it runs out");
        }
        drop(owned);
        self.known.left_at.insert(key, Instant::now());
        self.receipt("voice.room", key, epoch, |r| r.with_code("left").with_code(reason)).await;
    }

    /// Leaves every room this replica owns, on shutdown.
    pub async fn leave_all(&mut self) {
        for key in self.owned.keys().copied().collect::<Vec<_>>() {
            self.leave(key, "shutdown").await;
        }
    }

    async fn command(&self, guild: u64, channel: Option<u64>, reason: &str, epoch: i64) {
        let command = v1::VoiceCommand { guild_id: guild, channel_id: channel, reason: reason.to_owned(), epoch, at_ms: now_ms() };
        let id = MsgId::new(format!("voice-command:{guild}:{}:{epoch}:{}", channel.unwrap_or(0), command.at_ms));
        if let Err(e) = self.bus.publish(&Subject::VoiceCommand { guild }, &command, Some(&id)).await {
            tracing::warn!(error = %e, guild, "voice command not published");
        }
    }

    async fn room_event(&mut self, key: Key, epoch: i64, event: RoomEvent) {
        if self.owned.get(&key).is_none_or(|o| o.lease.epoch != epoch) {
            return;
        }
        match event {
            RoomEvent::Body(BodyEvent::Connected { .. }) => {
                if let Some(owned) = self.owned.get_mut(&key) {
                    owned.failures = 0;
                    owned.retry_at = None;
                }
                self.receipt("voice.connection", key, epoch, |r| r.with_code("connected")).await;
            }
            RoomEvent::Body(BodyEvent::Reconnected { .. }) => {
                self.receipt("voice.connection", key, epoch, |r| r.with_code("resumed")).await;
            }
            RoomEvent::Body(BodyEvent::Disconnected { reason }) => {
                tracing::warn!(guild = key.0, channel = key.1, %reason, "voice driver disconnected; asking for op 4 again");
                self.failed(key, false);
                self.receipt("voice.connection", key, epoch, |r| r.with_code("disconnected")).await;
            }
            RoomEvent::ConnectFailed(why) => {
                tracing::warn!(guild = key.0, channel = key.1, error = %why, "voice connection failed; asking for op 4 again after a pause");
                self.failed(key, true);
                self.receipt("voice.connection", key, epoch, |r| r.with_code("failed")).await;
            }
            RoomEvent::Body(BodyEvent::SpeechStarted { .. }) => {}
            RoomEvent::Body(BodyEvent::Heard(segment)) => self.heard(key, epoch, segment).await,
            RoomEvent::Playback { delivery_id, code, played_ms, audio_ms } => {
                if code == "cut_off" {
                    let played = if audio_ms > 0 { played_ms as f64 / audio_ms as f64 } else { 0.0 };
                    self.floor.cut_off(key.0, key.1, &delivery_id, played).await;
                }
                self.receipt_for(&delivery_id, "voice.playback", key, |r| {
                    r.with_code(code).with_count("played_ms", played_ms).with_count("audio_ms", audio_ms)
                })
                .await;
            }
        }
    }

    /// An utterance heard: transcribed off the keeper's loop, then one room input through the
    /// same path as typed lines (the room's input subject, read by whoever keeps the room).
    async fn heard(&mut self, key: Key, epoch: i64, segment: clankie_voice_body::Segment) {
        let started_ms = now_ms() - i64::try_from(segment.ended.elapsed().as_millis() + segment.duration().as_millis()).unwrap_or(0);
        let utterance = format!("utt:{}:{}:{}:{}", key.0, key.1, segment.ssrc, started_ms);
        let audio_ms = i64::try_from(segment.duration().as_millis()).unwrap_or(i64::MAX);
        metrics::counter!("clankie_voice_utterances_total").increment(1);
        self.receipt_for(&utterance, "voice.heard", key, |r| {
            r.with_id("speaker", segment.user_id).with_count("audio_ms", audio_ms).with_count("epoch", epoch)
        })
        .await;
        let author_name = self.names.get(&(key.0, segment.user_id)).cloned().unwrap_or_else(|| format!("user {}", segment.user_id));
        let heard = Utterance {
            id: utterance,
            speaker: segment.user_id,
            author_name,
            audio: Audio { pcm: segment.pcm, rate: clankie_voice_body::HEARD_RATE },
        };
        if let Some(owned) = self.owned.get(&key) {
            let _ = owned.ears.send(heard);
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

    async fn receipt(&self, kind: &'static str, key: Key, epoch: i64, build: impl FnOnce(v1::Receipt) -> v1::Receipt) {
        let id = format!("voice-room:{}:{}:{epoch}", key.0, key.1);
        self.receipt_for(&id, kind, key, build).await;
    }

    async fn receipt_for(&self, delivery_id: &str, kind: &'static str, key: Key, build: impl FnOnce(v1::Receipt) -> v1::Receipt) {
        room_receipt(&self.bus, delivery_id, kind, key, build).await;
    }
}

/// Keeps one room's lease: renews it every third of its time to live, on a task of its own,
/// and while the room is live vouches for its session (published off this path too). Reports a
/// fence on `fenced` and ends; a failed renewal (the database away) is tried again next tick.
async fn keep_room_lease(
    store: Store,
    bus: Bus,
    lease: RoomLease,
    ttl: Duration,
    vouching: Arc<std::sync::atomic::AtomicBool>,
    fenced: tokio::sync::watch::Sender<bool>,
) {
    let (guild, channel, epoch) = (lease.guild, lease.channel, lease.epoch);
    let mut tick = tokio::time::interval(ttl / 3);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        match store.renew_room(&lease, ttl).await {
            Ok(()) => {
                if !vouching.load(std::sync::atomic::Ordering::SeqCst) {
                    continue;
                }
                vouch_for(&bus, (guild, channel), epoch, ttl);
            }
            Err(StoreError::Fenced { .. }) => {
                let _ = fenced.send(true);
                return;
            }
            Err(e) => tracing::warn!(error = %e, guild, channel, "voice room lease not renewed yet; trying again"),
        }
    }
}

/// One utterance heard, waiting for its words.
struct Utterance {
    id: String,
    speaker: u64,
    author_name: String,
    audio: Audio,
}

/// A room's transcriber: at most `limit` utterances transcribed at once, and each one's words
/// enter the room in the order they were said, however long each took: a room input published
/// out of order would have the floor hear people out of order.
async fn transcriber(bus: Bus, stt: Arc<dyn SpeechToText>, key: Key, limit: usize, mut heard: mpsc::UnboundedReceiver<Utterance>) {
    use futures::StreamExt as _;
    let mut running = futures::stream::FuturesOrdered::new();
    loop {
        tokio::select! {
            next = heard.recv(), if running.len() < limit.max(1) => {
                let Some(u) = next else { break };
                let stt = stt.clone();
                running.push_back(async move {
                    let began = Instant::now();
                    let result = stt.transcribe(&u.audio).await;
                    (u, result, began.elapsed())
                });
            }
            Some((u, result, took)) = running.next() => publish_heard(&bus, key, u, result, took).await,
            else => break,
        }
    }
    while let Some((u, result, took)) = running.next().await {
        publish_heard(&bus, key, u, result, took).await;
    }
}

/// An utterance's transcription: its receipt, then its words as a room input.
async fn publish_heard(bus: &Bus, key: Key, u: Utterance, result: Result<String, clankie_speech::SpeechError>, took: Duration) {
    let took_ms = i64::try_from(took.as_millis()).unwrap_or(i64::MAX);
    let code = match &result {
        Ok(text) if text.trim().is_empty() => "empty",
        Ok(_) => "transcribed",
        Err(e) => e.code(),
    };
    let chars = result.as_ref().map(|t| t.chars().count() as i64).unwrap_or(0);
    room_receipt(bus, &u.id, "voice.transcribed", key, |r| {
        r.with_id("speaker", u.speaker).with_code(code).with_count("chars", chars).with_count("took_ms", took_ms)
    })
    .await;
    let Ok(text) = result else { return };
    if text.trim().is_empty() {
        return;
    }
    let input = v1::RoomInput {
        delivery_id: u.id.clone(),
        guild_id: key.0,
        channel_id: key.1,
        author_id: u.speaker,
        author_name: u.author_name,
        source: v1::RoomInputSource::Speech as i32,
        text,
        received_at_ms: now_ms(),
        ..Default::default()
    };
    let id = MsgId::new(format!("speech:{}", u.id));
    if let Err(e) = bus.publish(&Subject::VoiceInput { guild: key.0, channel: key.1 }, &input, Some(&id)).await {
        tracing::warn!(error = %e, "an utterance's room input was not published");
    }
}

/// Publishes a content-free receipt of a voice room: its lane, guild, channel and the replica's pid.
async fn room_receipt(bus: &Bus, delivery_id: &str, kind: &'static str, key: Key, build: impl FnOnce(v1::Receipt) -> v1::Receipt) {
    let Ok(kind) = ReceiptKind::new(kind) else { return };
    let lane = LaneKey::Voice { guild: key.0, channel: key.1 };
    let receipt = build(
        v1::Receipt::new(&kind, bus.service(), delivery_id, now_ms())
            .with_lane(&lane)
            .with_id("guild", key.0)
            .with_id("channel", key.1)
            .with_id("replica_pid", u64::from(std::process::id())),
    );
    // Off the caller's path: a slow bus delays evidence, never the room or its lease.
    let bus = bus.clone();
    tokio::spawn(async move {
        held_publish().await;
        if let Err(e) = bus.publish_receipt(&receipt).await {
            tracing::warn!(error = %e, "receipt not published");
        }
    });
}

/// The named wait a test sets (`CLANKIE_FAULT_HOLD=voice.publish=<ms>`) to make every voice-floor
/// publish as slow as one during a held stream leader.
async fn held_publish() {
    if let Some(held) = clankie_settings::fault::hold("voice.publish") {
        tokio::time::sleep(held).await;
    }
}

/// Vouches for the room's live session for one lease time from now: published on a task of its
/// own, so neither the keeper's loop nor a renewal waits on the bus.
fn vouch_for(bus: &Bus, key: Key, epoch: i64, ttl: Duration) {
    let (guild, channel) = key;
    let session = v1::VoiceSession {
        guild_id: guild,
        channel_id: Some(channel),
        session_id: format!("voice-{guild}-{channel}-{epoch}"),
        updated_at_ms: now_ms(),
        live_until_ms: now_ms() + i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX),
    };
    let bus = bus.clone();
    tokio::spawn(async move {
        held_publish().await;
        if let Err(e) = bus.publish(&Subject::VoiceSession { guild }, &session, None).await {
            tracing::warn!(error = %e, "voice session not vouched for");
        }
    });
}

/// Runs one room's audio body: connects when told, speaks what the room decides to say (one line
/// at a time, each synthesized off this loop), stops when a human speaks over him, and forwards
/// what happens to it.
async fn body_task(
    key: Key,
    epoch: i64,
    config: BodyConfig,
    tts: Arc<dyn TextToSpeech>,
    mut commands: mpsc::UnboundedReceiver<BodyCommand>,
    events: mpsc::UnboundedSender<(Key, i64, RoomEvent)>,
) {
    struct Playing {
        delivery_id: String,
        began: Instant,
        audio_ms: i64,
        cut: bool,
    }
    // The answer a sentence belongs to: its id up to the sentence number.
    fn answer_of(sentence: &str) -> &str {
        sentence.rsplit_once('/').map_or(sentence, |(answer, _)| answer)
    }
    // The answer being spoken (sentences still to come until its end), and the answers cut:
    // nothing more of a cut answer is played, whatever the run still writes.
    let mut answering: Option<String> = None;
    let mut cut_answers: std::collections::VecDeque<String> = std::collections::VecDeque::new();
    let (mut body, mut heard) = Body::new(config);
    let (done_tx, mut done) = mpsc::unbounded_channel::<(Connection, Result<(), clankie_voice_body::BodyError>)>();
    let (synth_tx, mut synthesized) = mpsc::unbounded_channel::<(String, Result<Audio, clankie_speech::SpeechError>)>();
    let (played_tx, mut played) = mpsc::unbounded_channel::<String>();
    let mut queue: std::collections::VecDeque<v1::Speak> = std::collections::VecDeque::new();
    let mut busy = false;
    let mut playing: Option<Playing> = None;
    let playback = |delivery_id: String, code: &'static str, played_ms: i64, audio_ms: i64| {
        let _ = events.send((key, epoch, RoomEvent::Playback { delivery_id, code, played_ms, audio_ms }));
    };
    loop {
        if !busy && let Some(next) = queue.pop_front() {
            busy = true;
            let (tts, synth_tx) = (tts.clone(), synth_tx.clone());
            tokio::spawn(async move {
                let result = tts.synthesize(&next.text).await;
                let _ = synth_tx.send((next.delivery_id, result));
            });
        }
        tokio::select! {
            command = commands.recv() => match command {
                Some(BodyCommand::Connect(connection)) => {
                    // Not awaited here: a newer connect (a changed server update) must not wait
                    // behind one that is still retrying; the driver discards the older attempt.
                    let attempt = body.connect(&connection);
                    let done_tx = done_tx.clone();
                    tokio::spawn(async move {
                        let _ = done_tx.send((connection, attempt.await));
                    });
                }
                // An empty line ends its run: nothing more of any of its answers follows.
                Some(BodyCommand::Say(speak)) if speak.text.is_empty() => {
                    if answering.as_deref().is_some_and(|a| a.strip_prefix(speak.delivery_id.as_str()).is_some_and(|r| r.starts_with('~'))) {
                        answering = None;
                    }
                }
                Some(BodyCommand::Say(speak)) if cut_answers.iter().any(|a| a == answer_of(&speak.delivery_id)) => {
                    playback(speak.delivery_id, "cut_off", 0, 0);
                }
                Some(BodyCommand::Say(speak)) => {
                    answering = Some(answer_of(&speak.delivery_id).to_owned());
                    queue.push_back(speak);
                }
                Some(BodyCommand::Leave) | None => {
                    body.leave();
                    return;
                }
            },
            Some((connection, result)) = done.recv() => {
                if let Err(e) = result && body.connection() == Some(&connection) {
                    body.forget();
                    let _ = events.send((key, epoch, RoomEvent::ConnectFailed(e.to_string())));
                }
            }
            Some((delivery_id, result)) = synthesized.recv() => match result {
                // Synthesized while someone spoke over the answer: it is never played.
                Ok(_) if cut_answers.iter().any(|a| a == answer_of(&delivery_id)) => {
                    busy = false;
                    playback(delivery_id, "cut_off", 0, 0);
                }
                Ok(audio) => {
                    let audio_ms = i64::try_from(audio.duration().as_millis()).unwrap_or(i64::MAX);
                    let finished = body.play(&audio.pcm, audio.rate);
                    let played_tx = played_tx.clone();
                    let id = delivery_id.clone();
                    tokio::spawn(async move {
                        let _ = finished.await;
                        let _ = played_tx.send(id);
                    });
                    playing = Some(Playing { delivery_id, began: Instant::now(), audio_ms, cut: false });
                }
                Err(e) => {
                    busy = false;
                    playback(delivery_id, e.code(), 0, 0);
                }
            },
            Some(delivery_id) = played.recv() => {
                if let Some(p) = playing.take_if(|p| p.delivery_id == delivery_id) {
                    let played_ms = i64::try_from(p.began.elapsed().as_millis()).unwrap_or(i64::MAX).min(p.audio_ms);
                    playback(p.delivery_id, if p.cut { "cut_off" } else { "played" }, played_ms, p.audio_ms);
                }
                busy = false;
            }
            Some(event) = heard.recv() => {
                match &event {
                    BodyEvent::Disconnected { .. } => body.forget(),
                    BodyEvent::SpeechStarted { .. } => {
                        // Barge-in: a human has spoken over him for the threshold, during a
                        // sentence or between two of an answer still coming. He stops, and
                        // nothing more of that answer is played: what is queued is dropped,
                        // what is being synthesized or still written is dropped when it comes.
                        let speaking = playing.as_ref().filter(|p| !p.cut).map(|p| answer_of(&p.delivery_id).to_owned());
                        if let Some(answer) = speaking.or_else(|| answering.clone()) {
                            if let Some(p) = playing.as_mut().filter(|p| !p.cut) {
                                p.cut = true;
                                body.stop();
                            }
                            for dropped in queue.drain(..) {
                                playback(dropped.delivery_id, "cut_off", 0, 0);
                            }
                            if answering.as_deref() == Some(answer.as_str()) {
                                answering = None;
                            }
                            cut_answers.push_back(answer);
                            while cut_answers.len() > 8 {
                                cut_answers.pop_front();
                            }
                        }
                    }
                    _ => {}
                }
                let _ = events.send((key, epoch, RoomEvent::Body(event)));
            }
        }
    }
}

/// The ring is the voice floor's: it sweeps it every `every`, by age and by lines per room
/// (the first sweep a minute after start at the latest). Runs until dropped.
pub async fn sweep_ring(store: Store, ring: clankie_store::RingRetention, every: Duration) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every.min(Duration::from_secs(60)), every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match store.sweep_voice_ring(&ring).await {
            Ok(0) => {}
            Ok(lines) => tracing::info!(lines, "swept the voice ring"),
            Err(e) => tracing::warn!(error = %e, "the voice ring sweep failed; it runs again next time"),
        }
    }
}
