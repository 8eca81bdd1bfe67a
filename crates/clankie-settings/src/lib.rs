//! Configuration for every Clankie service, read from `CLANKIE_*` variables.
//!
//! [`SETTINGS`] is the catalogue: every variable a service reads is listed
//! there with its default and meaning, and [`Settings`] reads nothing else.
//! [`attachment_root`] is the only derivation of the attachment path, so a
//! writer and a reader can never disagree about where a picture lives.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One documented configuration variable.
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    /// The environment variable.
    pub name: &'static str,
    /// The default, as a person would read it.
    pub default: &'static str,
    /// What it is for.
    pub doc: &'static str,
}

/// Every variable the services read.
pub const SETTINGS: &[Setting] = &[
    Setting {
        name: "CLANKIE_STATE_DIR",
        default: "$XDG_STATE_HOME/clankie, else ~/.local/state/clankie",
        doc: "Root of local state: the local stack's data, attachments unless overridden.",
    },
    Setting {
        name: "CLANKIE_DISCORD_ATTACHMENT_ROOT",
        default: "<state>/attachments",
        doc: "Where attachments and artifacts live. An override, never a prerequisite.",
    },
    Setting {
        name: "CLANKIE_NATS_URL",
        default: "nats://127.0.0.1:4222",
        doc: "NATS server with JetStream enabled.",
    },
    Setting {
        name: "CLANKIE_DATABASE_URL",
        default: "postgres://clankie@127.0.0.1:55432/clankie",
        doc: "PostgreSQL database for lanes, sessions and receipts. The password is never logged.",
    },
    Setting {
        name: "CLANKIE_REPLICA_ID",
        default: "<hostname>-<pid>",
        doc: "This process's name in lane leases and receipts.",
    },
    Setting {
        name: "CLANKIE_LOG",
        default: "info,sqlx=warn",
        doc: "tracing filter, e.g. `info,clankie_bus=debug`.",
    },
    Setting {
        name: "CLANKIE_BUS_CONNECT_TIMEOUT_SECS",
        default: "60",
        doc: "How long a service keeps retrying its first NATS connection before giving up.",
    },
    Setting {
        name: "CLANKIE_INGRESS_DEDUP_WINDOW_SECS",
        default: "120",
        doc: "JetStream duplicate window for ingress; at least 120 so gateway redelivery posts once.",
    },
];

/// A variable that is set but unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    #[error("{var} is invalid: {reason}")]
    Invalid { var: &'static str, reason: String },
}

/// The configuration a service runs with.
#[derive(Clone)]
pub struct Settings {
    /// Root of local state.
    pub state_root: PathBuf,
    attachment_root_override: Option<PathBuf>,
    /// NATS server URL.
    pub nats_url: String,
    /// PostgreSQL URL; may hold a password, so [`fmt::Debug`] redacts it.
    pub database_url: String,
    /// This process's name in leases and receipts.
    pub replica_id: String,
    /// tracing filter.
    pub log: String,
    /// Deadline for the first NATS connection.
    pub bus_connect_timeout: Duration,
    /// JetStream duplicate window on the ingress stream.
    pub ingress_dedup_window: Duration,
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("state_root", &self.state_root)
            .field("attachment_root", &attachment_root(self))
            .field("nats_url", &redact_url(&self.nats_url))
            .field("database_url", &redact_url(&self.database_url))
            .field("replica_id", &self.replica_id)
            .field("log", &self.log)
            .field("bus_connect_timeout", &self.bus_connect_timeout)
            .field("ingress_dedup_window", &self.ingress_dedup_window)
            .finish()
    }
}

/// The directory attachments and artifacts live under: the override if set, else `<state>/attachments`.
///
/// This is the one derivation of that path; every service calls it.
pub fn attachment_root(settings: &Settings) -> PathBuf {
    match &settings.attachment_root_override {
        Some(root) => root.clone(),
        None => settings.state_root.join("attachments"),
    }
}

/// Replaces the password in a URL's user-info with `***`.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}{path}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

