//! Settings a person can hold: a config file under the environment, the values in effect with
//! their origin, misspellings refused at start, and one catalogue every reader goes through.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::operator::start;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `clankie <args>` with only `env` of the `CLANKIE_*` variables; (success, stdout, stderr).
fn clankie(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_clankie"));
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("CLANKIE_") || k.ends_with("BACKTRACE")) {
        cmd.env_remove(k);
    }
    let out = cmd.args(args).envs(env.iter().copied()).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn line<'a>(effective: &'a str, name: &str) -> &'a str {
    effective.lines().find(|l| l.starts_with(&format!("{name} = "))).unwrap_or_else(|| panic!("{name} is not listed:\n{effective}"))
}

#[test]
fn settings_a_config_file_under_an_environment_override_shows_each_value_with_its_source_and_masks_a_secret_file() {
    let dir = clankie_testkit::TestDir::new();
    let secret = "MTA5.canary-token-7f3a";
    std::fs::write(dir.path().join("discord_token"), format!("{secret}\n")).unwrap();
    let config = dir.path().join("clankie.toml");
    std::fs::write(
        &config,
        "[model]\nmodel_name = \"from-the-file\"\nmodel_max_retries = 6\n\n[discord]\ndiscord_token_file = \"discord_token\"\n\
         outcome_reactions = \"on\"\n\n[voice]\nvoice_rooms = [\"1:2\", \"3:4\"]\n",
    )
    .unwrap();
    let config_arg = config.to_str().unwrap();
    let (ok, out, err) = clankie(&["--config", config_arg, "settings", "--effective"], &[("CLANKIE_MODEL_NAME", "from-the-environment")]);
    assert!(ok, "{err}");
    assert_eq!(line(&out, "CLANKIE_MODEL_NAME"), "CLANKIE_MODEL_NAME = from-the-environment (environment)");
    assert_eq!(line(&out, "CLANKIE_MODEL_MAX_RETRIES"), format!("CLANKIE_MODEL_MAX_RETRIES = 6 (file {})", config.display()));
    assert_eq!(line(&out, "CLANKIE_VOICE_ROOMS"), format!("CLANKIE_VOICE_ROOMS = 1:2,3:4 (file {})", config.display()));
    assert_eq!(line(&out, "CLANKIE_OUTCOME_REACTIONS"), format!("CLANKIE_OUTCOME_REACTIONS = on (file {})", config.display()));
    assert_eq!(
        line(&out, "CLANKIE_DISCORD_TOKEN"),
        format!("CLANKIE_DISCORD_TOKEN = (set, hidden) (secret file {})", dir.path().join("discord_token").display())
    );
    assert_eq!(line(&out, "CLANKIE_STALL_SILENCE_MS"), "CLANKIE_STALL_SILENCE_MS = 300000 (default)");
    assert!(!out.contains(secret) && !err.contains(secret), "the secret was printed:\n{out}{err}");
    // CLANKIE_CONFIG names the same file; --service keeps to what that service reads.
    let (ok, gateway, err) = clankie(&["settings", "--effective", "--service", "gateway"], &[("CLANKIE_CONFIG", config_arg)]);
    assert!(ok, "{err}");
    assert!(gateway.contains("CLANKIE_DISCORD_TOKEN = (set, hidden)") && !gateway.contains("CLANKIE_MODEL_NAME"), "{gateway}");
    println!("settings: --effective --service gateway lists {} settings", gateway.lines().count());
}

#[test]
fn settings_a_misspelt_variable_stops_every_service_at_start_naming_the_closest() {
    for service in ["gateway", "captain", "voice-floor", "media", "console", "run", "doctor"] {
        let (failed, out) = start(service, &[("CLANKIE_VOICE_ROOM", "1:2"), ("CLANKIE_CONSOLE_TOKEN", "t")]);
        assert!(failed, "clankie {service} started with CLANKIE_VOICE_ROOM set: {out}");
        assert!(out.contains("CLANKIE_VOICE_ROOM is not a Clankie setting; did you mean CLANKIE_VOICE_ROOMS?"), "{service}: {out}");
        assert!(!out.contains("nats") && !out.contains("NATS"), "{service} went on to the bus first: {out}");
    }
}

