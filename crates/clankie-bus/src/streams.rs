use std::time::Duration;

use async_nats::jetstream::stream;
use clankie_proto::{Area, Family};

/// One JetStream stream: a name, and the area whose subjects it stores.
#[derive(Debug, Clone, Copy)]
pub struct StreamSpec {
    /// The stream name.
    pub name: &'static str,
    /// The area whose families it holds.
    pub area: Area,
    /// A family of the area with a stream to itself; `None` holds the area's other families.
    pub only: Option<Family>,
    /// How long messages are kept; zero keeps them until they are removed (or their own TTL ends).
    pub max_age: Duration,
}

/// The stream reminders' schedule definitions and their firings live in.
pub const SCHEDULES_STREAM: &str = "CLANKIE_SCHEDULES";

const DAY: Duration = Duration::from_secs(24 * 3600);
const DEFAULT_DEDUP: Duration = Duration::from_secs(120);

const WEEK: Duration = Duration::from_secs(7 * 24 * 3600);

const fn stream(name: &'static str, area: Area, max_age: Duration) -> StreamSpec {
    StreamSpec { name, area, only: None, max_age }
}

/// Every stream the services rely on. Ingress keeps the longest duplicate
/// window because gateway redelivery is where double answers come from.
///
/// Text ingress, the busiest subjects (one per room), has a stream to itself so the
/// captains read it without a subject filter: a filtered consumer over thousands of
/// subjects costs an older nats-server a scan per message. It is listed before room input,
/// so a deployment whose `CLANKIE_INGRESS` once held all of `clankie.ingress.>` narrows it
/// before room input claims its own subjects.
///
/// The schedules stream keeps its messages until they are removed: a reminder's definition
/// waits there however far ahead it is due (nats-server removes a one-off's once it fires, a
/// cancel purges it), and each firing goes by its own TTL (`FIRING_TTL`, seven days).
pub const STREAMS: &[StreamSpec] = &[
    StreamSpec { name: "CLANKIE_INGRESS", area: Area::Ingress, only: Some(Family::IngressText), max_age: WEEK },
    stream("CLANKIE_ROOM_INPUT", Area::Ingress, WEEK),
    stream("CLANKIE_LANE", Area::Lane, WEEK),
    stream("CLANKIE_EGRESS", Area::Body, DAY),
    stream("CLANKIE_VOICE", Area::Voice, DAY),
    stream("CLANKIE_SELF", Area::Shared, WEEK),
    stream(SCHEDULES_STREAM, Area::Schedule, Duration::ZERO),
    stream("CLANKIE_RECEIPTS", Area::Receipt, Duration::from_secs(30 * 24 * 3600)),
];

/// The stream that stores a family's subjects; `None` for request/reply families.
pub fn stream_for(family: Family) -> Option<&'static StreamSpec> {
    STREAMS.iter().find(|s| s.families().contains(&family))
}

impl StreamSpec {
    /// The families whose subjects it holds, in catalogue order.
    pub fn families(&self) -> Vec<Family> {
        match self.only {
            Some(family) => vec![family],
            None => Family::ALL
                .into_iter()
                .filter(|f| f.area() == self.area && self.area.is_streamed() && !STREAMS.iter().any(|s| s.only == Some(*f)))
                .collect(),
        }
    }

    /// Whether `family` is all this stream holds, so its consumers need no subject filter.
    pub fn holds_only(&self, family: Family) -> bool {
        self.families() == [family]
    }

    pub(crate) fn config(&self, ingress_dedup_window: Duration, replicas: usize) -> stream::Config {
        let duplicate_window = if self.area == Area::Ingress { ingress_dedup_window } else { DEFAULT_DEDUP };
        let schedules = self.area == Area::Schedule;
        stream::Config {
            name: self.name.to_owned(),
            subjects: self.families().iter().map(|f| f.wildcard()).collect(),
            storage: stream::StorageType::File,
            retention: stream::RetentionPolicy::Limits,
            max_age: self.max_age,
            duplicate_window: if self.max_age.is_zero() { duplicate_window } else { duplicate_window.min(self.max_age) },
            num_replicas: replicas.max(1),
            // nats-server keeps each definition as the one message of its subject (it adds a
            // subject rollup to it, which the stream must allow), publishes the body on its
            // target when due, and gives each firing the TTL the definition names.
            allow_message_schedules: schedules,
            allow_message_ttl: schedules,
            allow_rollup: schedules,
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
            let holding = STREAMS.iter().filter(|s| s.families().contains(&family)).count();
            assert_eq!(holding, usize::from(family.area().is_streamed()), "{family:?}");
        }
        for spec in STREAMS {
            assert!(spec.families().iter().all(|f| f.area() == spec.families()[0].area()), "{} mixes areas", spec.name);
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

    #[test]
    fn the_schedules_stream_holds_definitions_and_firings_and_keeps_them_until_removed() {
        let spec = stream_for(Family::ScheduleDef).unwrap();
        assert_eq!(spec.name, SCHEDULES_STREAM);
        assert!(std::ptr::eq(spec, stream_for(Family::ScheduleDue).unwrap()), "a firing must land in its definition's stream");
        let cfg = spec.config(Duration::from_secs(300), 3);
        assert!(cfg.allow_message_schedules && cfg.allow_message_ttl && cfg.allow_rollup);
        assert_eq!((cfg.max_age, cfg.num_replicas, cfg.duplicate_window), (Duration::ZERO, 3, DEFAULT_DEDUP));
        let other = stream_for(Family::SelfExperience).unwrap().config(Duration::from_secs(300), 1);
        assert!(!other.allow_message_schedules && !other.allow_message_ttl && !other.allow_rollup);
    }
}
