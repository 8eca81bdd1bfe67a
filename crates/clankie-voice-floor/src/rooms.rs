//! The room keeper: which voice rooms are wanted, and which replica owns each.
//!
//! The gateway forwards every voice state and voice server update; each replica reads them all
//! (last per subject, so a fresh replica learns who is where). A room is *wanted* while a human
//! is in an allowed voice channel, and for a grace period after the last one leaves. A wanted room
//! is owned by exactly one replica through a room lease with a fencing epoch in PostgreSQL (the
//! `voice_rooms` table; the voice lane itself is the captain's, for `ask_clankie`). The owner
//! spawns the room's actor ([`crate::room`]), asks the gateway for op 4, hands the actor the
//! connection from his voice state and the server update, and announces the room live (the
//! gateway routes attached-chat text by it). When the owner dies its lease runs out and another
//! replica takes the room and reconnects.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clankie_bus::{Bus, BusError, ConsumerSpec, MsgId, now_ms};
use clankie_proto::{Family, Subject, v1};
use clankie_speech::{SpeechConfig, SpeechToText, TextToSpeech};
use clankie_store::{Store, StoreError};
use clankie_voice_body::{BodyConfig, Connection};
use tokio::sync::mpsc;

use crate::VoiceFloor;
use crate::room::{Key, Link, RoomHandle, RoomParts, room_receipt};

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
    /// After a voice server refused him for want of DAVE (close 4017), how long the room is
    /// left alone before he tries it again.
    pub dave_refused_hold: Duration,
    /// The speech engines: OpenAI-compatible where configured, offline otherwise.
    pub speech: SpeechConfig,
    /// Utterances of one room transcribed at once.
    pub transcriptions: usize,
    /// The end-of-turn detector's base URL; turns end on the silence bound without one.
    pub turns: Option<String>,
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
                turn_silence: settings.voice_turn_silence,
                pre_roll: settings.voice_pre_roll,
                longest_segment: settings.voice_max_utterance,
                barge_in: settings.barge_in,
                ..BodyConfig::default()
            },
            rejoin_after: Duration::from_secs(3),
            dave_refused_hold: settings.voice_dave_refused_hold,
            speech: speech_config(settings),
            transcriptions: settings.voice_transcriptions,
            turns: settings.turn_base_url.clone(),
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

/// A room this replica owns: the handle on its actor, and what the keeper tracks of its connection.
struct Owned {
    room: RoomHandle,
    connection: Option<Connection>,
    /// The connection that last failed or dropped: not tried again; a fresh op 4 brings new ones.
    failed: Option<Connection>,
    /// Consecutive failures, for the backoff before asking again.
    failures: u32,
    /// Not before this is op 4 asked for again after a failure.
    retry_at: Option<Instant>,
    asked: Option<Instant>,
    live: bool,
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
    /// The people forgotten, from the audience bucket: each room drops their older lines.
    forgotten: clankie_proto::audience::Forgotten,
    /// When this replica last saw him out of each room (his voice state follows shortly).
    left_at: HashMap<Key, Instant>,
    /// Rooms whose voice server refused him for want of DAVE, and when.
    dave_refused: HashMap<Key, Instant>,
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
    turns: Option<Arc<dyn clankie_voice_body::TurnDetector>>,
    /// Display names by (guild, user), from their voice states.
    names: HashMap<(u64, u64), String>,
    known: Known,
    owned: HashMap<Key, Owned>,
    links_tx: mpsc::UnboundedSender<(Key, i64, Link)>,
    links: mpsc::UnboundedReceiver<(Key, i64, Link)>,
}

