//! The catalogue: every `CLANKIE_*` setting any binary or script reads, with its type, unit,
//! default, whether a real deployment must set it, and which services read it.
//!
//! Each area's settings live in `area/<area>.rs`, named after the config file's section;
//! [`AREAS`] is the one table that joins them. The README's configuration table, `clankie
//! settings`, the config file's keys and the misspelling check are all read from here.

use crate::area;
pub use crate::setting::{Area, Kind, Service, Setting, Unit};

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
