//! What the sources give, as each area's reader asks for it: a setting's value parsed and
//! checked by its kind, with the value and what is allowed in every refusal, and the notices
//! reading leaves for the service to log.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::catalogue::{self, Kind};
use crate::{SettingsError, Sources, parse_flag, redact_url};

/// The sources being read, the names outside the catalogue a default is derived from
/// (`HOME`, `XDG_STATE_HOME`, `HOSTNAME`), and the notices so far.
pub(crate) struct Given<'a> {
    sources: &'a Sources,
    lookup: &'a dyn Fn(&str) -> Option<String>,
    pub notices: Vec<String>,
}

impl<'a> Given<'a> {
    pub fn new(sources: &'a Sources, lookup: &'a dyn Fn(&str) -> Option<String>) -> Given<'a> {
        Given { sources, lookup, notices: Vec::new() }
    }

    /// The value given for a catalogued setting.
    pub fn var(&self, name: &'static str) -> Option<String> {
        debug_assert!(catalogue::find(name).is_some(), "{name} is not in the catalogue");
        self.sources.get(name).map(str::to_owned)
    }

    /// The value given, or `default`.
    pub fn text(&self, name: &'static str, default: &str) -> String {
        self.var(name).unwrap_or_else(|| default.into())
    }

    /// The value given, unless it is empty or blank.
    pub fn nonempty(&self, name: &'static str) -> Option<String> {
        self.var(name).filter(|v| !v.trim().is_empty())
    }

    /// A whole number from `min` to `max`, or `default`.
    pub fn number(&self, name: &'static str, default: u64, min: u64, max: u64) -> Result<u64, SettingsError> {
        number(self.var(name), name, default, min, max)
    }

    /// A decimal number from `min` to `max`, or `default`.
    pub fn decimal(&self, name: &'static str, default: f64, min: f64, max: f64) -> Result<f64, SettingsError> {
        let Some(value) = self.var(name) else { return Ok(default) };
        let n: f64 = value.trim().parse().map_err(|_| SettingsError::Invalid {
            var: name,
            reason: format!("expected a number such as 3.75, got {:?}", truncate(&value)),
        })?;
        if !n.is_finite() || n < min || n > max {
            return Err(SettingsError::Invalid { var: name, reason: format!("{n} is out of range: it must be from {min} to {max}") });
        }
        Ok(n)
    }

    /// Milliseconds, at least `min`.
    pub fn ms(&self, name: &'static str, default: u64, min: u64) -> Result<Duration, SettingsError> {
        Ok(Duration::from_millis(self.number(name, default, min, u64::MAX / 2)?))
    }

    /// Seconds, at least `min`.
    pub fn secs(&self, name: &'static str, default: u64, min: u64) -> Result<Duration, SettingsError> {
        Ok(Duration::from_secs(self.number(name, default, min, u64::MAX)?))
    }

    /// Days, from `min` to a hundred years.
    pub fn days(&self, name: &'static str, default: u64, min: u64) -> Result<Duration, SettingsError> {
        Ok(Duration::from_secs(self.number(name, default, min, 36_500)? * 86_400))
    }

    /// On or off; off when not given.
    pub fn flag(&self, name: &'static str) -> Result<bool, SettingsError> {
        flag(self.var(name), name)
    }

    /// On or off; on when not given.
    pub fn flag_on(&self, name: &'static str) -> Result<bool, SettingsError> {
        match self.var(name) {
            None => Ok(true),
            set => flag(set, name),
        }
    }

    /// Comma-separated Discord ids.
    pub fn ids(&self, name: &'static str) -> Result<Vec<u64>, SettingsError> {
        ids(self.var(name), name)
    }

    /// An absolute path, or `default`.
    pub fn path(&self, name: &'static str, default: &str) -> Result<PathBuf, SettingsError> {
        absolute(name, &self.text(name, default))
    }

    /// An http:// or https:// URL with a host, when given.
    pub fn http_url(&self, name: &'static str) -> Result<Option<String>, SettingsError> {
        let url = self.var(name);
        if let Some(url) = &url {
            http_url(name, url)?;
        }
        Ok(url)
    }

    /// A name outside the catalogue a default is derived from.
    pub fn lookup(&self, name: &str) -> Option<String> {
        (self.lookup)(name)
    }
}

pub(crate) fn absolute(var: &'static str, value: &str) -> Result<PathBuf, SettingsError> {
    let path = PathBuf::from(value);
    if path.is_absolute() {
        Ok(path)
    } else {
        Err(SettingsError::Invalid { var, reason: format!("{:?} must be an absolute path", truncate(value)) })
    }
}

