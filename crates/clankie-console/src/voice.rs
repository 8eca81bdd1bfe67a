//! What the console knows of voice rooms from the bus: who is in each, its recent floor
//! decisions and its end-to-end encryption. Held in the console's state and fed by its bus
//! followers, so it is a module of its own that both can import.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use clankie_proto::v1;

/// Floor decisions the voice view keeps per room.
const DECISIONS_KEPT: usize = 12;

/// Who is in which voice channel, and each room's recent floor decisions, as the bus told it.
#[derive(Clone, Default)]
pub struct VoiceState {
    inner: Arc<Mutex<VoiceInner>>,
}

#[derive(Default)]
struct VoiceInner {
    members: BTreeMap<(u64, u64), v1::VoiceMember>,
    decisions: BTreeMap<(u64, u64), VecDeque<v1::FloorDecision>>,
    dave: BTreeMap<(u64, u64), RoomDave>,
}

/// A voice room's end-to-end encryption as its newest `voice.connection` receipt told it.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct RoomDave {
    pub protocol_version: i64,
    pub epoch: i64,
    pub privacy_code: Option<String>,
    pub at_ms: i64,
}

impl VoiceState {
    /// A member joined, moved or left (no channel): the voice view shows who is where now.
    pub(crate) fn member(&self, m: v1::VoiceMember) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if m.channel_id.is_some() {
            inner.members.insert((m.guild_id, m.user_id), m);
        } else {
            inner.members.remove(&(m.guild_id, m.user_id));
        }
    }

    /// A floor decision, kept newest first, so the voice view shows why he spoke or held back;
    /// one seen already (a redelivery) is not kept twice.
    pub(crate) fn decision(&self, d: v1::FloorDecision) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let kept = inner.decisions.entry((d.guild_id, d.channel_id)).or_default();
        if kept.iter().any(|k| k.delivery_id == d.delivery_id && k.decided_at_ms == d.decided_at_ms) {
            return;
        }
        kept.push_front(d);
        kept.truncate(DECISIONS_KEPT);
    }

    /// A `voice.connection` receipt: the room's DAVE state, unless an older receipt came late.
    pub(crate) fn connection(&self, r: &v1::Receipt) {
        let id = |name: &str| r.ids.get(name).and_then(|v| v.parse::<u64>().ok());
        let (Some(guild), Some(channel)) = (id("guild"), id("channel")) else { return };
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let dave = inner.dave.entry((guild, channel)).or_default();
        if r.at_ms < dave.at_ms {
            return;
        }
        *dave = RoomDave {
            protocol_version: r.counts.get("dave_protocol_version").copied().unwrap_or(0),
            epoch: r.counts.get("dave_epoch").copied().unwrap_or(0),
            privacy_code: r.ids.get("dave_privacy_code").cloned(),
            at_ms: r.at_ms,
        };
    }

    /// The room's DAVE state, once a receipt said it.
    pub fn dave(&self, room: (u64, u64)) -> Option<RoomDave> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).dave.get(&room).cloned()
    }

    /// Members of each (guild, channel), and the room's newest decisions first.
    pub fn rooms(&self) -> BTreeMap<(u64, u64), (Vec<v1::VoiceMember>, Vec<v1::FloorDecision>)> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let mut rooms: BTreeMap<(u64, u64), (Vec<v1::VoiceMember>, Vec<v1::FloorDecision>)> = BTreeMap::new();
        for m in inner.members.values() {
            if let Some(channel) = m.channel_id {
                rooms.entry((m.guild_id, channel)).or_default().0.push(m.clone());
            }
        }
        for (room, kept) in &inner.decisions {
            rooms.entry(*room).or_default().1 = kept.iter().cloned().collect();
        }
        rooms
    }
}