impl RoomKeeper {
    /// A keeper for `floor`'s rooms; fails only when an engine cannot be set up.
    pub fn new(bus: Bus, store: Store, floor: Arc<VoiceFloor>, config: RoomConfig) -> Result<RoomKeeper, RoomError> {
        let (links_tx, links) = mpsc::unbounded_channel();
        let (stt, tts) = clankie_speech::engines(&config.speech)?;
        let turns = match &config.turns {
            Some(base) => Some(crate::room::turn_detector(base)?),
            None => None,
        };
        Ok(RoomKeeper {
            bus,
            store,
            floor,
            config,
            stt,
            tts,
            turns,
            names: HashMap::new(),
            known: Known::default(),
            owned: HashMap::new(),
            links_tx,
            links,
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
        // A forget reaches the rooms live here now, or when this replica watches again after
        // being away; a room taken later reads a ring without them, and is told them all.
        let mut audience = std::pin::pin!(self.bus.audience_facts());
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
                Some(fact) = futures::StreamExt::next(&mut audience) => {
                    if let clankie_bus::AudienceFact::Forgotten { user_id, at_ms } = fact {
                        self.known.forgotten.record(user_id, at_ms);
                        for owned in self.owned.values() {
                            owned.room.forgotten(user_id, at_ms);
                        }
                    }
                }
                Some((key, epoch, link)) = self.links.recv() => self.link(key, epoch, link).await,
                _ = tick.tick() => {}
            }
            self.reconcile().await;
        }
    }

