//! Attachments and artifacts.
use crate::setting::{Area, Kind, Service::*, Setting, Unit};

/// The `[media]` section.
pub(crate) const SETTINGS: &[Setting] = &[
    Setting::new(
        Area::Media,
        "CLANKIE_DISCORD_ATTACHMENT_ROOT",
        Kind::Path,
        "<state>/attachments",
        "Where attachments and artifacts live. An override, never a prerequisite.",
        &[Gateway, Captain, Media, Run],
    ),
    Setting::new(
        Area::Media,
        "CLANKIE_MEDIA_MAX_BYTES",
        Kind::Size(Unit::Bytes),
        "26214400",
        "Largest attachment media downloads or serves (25 MiB).",
        &[Media, Run],
    ),
    Setting::new(
        Area::Media,
        "CLANKIE_MEDIA_MAX_AGE_SECS",
        Kind::Duration(Unit::Seconds),
        "604800",
        "The sweeper removes attachments unused this long (7 days).",
        &[Media, Run],
    ),
    Setting::new(
        Area::Media,
        "CLANKIE_MEDIA_MAX_TOTAL_BYTES",
        Kind::Size(Unit::Bytes),
        "1073741824",
        "The sweeper removes the oldest attachments past this total (1 GiB); recent ones are kept.",
        &[Media, Run],
    ),
    Setting::new(
        Area::Media,
        "CLANKIE_MEDIA_TIMEOUT_MS",
        Kind::Duration(Unit::Millis),
        "60000",
        "How long a captain waits for media to fetch one picture for the model before the lane sees only its name.",
        &[Captain, Run],
    ),
    Setting::new(
        Area::Media,
        "CLANKIE_ATTACHMENTS_PER_MESSAGE",
        Kind::Count,
        "4",
        "Pictures of one message the model is shown; the rest are counted, with a receipt.",
        &[Captain, Run],
    ),
];
