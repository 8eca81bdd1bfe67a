//! `clankie doctor`: every part a deployment needs, checked the way the services will use it,
//! each line ✓ or ✗ with the one-line fix; exit 0 only when every line passes.

use std::time::Duration;

use clankie_gateway::doctor::{Admitted, Check};
use clankie_settings::{ModelProvider, Origin, Settings, redact_url};
use clankie_store::{OwnerSettings, Store};

/// How long one check may take before it counts as not answering.
const PATIENCE: Duration = Duration::from_secs(10);

/// The Messages API version the captain's Anthropic client sends.
const ANTHROPIC_VERSION: &str = "2023-06-01";

/// Runs every check and prints them; whether all passed.
pub async fn run(settings: &Settings) -> bool {
    let mut checks = Vec::new();
    checks.extend(nats(settings).await);
    let (found, store) = postgres(settings).await;
    checks.extend(found);
    let owner = match &store {
        Some(store) => Some(owner(store).await),
        None => None,
    };
    if let Some((check, _)) = &owner {
        checks.push(check.clone());
    }
    let admitted = admitted(settings, owner.as_ref().and_then(|(_, o)| o.as_ref()));
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

/// The database's line, and the store when it could be reached (the owner settings are read from it).
async fn postgres(settings: &Settings) -> (Vec<Check>, Option<Store>) {
    let at = redact_url(&settings.database_url);
    let fix = "start PostgreSQL, or set CLANKIE_DATABASE_URL";
    let store = match tokio::time::timeout(PATIENCE, Store::connect(&settings.database_url)).await {
        Ok(Ok(store)) => store,
        Ok(Err(e)) => return (vec![Check::fail("postgres", format!("PostgreSQL at {at} could not be reached: {e}"), fix)], None),
        Err(_) => return (vec![Check::fail("postgres", format!("PostgreSQL at {at} did not answer in {PATIENCE:?}"), fix)], None),
    };
    let checks = migrations(&store, &at).await;
    (checks, Some(store))
}

async fn migrations(store: &Store, at: &str) -> Vec<Check> {
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

/// The owner settings' line: an owner must be set (memory proposals and the owner's commands wait on one).
async fn owner(store: &Store) -> (Check, Option<OwnerSettings>) {
    let settings = match store.owner_settings().await {
        Ok(settings) => settings,
        Err(e) => {
            let failed = Check::fail(
                "owner",
                format!("the owner settings could not be read: {e}"),
                "run `clankie migrate` (the captain also migrates when it starts)",
            );
            return (failed, None);
        }
    };
    let check = match settings.owner_id {
        Some(id) => Check::pass("owner", format!("the owner is the Discord user {id}")),
        None => Check::fail(
            "owner",
            "no owner is set: nobody may approve his memory proposals or use the owner's commands",
            "`clankie self settings --owner <your Discord user id>` (Developer Mode, right-click your name, Copy User ID), or `owner` in a self file",
        ),
    };
    (check, Some(settings))
}

/// Where he is admitted: the owner's guilds and channels, or the deprecated
/// `CLANKIE_DISCORD_GUILDS` when the owner admitted every guild.
fn admitted(settings: &Settings, owner: Option<&OwnerSettings>) -> Admitted {
    let (guilds, guilds_from) = match owner {
        Some(o) if !o.guilds.is_empty() => (o.guilds.clone(), "the owner settings (`clankie self settings --guilds`)"),
        _ if !settings.discord_guilds.is_empty() => (settings.discord_guilds.clone(), "CLANKIE_DISCORD_GUILDS (deprecated)"),
        _ => (Vec::new(), "the owner settings"),
    };
    let channels = owner.map(|o| o.channels.clone()).unwrap_or_default();
    Admitted { guilds, guilds_from, channels, voice_rooms: settings.voice_rooms.clone() }
}

fn client() -> Option<reqwest::Client> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().timeout(PATIENCE).build().ok()
}

/// A one-token request to the model over the configured provider's own wire, as the captain
/// would make it; the provider's own words when it refuses are shown here, on the person's
/// terminal, and nowhere else.
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
    let base_url = base.trim_end_matches('/');
    let ask = serde_json::json!([{ "role": "user", "content": "Say OK." }]);
    let (wire, request) = match settings.model_provider {
        ModelProvider::Anthropic => {
            let body = serde_json::json!({ "model": settings.model_name, "max_tokens": 1, "messages": ask });
            let mut request = http.post(format!("{base_url}/messages")).header("anthropic-version", ANTHROPIC_VERSION).json(&body);
            if let Some(key) = &settings.model_api_key {
                request = request.header("x-api-key", key);
            }
            ("Anthropic's Messages API", request)
        }
        ModelProvider::OpenAi => {
            let body = serde_json::json!({ "model": settings.model_name, "messages": ask, "max_tokens": 1 });
            let mut request = http.post(format!("{base_url}/chat/completions")).json(&body);
            if let Some(key) = &settings.model_api_key {
                request = request.bearer_auth(key);
            }
            ("OpenAI's Chat Completions", request)
        }
    };
    let at = redact_url(base);
    match request.send().await {
        Ok(r) if r.status().is_success() => {
            Check::pass("model", format!("{} at {at} answered a one-token request over {wire}", settings.model_name))
        }
        Ok(r) => {
            let status = r.status();
            // Both wires put the provider's words at error.message.
            let said = r
                .json::<serde_json::Value>()
                .await
                .ok()
                .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
                .unwrap_or_default();
            let fix = model_fix(settings.model_provider, status.as_u16());
            Check::fail("model", format!("{} at {at} refused {wire} with {status}: {said}", settings.model_name), fix)
        }
        Err(e) => Check::fail(
            "model",
            format!("the model at {at} could not be reached: {}", e.without_url()),
            "check CLANKIE_MODEL_BASE_URL and that the server is up",
        ),
    }
}