pub(crate) fn viewport(value: Option<String>) -> Result<(u32, u32), SettingsError> {
    let Some(value) = value else { return Ok((1280, 800)) };
    let bad = || SettingsError::Invalid {
        var: "CLANKIE_BROWSER_VIEWPORT",
        reason: format!("{:?} is not WIDTHxHEIGHT with each from 200 to 4000", truncate(&value)),
    };
    let (w, h) = value.trim().split_once(['x', 'X']).ok_or_else(bad)?;
    let (w, h): (u32, u32) = (w.trim().parse().map_err(|_| bad())?, h.trim().parse().map_err(|_| bad())?);
    if !(200..=4000).contains(&w) || !(200..=4000).contains(&h) {
        return Err(bad());
    }
    Ok((w, h))
}

pub(crate) fn socket_addr(var: &'static str, value: &str, example: &str) -> Result<std::net::SocketAddr, SettingsError> {
    value.trim().parse().map_err(|_| SettingsError::Invalid {
        var,
        reason: format!("{:?} is not host:port with an IP address, e.g. {example}", truncate(value)),
    })
}

pub(crate) fn flag(value: Option<String>, var: &'static str) -> Result<bool, SettingsError> {
    let Some(value) = value else { return Ok(false) };
    parse_flag(&value).ok_or_else(|| SettingsError::Invalid {
        var,
        reason: format!("{:?} is not one of true/false, on/off, yes/no, 1/0", truncate(&value)),
    })
}

pub(crate) fn http_url(var: &'static str, url: &str) -> Result<(), SettingsError> {
    let rest = url.trim().strip_prefix("http://").or_else(|| url.trim().strip_prefix("https://"));
    match rest {
        Some(host) if !host.is_empty() && !host.starts_with('/') => Ok(()),
        _ => Err(SettingsError::Invalid {
            var,
            reason: format!("{:?} is not an http:// or https:// URL with a host", truncate(&redact_url(url))),
        }),
    }
}

/// A log filter as `tracing`'s `EnvFilter` reads it: comma-separated `level` or `target=level`.
pub(crate) fn check_log_filter(filter: &str) -> Result<(), SettingsError> {
    const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];
    for directive in filter.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let (target, level) = match directive.rsplit_once('=') {
            Some((t, l)) => (Some(t), l),
            None if LEVELS.contains(&directive.to_ascii_lowercase().as_str()) => (None, directive),
            None => (Some(directive), "trace"),
        };
        let target_ok = target.is_none_or(|t| !t.is_empty() && t.chars().all(|c| c.is_ascii_alphanumeric() || "_:-.[]{}\"=".contains(c)));
        if !target_ok || !LEVELS.contains(&level.trim().to_ascii_lowercase().as_str()) {
            return Err(SettingsError::Invalid {
                var: "CLANKIE_LOG",
                reason: format!(
                    "{:?} is not a log directive; use `level` or `target=level` with a level of {}",
                    truncate(directive),
                    LEVELS.join(", ")
                ),
            });
        }
    }
    Ok(())
}

pub(crate) fn ids(value: Option<String>, var: &'static str) -> Result<Vec<u64>, SettingsError> {
    let Some(list) = value else { return Ok(Vec::new()) };
    list.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| t.parse::<u64>())
        .collect::<Result<Vec<u64>, _>>()
        .map_err(|_| SettingsError::Invalid { var, reason: format!("{:?} is not comma-separated Discord ids", truncate(&list)) })
}

pub(crate) fn number(value: Option<String>, var: &'static str, default: u64, min: u64, max: u64) -> Result<u64, SettingsError> {
    let Some(value) = value else { return Ok(default) };
    let n: u64 = value
        .trim()
        .parse()
        .map_err(|_| SettingsError::Invalid { var, reason: format!("expected a whole number, got {:?}", truncate(&value)) })?;
    if n < min || n > max {
        let unit = match catalogue::find(var).map(|s| s.kind) {
            Some(Kind::Duration(u) | Kind::Size(u)) => format!(" {}", u.name()),
            _ => String::new(),
        };
        let range = if max >= u64::MAX / 2 { format!("at least {min}{unit}") } else { format!("from {min} to {max}{unit}") };
        return Err(SettingsError::Invalid { var, reason: format!("{n} is out of range: it must be {range}") });
    }
    Ok(n)
}

pub(crate) fn truncate(s: &str) -> String {
    s.chars().take(40).collect()
}

pub(crate) fn default_state_root(lookup: &dyn Fn(&str) -> Option<String>) -> PathBuf {
    let nonempty = |k: &str| lookup(k).filter(|v| !v.is_empty());
    if let Some(xdg) = nonempty("XDG_STATE_HOME").filter(|p| Path::new(p).is_absolute()) {
        return PathBuf::from(xdg).join("clankie");
    }
    if let Some(home) = nonempty("HOME").filter(|p| Path::new(p).is_absolute()) {
        return PathBuf::from(home).join(".local/state/clankie");
    }
    std::env::temp_dir().join("clankie-state")
}

pub(crate) fn default_replica_id(lookup: &dyn Fn(&str) -> Option<String>) -> String {
    let host = lookup("HOSTNAME")
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-').take(48).collect::<String>())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "clankie".into());
    format!("{host}-{}", std::process::id())
}
