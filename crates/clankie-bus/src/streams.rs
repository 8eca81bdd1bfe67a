use std::time::Duration;

use async_nats::jetstream::stream;
use clankie_proto::Family;

/// One JetStream stream: a name and the families of subjects it stores.
#[derive(Debug, Clone, Copy)]
pub struct StreamSpec {
    /// The stream name.
    pub name: &'static str,
    /// The families whose subjects it holds, all of one area.
    pub families: &'static [Family],
    /// How long messages are kept.
    pub max_age: Duration,
}

const DAY: Duration = Duration::from_secs(24 * 3600);
const DEFAULT_DEDUP: Duration = Duration::from_secs(120);

const WEEK: Duration = Duration::from_secs(7 * 24 * 3600);

/// Every stream the services rely on. Ingress keeps the longest duplicate
/// window because gateway redelivery is where double answers come from.
///
/// Text ingress, the busiest subjects (one per room), has a stream to itself so the
/// captains read it without a subject filter: a filtered consumer over thousands of
/// subjects costs an older nats-server a scan per message. It is listed before room input,
/// so a deployment whose `CLANKIE_INGRESS` once held all of `clankie.ingress.>` narrows it
/// before room input claims its own subjects.
pub const STREAMS: &[StreamSpec] = &[
    StreamSpec { name: "CLANKIE_INGRESS", families: &[Family::IngressText], max_age: WEEK },
    StreamSpec { name: "CLANKIE_ROOM_INPUT", families: &[Family::IngressRoom], max_age: WEEK },
    StreamSpec { name: "CLANKIE_LANE", families: &[Family::LaneSteer, Family::LaneOutcome], max_age: WEEK },
    StreamSpec { name: "CLANKIE_EGRESS", families: &[Family::BodyTyping, Family::BodySend], max_age: DAY },
    StreamSpec {
        name: "CLANKIE_VOICE",
        families: &[
            Family::VoiceSession,
            Family::VoiceInput,
            Family::VoiceTranscript,
            Family::VoiceFloor,
            Family::VoiceSpeak,
            Family::VoiceMember,
            Family::VoiceServer,
            Family::VoiceCommand,
        ],
        max_age: DAY,
    },
    StreamSpec { name: "CLANKIE_SELF", families: &[Family::SelfExperience], max_age: WEEK },
    StreamSpec { name: "CLANKIE_RECEIPTS", families: &[Family::Receipt], max_age: Duration::from_secs(30 * 24 * 3600) },
];

/// The stream that stores a family's subjects; `None` for request/reply families.
pub fn stream_for(family: Family) -> Option<&'static StreamSpec> {
    STREAMS.iter().find(|s| s.families.contains(&family))
}

impl StreamSpec {
    /// Whether `family` is all this stream holds, so its consumers need no subject filter.
    pub fn holds_only(&self, family: Family) -> bool {
        self.families == [family]
    }

    pub(crate) fn config(&self, ingress_dedup_window: Duration, replicas: usize) -> stream::Config {
        let ingress = self.families.iter().any(|f| f.area() == clankie_proto::Area::Ingress);
        let duplicate_window = if ingress { ingress_dedup_window } else { DEFAULT_DEDUP };
        stream::Config {
            name: self.name.to_owned(),
            subjects: self.families.iter().map(|f| f.wildcard()).collect(),
            storage: stream::StorageType::File,
            retention: stream::RetentionPolicy::Limits,
            max_age: self.max_age,
            duplicate_window: duplicate_window.min(self.max_age),
            num_replicas: replicas.max(1),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_streamed_family_has_exactly_one_stream_of_its_area() {
        for family in Family::ALL {
            let holding = STREAMS.iter().filter(|s| s.families.contains(&family)).count();
            assert_eq!(holding, usize::from(family.area().is_streamed()), "{family:?}");
        }
        for spec in STREAMS {
            assert!(spec.families.iter().all(|f| f.area() == spec.families[0].area()), "{} mixes areas", spec.name);
        }
        assert!(stream_for(Family::IngressText).unwrap().holds_only(Family::IngressText));
        assert!(!stream_for(Family::VoiceFloor).unwrap().holds_only(Family::VoiceFloor));
    }

    #[test]
    fn ingress_dedup_window_is_the_configured_one() {
        let cfg = stream_for(Family::IngressText).unwrap().config(Duration::from_secs(300), 3);
        assert_eq!(cfg.num_replicas, 3);
        assert_eq!(cfg.duplicate_window, Duration::from_secs(300));
        assert_eq!(stream_for(Family::Receipt).unwrap().config(Duration::from_secs(300), 1).duplicate_window, DEFAULT_DEDUP);
    }
}
