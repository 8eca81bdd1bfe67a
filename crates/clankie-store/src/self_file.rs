//! The self as a file: a TOML file (`deploy/self.example.toml`) giving some of the persona, the
//! owner settings and approved memory, applied by `clankie self apply` and by a captain at start
//! (`CLANKIE_SELF_FILE`).
//!
//! The file wins only where it says so. A field it leaves out is never touched; a field it gives
//! is written only when its value differs from what the file last applied to that field
//! (`self_file_applied`), so an edit made since, in the console or with `clankie self`, stands
//! until the file changes that field, and applying one file twice writes nothing. A write goes
//! through the same statement as a console edit: one version bump and one `self_versions` row.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use sqlx::Row;

use crate::shared_self::{insert_memory, owner_settings_from, persona_from, write_owner_settings, write_persona};
use crate::{MemoryStatus, OwnerSettings, Persona, Sharing, Store, StoreError};

/// The longest name accepted.
pub const MAX_NAME_CHARS: usize = 80;
/// The longest character sheet or speaking style accepted.
pub const MAX_PERSONA_CHARS: usize = 8000;
/// The longest fact accepted (the same bound as the proposal tool's).
pub const MAX_FACT_CHARS: usize = 300;
/// Where a memory the self file added says it came from (`self_memory.proposed_in`).
pub const SELF_FILE_SOURCE: &str = "self-file";

/// The advisory lock class applies take, so captains starting side by side apply a file once.
const SELF_FILE_LOCK: i32 = 0x7365_6c66; // "self"

/// Why a self file was refused; nothing of it is applied then. The caller names the file, so
/// these messages do not; of its text they quote at most a mistyped id or code.
#[derive(Debug, thiserror::Error)]
pub enum SelfFileError {
    #[error("it cannot be read: check that the path names a readable file")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{0}: fix that line; deploy/self.example.toml shows every key a self file may hold")]
    Invalid(String),
    #[error("{field} is {chars} characters; at most {max} are accepted: shorten it in the self file")]
    TooLong { field: &'static str, chars: usize, max: usize },
    #[error("{field}: {value:?} is not a Discord id (a number such as 123456789012345678)")]
    NotAnId { field: &'static str, value: String },
    #[error("settings.sharing is {0:?}: write \"guild\" or \"none\"")]
    Sharing(String),
    #[error("memory.facts holds an empty fact: give it words or take it out of the file")]
    EmptyFact,
}

/// A self file, parsed and checked: `None` is a field the file leaves alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SelfFile {
    pub name: Option<String>,
    pub aliases: Option<Vec<String>>,
    pub sheet: Option<String>,
    pub style: Option<String>,
    /// `Some(None)`: the file says there is no owner.
    pub owner: Option<Option<u64>>,
    pub operators: Option<Vec<u64>>,
    pub grants: Option<Vec<u64>>,
    pub guilds: Option<Vec<u64>>,
    pub channels: Option<Vec<u64>>,
    pub trusted_dms: Option<Vec<u64>>,
    pub trusted_rooms: Option<Vec<u64>>,
    pub sharing: Option<Sharing>,
    /// Approved memory the file brings; a fact is added once, never taken back by the file.
    pub facts: Vec<String>,
}

/// What one apply wrote: field names and counts, never values, so it may be logged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SelfFileReport {
    /// The persona and owner-settings fields whose stored value the apply changed
    /// (`persona.name`, `settings.operators`, …), in the file's order.
    pub written: Vec<&'static str>,
    /// Facts added as approved memory.
    pub memories_added: usize,
    /// The persona's new version, when it was written.
    pub persona_version: Option<i64>,
    /// The owner settings' new version, when they were written.
    pub settings_version: Option<i64>,
}

impl SelfFileReport {
    /// Whether the apply changed nothing.
    pub fn is_empty(&self) -> bool {
        self.written.is_empty() && self.memories_added == 0
    }
}

