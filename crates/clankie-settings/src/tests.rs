use super::*;
use std::collections::HashMap;

fn settings(vars: &[(&str, &str)]) -> Result<Settings, SettingsError> {
    let env: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    Settings::from_lookup(|k| env.get(k).cloned())
}

#[test]
fn a_nats_server_list_is_read_and_redacted_server_by_server() {
    let list = "nats://tok1@n1:4222, nats://user:pw2@n2:4222,nats://n3:4222";
    let s = settings(&[("CLANKIE_NATS_URL", list), ("CLANKIE_STREAM_REPLICAS", "3")]).unwrap();
    assert_eq!(s.stream_replicas, 3);
    let shown = redact_url(&s.nats_url);
    assert!(!shown.contains("tok1") && !shown.contains("pw2"), "{shown}");
    assert_eq!(shown, "nats://***@n1:4222,nats://user:***@n2:4222,nats://n3:4222");
    assert!(settings(&[("CLANKIE_NATS_URL", "nats://n1:4222,n2:4222")]).is_err(), "every server needs a scheme");
    assert!(settings(&[("CLANKIE_STREAM_REPLICAS", "7")]).is_err());
}

#[test]
fn browse_settings_read_their_forms_and_refuse_others() {
    let s = settings(&[]).unwrap();
    assert_eq!((s.browse, s.browsers_max, s.browser_viewport), (BrowseMode::Auto, 2, (1280, 800)));
    let s = settings(&[("CLANKIE_BROWSE", "off"), ("CLANKIE_BROWSER_VIEWPORT", "800x600")]).unwrap();
    assert_eq!((s.browse, s.browser_viewport), (BrowseMode::Off, (800, 600)));
    for (var, bad) in [
        ("CLANKIE_BROWSE", "sometimes"),
        ("CLANKIE_BROWSER_VIEWPORT", "800"),
        ("CLANKIE_BROWSER_VIEWPORT", "10x10"),
        ("CLANKIE_BROWSERS_MAX", "0"),
        ("CLANKIE_CHROMIUM", "chromium"),
    ] {
        let err = settings(&[(var, bad)]).unwrap_err();
        assert!(err.to_string().starts_with(var), "{var}={bad}: {err}");
    }
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
fn redact_hides_userinfo_in_any_scheme_and_secret_query_parameters() {
    let cases = [
        ("nats://s3cr3tT0ken@nats.internal:4222", "nats://***@nats.internal:4222"),
        ("nats://user:hunter2@10.0.0.1:4222", "nats://user:***@10.0.0.1:4222"),
        ("postgres://clankie:pw@db:5432/clankie?sslmode=require", "postgres://clankie:***@db:5432/clankie?sslmode=require"),
        ("https://api.example.com/v1?api_key=abc123&model=x", "https://api.example.com/v1?api_key=***&model=x"),
        ("https://h/p?password=x&Token=y&sig=z&page=2#top", "https://h/p?password=***&Token=***&sig=***&page=2#top"),
        ("redis://:onlypass@cache:6379/0", "redis://***@cache:6379/0"),
        ("https://plain.example.com/path", "https://plain.example.com/path"),
    ];
    for (url, want) in cases {
        assert_eq!(redact_url(url), want, "{url}");
    }
    for secret in ["s3cr3tT0ken", "hunter2", "abc123", "onlypass"] {
        assert!(cases.iter().all(|(u, _)| !redact_url(u).contains(secret)));
    }
}

#[test]
fn debug_never_shows_the_database_password() {
    let s = settings(&[("CLANKIE_DATABASE_URL", "postgres://bot:hunter2@db:5432/clankie")]).unwrap();
    let shown = format!("{s:?}");
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(shown.contains("postgres://bot:***@db:5432/clankie"), "{shown}");
}

#[test]
fn the_model_key_never_shows_and_an_unset_endpoint_means_rehearsal() {
    let s = settings(&[("CLANKIE_MODEL_API_KEY", "sk-secret-123")]).unwrap();
    assert!(s.model_base_url.is_none());
    assert!(!format!("{s:?}").contains("sk-secret-123"));
    assert!(settings(&[("CLANKIE_MODEL_BASE_URL", "ftp://x")]).is_err());
}

#[test]
fn stall_durations_compress_but_stay_consistent() {
    let s = settings(&[("CLANKIE_STALL_SILENCE_MS", "400"), ("CLANKIE_STALL_TICK_MS", "50")]).unwrap();
    assert_eq!((s.stall_silence, s.stall_tick), (Duration::from_millis(400), Duration::from_millis(50)));
    assert!(settings(&[("CLANKIE_STALL_SILENCE_MS", "400"), ("CLANKIE_STALL_TICK_MS", "500")]).is_err());
    let d = settings(&[]).unwrap();
    assert_eq!((d.stall_silence, d.stall_tick), (Duration::from_secs(300), Duration::from_secs(5)));
}

#[test]
fn the_model_response_timeout_stays_under_half_the_stall_bound() {
    assert_eq!(settings(&[]).unwrap().model_response_timeout, Duration::from_secs(120));
    let short = settings(&[("CLANKIE_STALL_SILENCE_MS", "8000")]).unwrap();
    assert_eq!(short.model_response_timeout, Duration::from_secs(4));
    let set = settings(&[("CLANKIE_MODEL_RESPONSE_TIMEOUT_MS", "2000"), ("CLANKIE_STALL_SILENCE_MS", "8000")]).unwrap();
    assert_eq!(set.model_response_timeout, Duration::from_secs(2));
    assert!(settings(&[("CLANKIE_MODEL_RESPONSE_TIMEOUT_MS", "soon")]).is_err());
}

#[test]
fn the_discord_token_never_shows() {
    let s = settings(&[("CLANKIE_DISCORD_TOKEN", "MTA-secret-token")]).unwrap();
    assert!(!format!("{s:?}").contains("MTA-secret-token"));
    assert!(settings(&[("CLANKIE_TYPING_INTERVAL_MS", "10000")]).is_err());
    assert_eq!(settings(&[("CLANKIE_DISCORD_GUILDS", "1, 2")]).unwrap().discord_guilds, vec![1, 2]);
}

#[test]
fn replica_id_must_be_a_plain_token() {
    assert!(settings(&[("CLANKIE_REPLICA_ID", "a b")]).is_err());
    assert_eq!(settings(&[("CLANKIE_REPLICA_ID", "captain-0")]).unwrap().replica_id, "captain-0");
}

#[test]
fn settings_effective_never_shows_a_secret_or_a_password_in_any_url() {
    let env = [
        ("CLANKIE_MODEL_API_KEY", "sk-canary-key"),
        ("CLANKIE_STT_BASE_URL", "https://me:canary-pass@speech.example/v1?token=canary-token"),
        ("CLANKIE_DATABASE_URL", "postgres://clankie:canary-db@db/clankie"),
    ];
    let sources = Sources::gather(env.iter().map(|(k, v)| (k.to_string(), v.to_string()))).unwrap();
    let shown = format!("{:?}", sources.effective(None));
    for canary in ["sk-canary-key", "canary-pass", "canary-token", "canary-db"] {
        assert!(!shown.contains(canary), "{canary} shown");
    }
    assert!(shown.contains("speech.example"), "the rest of the URL is shown");
}

#[test]
fn settings_redaction_reaches_passwords_with_odd_characters_urls_without_a_scheme_and_every_server_of_a_list() {
    for (url, shown) in [
        ("postgres://clankie:ab#cd/e?f@pg/clankie", "postgres://clankie:***@pg/clankie"),
        ("clankie:pw@db/clankie", "clankie:***@db/clankie"),
        ("nats://tok@a:4222,tok@b:4222", "nats://***@a:4222,***@b:4222"),
        ("https://x/v1?a=1,2&token=canary", "https://x/v1?a=1,2&token=***"),
    ] {
        assert_eq!(redact_url(url), shown);
    }
}

#[test]
fn settings_an_empty_value_in_the_file_is_no_value_and_a_key_with_its_file_form_is_refused() {
    let path = std::path::Path::new("/etc/clankie/clankie.toml");
    let mut sources = Sources::default();
    sources.layer_file(path, "[model]\nmodel_api_key = \"\"\n").unwrap();
    assert_eq!(sources.get("CLANKIE_MODEL_API_KEY"), None);
    let both = Sources::default().layer_file(path, "[discord]\ndiscord_token = \"a\"\ndiscord_token_file = \"t\"\n").unwrap_err();
    assert!(both.to_string().contains("keep one"), "{both}");
    let shown = format!("{:?}", Sources::from_lookup(&|k| (k == "CLANKIE_MODEL_API_KEY").then(|| "sk-canary".to_owned())));
    assert!(!shown.contains("sk-canary") && shown.contains("CLANKIE_MODEL_API_KEY"), "{shown}");
}

#[test]
fn the_bills_prices_default_to_dated_list_prices_and_refuse_what_is_not_a_price() {
    let s = settings(&[]).unwrap();
    assert_eq!((s.price_input, s.price_output, s.price_cache_read, s.price_cache_write), (3.0, 15.0, 0.30, 3.75));
    assert_eq!(s.price_model, "Claude Sonnet 4.6, list prices of 2026-12-03");
    let hour = settings(&[("CLANKIE_PRICE_CACHE_WRITE_USD_PER_MTOK", "6.0"), ("CLANKIE_PRICE_MODEL", " mine ")]).unwrap();
    assert_eq!((hour.price_cache_write, hour.price_model.as_str()), (6.0, "mine"));
    for bad in ["cheap", "-1", "NaN", "inf"] {
        let err = settings(&[("CLANKIE_PRICE_INPUT_USD_PER_MTOK", bad)]).unwrap_err();
        assert!(err.to_string().starts_with("CLANKIE_PRICE_INPUT_USD_PER_MTOK"), "{bad:?}: {err}");
    }
}
