//! What the catalogue says of one setting: its area, type and unit, and who reads it.

/// A part of the system, and the config file's section for its settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Area {
    Core,
    Bus,
    Store,
    Discord,
    Model,
    Lanes,
    Media,
    Tools,
    Voice,
    Speech,
    Console,
    Local,
    Testing,
}

impl Area {
    /// The config file's section name.
    pub fn section(self) -> &'static str {
        match self {
            Area::Core => "core",
            Area::Bus => "bus",
            Area::Store => "store",
            Area::Discord => "discord",
            Area::Model => "model",
            Area::Lanes => "lanes",
            Area::Media => "media",
            Area::Tools => "tools",
            Area::Voice => "voice",
            Area::Speech => "speech",
            Area::Console => "console",
            Area::Local => "local",
            Area::Testing => "testing",
        }
    }
}

/// The unit a number is given in; the name's suffix says it too (`_MS`, `_SECS`, `_DAYS`, `_BYTES`, `_MIB`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Millis,
    Seconds,
    Days,
    Bytes,
    Mebibytes,
}

impl Unit {
    pub fn name(self) -> &'static str {
        match self {
            Unit::Millis => "ms",
            Unit::Seconds => "s",
            Unit::Days => "days",
            Unit::Bytes => "bytes",
            Unit::Mebibytes => "MiB",
        }
    }
}

/// What a value must look like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Text,
    /// `true/false`, `on/off`, `yes/no`, `1/0`.
    Flag,
    /// A whole number.
    Count,
    /// A number that may have a fraction, such as a price.
    Decimal,
    Duration(Unit),
    Size(Unit),
    /// One of the listed words.
    Choice(&'static [&'static str]),
    Url,
    /// `host:port`.
    Addr,
    /// An absolute path.
    Path,
    /// Comma-separated Discord ids.
    Ids,
    /// Comma-separated `guild:channel` pairs.
    Rooms,
    /// A comma-separated list.
    List,
    /// A log filter such as `info,sqlx=warn`.
    Filter,
}

impl Kind {
    /// The type as the README table and `clankie settings` show it.
    pub fn describe(self) -> String {
        match self {
            Kind::Text => "text".into(),
            Kind::Flag => "on/off".into(),
            Kind::Count => "number".into(),
            Kind::Decimal => "decimal number".into(),
            Kind::Duration(u) | Kind::Size(u) => format!("number ({})", u.name()),
            Kind::Choice(words) => words.join("/"),
            Kind::Url => "URL".into(),
            Kind::Addr => "host:port".into(),
            Kind::Path => "path".into(),
            Kind::Ids => "ids".into(),
            Kind::Rooms => "guild:channel list".into(),
            Kind::List => "list".into(),
            Kind::Filter => "log filter".into(),
        }
    }
}

/// A process that reads settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    Gateway,
    Captain,
    VoiceFloor,
    Media,
    Console,
    /// `clankie run`: the embedded sandbox.
    Run,
    /// The operator's commands (`clankie doctor`, `trail`, `stack`, ...).
    Cli,
    /// The local speech service (`deploy/speech/server.py`).
    Speech,
    Tests,
    Bench,
}

impl Service {
    /// Every service, in the order `clankie settings` names them.
    pub const ALL: [Service; 10] = [
        Service::Gateway,
        Service::Captain,
        Service::VoiceFloor,
        Service::Media,
        Service::Console,
        Service::Run,
        Service::Cli,
        Service::Speech,
        Service::Tests,
        Service::Bench,
    ];

    /// The name `clankie settings --service` takes.
    pub fn name(self) -> &'static str {
        match self {
            Service::Gateway => "gateway",
            Service::Captain => "captain",
            Service::VoiceFloor => "voice-floor",
            Service::Media => "media",
            Service::Console => "console",
            Service::Run => "run",
            Service::Cli => "cli",
            Service::Speech => "speech",
            Service::Tests => "tests",
            Service::Bench => "bench",
        }
    }

    pub fn by_name(name: &str) -> Option<Service> {
        Service::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// One documented setting.
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    /// The environment variable.
    pub name: &'static str,
    pub area: Area,
    pub kind: Kind,
    /// The default, as a person would read it.
    pub default: &'static str,
    /// What it is for.
    pub doc: &'static str,
    /// Which processes read it.
    pub services: &'static [Service],
    /// A real deployment (Discord itself, a real model) must set it.
    pub must_set: bool,
    /// Never shown; may be given as `<NAME>_FILE`.
    pub secret: bool,
    /// A URL that may hold a password: shown redacted; may be given as `<NAME>_FILE`.
    pub credentials: bool,
    /// Read from the environment only (tests, the speech service, the config file's own name).
    pub env_only: bool,
}

impl Setting {
    pub(crate) const fn new(
        area: Area,
        name: &'static str,
        kind: Kind,
        default: &'static str,
        doc: &'static str,
        services: &'static [Service],
    ) -> Setting {
        Setting { name, area, kind, default, doc, services, must_set: false, secret: false, credentials: false, env_only: false }
    }

    pub(crate) const fn secret(mut self) -> Setting {
        self.secret = true;
        self
    }

    pub(crate) const fn credentials(mut self) -> Setting {
        self.credentials = true;
        self
    }

    pub(crate) const fn must_set(mut self) -> Setting {
        self.must_set = true;
        self
    }

    pub(crate) const fn env_only(mut self) -> Setting {
        self.env_only = true;
        self
    }

    /// The config file's key: the name without `CLANKIE_`, in lower case.
    pub fn key(&self) -> String {
        self.name.trim_start_matches("CLANKIE_").to_ascii_lowercase()
    }

    /// Whether `<NAME>_FILE` (or `<key>_file` in the config file) may give it.
    pub fn from_file_allowed(&self) -> bool {
        self.secret || self.credentials
    }

    /// Whether `service` reads it.
    pub fn read_by(&self, service: Service) -> bool {
        self.services.contains(&service)
    }
}
