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
fn every_crate_is_named_in_the_architecture_map() {
    let map = std::fs::read_to_string(workspace().join("docs/ARCHITECTURE.md")).unwrap();
    for krate in std::fs::read_dir(workspace().join("crates")).unwrap().filter_map(Result::ok) {
        let name = krate.file_name().to_string_lossy().into_owned();
        assert!(map.contains(&format!("`{name}`")), "docs/ARCHITECTURE.md does not name {name}");
    }
}

/// Every file under deploy/ that describes a deployment, and the Dockerfile.
fn manifests() -> Vec<(PathBuf, String)> {
    let mut out = vec![];
    let mut stack = vec![workspace().join("deploy/compose"), workspace().join("deploy/k8s")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().filter_map(Result::ok) {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push((path.clone(), std::fs::read_to_string(&path).unwrap()));
            }
        }
    }
    let dockerfile = workspace().join("Dockerfile");
    out.push((dockerfile.clone(), std::fs::read_to_string(dockerfile).unwrap()));
    assert!(out.len() >= 10, "found too few manifests");
    out
}

/// The binaries the workspace builds: `[[bin]]` names and `src/bin/*.rs` files.
fn binaries() -> Vec<String> {
    let mut bins = vec![];
    for krate in std::fs::read_dir(workspace().join("crates")).unwrap().filter_map(Result::ok) {
        let manifest = std::fs::read_to_string(krate.path().join("Cargo.toml")).unwrap();
        let mut in_bin = false;
        for line in manifest.lines() {
            if line.trim() == "[[bin]]" {
                in_bin = true;
            } else if line.starts_with('[') {
                in_bin = false;
            } else if in_bin && let Some(name) = line.trim().strip_prefix("name = ") {
                bins.push(name.trim_matches('"').to_owned());
            }
        }
        for file in std::fs::read_dir(krate.path().join("src/bin")).into_iter().flatten().filter_map(Result::ok) {
            if let Some(stem) = file.path().file_stem() {
                bins.push(stem.to_string_lossy().into_owned());
            }
        }
    }
    bins
}

fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
}

#[test]
fn every_variable_in_the_manifests_is_a_setting() {
    let known = |var: &str| {
        clankie_settings::catalogue::find(var).is_some()
            || var.strip_suffix("_FILE").and_then(clankie_settings::catalogue::find).is_some_and(|s| s.from_file_allowed())
    };
    for (path, text) in manifests() {
        for var in words(&text).filter(|w| w.starts_with("CLANKIE_")) {
            assert!(known(var), "{} names {var}, which no service reads", path.display());
        }
    }
}

/// Every `clankie` subcommand the manifests run, e.g. `gateway` in `["clankie", "gateway"]`.
fn manifest_subcommands(line: &str) -> Vec<String> {
    let w: Vec<&str> = words(line).filter(|w| !w.is_empty()).collect();
    w.windows(2)
        .filter(|p| {
            p[0] == "clankie"
                && p[1].starts_with(|c: char| c.is_ascii_lowercase())
                && p[1].chars().all(|c| c.is_ascii_lowercase() || c == '-')
        })
        .map(|p| p[1].to_owned())
        .collect()
}

#[test]
fn every_command_in_the_manifests_is_a_binary_the_workspace_builds() {
    let bins = binaries();
    assert!(bins.contains(&"clankie".to_owned()) && bins.contains(&"clankie-model-standin".to_owned()), "{bins:?}");
    assert_eq!(manifest_subcommands(r#"command: ["clankie", "voice-floor"]"#), ["voice-floor"]);
    let mut seen = 0;
    let mut subcommands = std::collections::BTreeSet::new();
    for (path, text) in manifests() {
        for line in
            text.lines().filter(|l| l.contains("command:") || l.contains("--bin ") || l.starts_with("CMD") || l.contains("CMD-SHELL"))
        {
            for name in words(line).filter(|w| *w == "clankie" || w.starts_with("clankie-")) {
                seen += 1;
                assert!(bins.iter().any(|b| b == name), "{} runs {name}, which the workspace does not build", path.display());
            }
            subcommands.extend(manifest_subcommands(line));
        }
    }
    assert!(seen >= 10, "found only {seen} commands: the scan is broken");
    // The one binary knows every subcommand the manifests start it with.
    assert!(subcommands.len() >= 6, "{subcommands:?}");
    for sub in &subcommands {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_clankie")).args([sub.as_str(), "--help"]).output().unwrap();
        assert!(out.status.success(), "`clankie {sub}` is not a subcommand: {}", String::from_utf8_lossy(&out.stderr));
    }
}

#[test]
fn every_probe_path_in_the_manifests_is_served() {
    let mut seen = 0;
    for (path, text) in manifests() {
        for line in text.lines().filter(|l| l.contains("httpGet") || l.contains("GET /")) {
            let probe = line.split_whitespace().find(|w| w.starts_with('/')).unwrap_or_default().trim_end_matches([',', '}', '\\']);
            seen += 1;
            assert!(clankie_http::PATHS.contains(&probe), "{} probes {probe}, which no service serves", path.display());
        }
    }
    assert!(seen >= 6, "found only {seen} probes");
}

#[test]
fn every_nats_image_in_the_manifests_is_the_server_the_local_stack_pins() {
    let lib = std::fs::read_to_string(workspace().join("deploy/local/lib.sh")).unwrap();
    let pinned = lib.lines().find_map(|l| l.strip_prefix("NATS_SERVER_VERSION=")).expect("lib.sh pins NATS_SERVER_VERSION").trim();
    let parts: Vec<u32> = pinned.split('.').map(|p| p.parse().unwrap()).collect();
    assert!(parts.len() == 3 && (parts[0], parts[1]) >= (2, 12), "the pinned nats-server {pinned} is older than 2.12");
    let images: Vec<(PathBuf, String)> = manifests()
        .into_iter()
        .flat_map(|(path, text)| {
            text.lines()
                .filter_map(|l| l.trim().strip_prefix("image:").map(str::trim))
                .filter(|image| image.starts_with("nats:"))
                .map(|image| (path.clone(), image.to_owned()))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(images.len() >= 3, "compose, the dev overlay and the prod cluster each run nats: {images:?}");
    for (path, image) in images {
        assert_eq!(image, format!("nats:{pinned}-alpine"), "{} runs another nats-server than the local stack", path.display());
    }
}
