//! One reader for each area of the catalogue, filling in that area's fields of [`Settings`]
//! from what is given: a setting's default, its bounds and the checks that join two settings
//! of the same area live beside it. `read.rs` runs them in the catalogue's order.

use std::time::Duration;

use super::given::{Given, absolute, check_log_filter, default_replica_id, default_state_root, socket_addr, truncate, viewport};
use crate::{AllowList, BrowseMode, ModelProvider, Settings, SettingsError, parse_flag, redact_url};

/// Where state lives, who this replica is, what it logs, where it serves metrics.
pub(crate) fn core(g: &mut Given<'_>, s: &mut Settings) -> Result<(), SettingsError> {
    s.state_root = match g.var("CLANKIE_STATE_DIR") {
        Some(dir) => absolute("CLANKIE_STATE_DIR", &dir)?,
        None => default_state_root(&|name| g.lookup(name)),
    };
    s.replica_id = g.var("CLANKIE_REPLICA_ID").unwrap_or_else(|| default_replica_id(&|name| g.lookup(name)));
    if !s.replica_id.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)) || s.replica_id.len() > 64 {
        return Err(SettingsError::Invalid { var: "CLANKIE_REPLICA_ID", reason: "use at most 64 characters of [A-Za-z0-9._-]".into() });
    }
    s.log = g.text("CLANKIE_LOG", "info,sqlx=warn");
    check_log_filter(&s.log)?;
    s.http_addr = g.var("CLANKIE_HTTP_ADDR").map(|a| socket_addr("CLANKIE_HTTP_ADDR", &a, "0.0.0.0:9470")).transpose()?;
    s.shutdown_grace = g.ms("CLANKIE_SHUTDOWN_GRACE_MS", 30_000, 0)?;
    Ok(())
}

/// NATS, its streams and how ingress is delivered.
pub(crate) fn bus(g: &mut Given<'_>, s: &mut Settings) -> Result<(), SettingsError> {
    s.nats_url = g.text("CLANKIE_NATS_URL", "nats://127.0.0.1:4222");
    for url in s.nats_url.split(',') {
        url_like("CLANKIE_NATS_URL", url)?;
    }
    s.stream_replicas = g.number("CLANKIE_STREAM_REPLICAS", 1, 1, 5)? as usize;
    s.ingress_max_deliver = g.number("CLANKIE_INGRESS_MAX_DELIVER", 8, 2, 1000)? as u32;
    s.bus_connect_timeout = g.secs("CLANKIE_BUS_CONNECT_TIMEOUT_SECS", 60, 1)?;
    s.ingress_dedup_window = g.secs("CLANKIE_INGRESS_DEDUP_WINDOW_SECS", 120, 120)?;
    s.ingress_ack_wait = g.ms("CLANKIE_INGRESS_ACK_WAIT_MS", 30_000, 100)?;
    Ok(())
}

/// PostgreSQL and how long what it keeps is kept.
pub(crate) fn store(g: &mut Given<'_>, s: &mut Settings) -> Result<(), SettingsError> {
    s.database_url = g.text("CLANKIE_DATABASE_URL", "postgres://clankie@127.0.0.1:55432/clankie");
    url_like("CLANKIE_DATABASE_URL", &s.database_url)?;
    s.retention_receipts = g.days("CLANKIE_RECEIPTS_RETENTION_DAYS", 30, 1)?;
    s.retention_records = g.days("CLANKIE_RECORDS_RETENTION_DAYS", 30, 8)?;
    s.retention_replaced_entries = g.days("CLANKIE_REPLACED_ENTRIES_RETENTION_DAYS", 7, 1)?;
    s.voice_ring_retention = g.days("CLANKIE_VOICE_RING_RETENTION_DAYS", 7, 1)?;
    s.voice_ring_max_lines = g.number("CLANKIE_VOICE_RING_MAX_LINES", 2_000, 50, 10_000_000)?;
    s.retention_sweep_every = g.ms("CLANKIE_RETENTION_SWEEP_MS", 3_600_000, 1_000)?;
    Ok(())
}

