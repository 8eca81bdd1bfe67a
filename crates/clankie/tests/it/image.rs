//! The image's build context as `.dockerignore` leaves it. `docker build` sends only that context,
//! so a file the binary embeds (`include_str!`) but the ignore file drops breaks every image at
//! compile time while the workspace itself builds. This test assembles the context the way Docker
//! does and checks the image's binary in it, sharing the suite's target dir.

use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// One line of `.dockerignore`: its path segments and whether it is a `!` exception.
struct Rule {
    segments: Vec<String>,
    exception: bool,
}

/// Reads `.dockerignore` as Docker does: `#` comments, a leading `!` for an exception, the pattern
/// cleaned of a leading `/` and a trailing `/`.
fn rules(text: &str) -> Vec<Rule> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|line| {
            let (exception, pattern) = match line.strip_prefix('!') {
                Some(rest) => (true, rest.trim()),
                None => (false, line),
            };
            assert!(!pattern.contains('['), "this check does not read character classes: {pattern}");
            let segments = pattern.trim_matches('/').split('/').filter(|s| !s.is_empty() && *s != ".").map(str::to_owned).collect();
            Rule { segments, exception }
        })
        .collect()
}

/// `*` and `?` within one path segment, as Go's `filepath.Match`.
fn segment_matches(pattern: &[u8], name: &[u8]) -> bool {
    match (pattern.first(), name.first()) {
        (None, None) => true,
        (Some(b'*'), _) => segment_matches(&pattern[1..], name) || (!name.is_empty() && segment_matches(pattern, &name[1..])),
        (Some(b'?'), Some(_)) => segment_matches(&pattern[1..], &name[1..]),
        (Some(p), Some(n)) if p == n => segment_matches(&pattern[1..], &name[1..]),
        _ => false,
    }
}

/// Whether the pattern matches `path` or one of its parents (Docker drops a directory whole when
/// it matches). `**` stands for any number of segments, none included.
fn matches(pattern: &[String], path: &[&str]) -> bool {
    match pattern.first() {
        None => true,
        Some(s) if s == "**" => (0..=path.len()).any(|skip| matches(&pattern[1..], &path[skip..])),
        Some(s) => path.first().is_some_and(|name| segment_matches(s.as_bytes(), name.as_bytes()) && matches(&pattern[1..], &path[1..])),
    }
}

/// Whether the pattern could match something below the directory `dir`.
fn reaches_below(pattern: &[String], dir: &[&str]) -> bool {
    match (pattern.first(), dir.first()) {
        (_, None) | (None, _) => true,
        (Some(s), _) if s == "**" => true,
        (Some(s), Some(name)) => segment_matches(s.as_bytes(), name.as_bytes()) && reaches_below(&pattern[1..], &dir[1..]),
    }
}

/// Whether the last rule that matches the path excludes it.
fn excluded(rules: &[Rule], path: &[&str]) -> bool {
    rules.iter().rev().find(|r| matches(&r.segments, path)).is_some_and(|r| !r.exception)
}

/// Every file Docker would send as the context, relative to the workspace root.
fn context_files(root: &Path, rules: &[Rule]) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![PathBuf::new()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(root.join(&dir)).unwrap() {
            let entry = entry.unwrap();
            let relative = dir.join(entry.file_name());
            let text = relative.to_string_lossy().into_owned();
            let segments: Vec<&str> = text.split('/').collect();
            let out = excluded(rules, &segments);
            if entry.file_type().unwrap().is_dir() {
                // An excluded directory is walked only where an exception may take something back.
                if !out || rules.iter().any(|r| r.exception && reaches_below(&r.segments, &segments)) {
                    dirs.push(relative);
                }
            } else if !out {
                files.push(relative);
            }
        }
    }
    files.sort();
    files
}

/// Writes the context into `into`, leaving files whose bytes are unchanged untouched (cargo's
/// fingerprints read their times) and removing what the context no longer holds.
fn assemble(root: &Path, files: &[PathBuf], into: &Path) {
    for file in files {
        let bytes = std::fs::read(root.join(file)).unwrap();
        let target = into.join(file);
        if std::fs::read(&target).ok().as_deref() != Some(&bytes[..]) {
            std::fs::create_dir_all(target.parent().unwrap()).unwrap();
            std::fs::write(&target, &bytes).unwrap();
        }
    }
    let keep: std::collections::HashSet<PathBuf> = files.iter().cloned().collect();
    let mut dirs = vec![PathBuf::new()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(into.join(&dir)) else { continue };
        for entry in entries {
            let entry = entry.unwrap();
            let relative = dir.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                dirs.push(relative);
            } else if !keep.contains(&relative) {
                std::fs::remove_file(entry.path()).unwrap();
            }
        }
    }
}

#[test]
fn image_dockerignore_reads_as_docker_reads_it() {
    let rules = rules("target/\n**/target/\n*.md\ndeploy/\n!deploy/speech/server.py\n# a comment\n/docs\n");
    let out = |p: &str| excluded(&rules, &p.split('/').collect::<Vec<_>>());
    assert!(out("target/debug/clankie") && out("crates/x/target/y") && out("target"));
    assert!(out("README.md") && !out("vendor/twilight-http-ratelimiting/PATCHED.md"), "*.md is the root's alone");
    assert!(out("deploy/otel/receiver.py") && !out("deploy/speech/server.py"), "the last rule that matches decides");
    assert!(out("docs/deploy.md") && !out("crates/clankie/src/main.rs"));
    assert!(reaches_below(&rules[4].segments, &["deploy"]) && !reaches_below(&rules[4].segments, &["docs"]));
}

/// Where the copy of the build context lives: one path per target dir, so a second run checks
/// only what changed, and outside it. Inside the target dir cargo records the copy's sources
/// relative to the target dir, and a later checkout sharing the dir, whose crates have the same
/// fingerprints, took the stale copy's sources for its own and its changed crates for fresh.
fn context_dir(target: &std::path::Path) -> PathBuf {
    use std::hash::{BuildHasher, BuildHasherDefault};
    let hash = BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default().hash_one(target);
    std::env::temp_dir().join(format!("clankie-image-context-{hash:016x}"))
}

/// The image's binary compiles from the context `.dockerignore` leaves: `cargo check --locked` of
/// `clankie` in a copy of it, sharing the target dir.
#[test]
fn image_the_build_context_dockerignore_leaves_compiles_the_images_binary() {
    let root = workspace();
    let rules = rules(&std::fs::read_to_string(root.join(".dockerignore")).unwrap());
    let files = context_files(&root, &rules);
    for needed in ["Cargo.toml", "Cargo.lock", "Dockerfile", "crates/clankie/src/main.rs"] {
        assert!(files.contains(&PathBuf::from(needed)), "the context lacks {needed}");
    }
    assert!(!files.iter().any(|f| f.starts_with("target") || f.starts_with(".git")), "build output or history in the context");

    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root.join("target"));
    let context = context_dir(&target);
    assemble(&root, &files, &context);
    let started = std::time::Instant::now();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args(["check", "--locked", "--quiet", "--package", "clankie", "--bin", "clankie"])
        .current_dir(&context)
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error") || l.trim_start().starts_with("-->")).take(12).collect();
    assert!(
        out.status.success(),
        "the image's binary does not compile from the context .dockerignore leaves ({} files): {errors:#?}",
        files.len()
    );
    eprintln!("image_context: {} files, cargo check {:.1} s", files.len(), started.elapsed().as_secs_f64());
}
