//! Where state lives, logging, the HTTP endpoint, the config file.
use crate::setting::{Area, Kind, Service::*, Setting, Unit};

/// The `[core]` section.
pub(crate) const SETTINGS: &[Setting] = &[
    Setting::new(Area::Core, "CLANKIE_STATE_DIR", Kind::Path, "$XDG_STATE_HOME/clankie, else ~/.local/state/clankie", "Root of local state: the local stack's data, attachments unless overridden.", &[Gateway, Captain, VoiceFloor, Media, Console, Run, Cli]),
    Setting::new(Area::Core, "CLANKIE_REPLICA_ID", Kind::Text, "<hostname>-<pid>", "This process's name in lane leases and receipts; the default is unique per process (a container's or pod's hostname), so set it only to choose the name.", &[Gateway, Captain, VoiceFloor, Media, Console, Run]),
    Setting::new(Area::Core, "CLANKIE_LOG", Kind::Filter, "info,sqlx=warn", "tracing filter, e.g. `info,clankie_bus=debug`.", &[Gateway, Captain, VoiceFloor, Media, Console, Run, Cli]),
    Setting::new(Area::Core, "CLANKIE_HTTP_ADDR", Kind::Addr, "unset: no HTTP endpoint", "Address a service serves `/healthz` and `/metrics` on, e.g. `0.0.0.0:9470`.", &[Gateway, Captain, VoiceFloor, Media, Console, Run]),
    Setting::new(Area::Core, "CLANKIE_SHUTDOWN_GRACE_MS", Kind::Duration(Unit::Millis), "30000", "On SIGTERM, how long a captain lets live runs finish before it exits (others take the lanes).", &[Gateway, Captain, VoiceFloor, Media, Console, Run]),
    Setting::new(Area::Core, "CLANKIE_CONFIG", Kind::Path, "unset: no file", "The config file (TOML, sections by area; see `deploy/clankie.example.toml`). `clankie --config FILE` sets it. The environment overrides the file.", &[Gateway, Captain, VoiceFloor, Media, Console, Run, Cli]).env_only(),
];
