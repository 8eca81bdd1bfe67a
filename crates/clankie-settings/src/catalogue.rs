//! The catalogue: every `CLANKIE_*` setting any binary or script reads, with its type, unit,
//! default, whether a real deployment must set it, and which services read it.
//!
//! Each area's settings live in `area/<area>.rs`, named after the config file's section;
//! [`AREAS`] is the one table that joins them. The README's configuration table, `clankie
//! settings`, the config file's keys and the misspelling check are all read from here.

use crate::area;

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

/// The one table: every area's settings, in the order the README shows them.
pub const AREAS: &[(Area, &[Setting])] = &[
    (Area::Core, area::core::SETTINGS),
    (Area::Bus, area::bus::SETTINGS),
    (Area::Store, area::store::SETTINGS),
    (Area::Discord, area::discord::SETTINGS),
    (Area::Model, area::model::SETTINGS),
    (Area::Lanes, area::lanes::SETTINGS),
    (Area::Media, area::media::SETTINGS),
    (Area::Tools, area::tools::SETTINGS),
    (Area::Voice, area::voice::SETTINGS),
    (Area::Speech, area::speech::SETTINGS),
    (Area::Console, area::console::SETTINGS),
    (Area::Local, area::local::SETTINGS),
    (Area::Testing, area::testing::SETTINGS),
];

/// Every setting.
pub fn catalogue() -> impl Iterator<Item = &'static Setting> {
    AREAS.iter().flat_map(|(_, settings)| settings.iter())
}

/// The setting named `name`.
pub fn find(name: &str) -> Option<&'static Setting> {
    catalogue().find(|s| s.name == name)
}

/// The known name nearest to a misspelt one, if any is near enough to be what was meant.
pub fn closest<'a>(unknown: &str, known: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let (best, distance) = known.map(|k| (k, edit_distance(unknown, k))).min_by_key(|(_, d)| *d)?;
    (distance <= (unknown.len() / 3).max(2)).then_some(best)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1).min(row[j] + 1).min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// The README's configuration table, one section per area.
pub fn markdown() -> String {
    let mut out = String::new();
    for (area, settings) in AREAS {
        out.push_str(&format!("\n#### `[{}]`\n\n", area.section()));
        out.push_str("| variable | type | default | must set | read by | meaning |\n|---|---|---|---|---|---|\n");
        for s in *settings {
            let readers: Vec<&str> = s.services.iter().map(|r| r.name()).collect();
            out.push_str(&format!(
                "| `{}` | {} | `{}` | {} | {} | {} |\n",
                s.name,
                s.kind.describe(),
                s.default,
                if s.must_set { "yes" } else { "" },
                readers.join(", "),
                s.doc
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_is_unique_and_carries_the_prefix() {
        let mut names: Vec<&str> = catalogue().map(|s| s.name).collect();
        let all = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all, "a setting is listed twice");
        assert!(catalogue().all(|s| s.name.starts_with("CLANKIE_") && !s.services.is_empty()));
        assert!(AREAS.iter().all(|(area, settings)| settings.iter().all(|s| s.area == *area)));
    }

    #[test]
    fn a_misspelling_finds_the_setting_meant() {
        let names = || catalogue().map(|s| s.name);
        assert_eq!(closest("CLANKIE_VOICE_ROOM", names()), Some("CLANKIE_VOICE_ROOMS"));
        assert_eq!(closest(concat!("CLANKIE_", "DISCORD_TOKN"), names()), Some("CLANKIE_DISCORD_TOKEN"));
        assert_eq!(closest(concat!("CLANKIE_", "SOMETHING_ELSE_ENTIRELY"), names()), None);
    }
}