fn model_fix(provider: ModelProvider, status: u16) -> &'static str {
    match (provider, status) {
        (ModelProvider::Anthropic, 401 | 403) => "check CLANKIE_MODEL_API_KEY is an Anthropic key (sk-ant-…)",
        (_, 401 | 403) => "check CLANKIE_MODEL_API_KEY is a key of this provider",
        (ModelProvider::Anthropic, 404) => {
            "check CLANKIE_MODEL_NAME names a Claude model and CLANKIE_MODEL_BASE_URL is https://api.anthropic.com/v1 (with /v1)"
        }
        (ModelProvider::OpenAi, 404) => {
            "check CLANKIE_MODEL_NAME names a model the provider serves (and CLANKIE_MODEL_BASE_URL ends in /v1); for Claude set CLANKIE_MODEL_PROVIDER=anthropic"
        }
        (_, 429) => "the provider's quota or rate limit: check the account's billing",
        _ => "check CLANKIE_MODEL_PROVIDER, CLANKIE_MODEL_BASE_URL, CLANKIE_MODEL_NAME and CLANKIE_MODEL_API_KEY",
    }
}

/// A speech engine the voice floor may be given, and how doctor asks it what the voice floor does.
#[derive(Clone, Copy)]
enum Engine {
    SpeechToText,
    TextToSpeech,
    TurnDetector,
}