impl fmt::Display for SelfFileReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("nothing changed");
        }
        let mut parts: Vec<String> = self.written.iter().map(|w| (*w).to_owned()).collect();
        if self.memories_added > 0 {
            parts.push(format!("{} approved memor{}", self.memories_added, if self.memories_added == 1 { "y" } else { "ies" }));
        }
        f.write_str(&parts.join(", "))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    persona: Option<RawPersona>,
    settings: Option<RawSettings>,
    memory: Option<RawMemory>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPersona {
    name: Option<String>,
    aliases: Option<Vec<String>>,
    sheet: Option<String>,
    style: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSettings {
    owner: Option<RawId>,
    operators: Option<Vec<RawId>>,
    grants: Option<Vec<RawId>>,
    guilds: Option<Vec<RawId>>,
    channels: Option<Vec<RawId>>,
    trusted_dms: Option<Vec<RawId>>,
    trusted_rooms: Option<Vec<RawId>>,
    sharing: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMemory {
    facts: Option<Vec<String>>,
}

/// An id as written: a TOML integer or a string, checked as a Discord id afterwards so the
/// error can name its field.
struct RawId(String);

impl<'de> Deserialize<'de> for RawId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<RawId, D::Error> {
        struct Visit;
        impl serde::de::Visitor<'_> for Visit {
            type Value = RawId;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a Discord id, as a number or a string")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<RawId, E> {
                Ok(RawId(v.to_string()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<RawId, E> {
                Ok(RawId(v.to_string()))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<RawId, E> {
                Ok(RawId(v.to_owned()))
            }
        }
        d.deserialize_any(Visit)
    }
}

fn id(field: &'static str, raw: &RawId) -> Result<u64, SelfFileError> {
    raw.0.trim().parse().map_err(|_| SelfFileError::NotAnId { field, value: raw.0.chars().take(40).collect() })
}

fn id_list(field: &'static str, raw: Option<Vec<RawId>>) -> Result<Option<Vec<u64>>, SelfFileError> {
    raw.map(|list| list.iter().map(|r| id(field, r)).collect()).transpose()
}

fn bounded(field: &'static str, text: String, max: usize) -> Result<String, SelfFileError> {
    let chars = text.chars().count();
    if chars > max {
        return Err(SelfFileError::TooLong { field, chars, max });
    }
    Ok(text)
}

/// Where in the text a TOML error points, as a line and column, without quoting the line.
fn position(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// A parser's message with every quoted value left out: it may hold a fact or a persona's words,
/// and the error reaches the captain's log. Key names (quoted with backticks) stay.
fn unquoted(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut quoted = false;
    for c in message.chars() {
        match (c, quoted) {
            ('"', false) => {
                quoted = true;
                out.push_str("\"…\"");
            }
            ('"', true) => quoted = false,
            (c, false) => out.push(c),
            (_, true) => {}
        }
    }
    out
}

impl SelfFile {
    /// Parses and checks a self file's text, as the CLI checks the same fields.
    pub fn parse(text: &str) -> Result<SelfFile, SelfFileError> {
        let raw: RawFile = toml::from_str(text).map_err(|e| {
            let at = e.span().map(|s| position(text, s.start));
            SelfFileError::Invalid(match at {
                Some((line, column)) => format!("line {line}, column {column}: {}", unquoted(e.message().trim())),
                None => unquoted(e.message().trim()),
            })
        })?;
        let mut file = SelfFile::default();
        if let Some(p) = raw.persona {
            file.name = p.name.map(|n| bounded("persona.name", n.trim().to_owned(), MAX_NAME_CHARS)).transpose()?;
            file.aliases = p.aliases.map(|a| a.iter().map(|a| a.trim().to_owned()).filter(|a| !a.is_empty()).collect());
            file.sheet = p.sheet.map(|s| bounded("persona.sheet", s, MAX_PERSONA_CHARS)).transpose()?;
            file.style = p.style.map(|s| bounded("persona.style", s, MAX_PERSONA_CHARS)).transpose()?;
        }
        if let Some(s) = raw.settings {
            file.owner = s
                .owner
                .map(|o| match o.0.trim() {
                    "" | "none" => Ok(None),
                    _ => id("settings.owner", &o).map(Some),
                })
                .transpose()?;
            file.operators = id_list("settings.operators", s.operators)?;
            file.grants = id_list("settings.grants", s.grants)?;
            file.guilds = id_list("settings.guilds", s.guilds)?;
            file.channels = id_list("settings.channels", s.channels)?;
            file.trusted_dms = id_list("settings.trusted_dms", s.trusted_dms)?;
            file.trusted_rooms = id_list("settings.trusted_rooms", s.trusted_rooms)?;
            file.sharing = s
                .sharing
                .map(|c| Sharing::parse(c.trim()).ok_or_else(|| SelfFileError::Sharing(c.chars().take(20).collect())))
                .transpose()?;
        }
        for fact in raw.memory.and_then(|m| m.facts).unwrap_or_default() {
            let fact = bounded("a fact in memory.facts", fact.trim().to_owned(), MAX_FACT_CHARS)?;
            if fact.is_empty() {
                return Err(SelfFileError::EmptyFact);
            }
            if !file.facts.contains(&fact) {
                file.facts.push(fact);
            }
        }
        Ok(file)
    }

    /// Reads and checks the self file at `path`.
    pub fn read(path: &Path) -> Result<SelfFile, SelfFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| SelfFileError::Read { path: path.to_owned(), source })?;
        SelfFile::parse(&text)
    }

    fn persona_fields(&self) -> Vec<Given<Persona>> {
        let mut out: Vec<Given<Persona>> = Vec::new();
        given(&mut out, "persona.name", &self.name, |p| &mut p.name);
        given(&mut out, "persona.aliases", &self.aliases, |p| &mut p.aliases);
        given(&mut out, "persona.sheet", &self.sheet, |p| &mut p.character_sheet);
        given(&mut out, "persona.style", &self.style, |p| &mut p.speaking_style);
        out
    }

    fn settings_fields(&self) -> Vec<Given<OwnerSettings>> {
        let mut out: Vec<Given<OwnerSettings>> = Vec::new();
        given(&mut out, "settings.owner", &self.owner, |s| &mut s.owner_id);
        given(&mut out, "settings.operators", &self.operators, |s| &mut s.operators);
        given(&mut out, "settings.grants", &self.grants, |s| &mut s.grants);
        given(&mut out, "settings.guilds", &self.guilds, |s| &mut s.guilds);
        given(&mut out, "settings.channels", &self.channels, |s| &mut s.channels);
        given(&mut out, "settings.trusted_dms", &self.trusted_dms, |s| &mut s.trusted_dms);
        given(&mut out, "settings.trusted_rooms", &self.trusted_rooms, |s| &mut s.trusted_rooms);
        given(&mut out, "settings.sharing", &self.sharing, |s| &mut s.sharing);
        out
    }
}

/// One field the file gives: its name, the digest of its value, and how to set it on the
/// stored row (true when that changed the row).
struct Given<T> {
    field: &'static str,
    digest: String,
    set: Box<dyn Fn(&mut T) -> bool + Send + Sync>,
}

fn digest(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

fn given<T: 'static, V>(out: &mut Vec<Given<T>>, field: &'static str, value: &Option<V>, slot: fn(&mut T) -> &mut V)
where
    V: Serialize + Clone + PartialEq + Send + Sync + 'static,
{
    let Some(value) = value.clone() else { return };
    // JSON of plain strings, numbers and lists: the same value always gives the same digest.
    let digest = digest(serde_json::to_string(&value).unwrap_or_default().as_bytes());
    let set = move |row: &mut T| {
        let held = slot(row);
        let changed = *held != value;
        *held = value.clone();
        changed
    };
    out.push(Given { field, digest, set: Box::new(set) });
}

impl Store {
    /// Applies a self file in one transaction: each field the file gives whose value differs
    /// from what the file last applied there is set on the stored row, each table written
    /// (once, with its version row) only when a value changed, and each fact the file never
    /// applied before added as approved memory unless it is approved memory already.
    pub async fn apply_self_file(&self, file: &SelfFile) -> Result<SelfFileReport, StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1, 0)").bind(SELF_FILE_LOCK).execute(&mut *tx).await?;
        let applied: HashMap<String, String> = sqlx::query("SELECT field, digest FROM self_file_applied")
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(|r| Ok((r.try_get("field")?, r.try_get("digest")?)))
            .collect::<Result<_, StoreError>>()?;
        let is_new = |field: &str, digest: &str| applied.get(field).is_none_or(|d| d != digest);
        let mut report = SelfFileReport::default();
        let mut taken: Vec<(String, String)> = Vec::new();

        let due: Vec<Given<Persona>> = file.persona_fields().into_iter().filter(|g| is_new(g.field, &g.digest)).collect();
        if !due.is_empty() {
            let row =
                sqlx::query("SELECT name, aliases, character_sheet, speaking_style, version FROM self_persona WHERE id = 1 FOR UPDATE")
                    .fetch_one(&mut *tx)
                    .await?;
            let mut persona = persona_from(&row)?;
            let written = set_each(&mut persona, due, &mut taken);
            if !written.is_empty() {
                report.persona_version = Some(write_persona(&mut *tx, &persona).await?);
                report.written.extend(written);
            }
        }

        let due: Vec<Given<OwnerSettings>> = file.settings_fields().into_iter().filter(|g| is_new(g.field, &g.digest)).collect();
        if !due.is_empty() {
            let row = sqlx::query(
                "SELECT owner_id, operators, grants, guilds, channels, trusted_dms, trusted_rooms, sharing, version
                 FROM self_settings WHERE id = 1 FOR UPDATE",
            )
            .fetch_one(&mut *tx)
            .await?;
            let mut settings = owner_settings_from(&row)?;
            let written = set_each(&mut settings, due, &mut taken);
            if !written.is_empty() {
                report.settings_version = Some(write_owner_settings(&mut *tx, &settings).await?);
                report.written.extend(written);
            }
        }

        let mut seen = HashSet::new();
        for fact in &file.facts {
            let digest = digest(fact.as_bytes());
            let field = format!("memory.fact:{digest}");
            if !is_new(&field, &digest) || !seen.insert(digest.clone()) {
                continue;
            }
            let known: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM self_memory WHERE status = 'approved' AND fact = $1)")
                .bind(fact)
                .fetch_one(&mut *tx)
                .await?;
            if !known {
                insert_memory(&mut *tx, fact, MemoryStatus::Approved, SELF_FILE_SOURCE).await?;
                report.memories_added += 1;
            }
            taken.push((field, digest));
        }

        if !taken.is_empty() {
            let (fields, digests): (Vec<String>, Vec<String>) = taken.into_iter().unzip();
            sqlx::query(
                "INSERT INTO self_file_applied (field, digest)
                 SELECT * FROM unnest($1::text[], $2::text[])
                 ON CONFLICT (field) DO UPDATE SET digest = EXCLUDED.digest, applied_at = now()",
            )
            .bind(&fields)
            .bind(&digests)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(report)
    }
}

/// Sets each due field on `row`, noting it as applied; returns the fields whose value changed.
fn set_each<T>(row: &mut T, due: Vec<Given<T>>, taken: &mut Vec<(String, String)>) -> Vec<&'static str> {
    let mut written = Vec::new();
    for g in due {
        if (g.set)(row) {
            written.push(g.field);
        }
        taken.push((g.field.to_owned(), g.digest));
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_a_self_file_error_never_quotes_what_the_file_says() {
        let err = SelfFile::parse("[memory]\nfacts = \"ada's secret recipe\"\n").unwrap_err().to_string();
        assert!(!err.contains("secret recipe") && err.contains("line 2"), "{err}");
        let err = SelfFile::parse("[settings]\nsharing = \"everyone, including the secret recipe\"\n").unwrap_err().to_string();
        assert!(!err.contains("secret recipe"), "{err}");
    }
}
