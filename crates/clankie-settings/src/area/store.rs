//! PostgreSQL and how long it keeps things.
use crate::setting::{Area, Kind, Service::*, Setting, Unit};

/// The `[store]` section.
pub(crate) const SETTINGS: &[Setting] = &[
    Setting::new(
        Area::Store,
        "CLANKIE_DATABASE_URL",
        Kind::Url,
        "postgres://clankie@127.0.0.1:55432/clankie",
        "PostgreSQL database for lanes, sessions and receipts. The password is never logged.",
        &[Captain, VoiceFloor, Console, Run, Cli, Bench],
    )
    .credentials()
    .must_set(),
    Setting::new(
        Area::Store,
        "CLANKIE_RECEIPTS_RETENTION_DAYS",
        Kind::Duration(Unit::Days),
        "30",
        "Receipts older than this are swept (by the captains, in bounded batches).",
        &[Captain, Run],
    ),
    Setting::new(
        Area::Store,
        "CLANKIE_RECORDS_RETENTION_DAYS",
        Kind::Duration(Unit::Days),
        "30",
        "Settled deliveries, admissions, turns and sent or given-up outbox rows older than this are swept. At least 8: longer than the ingress stream keeps a message (a week), so a redelivered message always finds its outcome.",
        &[Captain, Run],
    ),
    Setting::new(
        Area::Store,
        "CLANKIE_REPLACED_ENTRIES_RETENTION_DAYS",
        Kind::Duration(Unit::Days),
        "7",
        "Session entries a compaction replaced with its summary are swept once older than this; what a compaction kept stays.",
        &[Captain, Run],
    ),
    Setting::new(
        Area::Store,
        "CLANKIE_VOICE_RING_RETENTION_DAYS",
        Kind::Duration(Unit::Days),
        "7",
        "Lines of the voice ring (what was said in voice) older than this are swept by the voice floor.",
        &[VoiceFloor, Run],
    ),
    Setting::new(
        Area::Store,
        "CLANKIE_VOICE_RING_MAX_LINES",
        Kind::Count,
        "2000",
        "The most lines the voice ring keeps per room; older ones are swept.",
        &[VoiceFloor, Run],
    ),
    Setting::new(
        Area::Store,
        "CLANKIE_RETENTION_SWEEP_MS",
        Kind::Duration(Unit::Millis),
        "3600000",
        "How often the sweepers run (the first sweep comes a minute after start).",
        &[Captain, VoiceFloor, Run],
    ),
];
