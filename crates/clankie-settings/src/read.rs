//! The reader: every setting parsed from its [`Sources`] and checked, area by area in the
//! catalogue's order, each area's reader (`areas.rs`) filling in its fields.

mod areas;
mod given;

use crate::catalogue::{self, Area};
use crate::{Settings, SettingsError, Sources};
use given::Given;

/// An area's reader: fills in that area's fields from what is given.
type Reader = fn(&mut Given<'_>, &mut Settings) -> Result<(), SettingsError>;

/// The reader of each of the catalogue's areas.
fn reader(area: Area) -> Reader {
    match area {
        Area::Core => areas::core,
        Area::Bus => areas::bus,
        Area::Store => areas::store,
        Area::Discord => areas::discord,
        Area::Model => areas::model,
        Area::Lanes => areas::lanes,
        Area::Media => areas::media,
        Area::Tools => areas::tools,
        Area::Voice => areas::voice,
        Area::Speech => areas::speech,
        Area::Console => areas::console,
        Area::Local => areas::local,
        Area::Testing => areas::testing,
    }
}

impl Settings {
    /// Reads the settings `sources` give, one area of the catalogue after another; `lookup`
    /// answers the few names outside the catalogue a default is derived from (`HOME`,
    /// `XDG_STATE_HOME`, `HOSTNAME`).
    pub fn from_sources(sources: Sources, lookup: impl Fn(&str) -> Option<String>) -> Result<Settings, SettingsError> {
        let given_sources = sources.clone();
        let mut given = Given::new(&given_sources, &lookup);
        for (old, new) in DEPRECATED {
            if given.var(old).is_some() {
                given.notices.push(format!("{old} is deprecated and will go: {new}"));
            }
        }
        let mut settings = Settings { sources, ..Settings::default() };
        for (area, _) in catalogue::AREAS {
            reader(*area)(&mut given, &mut settings)?;
        }
        settings.notices = given.notices;
        Ok(settings)
    }
}

/// The settings the shared self now holds, and what replaces each.
const DEPRECATED: [(&str, &str); 3] = [
    ("CLANKIE_BOT_NAME", "set the persona's name (`clankie self persona --name`, or `name` in a self file)"),
    ("CLANKIE_OPERATOR_GRANTS", "grant in the owner settings (`clankie self settings --grants`, or `grants` in a self file)"),
    ("CLANKIE_DISCORD_GUILDS", "admit guilds in the owner settings (`clankie self settings --guilds`, or `guilds` in a self file)"),
];
