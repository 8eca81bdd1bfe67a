//! Who may know what another thread lived.
//!
//! Nothing from a DM reaches any other thread, nor anything from a private thread
//! (its own audience); nothing from one guild reaches another. Within a guild, threads share experiences and presence. A DM
//! thread hears of guild life only when the owner trusts that DM. The owner
//! can make this stricter ([`Sharing::None`]) but never looser. The operator
//! console is the owner's own thread: it hears of guild life as a trusted DM
//! does, and nothing leaves it.

use clankie_proto::LaneKey;
use clankie_store::{OwnerSettings, Sharing};

/// Whether `reader` may know of something that happened in `source` (a thread's lane key).
pub fn may_know(settings: &OwnerSettings, reader: &LaneKey, source: &LaneKey) -> bool {
    if reader == source || settings.sharing == Sharing::None {
        return false;
    }
    match (reader.guild(), source.guild()) {
        (_, None) => false,
        (Some(here), Some(there)) => here == there,
        (None, Some(_)) => trusted_dm(settings, reader) || matches!(reader, LaneKey::Console { .. }),
    }
}

/// [`may_know`], and never of a lane that is its own audience: a private thread, whose talk,
/// people and very presence stay inside it (`private_lanes`, as the store marks them).
pub fn may_know_of(settings: &OwnerSettings, private_lanes: &[LaneKey], reader: &LaneKey, source: &LaneKey) -> bool {
    !private_lanes.contains(source) && may_know(settings, reader, source)
}

/// Whether `lane` is a DM or guild room the owner trusts: a privileged request there runs in the
/// room's durable system lane instead of a one-shot turn.
pub fn trusted_room(settings: &OwnerSettings, lane: &LaneKey) -> bool {
    match lane {
        LaneKey::Dm { .. } => trusted_dm(settings, lane),
        LaneKey::Room { channel, .. } => settings.trusted_rooms.contains(channel),
        LaneKey::Voice { .. } | LaneKey::Console { .. } => false,
    }
}

/// Whether `lane` is a DM the owner trusts.
pub fn trusted_dm(settings: &OwnerSettings, lane: &LaneKey) -> bool {
    matches!(lane, LaneKey::Dm { channel } if settings.trusted_dms.contains(channel))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOM_G: LaneKey = LaneKey::Room { guild: 1, channel: 10 };
    const VOICE_G: LaneKey = LaneKey::Voice { guild: 1, channel: 11 };
    const ROOM_H: LaneKey = LaneKey::Room { guild: 2, channel: 20 };
    const DM_A: LaneKey = LaneKey::Dm { channel: 30 };
    const DM_B: LaneKey = LaneKey::Dm { channel: 31 };

    #[test]
    fn nothing_leaves_a_dm_and_nothing_crosses_guilds() {
        let s = OwnerSettings::default();
        assert!(may_know(&s, &ROOM_G, &VOICE_G));
        assert!(may_know(&s, &VOICE_G, &ROOM_G));
        assert!(!may_know(&s, &ROOM_G, &ROOM_G), "a thread's own life is in its session already");
        assert!(!may_know(&s, &ROOM_H, &ROOM_G));
        assert!(!may_know(&s, &ROOM_G, &DM_A));
        assert!(!may_know(&s, &DM_B, &DM_A));
        assert!(!may_know(&s, &DM_A, &ROOM_G), "an untrusted DM hears nothing of guild life");
    }

    #[test]
    fn a_trusted_dm_hears_of_guilds_but_still_not_of_other_dms() {
        let s = OwnerSettings { trusted_dms: vec![30], ..Default::default() };
        assert!(may_know(&s, &DM_A, &ROOM_G));
        assert!(may_know(&s, &DM_A, &ROOM_H));
        assert!(!may_know(&s, &DM_A, &DM_B));
        assert!(!may_know(&s, &ROOM_G, &DM_A));
    }

    #[test]
    fn the_console_hears_of_guilds_but_never_of_dms_and_nothing_leaves_it() {
        let s = OwnerSettings::default();
        let console = LaneKey::Console { owner: 7 };
        assert!(may_know(&s, &console, &ROOM_G));
        assert!(may_know(&s, &console, &VOICE_G));
        assert!(!may_know(&s, &console, &DM_A));
        assert!(!may_know(&s, &ROOM_G, &console));
        assert!(!may_know(&s, &DM_A, &console));
    }

    #[test]
    fn trusted_rooms_are_the_trusted_dms_and_the_rooms_the_owner_marked() {
        let s = OwnerSettings { trusted_dms: vec![30], trusted_rooms: vec![10], ..Default::default() };
        assert!(trusted_room(&s, &DM_A) && trusted_room(&s, &ROOM_G));
        assert!(!trusted_room(&s, &DM_B) && !trusted_room(&s, &ROOM_H) && !trusted_room(&s, &VOICE_G));
    }

    #[test]
    fn sharing_none_keeps_every_thread_to_itself() {
        let s = OwnerSettings { sharing: Sharing::None, trusted_dms: vec![30], ..Default::default() };
        for (r, src) in [(ROOM_G, VOICE_G), (DM_A, ROOM_G)] {
            assert!(!may_know(&s, &r, &src));
        }
    }
}
