//! The room keeper's own state and its loop: it reads voice states, server updates, the
//! owner's commands and the rooms' connection reports, and reconciles its rooms after each.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clankie_bus::{Bus, BusError, ConsumerSpec, MsgId, now_ms};
use clankie_proto::{Family, Subject, v1};
use clankie_speech::{SpeechToText, TextToSpeech};
use clankie_store::{Store, StoreError};
use clankie_voice_body::Connection;
use tokio::sync::mpsc;

use super::config::RoomConfig;
use super::known::Known;
use crate::room::{Key, Link, RoomHandle, room_receipt};
use crate::voice_floor::VoiceFloor;

/// A room this replica owns: the handle on its actor, and what the keeper tracks of its connection.
pub(super) struct Owned {
    pub(super) room: RoomHandle,
    pub(super) connection: Option<Connection>,
    /// The connection that last failed or dropped: not tried again; a fresh op 4 brings new ones.
    pub(super) failed: Option<Connection>,
    /// Consecutive failures, for the backoff before asking again.
    pub(super) failures: u32,
    /// Not before this is op 4 asked for again after a failure.
    pub(super) retry_at: Option<Instant>,
    pub(super) asked: Option<Instant>,
    pub(super) live: bool,
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
    pub(super) bus: Bus,
    pub(super) store: Store,
    pub(super) floor: Arc<VoiceFloor>,
    pub(super) config: RoomConfig,
    pub(super) stt: Arc<dyn SpeechToText>,
    pub(super) tts: Arc<dyn TextToSpeech>,
    pub(super) turns: Option<Arc<dyn clankie_voice_body::TurnDetector>>,
    /// Display names by (guild, user), from their voice states.
    pub(super) names: HashMap<(u64, u64), String>,
    pub(super) known: Known,
    pub(super) owned: HashMap<Key, Owned>,
    pub(super) links_tx: mpsc::UnboundedSender<(Key, i64, Link)>,
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

    /// Leaves every room this replica owns, on shutdown.
    pub async fn leave_all(&mut self) {
        for key in self.owned.keys().copied().collect::<Vec<_>>() {
            self.leave(key, "shutdown").await;
        }
    }

    /// Asks the gateway for op 4 into `channel` (or out of the guild's voice), under the room's epoch.
    pub(super) async fn command(&self, guild: u64, channel: Option<u64>, reason: &str, epoch: i64) {
        let command = v1::VoiceCommand { guild_id: guild, channel_id: channel, reason: reason.to_owned(), epoch, at_ms: now_ms() };
        let id = MsgId::new(format!("voice-command:{guild}:{}:{epoch}:{}", channel.unwrap_or(0), command.at_ms));
        if let Err(e) = self.bus.publish(&Subject::VoiceCommand { guild }, &command, Some(&id)).await {
            tracing::warn!(error = %e, guild, "voice command not published");
        }
    }

    /// Publishes a receipt of the room under `epoch`, off the keeper's loop.
    pub(super) async fn receipt(&self, kind: &'static str, key: Key, epoch: i64, build: impl FnOnce(v1::Receipt) -> v1::Receipt) {
        let id = format!("voice-room:{}:{}:{epoch}", key.0, key.1);
        room_receipt(&self.bus, &id, kind, key, build);
    }
}
