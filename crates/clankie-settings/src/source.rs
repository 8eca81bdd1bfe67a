//! Where values come from: the environment over the config file over the defaults, with
//! secrets readable from files, and every name checked against the catalogue so a
//! misspelling stops the service instead of being ignored.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::SettingsError;
use crate::catalogue::{self, AREAS, Setting};

/// Where a value in effect came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    Default,
    /// The config file.
    File(PathBuf),
    Environment,
    /// A file a `<NAME>_FILE` variable or `<key>_file` key named (a Docker or Kubernetes secret).
    SecretFile(PathBuf),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Default => f.write_str("default"),
            Origin::File(path) => write!(f, "file {}", path.display()),
            Origin::Environment => f.write_str("environment"),
            Origin::SecretFile(path) => write!(f, "secret file {}", path.display()),
        }
    }
}

/// The values given for settings, each with its origin; what is not here is at its default.
#[derive(Clone, Default)]
pub struct Sources {
    values: BTreeMap<&'static str, (String, Origin)>,
}

/// Names and origins only: a value may be a secret.
impl fmt::Debug for Sources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.values.iter().map(|(name, (_, origin))| (name, origin))).finish()
    }
}

impl Sources {
    /// The process environment, and the config file `CLANKIE_CONFIG` names.
    pub fn from_process() -> Result<Sources, SettingsError> {
        Sources::gather(std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.to_string_lossy().into_owned()))))
    }

    /// `env` as the environment, and the config file its `CLANKIE_CONFIG` names. Every
    /// `CLANKIE_` name in either must be a setting.
    pub fn gather(env: impl IntoIterator<Item = (String, String)>) -> Result<Sources, SettingsError> {
        let mut sources = Sources::default();
        let mut config = None;
        for (name, value) in env {
            if !name.starts_with("CLANKIE_") || value.trim().is_empty() {
                continue;
            }
            if let Some(setting) = catalogue::find(&name) {
                if setting.name == "CLANKIE_CONFIG" {
                    config = Some(PathBuf::from(value.trim()));
                }
                sources.put(setting, value, Origin::Environment)?;
            } else if let Some(setting) = name.strip_suffix("_FILE").and_then(catalogue::find).filter(|s| s.from_file_allowed()) {
                let path = PathBuf::from(value.trim());
                let secret = read_secret(&path).map_err(|reason| SettingsError::Invalid { var: setting.name, reason })?;
                sources.put(setting, secret, Origin::SecretFile(path))?;
            } else {
                let closest = catalogue::closest(&name, catalogue::catalogue().map(|s| s.name));
                return Err(SettingsError::Unknown { name, closest });
            }
        }
        if let Some(path) = config {
            let text = std::fs::read_to_string(&path)
                .map_err(|e| SettingsError::File { path: path.clone(), reason: format!("cannot be read ({e})") })?;
            sources.layer_file(&path, &text)?;
        }
        Ok(sources)
    }

    /// Adds the config file's values where the environment gave none.
    pub fn layer_file(&mut self, path: &Path, text: &str) -> Result<(), SettingsError> {
        let fail = |reason: String| SettingsError::File { path: path.to_owned(), reason };
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| fail(e.message().to_owned()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        let sections = || AREAS.iter().map(|(area, _)| area.section());
        for (section, keys) in &table {
            let Some((_, settings)) = AREAS.iter().find(|(area, _)| area.section() == section) else {
                return Err(fail(unknown(
                    "section",
                    &format!("[{section}]"),
                    catalogue::closest(section, sections()).map(|s| format!("[{s}]")),
                )));
            };
            let toml::Value::Table(keys) = keys else {
                return Err(fail(format!("`{section}` must be a section ([{section}]) of keys, not a value")));
            };
            for (key, value) in keys {
                let here = |k: &str| settings.iter().find(|s| s.key() == k);
                let (setting, from_file) = match (here(key), key.strip_suffix("_file").and_then(here)) {
                    (Some(s), _) => (s, false),
                    (None, Some(s)) if s.from_file_allowed() => (s, true),
                    _ => return Err(fail(misplaced(section, key))),
                };
                if setting.env_only {
                    return Err(fail(format!("[{section}] {key}: {} is read from the environment only", setting.name)));
                }
                if keys.contains_key(&setting.key()) && keys.contains_key(&format!("{}_file", setting.key())) {
                    return Err(fail(format!("[{section}] has both {0} and {0}_file; keep one", setting.key())));
                }
                if self.values.contains_key(setting.name) {
                    continue;
                }
                let text = flatten(value).ok_or_else(|| {
                    fail(format!("[{section}] {key}: expected a string, number, boolean or a list of them ({})", setting.kind.describe()))
                })?;
                // As in the environment, an empty value is no value.
                if text.trim().is_empty() {
                    continue;
                }
                if from_file {
                    let secret_path = base.join(text.trim());
                    let secret = read_secret(&secret_path).map_err(|reason| fail(format!("[{section}] {key}: {reason}")))?;
                    self.put(setting, secret, Origin::SecretFile(secret_path))?;
                } else {
                    self.put(setting, text, Origin::File(path.to_owned()))?;
                }
            }
        }
        Ok(())
    }

    fn put(&mut self, setting: &'static Setting, value: String, origin: Origin) -> Result<(), SettingsError> {
        if let Some((_, earlier)) = self.values.get(setting.name)
            && *earlier != origin
            && matches!((earlier, &origin), (Origin::Environment, Origin::SecretFile(_)) | (Origin::SecretFile(_), Origin::Environment))
        {
            return Err(SettingsError::Invalid {
                var: setting.name,
                reason: format!("both {0} and {0}_FILE are set; keep one", setting.name),
            });
        }
        self.values.insert(setting.name, (value, origin));
        Ok(())
    }

    /// Records what `lookup` gives for every setting, as the environment.
    pub fn from_lookup(lookup: &impl Fn(&str) -> Option<String>) -> Sources {
        let values = catalogue::catalogue()
            .filter_map(|s| Some((s.name, (lookup(s.name).filter(|v| !v.trim().is_empty())?, Origin::Environment))))
            .collect();
        Sources { values }
    }

    /// The value given for `name`, if any.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(|(v, _)| v.as_str())
    }

    /// Where the value of `name` came from.
    pub fn origin(&self, name: &str) -> Origin {
        self.values.get(name).map_or(Origin::Default, |(_, o)| o.clone())
    }

    /// Every setting `service` reads (every one when `None`), with the value in effect and its
    /// origin; secrets masked and passwords in URLs redacted.
    pub fn effective(&self, service: Option<catalogue::Service>) -> Vec<Effective> {
        catalogue::catalogue()
            .filter(|s| service.is_none_or(|svc| s.read_by(svc)))
            .map(|s| {
                let value = match self.values.get(s.name) {
                    None => s.default.to_owned(),
                    Some(_) if s.secret => "(set, hidden)".to_owned(),
                    // Any URL may carry a token in its user-info or query, whether or not it is meant to.
                    Some((v, _)) if s.credentials || s.kind == crate::Kind::Url => crate::redact_url(v),
                    Some((v, _)) => v.clone(),
                };
                Effective { name: s.name, value, origin: self.origin(s.name) }
            })
            .collect()
    }
}