#[test]
fn settings_a_misspelt_or_misplaced_config_key_stops_a_service_at_start_naming_the_closest() {
    let dir = clankie_testkit::TestDir::new();
    let config = dir.path().join("clankie.toml");
    let cases = [
        ("[voice]\nvoice_room = \"1:2\"\n", "[voice] voice_room is not a setting; did you mean [voice] voice_rooms?"),
        ("[discord]\nvoice_rooms = \"1:2\"\n", "voice_rooms belongs in [voice], not [discord]"),
        ("[discrod]\ndiscord_token = \"x\"\n", "[discrod] is not a section; did you mean [discord]?"),
        ("[testing]\nfuzz_cases = 3\n", "CLANKIE_FUZZ_CASES is read from the environment only"),
    ];
    for (text, says) in cases {
        std::fs::write(&config, text).unwrap();
        let (failed, out) = start("captain", &[("CLANKIE_CONFIG", config.to_str().unwrap())]);
        assert!(failed && out.contains(says), "{text:?} should say {says:?}: {out}");
    }
}

#[test]
fn settings_every_on_off_setting_takes_every_spelling_and_a_bad_one_says_what_it_takes() {
    let read = |value: &str| {
        let pairs = [("CLANKIE_OUTCOME_REACTIONS", value), ("CLANKIE_MEMORY_DM", value), ("CLANKIE_CAPTAIN_ONE_SHOT", value)];
        clankie_settings::Settings::from_lookup(|k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string()))
    };
    for (value, on) in [("true", true), ("on", true), ("yes", true), ("1", true), ("ON", true)].into_iter().chain([
        ("false", false),
        ("off", false),
        ("no", false),
        ("0", false),
    ]) {
        let s = read(value).unwrap_or_else(|e| panic!("{value}: {e}"));
        assert_eq!((s.outcome_reactions, s.memory_dm, s.captain_one_shot), (on, on, on), "{value}");
    }
    let err = read("maybe").unwrap_err().to_string();
    assert!(err.contains("\"maybe\"") && err.contains("on/off"), "{err}");
    let (ok, _, err) = clankie(&["settings", "--effective"], &[("CLANKIE_OUTCOME_REACTIONS", "on")]);
    assert!(ok, "CLANKIE_OUTCOME_REACTIONS=on was refused: {err}");
}

#[test]
fn settings_a_bad_value_says_the_value_and_what_is_allowed_and_a_clamp_or_a_deprecated_alias_is_said_once() {
    let cases: [(&str, &str, &str); 5] = [
        ("CLANKIE_WARM_CACHE_MIB", "0", "0 is out of range: it must be from 1 to 1048576 MiB"),
        ("CLANKIE_STT_BASE_URL", "speech:8788", "\"speech:8788\" is not an http:// or https:// URL"),
        ("CLANKIE_LOG", "info,sqlx=loud", "\"sqlx=loud\" is not a log directive"),
        ("CLANKIE_BROWSE", "sometimes", "\"sometimes\" is not one of auto, on or off"),
        ("CLANKIE_DISCORD_API", "loopback", "\"loopback\" is not host:port"),
    ];
    for (name, value, says) in cases {
        let (ok, _, err) = clankie(&["settings", "--effective"], &[(name, value)]);
        assert!(!ok && err.contains(name) && err.contains(says), "{name}={value} should say {says:?}: {err}");
    }
    let env = [
        ("CLANKIE_STALL_SILENCE_MS", "10000"),
        ("CLANKIE_MODEL_RESPONSE_TIMEOUT_MS", "60000"),
        ("CLANKIE_BOT_NAME", "Bob"),
        ("CLANKIE_LOG", "warn"),
    ];
    let (ok, _, err) = clankie(&["settings", "--effective"], &env);
    let clamp = "CLANKIE_MODEL_RESPONSE_TIMEOUT_MS=60000 is clamped to 5000 ms";
    assert!(ok && err.matches(clamp).count() == 1, "the clamp should be said once at warn: {err}");
    let deprecated = "CLANKIE_BOT_NAME is deprecated and will go: set the persona's name";
    assert!(err.matches(deprecated).count() == 1 && err.contains("WARN"), "the deprecated alias should say so once at warn: {err}");
}

