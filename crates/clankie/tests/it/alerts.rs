//! `alerts_`: the Prometheus rules in `deploy/prometheus/` pass Prometheus' own checker and
//! unit tests (`promtool`, Debian's `prometheus` package), every alert has a test that fires and
//! one that stays quiet, a runbook paragraph, and reads only metrics some service emits.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `promtool` run in `deploy/prometheus/`. A missing promtool fails the test wherever it runs:
/// a skipped check would read as a passed one.
fn promtool(args: &[&str]) -> std::process::Output {
    let dir = workspace().join("deploy/prometheus");
    match Command::new("promtool").args(args).current_dir(&dir).output() {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            panic!("promtool is not installed: `apt-get install prometheus` (Debian's package) brings it; deploy/local/test installs it")
        }
        Err(e) => panic!("promtool could not run: {e}"),
    }
}

fn alerts(rules: &str) -> Vec<String> {
    rules.lines().filter_map(|l| l.trim().strip_prefix("- alert: ")).map(|a| a.trim().to_owned()).collect()
}

#[test]
fn alerts_rules_pass_promtool_check_and_their_unit_tests() {
    let check = promtool(&["check", "rules", "clankie-rules.yml"]);
    let said = format!("{}{}", String::from_utf8_lossy(&check.stdout), String::from_utf8_lossy(&check.stderr));
    assert!(check.status.success(), "promtool check rules failed:\n{said}");
    let test = promtool(&["test", "rules", "clankie-rules.test.yml"]);
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

/// The series each rule reads, by name, with the label names the rule selects or groups by.
fn series_the_rules_read(rules: &str) -> BTreeSet<(String, BTreeSet<String>)> {
    let mut read = BTreeSet::new();
    for expr in rules.lines().filter_map(|l| l.trim().strip_prefix("expr: ")) {
        let by: BTreeSet<String> = expr
            .split("by (")
            .skip(1)
            .filter_map(|rest| rest.split(')').next())
            .flat_map(|labels| labels.split(',').map(|l| l.trim().to_owned()))
            .filter(|l| !l.is_empty() && l != "job")
            .collect();
        let mut rest = expr;
        while let Some(at) = rest.find("clankie_") {
            let tail = &rest[at..];
            let end = tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
            let (name, after) = (&tail[..end], &tail[end..]);
            // A recording rule's name (`clankie:…`, `clankie_captain:…`) is no series a service exports.
            if !after.starts_with(':') {
                let mut labels = by.clone();
                if let Some(matchers) = after.strip_prefix('{').and_then(|m| m.split('}').next()) {
                    labels.extend(matchers.split(',').filter_map(|m| m.split(['=', '!']).next()).map(|l| l.trim().to_owned()));
                }
                read.insert((name.to_owned(), labels));
            }
            rest = after;
        }
    }
    read
}

/// What a Prometheus text exposition holds: each series' name and label names.
fn exposition_series(text: &str) -> BTreeSet<(String, BTreeSet<String>)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let name_end = l.find(['{', ' ']).unwrap_or(l.len());
            let labels = l[name_end..]
                .strip_prefix('{')
                .and_then(|m| m.split('}').next())
                .map(|m| {
                    m.split(',').filter_map(|kv| kv.split('=').next()).map(|k| k.trim().to_owned()).filter(|k| !k.is_empty()).collect()
                })
                .unwrap_or_default();
            (l[..name_end].to_owned(), labels)
        })
        .collect()
}

#[test]
fn alerts_series_the_rules_read_are_parsed_with_their_labels() {
    let read = series_the_rules_read(
        "        expr: sum by (kind) (rate(clankie_captain_outcomes_total[10m]))\n        expr: clankie:failed_share:ratio10m > 0.2\n        expr: max(clankie_bus_consumer_pending{consumer=\"captain\"}) > 200",
    );
    let names: Vec<(&str, Vec<&str>)> = read.iter().map(|(n, l)| (n.as_str(), l.iter().map(String::as_str).collect())).collect();
    assert_eq!(names, [("clankie_bus_consumer_pending", vec!["consumer"]), ("clankie_captain_outcomes_total", vec!["kind"])]);
    let scraped = exposition_series("# TYPE x counter\nclankie_ready 1\nclankie_dependency_up{dependency=\"nats\"} 1\n");
    assert!(scraped.contains(&("clankie_dependency_up".to_owned(), ["dependency".to_owned()].into())), "{scraped:?}");
}