/// Discord: where it is, the token, the shards and leases, how replies and context are shaped.
pub(crate) fn discord(g: &mut Given<'_>, s: &mut Settings) -> Result<(), SettingsError> {
    s.discord_token = g.text("CLANKIE_DISCORD_TOKEN", "loopback-token");
    s.discord_api = g.var("CLANKIE_DISCORD_API");
    if let Some(api) = &s.discord_api {
        let host_port = api.trim().trim_start_matches("http://").trim_start_matches("https://").trim_end_matches('/');
        if host_port.rsplit_once(':').is_none_or(|(host, port)| host.is_empty() || port.parse::<u16>().is_err()) {
            return Err(SettingsError::Invalid {
                var: "CLANKIE_DISCORD_API",
                reason: format!(
                    "{:?} is not host:port (e.g. 127.0.0.1:8700, the loopback); unset it for Discord itself",
                    truncate(&redact_url(api))
                ),
            });
        }
    }
    s.discord_gateway_url = g.var("CLANKIE_DISCORD_GATEWAY_URL");
    if let Some(url) = &s.discord_gateway_url
        && !(url.starts_with("ws://") || url.starts_with("wss://"))
    {
        return Err(SettingsError::Invalid {
            var: "CLANKIE_DISCORD_GATEWAY_URL",
            reason: format!("{:?} is not a ws:// or wss:// URL", truncate(&redact_url(url))),
        });
    }
    s.discord_guilds = g.ids("CLANKIE_DISCORD_GUILDS")?;
    s.outcome_reactions = g.flag("CLANKIE_OUTCOME_REACTIONS")?;
    s.typing_interval = g.ms("CLANKIE_TYPING_INTERVAL_MS", 8_000, 50)?;
    if s.typing_interval >= Duration::from_secs(10) {
        return Err(SettingsError::Invalid {
            var: "CLANKIE_TYPING_INTERVAL_MS",
            reason: format!("{} must be under 10000: Discord's indicator expires after 10 s", s.typing_interval.as_millis()),
        });
    }
    s.gateway_publish_patience = g.ms("CLANKIE_GATEWAY_PUBLISH_PATIENCE_MS", 20_000, 100)?;
    s.discord_shards = g.number("CLANKIE_DISCORD_SHARDS", 0, 0, 65_535)? as u32;
    s.shard_lease_ttl = g.ms("CLANKIE_SHARD_LEASE_TTL_MS", 15_000, 300)?;
    s.rest_lease_ttl = g.ms("CLANKIE_REST_LEASE_TTL_MS", 5_000, 300)?;
    s.button_lifetime = g.ms("CLANKIE_BUTTON_LIFETIME_MS", 86_400_000, 1_000)?;
    s.tool_card_delay = g.ms("CLANKIE_TOOL_CARD_DELAY_MS", 3_000, 0)?;
    s.reply_max_pieces = g.number("CLANKIE_REPLY_MAX_PIECES", 10, 1, 1_000)? as usize;
    s.history_limit = g.number("CLANKIE_HISTORY_LIMIT", 10, 0, 100)? as u32;
    s.reply_chain_depth = g.number("CLANKIE_REPLY_CHAIN_DEPTH", 3, 0, 10)? as usize;
    s.named_admission = g.flag_on("CLANKIE_NAMED_ADMISSION")?;
    s.typing_hold = g.ms("CLANKIE_TYPING_HOLD_MS", 8_000, 0)?;
    Ok(())
}