impl Engine {
    fn what(self) -> &'static str {
        match self {
            Engine::SpeechToText => "speech-to-text",
            Engine::TextToSpeech => "text-to-speech",
            Engine::TurnDetector => "turn detector",
        }
    }

    fn var(self) -> &'static str {
        match self {
            Engine::SpeechToText => "CLANKIE_STT_BASE_URL",
            Engine::TextToSpeech => "CLANKIE_TTS_BASE_URL",
            Engine::TurnDetector => "CLANKIE_TURN_BASE_URL",
        }
    }

    /// The route the voice floor posts to under the engine's base URL.
    fn route(self) -> &'static str {
        match self {
            Engine::SpeechToText => "audio/transcriptions",
            Engine::TextToSpeech => "audio/speech",
            Engine::TurnDetector => "turn",
        }
    }

    fn base(self, settings: &Settings) -> Option<&String> {
        match self {
            Engine::SpeechToText => settings.stt_base_url.as_ref(),
            Engine::TextToSpeech => settings.tts_base_url.as_ref(),
            Engine::TurnDetector => settings.turn_base_url.as_ref(),
        }
    }

    /// The voice floor's own request, made small: half a second of silence to hear, one word to say.
    fn request(self, http: &reqwest::Client, settings: &Settings, url: &str) -> reqwest::RequestBuilder {
        let bearer = |r: reqwest::RequestBuilder, key: &Option<String>| match key {
            Some(key) => r.bearer_auth(key),
            None => r,
        };
        match self {
            Engine::SpeechToText => {
                let boundary = "clankie-doctor";
                let mut body = Vec::new();
                for (name, value) in [("model", settings.stt_model.as_str()), ("response_format", "json")] {
                    body.extend_from_slice(
                        format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n").as_bytes(),
                    );
                }
                body.extend_from_slice(
                    format!("--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"doctor.wav\"\r\nContent-Type: audio/wav\r\n\r\n")
                        .as_bytes(),
                );
                body.extend_from_slice(&silence());
                body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
                let request = http.post(url).header("content-type", format!("multipart/form-data; boundary={boundary}")).body(body);
                bearer(request, &settings.stt_api_key)
            }
            Engine::TextToSpeech => {
                let body = serde_json::json!({ "model": settings.tts_model, "input": "OK.", "voice": settings.tts_voice, "response_format": "wav" });
                bearer(http.post(url).json(&body), &settings.tts_api_key)
            }
            Engine::TurnDetector => http.post(url).header("content-type", "audio/wav").body(silence()),
        }
    }
}

/// Half a second of 16 kHz mono 16-bit silence, as a WAV file.
fn silence() -> Vec<u8> {
    const RATE: u32 = 16_000;
    let data = RATE; // half a second of two-byte samples
    let mut wav = Vec::with_capacity(44 + data as usize);
    wav.extend_from_slice(b"RIFF");
    wav.extend_from_slice(&(36 + data).to_le_bytes());
    wav.extend_from_slice(b"WAVEfmt ");
    wav.extend_from_slice(&16u32.to_le_bytes());
    wav.extend_from_slice(&1u16.to_le_bytes());
    wav.extend_from_slice(&1u16.to_le_bytes());
    wav.extend_from_slice(&RATE.to_le_bytes());
    wav.extend_from_slice(&(RATE * 2).to_le_bytes());
    wav.extend_from_slice(&2u16.to_le_bytes());
    wav.extend_from_slice(&16u16.to_le_bytes());
    wav.extend_from_slice(b"data");
    wav.extend_from_slice(&data.to_le_bytes());
    wav.resize(44 + data as usize, 0);
    wav
}

/// The speech engines the voice rooms need, each asked what the voice floor asks it: with a
/// voice room set, a missing engine fails (the offline rehearsal engines cannot follow real
/// speech), and an engine that answers anything but 2xx at its route fails.
async fn speech(settings: &Settings) -> Vec<Check> {
    let rooms = settings.voice_rooms.len();
    let mut checks = Vec::new();
    if rooms > 0 {
        for engine in [Engine::SpeechToText, Engine::TextToSpeech].into_iter().filter(|e| e.base(settings).is_none()) {
            checks.push(Check::fail(
                "speech",
                format!(
                    "CLANKIE_VOICE_ROOMS keeps {rooms} voice room(s) live but no {} engine is set: the voice floor would fall back to the offline rehearsal engine, which cannot follow real speech",
                    engine.what()
                ),
                format!(
                    "set {} to a speech service (compose's speech profile: http://speech:8788/v1; or `clankie speech`, see docs/discord-setup.md, Voice and speech), or empty CLANKIE_VOICE_ROOMS",
                    engine.var()
                ),
            ));
        }
    }
    let set: Vec<(Engine, &String)> = [Engine::SpeechToText, Engine::TextToSpeech, Engine::TurnDetector]
        .into_iter()
        .filter_map(|e| e.base(settings).map(|b| (e, b)))
        .collect();
    if set.is_empty() && rooms == 0 {
        return vec![Check::pass("speech", "no voice room and no speech engine is set (text is unaffected)")];
    }
    let Some(http) = client() else { return vec![Check::fail("speech", "no HTTP client could be built", "report this")] };
    let patience = settings.speech_timeout.max(PATIENCE);
    for (engine, base) in set {
        let url = format!("{}/{}", base.trim_end_matches('/'), engine.route());
        let at = redact_url(&url);
        let fix = format!("start it, or correct {} (the URL the /{} route is under, often ending in /v1)", engine.var(), engine.route());
        match engine.request(&http, settings, &url).timeout(patience).send().await {
            Ok(r) if r.status().is_success() => {
                checks.push(Check::pass("speech", format!("the {} engine at {at} answered ({})", engine.what(), r.status())))
            }
            Ok(r) => checks.push(Check::fail("speech", format!("the {} engine at {at} answered {}", engine.what(), r.status()), fix)),
            Err(e) => checks.push(Check::fail(
                "speech",
                format!("the {} engine at {at} does not answer: {}", engine.what(), e.without_url()),
                fix,
            )),
        }
    }
    checks
}