impl Settings {
    /// Reads the process environment.
    pub fn from_env() -> Result<Settings, SettingsError> {
        Settings::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads settings through `lookup`, so tests can supply an environment of their own.
    ///
    /// Empty values count as unset.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Settings, SettingsError> {
        let var = |name: &'static str| {
            debug_assert!(SETTINGS.iter().any(|s| s.name == name), "{name} is not in SETTINGS");
            lookup(name).filter(|v| !v.trim().is_empty())
        };
        let state_root = match var("CLANKIE_STATE_DIR") {
            Some(dir) => absolute("CLANKIE_STATE_DIR", &dir)?,
            None => default_state_root(&lookup),
        };
        let attachment_root_override = var("CLANKIE_DISCORD_ATTACHMENT_ROOT")
            .map(|dir| absolute("CLANKIE_DISCORD_ATTACHMENT_ROOT", &dir))
            .transpose()?;
        let nats_url = var("CLANKIE_NATS_URL").unwrap_or_else(|| "nats://127.0.0.1:4222".into());
        let database_url =
            var("CLANKIE_DATABASE_URL").unwrap_or_else(|| "postgres://clankie@127.0.0.1:55432/clankie".into());
        for (name, url) in [("CLANKIE_NATS_URL", &nats_url), ("CLANKIE_DATABASE_URL", &database_url)] {
            if !url.contains("://") {
                return Err(SettingsError::Invalid { var: name, reason: "expected a URL such as scheme://host:port".into() });
            }
        }
        let replica_id = var("CLANKIE_REPLICA_ID").unwrap_or_else(|| default_replica_id(&lookup));
        if !replica_id.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)) || replica_id.len() > 64 {
            return Err(SettingsError::Invalid {
                var: "CLANKIE_REPLICA_ID",
                reason: "use at most 64 characters of [A-Za-z0-9._-]".into(),
            });
        }
        let log = var("CLANKIE_LOG").unwrap_or_else(|| "info,sqlx=warn".into());
        let bus_connect_timeout = Duration::from_secs(secs(var("CLANKIE_BUS_CONNECT_TIMEOUT_SECS"), "CLANKIE_BUS_CONNECT_TIMEOUT_SECS", 60, 1)?);
        let ingress_dedup_window =
            Duration::from_secs(secs(var("CLANKIE_INGRESS_DEDUP_WINDOW_SECS"), "CLANKIE_INGRESS_DEDUP_WINDOW_SECS", 120, 120)?);
        Ok(Settings {
            state_root,
            attachment_root_override,
            nats_url,
            database_url,
            replica_id,
            log,
            bus_connect_timeout,
            ingress_dedup_window,
        })
    }

    /// Settings pointing at the given bus and database, everything else default; for tests and tools.
    pub fn for_endpoints(nats_url: &str, database_url: &str, state_root: &Path) -> Result<Settings, SettingsError> {
        let state = state_root.display().to_string();
        Settings::from_lookup(|name| match name {
            "CLANKIE_NATS_URL" => Some(nats_url.to_owned()),
            "CLANKIE_DATABASE_URL" => Some(database_url.to_owned()),
            "CLANKIE_STATE_DIR" => Some(state.clone()),
            _ => None,
        })
    }
}

fn absolute(var: &'static str, value: &str) -> Result<PathBuf, SettingsError> {
    let path = PathBuf::from(value);
    if path.is_absolute() {
        Ok(path)
    } else {
        Err(SettingsError::Invalid { var, reason: "must be an absolute path".into() })
    }
}

fn secs(value: Option<String>, var: &'static str, default: u64, min: u64) -> Result<u64, SettingsError> {
    let Some(value) = value else { return Ok(default) };
    let n: u64 = value
        .trim()
        .parse()
        .map_err(|_| SettingsError::Invalid { var, reason: format!("expected whole seconds, got {:?}", truncate(&value)) })?;
    if n < min {
        return Err(SettingsError::Invalid { var, reason: format!("must be at least {min} seconds") });
    }
    Ok(n)
}