#[test]
fn settings_the_readme_table_equals_the_catalogue() {
    let readme = std::fs::read_to_string(workspace().join("README.md")).unwrap();
    let begin = readme.find("<!-- settings:begin -->\n").expect("README has no settings:begin marker") + 24;
    let end = readme.find("<!-- settings:end -->").expect("README has no settings:end marker");
    assert!(
        readme[begin..end] == clankie_settings::catalogue::markdown(),
        "README's configuration table differs from the catalogue: regenerate it with `clankie settings`"
    );
}

/// Every file a person or a process reads settings from: code, scripts, manifests and docs.
fn readers() -> Vec<(PathBuf, String)> {
    let root = workspace();
    let mut out = vec![];
    let mut stack = vec![root.join("crates"), root.join("deploy"), root.join("docs"), root.join(".ci"), root.join(".config")];
    for file in ["README.md", "Dockerfile", "justfile"] {
        out.push((root.join(file), std::fs::read_to_string(root.join(file)).unwrap()));
    }
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().filter_map(Result::ok) {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if !["target", "node_modules", ".venv", "__pycache__"].contains(&name.as_str()) {
                    stack.push(path);
                }
            } else if let Ok(text) = std::fs::read_to_string(&path) {
                out.push((path, text));
            }
        }
    }
    out
}

#[test]
fn settings_no_clankie_name_is_read_outside_the_catalogue() {
    let streams: Vec<&str> = clankie_bus::STREAMS.iter().map(|s| s.name).collect();
    let known = |name: &str| {
        clankie_settings::catalogue::find(name).is_some()
            || name.strip_suffix("_FILE").and_then(clankie_settings::catalogue::find).is_some_and(|s| s.from_file_allowed())
            || streams.contains(&name)
    };
    let mut offenders = vec![];
    let files = readers();
    for (path, text) in &files {
        let mut rest = text.as_str();
        while let Some(at) = rest.find("CLANKIE_") {
            let tail = &rest[at..];
            let len = tail.find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')).unwrap_or(tail.len());
            let token = &tail[..len];
            let is_prefix = tail[len..].starts_with('*') || token.ends_with('_');
            // The misspelling the settings tests and docs name on purpose.
            if !is_prefix && !known(token) && token != "CLANKIE_VOICE_ROOM" {
                offenders.push(format!("{}: {token}", path.strip_prefix(workspace()).unwrap_or(path).display()));
            }
            rest = &tail[len.max(1)..];
        }
    }
    offenders.sort();
    offenders.dedup();
    assert!(files.iter().any(|(p, _)| p.ends_with("deploy/speech/server.py")), "the walk missed the speech service");
    assert!(offenders.is_empty(), "names no setting in the catalogue (add it, or fix the spelling):\n{}", offenders.join("\n"));
}

#[test]
fn settings_the_example_config_file_is_read_whole() {
    let path = workspace().join("deploy/clankie.example.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut sources = clankie_settings::Sources::default();
    sources.layer_file(&path, &text).unwrap();
    let given = clankie_settings::catalogue().filter(|s| sources.get(s.name).is_some()).count();
    assert!(given >= 10, "the example sets only {given} settings");
    for must in clankie_settings::catalogue().filter(|s| s.must_set) {
        let key = must.key();
        assert!(text.contains(&format!("{key} =")) || text.contains(&format!("{key}_file =")), "the example never mentions {key}");
    }
    clankie_settings::Settings::from_sources(sources, |_| None).unwrap();
}