/// The model endpoint, its bounds and the stall watchdog that guards a run.
pub(crate) fn model(g: &mut Given<'_>, s: &mut Settings) -> Result<(), SettingsError> {
    s.model_base_url = g.http_url("CLANKIE_MODEL_BASE_URL")?;
    s.model_name = g.text("CLANKIE_MODEL_NAME", "gpt-4o-mini");
    s.model_api_key = g.var("CLANKIE_MODEL_API_KEY");
    s.model_provider = match g.var("CLANKIE_MODEL_PROVIDER").as_deref().map(|v| v.trim().to_ascii_lowercase()) {
        Some(p) if p == "openai" => ModelProvider::OpenAi,
        Some(p) if p == "anthropic" => ModelProvider::Anthropic,
        Some(p) => {
            return Err(SettingsError::Invalid {
                var: "CLANKIE_MODEL_PROVIDER",
                reason: format!("{:?} is not one of openai or anthropic", truncate(&p)),
            });
        }
        None if s.model_base_url.as_deref().is_some_and(|u| u.contains("anthropic.com")) => ModelProvider::Anthropic,
        None => ModelProvider::OpenAi,
    };
    s.model_max_tokens = g.number("CLANKIE_MODEL_MAX_TOKENS", 4096, 16, 1_000_000)? as u32;
    s.model_cache_ttl = match g.var("CLANKIE_MODEL_CACHE_TTL").as_deref().map(str::trim) {
        None | Some("5m") => Duration::from_secs(300),
        Some("1h") => Duration::from_secs(3600),
        Some(other) => {
            return Err(SettingsError::Invalid {
                var: "CLANKIE_MODEL_CACHE_TTL",
                reason: format!("{:?} is not one of 5m or 1h (the two lifetimes Anthropic offers)", truncate(other)),
            });
        }
    };
    s.model_max_retries = g.number("CLANKIE_MODEL_MAX_RETRIES", 4, 0, 20)? as u32;
    stall(g, s)?;
    s.context_budget_tokens = g.number("CLANKIE_CONTEXT_BUDGET_TOKENS", 60_000, 1_000, 10_000_000)? as usize;
    s.rehearsal_think = Duration::from_millis(g.number("CLANKIE_REHEARSAL_THINK_MS", 1_500, 0, 600_000)?);
    s.rehearsal_token = Duration::from_millis(g.number("CLANKIE_REHEARSAL_TOKEN_MS", 60, 0, 60_000)?);
    s.tool_calls_per_step = g.number("CLANKIE_TOOL_CALLS_PER_STEP", 8, 1, 128)? as usize;
    s.tool_args_max_bytes = g.number("CLANKIE_TOOL_ARGS_MAX_BYTES", 16 * 1024, 64, 16 * 1024 * 1024)? as usize;
    s.model_stream_max_bytes = g.number("CLANKIE_MODEL_STREAM_MAX_BYTES", 1 << 20, 1024, 1 << 30)? as usize;
    prices(g, s)
}

/// The list prices the bill reckons at, in US dollars per million tokens, and whose they are.
fn prices(g: &mut Given<'_>, s: &mut Settings) -> Result<(), SettingsError> {
    s.price_model = g.text("CLANKIE_PRICE_MODEL", "Claude Sonnet 4.6, list prices of 2026-12-03").trim().to_owned();
    s.price_input = g.decimal("CLANKIE_PRICE_INPUT_USD_PER_MTOK", 3.0, 0.0, 1_000_000.0)?;
    s.price_output = g.decimal("CLANKIE_PRICE_OUTPUT_USD_PER_MTOK", 15.0, 0.0, 1_000_000.0)?;
    s.price_cache_read = g.decimal("CLANKIE_PRICE_CACHE_READ_USD_PER_MTOK", 0.30, 0.0, 1_000_000.0)?;
    s.price_cache_write = g.decimal("CLANKIE_PRICE_CACHE_WRITE_USD_PER_MTOK", 3.75, 0.0, 1_000_000.0)?;
    Ok(())
}

