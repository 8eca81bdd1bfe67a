//! `clankie doctor`: every part a deployment needs, checked the way the services will use it,
//! each line ✓ or ✗ with the one-line fix; exit 0 only when every line passes.

use std::time::Duration;

use clankie_gateway::doctor::{Admitted, Check};
use clankie_settings::{Settings, redact_url};

/// How long one check may take before it counts as not answering.
const PATIENCE: Duration = Duration::from_secs(10);

/// Runs every check and prints them; whether all passed.
pub async fn run(settings: &Settings) -> bool {
    let mut checks = Vec::new();
    checks.extend(nats(settings).await);
    checks.extend(postgres(settings).await);
    let admitted = Admitted { guilds: settings.discord_guilds.clone(), voice_rooms: settings.voice_rooms.clone() };
    checks.extend(clankie_gateway::doctor::discord_checks(&settings.discord_token, settings.discord_api.as_deref(), &admitted).await);
    checks.push(model(settings).await);
    checks.extend(speech(settings).await);
    checks.push(console(settings));
    let mut all = true;
    for check in &checks {
        all &= check.ok;
        println!("{} {}: {}", if check.ok { "✓" } else { "✗" }, check.name, check.found);
        if !check.ok {
            println!("    fix: {}", check.fix);
        }
    }
    let failed = checks.iter().filter(|c| !c.ok).count();
    if failed == 0 {
        println!("all {} checks passed", checks.len());
    } else {
        println!("{failed} of {} checks failed", checks.len());
    }
    all
}

async fn nats(settings: &Settings) -> Vec<Check> {
    let at = redact_url(&settings.nats_url);
    let bus = match tokio::time::timeout(PATIENCE, clankie_bus::Bus::connect(settings, "doctor")).await {
        Ok(Ok(bus)) => bus,
        Ok(Err(e)) => {
            return vec![Check::fail(
                "nats",
                format!("NATS at {at} could not be reached: {e}"),
                "start nats-server with JetStream (-js), or set CLANKIE_NATS_URL",
            )];
        }
        Err(_) => {
            return vec![Check::fail(
                "nats",
                format!("NATS at {at} did not answer in {PATIENCE:?}"),
                "start nats-server with JetStream (-js), or set CLANKIE_NATS_URL",
            )];
        }
    };
    let missing = match bus.missing_streams().await {
        Ok(missing) => missing,
        Err(e) => {
            return vec![Check::fail("nats", format!("JetStream at {at} did not answer: {e}"), "run nats-server with JetStream on (-js)")];
        }
    };
    if missing.is_empty() {
        vec![Check::pass("nats", format!("JetStream at {at} holds all {} streams", clankie_bus::STREAMS.len()))]
    } else {
        vec![Check::fail(
            "nats",
            format!("JetStream at {at} lacks {}", missing.join(", ")),
            "run `clankie streams` (the services also declare them when they start)",
        )]
    }
}

async fn postgres(settings: &Settings) -> Vec<Check> {
    let at = redact_url(&settings.database_url);
    let store = match tokio::time::timeout(PATIENCE, clankie_store::Store::connect(&settings.database_url)).await {
        Ok(Ok(store)) => store,
        Ok(Err(e)) => {
            return vec![Check::fail(
                "postgres",
                format!("PostgreSQL at {at} could not be reached: {e}"),
                "start PostgreSQL, or set CLANKIE_DATABASE_URL",
            )];
        }
        Err(_) => {
            return vec![Check::fail(
                "postgres",
                format!("PostgreSQL at {at} did not answer in {PATIENCE:?}"),
                "start PostgreSQL, or set CLANKIE_DATABASE_URL",
            )];
        }
    };
    match store.migration_gap().await {
        Ok(gap) if !gap.unknown.is_empty() => vec![Check::fail(
            "postgres",
            format!("the database at {at} is newer than this binary (migrations {:?} are unknown to it)", gap.unknown),
            "run the release that migrated it, or a newer one (a migration is never rolled back)",
        )],
        Ok(gap) if !gap.pending.is_empty() => vec![Check::fail(
            "postgres",
            format!("the database at {at} lacks {} migration(s) of this binary", gap.pending.len()),
            "run `clankie migrate` (the captain also migrates when it starts)",
        )],
        Ok(gap) => vec![Check::pass("postgres", format!("the database at {at} is current ({} migrations)", gap.applied))],
        Err(e) => vec![Check::fail(
            "postgres",
            format!("the migrations of {at} could not be read: {e}"),
            "check CLANKIE_DATABASE_URL names Clankie's database and its user may read it",
        )],
    }
}

