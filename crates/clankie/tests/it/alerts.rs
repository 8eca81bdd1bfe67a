//! `alerts_`: the Prometheus rules in `deploy/prometheus/` pass Prometheus' own checker and
//! unit tests (`promtool`, Debian's `prometheus` package), every alert has a test that fires and
//! one that stays quiet, a runbook paragraph, and reads only metrics some service emits.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn promtool(args: &[&str]) -> Option<std::process::Output> {
    let dir = workspace().join("deploy/prometheus");
    match Command::new("promtool").args(args).current_dir(&dir).output() {
        Ok(out) => Some(out),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let ci = std::env::var("CI").is_ok_and(|v| v.trim().eq_ignore_ascii_case("true") || v.trim() == "1");
            assert!(!ci, "CI=true and promtool is missing: deploy/local/test installs Debian's prometheus package");
            eprintln!("SKIPPED: promtool is not installed (apt-get install prometheus)");
            None
        }
        Err(e) => panic!("promtool could not run: {e}"),
    }
}

fn alerts(rules: &str) -> Vec<String> {
    rules.lines().filter_map(|l| l.trim().strip_prefix("- alert: ")).map(|a| a.trim().to_owned()).collect()
}

#[test]
fn alerts_rules_pass_promtool_check_and_their_unit_tests() {
    let Some(check) = promtool(&["check", "rules", "clankie-rules.yml"]) else { return };
    let said = format!("{}{}", String::from_utf8_lossy(&check.stdout), String::from_utf8_lossy(&check.stderr));
    assert!(check.status.success(), "promtool check rules failed:\n{said}");
    let test = promtool(&["test", "rules", "clankie-rules.test.yml"]).unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&test.stdout), String::from_utf8_lossy(&test.stderr));
    assert!(test.status.success(), "promtool test rules failed:\n{said}");
    println!("{}", said.trim());
}

#[test]
fn alerts_each_fires_once_and_stays_quiet_once_in_the_tests_and_has_a_runbook() {
    let dir = workspace().join("deploy/prometheus");
    let rules = std::fs::read_to_string(dir.join("clankie-rules.yml")).unwrap();
    let tests = std::fs::read_to_string(dir.join("clankie-rules.test.yml")).unwrap();
    let runbook = std::fs::read_to_string(workspace().join("docs/operations.md")).unwrap();
    let names = alerts(&rules);
    assert!(names.len() >= 16, "the rules lost alerts: {names:?}");
    // Each test case names one alert, then either expects alerts or `exp_alerts: []`.
    let (mut fires, mut quiet) = (BTreeSet::new(), BTreeSet::new());
    let mut current = None;
    for line in tests.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix("alertname: ") {
            current = Some(name.to_owned());
        } else if let Some(name) = &current {
            if line == "exp_alerts: []" {
                quiet.insert(name.clone());
            } else if line == "exp_alerts:" {
                fires.insert(name.clone());
            }
        }
    }
    for name in &names {
        assert!(fires.contains(name), "{name} has no test in which it fires");
        assert!(quiet.contains(name), "{name} has no test in which it stays quiet");
        assert!(runbook.contains(&format!("### {name}\n")), "docs/operations.md has no runbook paragraph for {name}");
        let anchor = format!("runbook: docs/operations.md#{}", name.to_lowercase());
        assert!(rules.contains(&anchor), "{name}'s runbook annotation is not {anchor}");
    }
}

#[test]
fn alerts_read_only_metrics_a_service_emits() {
    let rules = std::fs::read_to_string(workspace().join("deploy/prometheus/clankie-rules.yml")).unwrap();
    let mut source = String::new();
    for entry in std::fs::read_dir(workspace().join("crates")).unwrap() {
        let src = entry.unwrap().path().join("src");
        let mut stack = vec![src];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            for e in entries.flatten() {
                let path = e.path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|x| x == "rs") {
                    source.push_str(&std::fs::read_to_string(&path).unwrap_or_default());
                }
            }
        }
    }
    let metrics: BTreeSet<String> = rules
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("clankie_") && !w.starts_with("clankie_captain:"))
        .map(str::to_owned)
        .collect();
    assert!(!metrics.is_empty());
    for metric in &metrics {
        assert!(source.contains(&format!("\"{metric}\"")), "the rules read {metric}, which no service emits");
    }
    println!("alerts read {} metrics, each emitted: {metrics:?}", metrics.len());
}