/// The stall bound, its tick, and the model's response timeout held under half the bound, so a
/// silent connection is retried before the run is given up.
fn stall(g: &mut Given<'_>, s: &mut Settings) -> Result<(), SettingsError> {
    s.stall_silence = Duration::from_millis(g.number("CLANKIE_STALL_SILENCE_MS", 300_000, 10, u64::MAX)?);
    s.stall_tick = Duration::from_millis(g.number("CLANKIE_STALL_TICK_MS", 5_000, 1, u64::MAX)?);
    if s.stall_tick > s.stall_silence {
        return Err(SettingsError::Invalid {
            var: "CLANKIE_STALL_TICK_MS",
            reason: format!("{} must not exceed CLANKIE_STALL_SILENCE_MS ({})", s.stall_tick.as_millis(), s.stall_silence.as_millis()),
        });
    }
    let timeout = Duration::from_millis(g.number("CLANKIE_MODEL_RESPONSE_TIMEOUT_MS", 120_000, 1, u64::MAX)?);
    if timeout > s.stall_silence / 2 && g.var("CLANKIE_MODEL_RESPONSE_TIMEOUT_MS").is_some() {
        g.notices.push(format!(
            "CLANKIE_MODEL_RESPONSE_TIMEOUT_MS={} is clamped to {} ms, half of CLANKIE_STALL_SILENCE_MS, so a silent connection is retried before the run is given up",
            timeout.as_millis(),
            (s.stall_silence / 2).as_millis()
        ));
    }
    s.model_response_timeout = timeout.min(s.stall_silence / 2);
    Ok(())
}

/// Lanes and the shared self: his names, leases, the outbox, exchanges, memory, grants.
pub(crate) fn lanes(g: &mut Given<'_>, s: &mut Settings) -> Result<(), SettingsError> {
    s.bot_aliases = g.text("CLANKIE_BOT_ALIASES", "clanky").split(',').map(|a| a.trim().to_owned()).filter(|a| !a.is_empty()).collect();
    s.captain_one_shot = g.flag("CLANKIE_CAPTAIN_ONE_SHOT")?;
    s.bot_name = g.text("CLANKIE_BOT_NAME", "Clankie");
    s.warm_cache_mib = g.number("CLANKIE_WARM_CACHE_MIB", 64, 1, 1 << 20)? as usize;
    s.lane_lease_ttl = g.ms("CLANKIE_LANE_LEASE_TTL_MS", 30_000, 100)?;
    s.outbox_relay_after = g.ms("CLANKIE_OUTBOX_RELAY_MS", 5_000, 100)?;
    s.outbox_max_age = g.ms("CLANKIE_OUTBOX_MAX_AGE_MS", 600_000, 1_000)?;
    s.memory_dm = g.flag_on("CLANKIE_MEMORY_DM")?;
    s.quiet_minute = g.ms("CLANKIE_QUIET_MINUTE_MS", 60_000, 10)?;
    s.exchange_window = g.ms("CLANKIE_EXCHANGE_WINDOW_MS", 300_000, 0)?;
    s.operator_grants = g.ids("CLANKIE_OPERATOR_GRANTS")?;
    s.experience_ttl = g.secs("CLANKIE_EXPERIENCE_TTL_SECS", 24 * 3600, 1)?;
    s.history_max_chars = g.number("CLANKIE_HISTORY_MAX_CHARS", 8_000, 0, 1_000_000)? as usize;
    s.flood_admissions_per_minute = g.number("CLANKIE_FLOOD_ADMISSIONS_PER_MINUTE", 20, 0, 1_000_000)? as u32;
    s.reminders_per_person = g.number("CLANKIE_REMINDERS_PER_PERSON", 10, 0, 1_000_000)? as u32;
    s.reminders_per_room = g.number("CLANKIE_REMINDERS_PER_ROOM", 50, 0, 1_000_000)? as u32;
    s.reminder_horizon_days = g.number("CLANKIE_REMINDER_HORIZON_DAYS", 366, 1, 36_600)? as u32;
    s.time_zone = g.text("CLANKIE_TIME_ZONE", "UTC");
    s.self_file = g.var("CLANKIE_SELF_FILE").map(|f| absolute("CLANKIE_SELF_FILE", &f)).transpose()?;
    Ok(())
}