/// Whether `token` is one no console should keep: a placeholder of the examples, or too short to keep anyone out.
fn weak_console_token(token: &str) -> Option<&'static str> {
    const PLACEHOLDERS: [&str; 8] =
        ["replace-me", "replace_me", "replaceme", "changeme", "change-me", "change_me", "example", "placeholder"];
    let token = token.trim();
    let lower = token.to_ascii_lowercase();
    if PLACEHOLDERS.iter().any(|p| lower.contains(p)) || token.starts_with('<') || token.contains(char::is_whitespace) {
        Some("a placeholder")
    } else if token.chars().count() < 16 {
        Some("shorter than 16 characters")
    } else {
        None
    }
}

/// The console's token, checked where the console runs: where `CLANKIE_CONSOLE_ADDR` is set in
/// the environment (its container sets it), not in every service that shares the secrets.
fn console(settings: &Settings) -> Check {
    if matches!(settings.sources.origin("CLANKIE_CONSOLE_ADDR"), Origin::Default | Origin::File(_)) {
        return Check::pass(
            "console",
            "not checked here: CLANKIE_CONSOLE_ADDR is not set in the environment, so the console does not run here (run doctor in the console's container, or with CLANKIE_CONSOLE_ADDR set)",
        );
    }
    let fix = "set CLANKIE_CONSOLE_TOKEN to a long random string (`openssl rand -hex 32`)";
    match settings.console_token.as_deref().map(str::trim).filter(|t| !t.is_empty()) {
        None => Check::fail("console", "CLANKIE_CONSOLE_TOKEN is not set: the console refuses every request", fix),
        Some(token) => match weak_console_token(token) {
            Some(why) => Check::fail("console", format!("CLANKIE_CONSOLE_TOKEN is {why}: anyone who guesses it runs the console"), fix),
            None => Check::pass("console", "CLANKIE_CONSOLE_TOKEN is set"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doctor_a_console_token_from_the_examples_or_short_is_weak_and_a_random_one_is_not() {
        for weak in [
            "replace-me",
            "changeme",
            "sandbox",
            "op-token",
            "<a long random string, e.g. openssl rand -hex 16>",
            "REPLACE-ME-with-something-long",
        ] {
            assert!(weak_console_token(weak).is_some(), "{weak:?} passed");
        }
        assert_eq!(weak_console_token("3f9c0a7e1b2d4c6e8f0a1b2c3d4e5f60"), None);
    }

    #[test]
    fn doctor_the_silence_it_sends_is_a_wav_file() {
        let wav = silence();
        assert_eq!((&wav[..4], &wav[8..12], wav.len()), (&b"RIFF"[..], &b"WAVE"[..], 44 + 16_000));
        assert_eq!(u32::from_le_bytes(wav[4..8].try_into().unwrap()) as usize, wav.len() - 8);
    }
}
