use std::time::Duration;

use async_nats::jetstream::stream;
use clankie_proto::{Area, Family};

/// One JetStream stream: a name and the area of subjects it stores.
#[derive(Debug, Clone, Copy)]
pub struct StreamSpec {
    /// The stream name.
    pub name: &'static str,
    /// The subjects it holds.
    pub area: Area,
    /// How long messages are kept.
    pub max_age: Duration,
}

const DAY: Duration = Duration::from_secs(24 * 3600);
const DEFAULT_DEDUP: Duration = Duration::from_secs(120);

/// Every stream the services rely on. Ingress keeps the longest duplicate
/// window because gateway redelivery is where double answers come from.
pub const STREAMS: &[StreamSpec] = &[
    StreamSpec { name: "CLANKIE_INGRESS", area: Area::Ingress, max_age: Duration::from_secs(7 * 24 * 3600) },
    StreamSpec { name: "CLANKIE_LANE", area: Area::Lane, max_age: Duration::from_secs(7 * 24 * 3600) },
    StreamSpec { name: "CLANKIE_EGRESS", area: Area::Body, max_age: DAY },
    StreamSpec { name: "CLANKIE_VOICE", area: Area::Voice, max_age: DAY },
    StreamSpec { name: "CLANKIE_SELF", area: Area::Shared, max_age: Duration::from_secs(7 * 24 * 3600) },
    StreamSpec { name: "CLANKIE_RECEIPTS", area: Area::Receipt, max_age: Duration::from_secs(30 * 24 * 3600) },
];

/// The stream that stores a family's subjects; `None` for request/reply families.
pub fn stream_for(family: Family) -> Option<&'static StreamSpec> {
    let area = family.area();
    STREAMS.iter().find(|s| s.area == area)
}

impl StreamSpec {
    pub(crate) fn config(&self, ingress_dedup_window: Duration, replicas: usize) -> stream::Config {
        let duplicate_window = if self.area == Area::Ingress { ingress_dedup_window } else { DEFAULT_DEDUP };
        stream::Config {
            name: self.name.to_owned(),
            subjects: vec![self.area.wildcard()],
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
    fn every_area_has_exactly_one_stream() {
        for area in Area::ALL {
            let expected = usize::from(area.is_streamed());
            assert_eq!(STREAMS.iter().filter(|s| s.area == area).count(), expected, "{area:?}");
        }
        for family in Family::ALL.into_iter().filter(|f| f.area().is_streamed()) {
            assert_eq!(stream_for(family).map(|s| s.area), Some(family.area()));
        }
    }

    #[test]
    fn ingress_dedup_window_is_the_configured_one() {
        let cfg = stream_for(Family::IngressText).unwrap().config(Duration::from_secs(300), 3);
        assert_eq!(cfg.num_replicas, 3);
        assert_eq!(cfg.duplicate_window, Duration::from_secs(300));
        assert_eq!(stream_for(Family::Receipt).unwrap().config(Duration::from_secs(300), 1).duplicate_window, DEFAULT_DEDUP);
    }
}