/// Attachments and artifacts: where they are kept, how big, how long.
pub(crate) fn media(g: &mut Given<'_>, s: &mut Settings) -> Result<(), SettingsError> {
    s.attachment_root_override =
        g.var("CLANKIE_DISCORD_ATTACHMENT_ROOT").map(|dir| absolute("CLANKIE_DISCORD_ATTACHMENT_ROOT", &dir)).transpose()?;
    s.media_max_bytes = g.number("CLANKIE_MEDIA_MAX_BYTES", 25 * 1024 * 1024, 1, u64::MAX)?;
    s.media_max_age = g.secs("CLANKIE_MEDIA_MAX_AGE_SECS", 7 * 24 * 3600, 0)?;
    s.media_max_total_bytes = g.number("CLANKIE_MEDIA_MAX_TOTAL_BYTES", 1 << 30, 0, u64::MAX)?;
    s.media_timeout = g.ms("CLANKIE_MEDIA_TIMEOUT_MS", 60_000, 100)?;
    s.attachments_per_message = g.number("CLANKIE_ATTACHMENTS_PER_MESSAGE", 4, 0, 100)? as usize;
    Ok(())
}

/// The tools' reach: the egress allow list and the browser.
pub(crate) fn tools(g: &mut Given<'_>, s: &mut Settings) -> Result<(), SettingsError> {
    s.egress_allow = AllowList::parse(&g.var("CLANKIE_EGRESS_ALLOW").unwrap_or_default())
        .map_err(|e| SettingsError::Invalid { var: "CLANKIE_EGRESS_ALLOW", reason: e.to_string() })?;
    s.browse = match g.var("CLANKIE_BROWSE").as_deref().map(str::trim) {
        None | Some("auto") => BrowseMode::Auto,
        Some(v) => match parse_flag(v) {
            Some(true) => BrowseMode::On,
            Some(false) => BrowseMode::Off,
            None => {
                return Err(SettingsError::Invalid {
                    var: "CLANKIE_BROWSE",
                    reason: format!("{:?} is not one of auto, on or off", truncate(v)),
                });
            }
        },
    };
    s.browsers_max = g.number("CLANKIE_BROWSERS_MAX", 2, 1, 64)? as usize;
    s.browse_deadline = g.ms("CLANKIE_BROWSE_DEADLINE_MS", 30_000, 500)?;
    s.browser_viewport = viewport(g.var("CLANKIE_BROWSER_VIEWPORT"))?;
    s.chromium = g.path("CLANKIE_CHROMIUM", "/usr/bin/chromium")?;
    s.chromedriver = g.path("CLANKIE_CHROMEDRIVER", "/usr/bin/chromedriver")?;
    Ok(())
}

/// The voice rooms, the floor's timing and the room lease.
pub(crate) fn voice(g: &mut Given<'_>, s: &mut Settings) -> Result<(), SettingsError> {
    s.voice_rooms = match g.var("CLANKIE_VOICE_ROOMS") {
        None => Vec::new(),
        Some(list) => list
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(|t| {
                let (guild, channel) = t.split_once(':')?;
                Some((guild.trim().parse().ok()?, channel.trim().parse().ok()?))
            })
            .collect::<Option<Vec<(u64, u64)>>>()
            .ok_or_else(|| SettingsError::Invalid {
                var: "CLANKIE_VOICE_ROOMS",
                reason: format!("{:?} is not comma-separated guild:channel pairs of Discord ids", truncate(&list)),
            })?,
    };
    s.voice_speech_start = g.ms("CLANKIE_VOICE_SPEECH_START_MS", 200, 0)?;
    s.voice_end_of_turn = g.ms("CLANKIE_VOICE_END_OF_TURN_MS", 800, 20)?;
    s.voice_turn_silence = g.ms("CLANKIE_VOICE_TURN_SILENCE_MS", 200, 20)?;
    s.voice_dave_refused_hold = g.secs("CLANKIE_VOICE_DAVE_REFUSED_HOLD_SECS", 600, 1)?;
    s.voice_pre_roll = g.ms("CLANKIE_VOICE_PRE_ROLL_MS", 300, 0)?;
    s.voice_max_utterance = g.ms("CLANKIE_VOICE_MAX_UTTERANCE_MS", 15_000, 200)?;
    s.voice_transcriptions = g.number("CLANKIE_VOICE_TRANSCRIPTIONS", 2, 1, 16)? as usize;
    s.barge_in = g.ms("CLANKIE_BARGE_IN_MS", 500, 20)?;
    s.voice_grace = g.ms("CLANKIE_VOICE_GRACE_MS", 30_000, 0)?;
    s.voice_lease_ttl = g.ms("CLANKIE_VOICE_LEASE_TTL_MS", 10_000, 300)?;
    s.floor_continuation = g.ms("CLANKIE_FLOOR_CONTINUATION_MS", 60_000, 0)?;
    s.floor_offer_interval = g.ms("CLANKIE_FLOOR_OFFER_INTERVAL_MS", 300_000, 0)?;
    Ok(())
}

