//! The life of a room this replica owns: taken under a lease, kept joined, connected and
//! live, fenced or restarted, and left.

use std::time::Instant;

use clankie_bus::now_ms;
use clankie_proto::{Subject, v1};
use clankie_voice_body::Connection;

use super::keeper::{Owned, RoomKeeper};
use crate::room::{Key, RoomHandle, RoomParts};

impl RoomKeeper {
    /// Takes the room's lease if no replica holds it, and spawns its actor.
    pub(super) async fn try_take(&mut self, key: Key) {
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
    pub(super) async fn renew(&mut self, key: Key) -> bool {
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

    /// Keeps a wanted room this replica owns joined, live and connected: op 4 while he is out or
    /// has no connection worth a try, live once he is in, and the body connected to what his
    /// voice state and the server update bring.
    pub(super) async fn keep(&mut self, key: Key) {
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

    /// Lets go of a room: he leaves it (unless he is moving within the guild or was dismissed), its
    /// live session is ended, and its lease is released.
    pub(super) async fn leave(&mut self, key: Key, reason: &'static str) {
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
}