/// Every series a rule reads, scraped from running services: gateway, captain, media, voice
/// floor and console each in its own process, one message answered and one failed by the
/// model, a voice room kept; each rule's series is exported by some service with the labels the
/// rule selects or groups by. (promtool tests the rules against series made up to match.)
#[tokio::test]
async fn alerts_every_series_a_rule_reads_is_scraped_from_the_running_services_with_the_labels_it_reads() {
    let rules = std::fs::read_to_string(workspace().join("deploy/prometheus/clankie-rules.yml")).unwrap();
    let read = series_the_rules_read(&rules);
    assert!(read.len() >= 16, "the rules read {read:?}");
    let cast = crate::chaos::Cast::start(clankie_discord_loopback::LoopbackConfig::default()).await;
    let addr = || std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).unwrap().to_string();
    let services = ["gateway", "captain", "media", "voice-floor", "console"];
    let addrs: Vec<String> = services.iter().map(|_| addr()).collect();
    let console_addr = addr();
    let mut running = Vec::new();
    for (service, http) in services.iter().zip(&addrs) {
        let mut env = vec![("CLANKIE_HTTP_ADDR", http.as_str()), ("CLANKIE_VOICE_ROOMS", "100:300")];
        if *service == "console" {
            env.extend([("CLANKIE_CONSOLE_ADDR", console_addr.as_str()), ("CLANKIE_CONSOLE_TOKEN", "op-token")]);
        }
        running.push(cast.service(service, service, None, &env));
    }
    assert!(cast.discord.wait_for_session(Duration::from_secs(20)).await, "the gateway never attached");
    // Someone in the voice room: the floor takes the room (its body gauge).
    cast.discord.voice_join(300, "ada").unwrap();
    // One message the model fails (a model error), one it answers (the first chunk's timing).
    cast.standin.script(clankie_model_standin::Script::any(clankie_model_standin::Reply::ModelNotFound));
    let failed = cast.mention("ada", "what is on today?");
    let outcome = |id: u64| {
        let store = cast.store.clone();
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            loop {
                if let Some(o) = store.outcome(&id.to_string()).await.unwrap() {
                    return o;
                }
                assert!(tokio::time::Instant::now() < deadline, "no outcome for {id}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert_eq!(outcome(failed).await.kind, clankie_proto::v1::OutcomeKind::Failed);
    cast.standin.script(clankie_model_standin::Script::any(clankie_model_standin::Reply::text("The lobby opens at nine.")));
    let answered = cast.mention("bob", "and tomorrow?");
    assert_eq!(outcome(answered).await.kind, clankie_proto::v1::OutcomeKind::Replied);

    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let (scraped, missing) = loop {
        let mut scraped: Vec<(&str, BTreeSet<(String, BTreeSet<String>)>)> = Vec::new();
        for (service, at) in services.iter().zip(&addrs) {
            let text = match http.get(format!("http://{at}/metrics")).send().await {
                Ok(r) => r.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            };
            scraped.push((service, exposition_series(&text)));
        }
        let missing: Vec<&(String, BTreeSet<String>)> = read
            .iter()
            .filter(|(name, labels)| !scraped.iter().any(|(_, series)| series.iter().any(|(n, l)| n == name && labels.is_subset(l))))
            .collect();
        if missing.is_empty() || tokio::time::Instant::now() > deadline {
            break (scraped, missing.into_iter().cloned().collect::<Vec<_>>());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    for (name, labels) in &read {
        let by: Vec<&str> =
            scraped.iter().filter(|(_, s)| s.iter().any(|(n, l)| n == name && labels.is_subset(l))).map(|(s, _)| *s).collect();
        println!("alerts: {name} {labels:?} exported by {by:?}");
    }
    assert!(missing.is_empty(), "series the rules read that no running service exports (name, labels): {missing:?}");
    drop(running);
}
