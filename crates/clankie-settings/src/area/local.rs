//! The embedded sandbox and the local stack (`clankie run`, `clankie stack`).
use crate::setting::{Area, Kind, Service::*, Setting};

/// The `[local]` section.
pub(crate) const SETTINGS: &[Setting] = &[
    Setting::new(Area::Local, "CLANKIE_SANDBOX_ADDR", Kind::Addr, "127.0.0.1:8700", "Where `clankie run` serves the loopback Discord and its sandbox page.", &[Cli]),
    Setting::new(Area::Local, "CLANKIE_SANDBOX_MESSAGES_KEPT", Kind::Count, "200", "Messages each sandbox room keeps (the newest); older ones leave its page and history.", &[Run]),
    Setting::new(Area::Local, "CLANKIE_LOOPBACK_DAVE", Kind::Flag, "on", "The loopback voice server speaks DAVE end-to-end encryption, as Discord requires (`off`: passthrough, for comparison).", &[Run, Tests]).env_only(),
    Setting::new(Area::Local, "CLANKIE_TOOLS_DIR", Kind::Path, "/var/tmp/clankie-tools", "Where the local stack installs its pinned tools (nats-server, the speech engines, llama.cpp's server) outside the clone; the speech image's are in /opt/clankie-tools.", &[Run, Cli]).env_only(),
    Setting::new(Area::Local, "CLANKIE_SPEECH_DIR", Kind::Path, "unset: a directory named for the pinned set under CLANKIE_TOOLS_DIR", "Where the local speech service's engines are installed (and looked for).", &[Run, Cli]).env_only(),
    Setting::new(Area::Local, "CLANKIE_LLAMA_DIR", Kind::Path, "unset: a directory named for the pins under CLANKIE_TOOLS_DIR", "Where `clankie llama` finds or installs llama.cpp's server and its model.", &[Run, Cli]).env_only(),
    Setting::new(Area::Local, "CLANKIE_NATS_SERVER", Kind::Path, "unset: the pinned one under CLANKIE_TOOLS_DIR, else on PATH", "The nats-server binary `clankie stack` and the tests start.", &[Run, Cli]).env_only(),
    Setting::new(Area::Local, "CLANKIE_LOOPBACK_VOICE_DIR", Kind::Path, "unset: <state>/voice", "Where `clankie loopback` keeps its voice server's CA and key.", &[Run, Cli]).env_only(),
];
