//! `.env` files as Docker Compose reads them, so the `clankie` binary run beside a compose
//! deployment sees the settings its services see. The environment wins over the file; the
//! caller applies what is left.
//!
//! The syntax is compose's: `NAME=value` (an `export ` before it is allowed), `#` comments,
//! unquoted values ending at ` #`, single quotes literal, double quotes with `\n`, `\t`, `\"` and
//! `\\`, and `${NAME}`, `${NAME:-default}`, `${NAME-default}`, `$NAME` and `$$` expanded in
//! unquoted and double-quoted values from the environment and the lines above.

use std::path::Path;

use crate::SettingsError;

/// The `(name, value)` pairs `text` sets, in order. `lookup` is the environment, read for
/// `${…}` before the file's own earlier lines. An error names the line, never its value.
pub fn parse(text: &str, lookup: impl Fn(&str) -> Option<String>) -> Result<Vec<(String, String)>, String> {
    let mut set: Vec<(String, String)> = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let at = number + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").map_or(line, str::trim_start);
        let Some((name, raw)) = line.split_once('=') else {
            // A bare name passes the caller's own variable through: nothing to set.
            continue;
        };
        let name = name.trim();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') || name.starts_with(|c: char| c.is_ascii_digit())
        {
            return Err(format!("line {at}: `{}` is not a variable name", name.chars().take(40).collect::<String>()));
        }
        let known = |key: &str| lookup(key).or_else(|| set.iter().rev().find(|(n, _)| n == key).map(|(_, v)| v.clone()));
        let raw = raw.trim_start();
        let value = if let Some(rest) = raw.strip_prefix('\'') {
            let Some(end) = rest.find('\'') else { return Err(format!("line {at}: {name}'s single quote is not closed")) };
            rest[..end].to_owned()
        } else if let Some(rest) = raw.strip_prefix('"') {
            let (inner, closed) = unescape(rest);
            if !closed {
                return Err(format!("line {at}: {name}'s double quote is not closed"));
            }
            expand(&inner, &known).map_err(|e| format!("line {at}: {name}: {e}"))?
        } else {
            let end = raw.find(" #").or_else(|| raw.find("\t#")).unwrap_or(raw.len());
            expand(raw[..end].trim_end(), &known).map_err(|e| format!("line {at}: {name}: {e}"))?
        };
        set.push((name.to_owned(), value));
    }
    Ok(set)
}

/// The text up to the closing double quote with its escapes read, and whether the quote closed.
fn unescape(rest: &str) -> (String, bool) {
    let mut out = String::new();
    let mut chars = rest.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return (out, true),
            '\\' => match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some('r') => out.push('\r'),
                Some(other @ ('"' | '\\' | '$')) => {
                    // `\$` stays literal through the expansion that follows.
                    if other == '$' {
                        out.push_str("$$");
                    } else {
                        out.push(other);
                    }
                }
                Some(other) => {
                    out.push('\\');
                    out.push(other);
                }
                None => out.push('\\'),
            },
            other => out.push(other),
        }
    }
    (out, false)
}

/// Expands `$NAME`, `${NAME}`, `${NAME:-default}`, `${NAME-default}` and `$$`.
fn expand(text: &str, known: &impl Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        rest = &rest[at + 1..];
        if let Some(after) = rest.strip_prefix('$') {
            out.push('$');
            rest = after;
        } else if let Some(braced) = rest.strip_prefix('{') {
            let end = braced.find('}').ok_or("a ${ is not closed")?;
            let inside = &braced[..end];
            rest = &braced[end + 1..];
            let (name, default, empty_counts) = match (inside.split_once(":-"), inside.split_once('-')) {
                (Some((n, d)), _) => (n, Some(d), true),
                (None, Some((n, d))) => (n, Some(d), false),
                (None, None) => (inside, None, false),
            };
            match (known(name), default) {
                (Some(v), Some(d)) if empty_counts && v.is_empty() => out.push_str(d),
                (Some(v), _) => out.push_str(&v),
                (None, Some(d)) => out.push_str(d),
                (None, None) => {}
            }
        } else {
            let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
            if end == 0 {
                out.push('$');
            } else {
                out.push_str(&known(&rest[..end]).unwrap_or_default());
            }
            rest = &rest[end..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// Reads the `.env` file at `path`, if there is one; `lookup` is the environment.
pub fn read(path: &Path, lookup: impl Fn(&str) -> Option<String>) -> Result<Option<Vec<(String, String)>>, SettingsError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(SettingsError::File { path: path.to_owned(), reason: format!("cannot be read ({e})") }),
    };
    parse(&text, lookup).map(Some).map_err(|reason| SettingsError::File { path: path.to_owned(), reason })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "HOME_HOST" => Some("db.example".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn dotenv_reads_what_compose_reads() {
        let text = r#"
# a comment
export CLANKIE_LOG=info
POSTGRES_PASSWORD=s3cret # the database's
CLANKIE_DATABASE_URL=postgres://clankie:${POSTGRES_PASSWORD}@${HOME_HOST}:5432/clankie
QUOTED="a # not a comment\nnext"
LITERAL='${POSTGRES_PASSWORD} stays'
DEFAULTED=${MISSING:-fallback}/${EMPTY:-e}/${EMPTY-kept}
DOLLARS=$$HOME and \$
BARE
"#;
        let set = parse(text, env).unwrap();
        let get = |n: &str| set.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
        assert_eq!(get("CLANKIE_LOG"), Some("info"));
        assert_eq!(get("POSTGRES_PASSWORD"), Some("s3cret"));
        assert_eq!(get("CLANKIE_DATABASE_URL"), Some("postgres://clankie:s3cret@db.example:5432/clankie"));
        assert_eq!(get("QUOTED"), Some("a # not a comment\nnext"));
        assert_eq!(get("LITERAL"), Some("${POSTGRES_PASSWORD} stays"));
        assert_eq!(get("DEFAULTED"), Some("fallback/e/"));
        assert_eq!(get("DOLLARS"), Some("$HOME and \\$"));
        assert_eq!(get("BARE"), None);
    }

    #[test]
    fn dotenv_errors_name_the_line_never_the_value() {
        let e = parse("A=1\nB=\"s3cret never closed\n", env).unwrap_err();
        assert!(e.contains("line 2") && e.contains('B') && !e.contains("s3cret"), "{e}");
        let e = parse("1BAD=x\n", env).unwrap_err();
        assert!(e.contains("line 1") && e.contains("not a variable name"), "{e}");
        assert!(read(Path::new("/nonexistent/.env"), env).unwrap().is_none());
    }
}