fn truncate(s: &str) -> String {
    s.chars().take(40).collect()
}

fn default_state_root(lookup: &impl Fn(&str) -> Option<String>) -> PathBuf {
    let nonempty = |k: &str| lookup(k).filter(|v| !v.is_empty());
    if let Some(xdg) = nonempty("XDG_STATE_HOME").filter(|p| Path::new(p).is_absolute()) {
        return PathBuf::from(xdg).join("clankie");
    }
    if let Some(home) = nonempty("HOME").filter(|p| Path::new(p).is_absolute()) {
        return PathBuf::from(home).join(".local/state/clankie");
    }
    std::env::temp_dir().join("clankie-state")
}

fn default_replica_id(lookup: &impl Fn(&str) -> Option<String>) -> String {
    let host = lookup("HOSTNAME")
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-').take(48).collect::<String>())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "clankie".into());
    format!("{host}-{}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn settings(vars: &[(&str, &str)]) -> Result<Settings, SettingsError> {
        let env: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Settings::from_lookup(|k| env.get(k).cloned())
    }

    #[test]
    fn attachment_root_defaults_under_state() {
        let s = settings(&[("CLANKIE_STATE_DIR", "/srv/clankie")]).unwrap();
        assert_eq!(attachment_root(&s), PathBuf::from("/srv/clankie/attachments"));
    }

    #[test]
    fn attachment_root_override_wins() {
        let s = settings(&[("CLANKIE_STATE_DIR", "/srv/clankie"), ("CLANKIE_DISCORD_ATTACHMENT_ROOT", "/mnt/att")]).unwrap();
        assert_eq!(attachment_root(&s), PathBuf::from("/mnt/att"));
    }

    #[test]
    fn empty_override_counts_as_unset() {
        let s = settings(&[("CLANKIE_STATE_DIR", "/srv/c"), ("CLANKIE_DISCORD_ATTACHMENT_ROOT", " ")]).unwrap();
        assert_eq!(attachment_root(&s), PathBuf::from("/srv/c/attachments"));
    }

    #[test]
    fn state_root_follows_xdg_then_home() {
        let s = settings(&[("XDG_STATE_HOME", "/x"), ("HOME", "/h")]).unwrap();
        assert_eq!(s.state_root, PathBuf::from("/x/clankie"));
        let s = settings(&[("HOME", "/h")]).unwrap();
        assert_eq!(s.state_root, PathBuf::from("/h/.local/state/clankie"));
    }

    #[test]
    fn relative_paths_are_refused() {
        let err = settings(&[("CLANKIE_DISCORD_ATTACHMENT_ROOT", "att")]).unwrap_err();
        assert!(err.to_string().contains("CLANKIE_DISCORD_ATTACHMENT_ROOT"), "{err}");
    }

    #[test]
    fn dedup_window_below_two_minutes_is_refused() {
        assert!(settings(&[("CLANKIE_INGRESS_DEDUP_WINDOW_SECS", "30")]).is_err());
        assert!(settings(&[("CLANKIE_INGRESS_DEDUP_WINDOW_SECS", "soon")]).is_err());
        let s = settings(&[("CLANKIE_INGRESS_DEDUP_WINDOW_SECS", "300")]).unwrap();
        assert_eq!(s.ingress_dedup_window, Duration::from_secs(300));
    }

    #[test]
    fn debug_never_shows_the_database_password() {
        let s = settings(&[("CLANKIE_DATABASE_URL", "postgres://bot:hunter2@db:5432/clankie")]).unwrap();
        let shown = format!("{s:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("postgres://bot:***@db:5432/clankie"), "{shown}");
    }

    #[test]
    fn replica_id_must_be_a_plain_token() {
        assert!(settings(&[("CLANKIE_REPLICA_ID", "a b")]).is_err());
        assert_eq!(settings(&[("CLANKIE_REPLICA_ID", "captain-0")]).unwrap().replica_id, "captain-0");
    }
}