/// The speech engines the voice floor reaches.
pub(crate) fn speech(g: &mut Given<'_>, s: &mut Settings) -> Result<(), SettingsError> {
    for name in ["CLANKIE_STT_BASE_URL", "CLANKIE_TTS_BASE_URL", "CLANKIE_TURN_BASE_URL"] {
        g.http_url(name)?;
    }
    s.stt_base_url = g.nonempty("CLANKIE_STT_BASE_URL");
    s.stt_model = g.text("CLANKIE_STT_MODEL", "whisper-1");
    s.stt_api_key = g.var("CLANKIE_STT_API_KEY").filter(|v| !v.is_empty());
    s.stt_grammar = g.nonempty("CLANKIE_STT_GRAMMAR").map(std::path::PathBuf::from);
    s.tts_base_url = g.nonempty("CLANKIE_TTS_BASE_URL");
    s.tts_model = g.text("CLANKIE_TTS_MODEL", "tts-1");
    s.tts_voice = g.text("CLANKIE_TTS_VOICE", "alloy");
    s.tts_api_key = g.var("CLANKIE_TTS_API_KEY").filter(|v| !v.is_empty());
    s.speech_timeout = g.ms("CLANKIE_SPEECH_TIMEOUT_MS", 15_000, 100)?;
    s.turn_base_url = g.nonempty("CLANKIE_TURN_BASE_URL");
    Ok(())
}

/// The operator console and where its trace links go.
pub(crate) fn console(g: &mut Given<'_>, s: &mut Settings) -> Result<(), SettingsError> {
    s.console_addr = Some(socket_addr("CLANKIE_CONSOLE_ADDR", &g.text("CLANKIE_CONSOLE_ADDR", "127.0.0.1:8790"), "127.0.0.1:8790")?);
    s.console_token = g.var("CLANKIE_CONSOLE_TOKEN").map(|t| t.trim().to_owned()).filter(|t| !t.is_empty());
    s.trace_url = g.var("CLANKIE_TRACE_URL").map(|t| t.trim().to_owned()).filter(|t| !t.is_empty());
    if let Some(url) = &s.trace_url
        && !url.contains("{trace_id}")
    {
        return Err(SettingsError::Invalid {
            var: "CLANKIE_TRACE_URL",
            reason: format!(
                "{url:?} has no {{trace_id}}: give your trace viewer's page for one trace with {{trace_id}} where the id goes, such as http://jaeger:16686/trace/{{trace_id}}"
            ),
        });
    }
    Ok(())
}

/// The embedded default: where the loopback Discord serves and what it keeps.
pub(crate) fn local(g: &mut Given<'_>, s: &mut Settings) -> Result<(), SettingsError> {
    s.sandbox_addr = Some(socket_addr("CLANKIE_SANDBOX_ADDR", &g.text("CLANKIE_SANDBOX_ADDR", "127.0.0.1:8700"), "127.0.0.1:8700")?);
    s.sandbox_messages_kept = g.number("CLANKIE_SANDBOX_MESSAGES_KEPT", 200, 1, 100_000)? as usize;
    Ok(())
}

/// The testing area's settings are read by the tests and tools themselves, never a service.
pub(crate) fn testing(_: &mut Given<'_>, _: &mut Settings) -> Result<(), SettingsError> {
    Ok(())
}

/// A URL must at least look like one (`scheme://host:port`); its value is shown redacted.
fn url_like(var: &'static str, url: &str) -> Result<(), SettingsError> {
    if url.contains("://") {
        return Ok(());
    }
    Err(SettingsError::Invalid { var, reason: format!("{:?} is not a URL such as scheme://host:port", truncate(&redact_url(url))) })
}
