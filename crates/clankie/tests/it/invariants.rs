//! Workspace rules that code review would otherwise have to remember.

use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `.rs` file under some crate's `src/`, with its crate name.
fn sources() -> Vec<(String, PathBuf, String)> {
    let mut out = Vec::new();
    for krate in std::fs::read_dir(workspace().join("crates")).unwrap().filter_map(Result::ok) {
        let name = krate.file_name().to_string_lossy().into_owned();
        let mut stack = vec![krate.path().join("src")];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().filter_map(Result::ok) {
                let path = entry.path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|x| x == "rs") {
                    let text = std::fs::read_to_string(&path).unwrap();
                    out.push((name.clone(), path, text));
                }
            }
        }
    }
    assert!(out.len() > 10, "found too few sources: the walk is broken");
    out
}

/// A string literal starting `clankie.` that is not a protobuf type name (`clankie.v1.…`).
fn has_subject_literal(text: &str) -> bool {
    text.match_indices("\"clankie.").any(|(i, m)| !text[i + m.len()..].starts_with("v1."))
}

#[test]
fn subject_strings_are_built_only_in_the_catalogue() {
    assert!(has_subject_literal("let s = \"clankie.body.send.1\";"));
    assert!(!has_subject_literal("let t = \"clankie.v1.Ingress\";"));
    let offenders: Vec<_> = sources()
        .into_iter()
        .filter(|(krate, _, text)| krate != "clankie-proto" && has_subject_literal(text))
        .map(|(_, path, _)| path)
        .collect();
    assert!(offenders.is_empty(), "subject literals outside clankie-proto: {offenders:?}");
}

#[test]
fn the_attachment_root_is_derived_only_in_settings() {
    let offenders: Vec<_> = sources()
        .into_iter()
        .filter(|(krate, _, text)| {
            krate != "clankie-settings" && (text.contains("join(\"attachments") || text.contains("CLANKIE_DISCORD_ATTACHMENT_ROOT"))
        })
        .map(|(_, path, _)| path)
        .collect();
    assert!(offenders.is_empty(), "attachment path derived outside clankie-settings: {offenders:?}");
}

#[test]
fn the_readme_configuration_table_lists_every_setting() {
    let readme = std::fs::read_to_string(workspace().join("README.md")).unwrap();
    for s in clankie_settings::SETTINGS {
        let row = format!("| `{}` | `{}` | {} |", s.name, s.default, s.doc);
        assert!(readme.contains(&row), "README lacks the row for {} (regenerate with `clankie settings`)", s.name);
    }
}

#[test]
fn every_crate_is_named_in_the_architecture_map() {
    let map = std::fs::read_to_string(workspace().join("docs/ARCHITECTURE.md")).unwrap();
    for krate in std::fs::read_dir(workspace().join("crates")).unwrap().filter_map(Result::ok) {
        let name = krate.file_name().to_string_lossy().into_owned();
        assert!(map.contains(&format!("`{name}`")), "docs/ARCHITECTURE.md does not name {name}");
    }
}
