//! NATS JetStream: the servers, the streams, delivery.
use crate::setting::{Area, Kind, Service::*, Setting, Unit};

/// The `[bus]` section.
pub(crate) const SETTINGS: &[Setting] = &[
    Setting::new(
        Area::Bus,
        "CLANKIE_NATS_URL",
        Kind::Url,
        "nats://127.0.0.1:4222",
        "NATS server with JetStream enabled; a comma-separated list for a cluster (`nats://n1:4222,nats://n2:4222,nats://n3:4222`).",
        &[Gateway, Captain, VoiceFloor, Media, Console, Run, Cli],
    )
    .credentials()
    .must_set(),
    Setting::new(
        Area::Bus,
        "CLANKIE_INGRESS_MAX_DELIVER",
        Kind::Count,
        "8",
        "Deliveries of one message a captain tries, with growing backoff, before it settles it `failed` (`captain_lane_unavailable`) instead of looping.",
        &[Captain, Run],
    ),
    Setting::new(
        Area::Bus,
        "CLANKIE_STREAM_REPLICAS",
        Kind::Count,
        "1",
        "Copies JetStream keeps of every stream: 1 on one server, 3 on a three-node cluster. `clankie streams` applies a change.",
        &[Gateway, Captain, VoiceFloor, Media, Console, Run, Cli],
    ),
    Setting::new(
        Area::Bus,
        "CLANKIE_BUS_CONNECT_TIMEOUT_SECS",
        Kind::Duration(Unit::Seconds),
        "60",
        "How long a service keeps retrying its first NATS connection before giving up.",
        &[Gateway, Captain, VoiceFloor, Media, Console, Run],
    ),
    Setting::new(
        Area::Bus,
        "CLANKIE_INGRESS_DEDUP_WINDOW_SECS",
        Kind::Duration(Unit::Seconds),
        "120",
        "JetStream duplicate window for ingress; at least 120 so gateway redelivery posts once.",
        &[Gateway, Captain, VoiceFloor, Media, Console, Run],
    ),
    Setting::new(
        Area::Bus,
        "CLANKIE_INGRESS_ACK_WAIT_MS",
        Kind::Duration(Unit::Millis),
        "30000",
        "JetStream ack wait for captain deliveries; a delivery unacked this long (its replica died) is redelivered.",
        &[Captain, Run],
    ),
];