/// One setting as it is in effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effective {
    pub name: &'static str,
    /// The value, masked or redacted where it is secret; the default's description when unset.
    pub value: String,
    pub origin: Origin,
}

/// `"yes"` for `true`, and the other spellings every on/off setting accepts.
pub fn parse_flag(value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "on" | "yes" | "1" => Some(true),
        "false" | "off" | "no" | "0" => Some(false),
        _ => None,
    }
}

fn read_secret(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("the secret file {} cannot be read ({e})", path.display()))?;
    let secret = text.trim_end_matches(['\n', '\r']).to_owned();
    if secret.trim().is_empty() {
        return Err(format!("the secret file {} is empty", path.display()));
    }
    Ok(secret)
}

fn flatten(value: &toml::Value) -> Option<String> {
    match value {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        toml::Value::Array(items) => items
            .iter()
            .map(|i| match i {
                toml::Value::Array(_) | toml::Value::Table(_) => None,
                other => flatten(other),
            })
            .collect::<Option<Vec<_>>>()
            .map(|v| v.join(",")),
        toml::Value::Datetime(_) | toml::Value::Table(_) => None,
    }
}

fn unknown(what: &str, name: &str, closest: Option<String>) -> String {
    match closest {
        Some(c) => format!("{name} is not a {what}; did you mean {c}?"),
        None => format!("{name} is not a {what}"),
    }
}

/// A key not in its section: either it lives in another section, or it is misspelt.
fn misplaced(section: &str, key: &str) -> String {
    let base = key.strip_suffix("_file").unwrap_or(key);
    if let Some(s) = catalogue::catalogue().find(|s| s.key() == key || (s.key() == base && s.from_file_allowed())) {
        return format!("{key} belongs in [{}], not [{section}]", s.area.section());
    }
    let keys: Vec<(String, &str)> = catalogue::catalogue().map(|s| (s.key(), s.area.section())).collect();
    match catalogue::closest(key, keys.iter().map(|(k, _)| k.as_str())) {
        Some(near) => {
            let home = keys.iter().find(|(k, _)| k == near).map_or(section, |(_, s)| *s);
            format!("[{section}] {key} is not a setting; did you mean [{home}] {near}?")
        }
        None => format!("[{section}] {key} is not a setting (`clankie settings` lists them all)"),
    }
}