fn client() -> Option<reqwest::Client> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().timeout(PATIENCE).build().ok()
}

/// A one-token request to the model, as the captain would make it; the provider's own words
/// when it refuses are shown here, on the person's terminal, and nowhere else.
async fn model(settings: &Settings) -> Check {
    let Some(base) = &settings.model_base_url else {
        return if settings.discord_api.is_none() {
            Check::fail(
                "model",
                "no model is configured (the rehearsal model only serves the sandbox)",
                "set CLANKIE_MODEL_BASE_URL, CLANKIE_MODEL_NAME and CLANKIE_MODEL_API_KEY",
            )
        } else {
            Check::pass("model", "the rehearsal model (no CLANKIE_MODEL_BASE_URL; fine for the loopback Discord)")
        };
    };
    let Some(http) = client() else { return Check::fail("model", "no HTTP client could be built", "report this") };
    let url = format!("{}/chat/completions", base.trim_end_matches('/'));
    let body = serde_json::json!({
        "model": settings.model_name,
        "messages": [{ "role": "user", "content": "Say OK." }],
        "max_tokens": 1,
    });
    let mut request = http.post(&url).json(&body);
    if let Some(key) = &settings.model_api_key {
        request = request.bearer_auth(key);
    }
    let at = redact_url(base);
    match request.send().await {
        Ok(r) if r.status().is_success() => Check::pass("model", format!("{} at {at} answered a one-token request", settings.model_name)),
        Ok(r) => {
            let status = r.status();
            let said = r
                .json::<serde_json::Value>()
                .await
                .ok()
                .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
                .unwrap_or_default();
            let fix = match status.as_u16() {
                401 | 403 => "check CLANKIE_MODEL_API_KEY is a key of this provider",
                404 => "check CLANKIE_MODEL_NAME names a model the provider serves (and CLANKIE_MODEL_BASE_URL ends in /v1)",
                429 => "the provider's quota or rate limit: check the account's billing",
                _ => "check CLANKIE_MODEL_BASE_URL, CLANKIE_MODEL_NAME and CLANKIE_MODEL_API_KEY",
            };
            Check::fail("model", format!("{} at {at} refused with {status}: {said}", settings.model_name), fix)
        }
        Err(e) => Check::fail(
            "model",
            format!("the model at {at} could not be reached: {}", e.without_url()),
            "check CLANKIE_MODEL_BASE_URL and that the server is up",
        ),
    }
}

/// Each speech engine set answers HTTP at all (its own routes are its business).
async fn speech(settings: &Settings) -> Vec<Check> {
    let engines = [
        ("speech to text", &settings.stt_base_url, "CLANKIE_STT_BASE_URL"),
        ("text to speech", &settings.tts_base_url, "CLANKIE_TTS_BASE_URL"),
        ("turn detector", &settings.turn_base_url, "CLANKIE_TURN_BASE_URL"),
    ];
    let set: Vec<_> = engines.iter().filter_map(|(what, url, var)| url.as_ref().map(|u| (*what, u, *var))).collect();
    if set.is_empty() {
        return vec![Check::pass("speech", "no speech engine is set (voice rooms cannot hear or speak; text is unaffected)")];
    }
    let Some(http) = client() else { return vec![Check::fail("speech", "no HTTP client could be built", "report this")] };
    let mut checks = Vec::new();
    for (what, url, var) in set {
        let at = redact_url(url);
        match http.get(url.as_str()).send().await {
            Ok(r) => checks.push(Check::pass("speech", format!("the {what} engine at {at} answers ({})", r.status()))),
            Err(e) => checks.push(Check::fail(
                "speech",
                format!("the {what} engine at {at} does not answer: {}", e.without_url()),
                format!("start it, or correct {var}"),
            )),
        }
    }
    checks
}

fn console(settings: &Settings) -> Check {
    if settings.console_token.as_deref().is_some_and(|t| !t.is_empty()) {
        Check::pass("console", "CLANKIE_CONSOLE_TOKEN is set")
    } else {
        Check::fail(
            "console",
            "CLANKIE_CONSOLE_TOKEN is not set: the console refuses every request",
            "set CLANKIE_CONSOLE_TOKEN to a long random string (`openssl rand -hex 32`)",
        )
    }
}