    fn member(&mut self, m: &v1::VoiceMember) {
        if !m.display_name.is_empty() {
            self.names.insert((m.guild_id, m.user_id), m.display_name.clone());
            for (_, owned) in self.owned.iter().filter(|(k, _)| k.0 == m.guild_id) {
                owned.room.named(m.user_id, m.display_name.clone());
            }
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
        if command.reason != clankie_proto::OWNER_VOICE_REASON {
            return;
        }
        match command.channel_id {
            Some(channel) => {
                let key = (command.guild_id, channel);
                if self.config.allow.contains(&key) {
                    // One voice channel per guild: a summon elsewhere in it moves him.
                    for other in self.config.allow.iter().copied().filter(|k| k.0 == key.0 && *k != key) {
                        self.known.summoned.remove(&other);
                        self.known.dismissed.insert(other);
                    }
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
            if self.known.dave_refused.get(&key).is_some_and(|at| at.elapsed() < self.config.dave_refused_hold) {
                continue;
            }
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
        // He is in one voice channel per guild: where several are wanted, the one the owner
        // summoned him to, else the one he is in, else the first listed.
        let mut by_guild: std::collections::HashMap<u64, Vec<Key>> = std::collections::HashMap::new();
        for key in self.config.allow.iter().copied().filter(|k| wanted.contains(k)) {
            by_guild.entry(key.0).or_default().push(key);
        }
        for keys in by_guild.into_values().filter(|k| k.len() > 1) {
            let keep = keys
                .iter()
                .copied()
                .find(|k| self.known.summoned.contains(k))
                .or_else(|| keys.iter().copied().find(|k| self.known.him_in(*k)))
                .unwrap_or(keys[0]);
            for key in keys.into_iter().filter(|k| *k != keep) {
                wanted.remove(&key);
            }
        }
        (wanted, clear)
    }

    async fn reconcile(&mut self) {
        // Read before `wanted` lets go of dismissals whose rooms are empty.
        let dismissed = self.known.dismissed.clone();
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
            } else if dismissed.contains(&key) {
                self.leave(key, "dismissed").await;
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
        let epoch = lease.epoch;
        let room = RoomHandle::spawn(RoomParts {
            key,
            lease,
            lease_ttl: self.config.lease_ttl,
            floor: self.floor.clone(),
            store: self.store.clone(),
            body: self.config.body,
            tts: self.tts.clone(),
            stt: self.stt.clone(),
            turns: self.turns.clone(),
            transcriptions: self.config.transcriptions,
            names: self.names.iter().filter(|((g, _), _)| *g == key.0).map(|((_, u), n)| (*u, n.clone())).collect(),
            links: self.links_tx.clone(),
            forgotten: self.known.forgotten.clone(),
        });
        self.receipt("voice.room", key, epoch, |r| r.with_code("owned").with_count("epoch", epoch)).await;
        self.owned.insert(key, Owned { room, connection: None, failed: None, failures: 0, retry_at: None, asked: None, live: false });
    }

    /// Whether the room is still this replica's: false once its lease keeper saw it fenced.
    async fn renew(&mut self, key: Key) -> bool {
        let Some(owned) = self.owned.get(&key) else { return false };
        if owned.room.broken() {
            self.restart(key).await;
            return false;
        }
        if !*owned.room.fenced.borrow() {
            return true;
        }
        let epoch = owned.room.lease.epoch;
        tracing::warn!(guild = key.0, channel = key.1, epoch, "voice room fenced: another replica owns it now");
        self.lose(key).await;
        self.receipt("voice.room", key, epoch, |r| r.with_code("fenced")).await;
        false
    }

    /// Lets go of a room a part of which ended (no half-alive room): its lease is released and
    /// the next reconcile takes the room again, a fresh actor and body with the ring read back.
    async fn restart(&mut self, key: Key) {
        let Some(owned) = self.owned.remove(&key) else { return };
        let epoch = owned.room.lease.epoch;
        metrics::counter!("clankie_part_restarts_total", "part" => "voice.room").increment(1);
        tracing::error!(part = "voice.room", guild = key.0, channel = key.1, epoch, "a part of a voice room ended; taking the room again");
        if let Err(e) = self.store.release_room(&owned.room.lease).await {
            tracing::warn!(error = %e, "voice room lease not released; it runs out before the room is taken again");
        }
        drop(owned);
        self.receipt("voice.room", key, epoch, |r| r.with_code("restarted")).await;
    }

    /// Forgets a room without asking the gateway for anything: the new owner holds it now. Its
    /// actor ends with its handle, and its runs with it.
    async fn lose(&mut self, key: Key) {
        self.owned.remove(&key);
    }

    async fn keep(&mut self, key: Key) {
        let (guild, channel) = key;
        let him = self.known.him.get(&guild).cloned();
        let server = self.known.servers.get(&guild).cloned();
        let Some(owned) = self.owned.get_mut(&key) else { return };
        let epoch = owned.room.lease.epoch;
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
        if let Some(owned) = self.owned.get_mut(&key)
            && !owned.live
        {
            if let Err(e) = owned.room.go_live().await {
                tracing::warn!(error = %e, guild, channel, "voice room input not opened yet; the room is not announced");
                return;
            }
            owned.live = true;
            tracing::info!(guild, channel, epoch, "room live: taking input");
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
            owned.room.connect(connection);
        }
    }

    async fn leave(&mut self, key: Key, reason: &'static str) {
        let Some(owned) = self.owned.remove(&key) else { return };
        let (guild, channel) = key;
        let epoch = owned.room.lease.epoch;
        // Moving within the guild (another room here is ours, or he is already in another one,
        // kept by another replica): the op 4 into it took him out of this one, and a leave now
        // would take him out of that one too.
        let moving =
            self.owned.keys().any(|k| k.0 == guild) || matches!(self.known.him.get(&guild), Some((Some(c), _, _)) if *c != channel);
        // The owner's leave went out as op 4 from the gateway at once: a second would be noise.
        if !moving && reason != "dismissed" {
            self.command(guild, None, reason, epoch).await;
        }
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
            self.floor.left(guild, channel).await;
        }
        if let Err(e) = self.store.release_room(&owned.room.lease).await {
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

    async fn link(&mut self, key: Key, epoch: i64, link: Link) {
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

    async fn receipt(&self, kind: &'static str, key: Key, epoch: i64, build: impl FnOnce(v1::Receipt) -> v1::Receipt) {
        let id = format!("voice-room:{}:{}:{epoch}", key.0, key.1);
        room_receipt(&self.bus, &id, kind, key, build);
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
