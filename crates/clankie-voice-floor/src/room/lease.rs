//! The room's lease keeping: renewals on a task of their own, a fence reported to the keeper,
//! and the live session vouched for at each renewal, so nothing the room waits on holds it up.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clankie_bus::{Bus, now_ms};
use clankie_proto::{Subject, v1};
use clankie_store::{RoomLease, Store, StoreError};
use tokio::sync::watch;

use super::Key;
use super::publisher::held_publish;

/// Keeps one room's lease: renews it every third of its time to live, on a task of its own,
/// and while the room is live vouches for its session (published off this path too). Reports a
/// fence on `fenced` and ends; a failed renewal (the database away) is tried again next tick.
pub(super) async fn keep_room_lease(
    store: Store,
    bus: Bus,
    lease: RoomLease,
    ttl: Duration,
    vouching: Arc<AtomicBool>,
    fenced: watch::Sender<bool>,
) {
    let (guild, channel, epoch) = (lease.guild, lease.channel, lease.epoch);
    let mut tick = tokio::time::interval(ttl / 3);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        match store.renew_room(&lease, ttl).await {
            Ok(()) => {
                if vouching.load(Ordering::SeqCst) {
                    vouch_for(&bus, (guild, channel), epoch, ttl);
                }
            }
            Err(StoreError::Fenced { .. }) => {
                let _ = fenced.send(true);
                return;
            }
            Err(e) => tracing::warn!(error = %e, guild, channel, "voice room lease not renewed yet; trying again"),
        }
    }
}

/// Vouches for the room's live session for one lease time from now: published on a task of its
/// own, so neither the room nor a renewal waits on the bus.
pub(super) fn vouch_for(bus: &Bus, key: Key, epoch: i64, ttl: Duration) {
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
