//! The reader: every setting parsed from its [`Sources`] and checked, with the value and
//! what is allowed in each refusal.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::catalogue::{self, Kind};
use crate::{AllowList, BrowseMode, ModelProvider, Settings, SettingsError, Sources, parse_flag, redact_url};

impl Settings {
    /// Reads the settings `sources` give; `lookup` answers the few names outside the
    /// catalogue a default is derived from (`HOME`, `XDG_STATE_HOME`, `HOSTNAME`).
    pub fn from_sources(sources: Sources, lookup: impl Fn(&str) -> Option<String>) -> Result<Settings, SettingsError> {
        let mut notices = Vec::new();
        let given = sources.clone();
        let var = |name: &'static str| {
            debug_assert!(catalogue::find(name).is_some(), "{name} is not in the catalogue");
            given.get(name).map(str::to_owned)
        };
        for (old, new) in DEPRECATED {
            if var(old).is_some() {
                notices.push(format!("{old} is deprecated and will go: {new}"));
            }
        }
        let state_root = match var("CLANKIE_STATE_DIR") {
            Some(dir) => absolute("CLANKIE_STATE_DIR", &dir)?,
            None => default_state_root(&lookup),
        };
        let attachment_root_override =
            var("CLANKIE_DISCORD_ATTACHMENT_ROOT").map(|dir| absolute("CLANKIE_DISCORD_ATTACHMENT_ROOT", &dir)).transpose()?;
        let nats_url = var("CLANKIE_NATS_URL").unwrap_or_else(|| "nats://127.0.0.1:4222".into());
        let database_url = var("CLANKIE_DATABASE_URL").unwrap_or_else(|| "postgres://clankie@127.0.0.1:55432/clankie".into());
        let stream_replicas = number(var("CLANKIE_STREAM_REPLICAS"), "CLANKIE_STREAM_REPLICAS", 1, 1, 5)? as usize;
        let ingress_max_deliver = number(var("CLANKIE_INGRESS_MAX_DELIVER"), "CLANKIE_INGRESS_MAX_DELIVER", 8, 2, 1000)? as u32;
        for (name, url) in nats_url.split(',').map(|u| ("CLANKIE_NATS_URL", u)).chain([("CLANKIE_DATABASE_URL", database_url.as_str())]) {
            if !url.contains("://") {
                return Err(SettingsError::Invalid {
                    var: name,
                    reason: format!("{:?} is not a URL such as scheme://host:port", truncate(&redact_url(url))),
                });
            }
        }
        let replica_id = var("CLANKIE_REPLICA_ID").unwrap_or_else(|| default_replica_id(&lookup));
        if !replica_id.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)) || replica_id.len() > 64 {
            return Err(SettingsError::Invalid { var: "CLANKIE_REPLICA_ID", reason: "use at most 64 characters of [A-Za-z0-9._-]".into() });
        }
        let log = var("CLANKIE_LOG").unwrap_or_else(|| "info,sqlx=warn".into());
        let bus_connect_timeout =
            Duration::from_secs(secs(var("CLANKIE_BUS_CONNECT_TIMEOUT_SECS"), "CLANKIE_BUS_CONNECT_TIMEOUT_SECS", 60, 1)?);
        let ingress_dedup_window =
            Duration::from_secs(secs(var("CLANKIE_INGRESS_DEDUP_WINDOW_SECS"), "CLANKIE_INGRESS_DEDUP_WINDOW_SECS", 120, 120)?);
        let model_base_url = var("CLANKIE_MODEL_BASE_URL");
        if let Some(url) = &model_base_url {
            http_url("CLANKIE_MODEL_BASE_URL", url)?;
        }
        let model_name = var("CLANKIE_MODEL_NAME").unwrap_or_else(|| "gpt-4o-mini".into());
        let model_api_key = var("CLANKIE_MODEL_API_KEY");
        let model_provider = match var("CLANKIE_MODEL_PROVIDER").as_deref().map(|v| v.trim().to_ascii_lowercase()) {
            Some(p) if p == "openai" => ModelProvider::OpenAi,
            Some(p) if p == "anthropic" => ModelProvider::Anthropic,
            Some(p) => {
                return Err(SettingsError::Invalid {
                    var: "CLANKIE_MODEL_PROVIDER",
                    reason: format!("{:?} is not one of openai or anthropic", truncate(&p)),
                });
            }
            None if model_base_url.as_deref().is_some_and(|u| u.contains("anthropic.com")) => ModelProvider::Anthropic,
            None => ModelProvider::OpenAi,
        };
        let model_max_tokens = number(var("CLANKIE_MODEL_MAX_TOKENS"), "CLANKIE_MODEL_MAX_TOKENS", 4096, 16, 1_000_000)? as u32;
        let model_cache_ttl = match var("CLANKIE_MODEL_CACHE_TTL").as_deref().map(str::trim) {
            None | Some("5m") => Duration::from_secs(300),
            Some("1h") => Duration::from_secs(3600),
            Some(other) => {
                return Err(SettingsError::Invalid {
                    var: "CLANKIE_MODEL_CACHE_TTL",
                    reason: format!("{:?} is not one of 5m or 1h (the two lifetimes Anthropic offers)", truncate(other)),
                });
            }
        };
        let model_max_retries = number(var("CLANKIE_MODEL_MAX_RETRIES"), "CLANKIE_MODEL_MAX_RETRIES", 4, 0, 20)? as u32;
        let stall_silence =
            Duration::from_millis(number(var("CLANKIE_STALL_SILENCE_MS"), "CLANKIE_STALL_SILENCE_MS", 300_000, 10, u64::MAX)?);
        let stall_tick = Duration::from_millis(number(var("CLANKIE_STALL_TICK_MS"), "CLANKIE_STALL_TICK_MS", 5_000, 1, u64::MAX)?);
        if stall_tick > stall_silence {
            return Err(SettingsError::Invalid {
                var: "CLANKIE_STALL_TICK_MS",
                reason: format!("{} must not exceed CLANKIE_STALL_SILENCE_MS ({})", stall_tick.as_millis(), stall_silence.as_millis()),
            });
        }
        // Under half the stall bound, so a silent connection is retried before the run is given up.
        let model_response_timeout = Duration::from_millis(number(
            var("CLANKIE_MODEL_RESPONSE_TIMEOUT_MS"),
            "CLANKIE_MODEL_RESPONSE_TIMEOUT_MS",
            120_000,
            1,
            u64::MAX,
        )?);
        if model_response_timeout > stall_silence / 2 && var("CLANKIE_MODEL_RESPONSE_TIMEOUT_MS").is_some() {
            notices.push(format!(
                "CLANKIE_MODEL_RESPONSE_TIMEOUT_MS={} is clamped to {} ms, half of CLANKIE_STALL_SILENCE_MS, so a silent connection is retried before the run is given up",
                model_response_timeout.as_millis(),
                (stall_silence / 2).as_millis()
            ));
        }
        let model_response_timeout = model_response_timeout.min(stall_silence / 2);
        let context_budget_tokens =
            number(var("CLANKIE_CONTEXT_BUDGET_TOKENS"), "CLANKIE_CONTEXT_BUDGET_TOKENS", 60_000, 1_000, 10_000_000)? as usize;
        let rehearsal_think =
            Duration::from_millis(number(var("CLANKIE_REHEARSAL_THINK_MS"), "CLANKIE_REHEARSAL_THINK_MS", 1_500, 0, 600_000)?);
        let rehearsal_token =
            Duration::from_millis(number(var("CLANKIE_REHEARSAL_TOKEN_MS"), "CLANKIE_REHEARSAL_TOKEN_MS", 60, 0, 60_000)?);
        let ms = |name: &'static str, default: u64, min: u64| -> Result<Duration, SettingsError> {
            Ok(Duration::from_millis(number(var(name), name, default, min, u64::MAX / 2)?))
        };
        let http_addr = var("CLANKIE_HTTP_ADDR").map(|a| socket_addr("CLANKIE_HTTP_ADDR", &a, "0.0.0.0:9470")).transpose()?;
        let sandbox_addr =
            socket_addr("CLANKIE_SANDBOX_ADDR", &var("CLANKIE_SANDBOX_ADDR").unwrap_or_else(|| "127.0.0.1:8700".into()), "127.0.0.1:8700")?;
        let sandbox_messages_kept =
            number(var("CLANKIE_SANDBOX_MESSAGES_KEPT"), "CLANKIE_SANDBOX_MESSAGES_KEPT", 200, 1, 100_000)? as usize;
        let console_addr =
            socket_addr("CLANKIE_CONSOLE_ADDR", &var("CLANKIE_CONSOLE_ADDR").unwrap_or_else(|| "127.0.0.1:8790".into()), "127.0.0.1:8790")?;
        let warm_cache_mib = number(var("CLANKIE_WARM_CACHE_MIB"), "CLANKIE_WARM_CACHE_MIB", 64, 1, 1 << 20)? as usize;
        let console_token = var("CLANKIE_CONSOLE_TOKEN").map(|t| t.trim().to_owned()).filter(|t| !t.is_empty());
        let trace_url = var("CLANKIE_TRACE_URL").map(|t| t.trim().to_owned()).filter(|t| !t.is_empty());
        if let Some(url) = &trace_url
            && !url.contains("{trace_id}")
        {
            return Err(SettingsError::Invalid {
                var: "CLANKIE_TRACE_URL",
                reason: format!(
                    "{url:?} has no {{trace_id}}: give your trace viewer's page for one trace with {{trace_id}} where the id goes, such as http://jaeger:16686/trace/{{trace_id}}"
                ),
            });
        }
        let voice_rooms = match var("CLANKIE_VOICE_ROOMS") {
            None => Vec::new(),
            Some(list) => list
                .split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(|t| {
                    let (g, c) = t.split_once(':')?;
                    Some((g.trim().parse().ok()?, c.trim().parse().ok()?))
                })
                .collect::<Option<Vec<(u64, u64)>>>()
                .ok_or_else(|| SettingsError::Invalid {
                    var: "CLANKIE_VOICE_ROOMS",
                    reason: format!("{:?} is not comma-separated guild:channel pairs of Discord ids", truncate(&list)),
                })?,
        };
        let bot_aliases = var("CLANKIE_BOT_ALIASES")
            .unwrap_or_else(|| "clanky".into())
            .split(',')
            .map(|a| a.trim().to_owned())
            .filter(|a| !a.is_empty())
            .collect();
        let floor_continuation = ms("CLANKIE_FLOOR_CONTINUATION_MS", 60_000, 0)?;
        let floor_offer_interval = ms("CLANKIE_FLOOR_OFFER_INTERVAL_MS", 300_000, 0)?;
        let voice_grace = ms("CLANKIE_VOICE_GRACE_MS", 30_000, 0)?;
        let gateway_publish_patience = ms("CLANKIE_GATEWAY_PUBLISH_PATIENCE_MS", 20_000, 100)?;
        let discord_shards = number(var("CLANKIE_DISCORD_SHARDS"), "CLANKIE_DISCORD_SHARDS", 0, 0, 65_535)? as u32;
        let shard_lease_ttl = ms("CLANKIE_SHARD_LEASE_TTL_MS", 15_000, 300)?;
        let rest_lease_ttl = ms("CLANKIE_REST_LEASE_TTL_MS", 5_000, 300)?;
        let speech_timeout = ms("CLANKIE_SPEECH_TIMEOUT_MS", 15_000, 100)?;
        let voice_speech_start = ms("CLANKIE_VOICE_SPEECH_START_MS", 200, 0)?;
        let voice_end_of_turn = ms("CLANKIE_VOICE_END_OF_TURN_MS", 800, 20)?;
        let voice_turn_silence = ms("CLANKIE_VOICE_TURN_SILENCE_MS", 200, 20)?;
        let voice_pre_roll = ms("CLANKIE_VOICE_PRE_ROLL_MS", 300, 0)?;
        let voice_max_utterance = ms("CLANKIE_VOICE_MAX_UTTERANCE_MS", 15_000, 200)?;
        let voice_transcriptions = number(var("CLANKIE_VOICE_TRANSCRIPTIONS"), "CLANKIE_VOICE_TRANSCRIPTIONS", 2, 1, 16)? as usize;
        let barge_in = ms("CLANKIE_BARGE_IN_MS", 500, 20)?;
        let voice_lease_ttl = ms("CLANKIE_VOICE_LEASE_TTL_MS", 10_000, 300)?;
        let voice_dave_refused_hold =
            Duration::from_secs(secs(var("CLANKIE_VOICE_DAVE_REFUSED_HOLD_SECS"), "CLANKIE_VOICE_DAVE_REFUSED_HOLD_SECS", 600, 1)?);
        let shutdown_grace = ms("CLANKIE_SHUTDOWN_GRACE_MS", 30_000, 0)?;
        let media_max_bytes = number(var("CLANKIE_MEDIA_MAX_BYTES"), "CLANKIE_MEDIA_MAX_BYTES", 25 * 1024 * 1024, 1, u64::MAX)?;
        let media_max_age = Duration::from_secs(secs(var("CLANKIE_MEDIA_MAX_AGE_SECS"), "CLANKIE_MEDIA_MAX_AGE_SECS", 7 * 24 * 3600, 0)?);
        let media_max_total_bytes = number(var("CLANKIE_MEDIA_MAX_TOTAL_BYTES"), "CLANKIE_MEDIA_MAX_TOTAL_BYTES", 1 << 30, 0, u64::MAX)?;
        let bot_name = var("CLANKIE_BOT_NAME").unwrap_or_else(|| "Clankie".into());
        let lane_lease_ttl = ms("CLANKIE_LANE_LEASE_TTL_MS", 30_000, 100)?;
        let ingress_ack_wait = ms("CLANKIE_INGRESS_ACK_WAIT_MS", 30_000, 100)?;
        let outbox_relay_after = ms("CLANKIE_OUTBOX_RELAY_MS", 5_000, 100)?;
        let outbox_max_age = ms("CLANKIE_OUTBOX_MAX_AGE_MS", 600_000, 1_000)?;
        let memory_dm = match var("CLANKIE_MEMORY_DM") {
            None => true,
            set => flag(set, "CLANKIE_MEMORY_DM")?,
        };
        check_log_filter(&log)?;
        for name in ["CLANKIE_STT_BASE_URL", "CLANKIE_TTS_BASE_URL", "CLANKIE_TURN_BASE_URL"] {
            if let Some(url) = var(name) {
                http_url(name, &url)?;
            }
        }
        let button_lifetime = ms("CLANKIE_BUTTON_LIFETIME_MS", 86_400_000, 1_000)?;
        let quiet_minute = ms("CLANKIE_QUIET_MINUTE_MS", 60_000, 10)?;
        let days = |name: &'static str, default: u64, min: u64| -> Result<Duration, SettingsError> {
            Ok(Duration::from_secs(number(var(name), name, default, min, 36_500)? * 86_400))
        };
        let retention_receipts = days("CLANKIE_RECEIPTS_RETENTION_DAYS", 30, 1)?;
        let retention_records = days("CLANKIE_RECORDS_RETENTION_DAYS", 30, 8)?;
        let retention_replaced_entries = days("CLANKIE_REPLACED_ENTRIES_RETENTION_DAYS", 7, 1)?;
        let voice_ring_retention = days("CLANKIE_VOICE_RING_RETENTION_DAYS", 7, 1)?;
        let voice_ring_max_lines = number(var("CLANKIE_VOICE_RING_MAX_LINES"), "CLANKIE_VOICE_RING_MAX_LINES", 2_000, 50, 10_000_000)?;
        let retention_sweep_every = ms("CLANKIE_RETENTION_SWEEP_MS", 3_600_000, 1_000)?;
        let media_timeout = ms("CLANKIE_MEDIA_TIMEOUT_MS", 60_000, 100)?;
        let exchange_window = ms("CLANKIE_EXCHANGE_WINDOW_MS", 300_000, 0)?;
        let tool_card_delay = ms("CLANKIE_TOOL_CARD_DELAY_MS", 3_000, 0)?;
        let history_limit = number(var("CLANKIE_HISTORY_LIMIT"), "CLANKIE_HISTORY_LIMIT", 10, 0, 100)? as u32;
        let reply_chain_depth = number(var("CLANKIE_REPLY_CHAIN_DEPTH"), "CLANKIE_REPLY_CHAIN_DEPTH", 3, 0, 10)? as usize;
        let named_admission = match var("CLANKIE_NAMED_ADMISSION") {
            Some(v) => flag(Some(v), "CLANKIE_NAMED_ADMISSION")?,
            None => true,
        };
        let reply_max_pieces = number(var("CLANKIE_REPLY_MAX_PIECES"), "CLANKIE_REPLY_MAX_PIECES", 10, 1, 1_000)? as usize;
        let operator_grants = ids(var("CLANKIE_OPERATOR_GRANTS"), "CLANKIE_OPERATOR_GRANTS")?;
        let typing_hold = ms("CLANKIE_TYPING_HOLD_MS", 8_000, 0)?;
        let experience_ttl = Duration::from_secs(secs(var("CLANKIE_EXPERIENCE_TTL_SECS"), "CLANKIE_EXPERIENCE_TTL_SECS", 24 * 3600, 1)?);
        let egress_allow = AllowList::parse(&var("CLANKIE_EGRESS_ALLOW").unwrap_or_default())
            .map_err(|e| SettingsError::Invalid { var: "CLANKIE_EGRESS_ALLOW", reason: e.to_string() })?;
        let history_max_chars = number(var("CLANKIE_HISTORY_MAX_CHARS"), "CLANKIE_HISTORY_MAX_CHARS", 8_000, 0, 1_000_000)? as usize;
        let attachments_per_message =
            number(var("CLANKIE_ATTACHMENTS_PER_MESSAGE"), "CLANKIE_ATTACHMENTS_PER_MESSAGE", 4, 0, 100)? as usize;
        let tool_calls_per_step = number(var("CLANKIE_TOOL_CALLS_PER_STEP"), "CLANKIE_TOOL_CALLS_PER_STEP", 8, 1, 128)? as usize;
        let tool_args_max_bytes =
            number(var("CLANKIE_TOOL_ARGS_MAX_BYTES"), "CLANKIE_TOOL_ARGS_MAX_BYTES", 16 * 1024, 64, 16 * 1024 * 1024)? as usize;
        let model_stream_max_bytes =
            number(var("CLANKIE_MODEL_STREAM_MAX_BYTES"), "CLANKIE_MODEL_STREAM_MAX_BYTES", 1 << 20, 1024, 1 << 30)? as usize;
        let flood_admissions_per_minute =
            number(var("CLANKIE_FLOOD_ADMISSIONS_PER_MINUTE"), "CLANKIE_FLOOD_ADMISSIONS_PER_MINUTE", 20, 0, 1_000_000)? as u32;
        let browse = match var("CLANKIE_BROWSE").as_deref().map(str::trim) {
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
        let browsers_max = number(var("CLANKIE_BROWSERS_MAX"), "CLANKIE_BROWSERS_MAX", 2, 1, 64)? as usize;
        let browse_deadline = ms("CLANKIE_BROWSE_DEADLINE_MS", 30_000, 500)?;
        let browser_viewport = viewport(var("CLANKIE_BROWSER_VIEWPORT"))?;
        let chromium = absolute("CLANKIE_CHROMIUM", &var("CLANKIE_CHROMIUM").unwrap_or_else(|| "/usr/bin/chromium".into()))?;
        let self_file = var("CLANKIE_SELF_FILE").map(|f| absolute("CLANKIE_SELF_FILE", &f)).transpose()?;
        let chromedriver =
            absolute("CLANKIE_CHROMEDRIVER", &var("CLANKIE_CHROMEDRIVER").unwrap_or_else(|| "/usr/bin/chromedriver".into()))?;
        let discord_guilds = ids(var("CLANKIE_DISCORD_GUILDS"), "CLANKIE_DISCORD_GUILDS")?;
        let discord_token = var("CLANKIE_DISCORD_TOKEN").unwrap_or_else(|| "loopback-token".into());
        let discord_api = var("CLANKIE_DISCORD_API");
        if let Some(api) = &discord_api {
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
        let discord_gateway_url = var("CLANKIE_DISCORD_GATEWAY_URL");
        if let Some(url) = &discord_gateway_url
            && !(url.starts_with("ws://") || url.starts_with("wss://"))
        {
            return Err(SettingsError::Invalid {
                var: "CLANKIE_DISCORD_GATEWAY_URL",
                reason: format!("{:?} is not a ws:// or wss:// URL", truncate(&redact_url(url))),
            });
        }
        let outcome_reactions = flag(var("CLANKIE_OUTCOME_REACTIONS"), "CLANKIE_OUTCOME_REACTIONS")?;
        let captain_one_shot = flag(var("CLANKIE_CAPTAIN_ONE_SHOT"), "CLANKIE_CAPTAIN_ONE_SHOT")?;
        let typing_interval = ms("CLANKIE_TYPING_INTERVAL_MS", 8_000, 50)?;
        if typing_interval >= Duration::from_secs(10) {
            return Err(SettingsError::Invalid {
                var: "CLANKIE_TYPING_INTERVAL_MS",
                reason: format!("{} must be under 10000: Discord's indicator expires after 10 s", typing_interval.as_millis()),
            });
        }
        Ok(Settings {
            sources,
            notices,
            browse,
            browsers_max,
            browse_deadline,
            browser_viewport,
            chromium,
            chromedriver,
            self_file,
            egress_allow,
            history_max_chars,
            attachments_per_message,
            tool_calls_per_step,
            tool_args_max_bytes,
            model_stream_max_bytes,
            flood_admissions_per_minute,
            captain_one_shot,
            media_max_bytes,
            media_max_age,
            media_max_total_bytes,
            shutdown_grace,
            voice_rooms,
            voice_grace,
            gateway_publish_patience,
            discord_shards,
            shard_lease_ttl,
            rest_lease_ttl,
            stt_base_url: var("CLANKIE_STT_BASE_URL").filter(|v| !v.trim().is_empty()),
            stt_model: var("CLANKIE_STT_MODEL").unwrap_or_else(|| "whisper-1".into()),
            stt_api_key: var("CLANKIE_STT_API_KEY").filter(|v| !v.is_empty()),
            stt_grammar: var("CLANKIE_STT_GRAMMAR").filter(|v| !v.trim().is_empty()).map(PathBuf::from),
            tts_base_url: var("CLANKIE_TTS_BASE_URL").filter(|v| !v.trim().is_empty()),
            tts_model: var("CLANKIE_TTS_MODEL").unwrap_or_else(|| "tts-1".into()),
            tts_voice: var("CLANKIE_TTS_VOICE").unwrap_or_else(|| "alloy".into()),
            tts_api_key: var("CLANKIE_TTS_API_KEY").filter(|v| !v.is_empty()),
            speech_timeout,
            voice_speech_start,
            voice_end_of_turn,
            voice_turn_silence,
            turn_base_url: var("CLANKIE_TURN_BASE_URL").filter(|v| !v.trim().is_empty()),
            voice_pre_roll,
            voice_max_utterance,
            voice_transcriptions,
            barge_in,
            voice_lease_ttl,
            voice_dave_refused_hold,
            bot_aliases,
            floor_continuation,
            floor_offer_interval,
            sandbox_addr,
            sandbox_messages_kept,
            console_addr,
            console_token,
            trace_url,
            warm_cache_mib,
            discord_token,
            discord_api,
            discord_gateway_url,
            discord_guilds,
            outcome_reactions,
            typing_interval,
            http_addr,
            bot_name,
            lane_lease_ttl,
            ingress_ack_wait,
            outbox_relay_after,
            outbox_max_age,
            memory_dm,
            button_lifetime,
            quiet_minute,
            retention_receipts,
            retention_records,
            retention_replaced_entries,
            voice_ring_retention,
            voice_ring_max_lines,
            retention_sweep_every,
            media_timeout,
            exchange_window,
            tool_card_delay,
            history_limit,
            reply_chain_depth,
            named_admission,
            reply_max_pieces,
            operator_grants,
            experience_ttl,
            typing_hold,
            model_base_url,
            model_name,
            model_api_key,
            model_provider,
            model_max_tokens,
            model_cache_ttl,
            model_max_retries,
            model_response_timeout,
            stall_silence,
            stall_tick,
            context_budget_tokens,
            rehearsal_think,
            rehearsal_token,
            state_root,
            attachment_root_override,
            nats_url,
            stream_replicas,
            ingress_max_deliver,
            database_url,
            replica_id,
            log,
            bus_connect_timeout,
            ingress_dedup_window,
        })
    }
}

fn absolute(var: &'static str, value: &str) -> Result<PathBuf, SettingsError> {
    let path = PathBuf::from(value);
    if path.is_absolute() {
        Ok(path)
    } else {
        Err(SettingsError::Invalid { var, reason: format!("{:?} must be an absolute path", truncate(value)) })
    }
}

fn viewport(value: Option<String>) -> Result<(u32, u32), SettingsError> {
    let Some(value) = value else { return Ok((1280, 800)) };
    let bad = || SettingsError::Invalid {
        var: "CLANKIE_BROWSER_VIEWPORT",
        reason: format!("{:?} is not WIDTHxHEIGHT with each from 200 to 4000", truncate(&value)),
    };
    let (w, h) = value.trim().split_once(['x', 'X']).ok_or_else(bad)?;
    let (w, h): (u32, u32) = (w.trim().parse().map_err(|_| bad())?, h.trim().parse().map_err(|_| bad())?);
    if !(200..=4000).contains(&w) || !(200..=4000).contains(&h) {
        return Err(bad());
    }
    Ok((w, h))
}

fn socket_addr(var: &'static str, value: &str, example: &str) -> Result<std::net::SocketAddr, SettingsError> {
    value.trim().parse().map_err(|_| SettingsError::Invalid {
        var,
        reason: format!("{:?} is not host:port with an IP address, e.g. {example}", truncate(value)),
    })
}

fn flag(value: Option<String>, var: &'static str) -> Result<bool, SettingsError> {
    let Some(value) = value else { return Ok(false) };
    parse_flag(&value).ok_or_else(|| SettingsError::Invalid {
        var,
        reason: format!("{:?} is not one of true/false, on/off, yes/no, 1/0", truncate(&value)),
    })
}

/// The settings the shared self now holds, and what replaces each.
const DEPRECATED: [(&str, &str); 3] = [
    ("CLANKIE_BOT_NAME", "set the persona's name (`clankie self persona --name`, or `name` in a self file)"),
    ("CLANKIE_OPERATOR_GRANTS", "grant in the owner settings (`clankie self settings --grants`, or `grants` in a self file)"),
    ("CLANKIE_DISCORD_GUILDS", "admit guilds in the owner settings (`clankie self settings --guilds`, or `guilds` in a self file)"),
];

fn http_url(var: &'static str, url: &str) -> Result<(), SettingsError> {
    let rest = url.trim().strip_prefix("http://").or_else(|| url.trim().strip_prefix("https://"));
    match rest {
        Some(host) if !host.is_empty() && !host.starts_with('/') => Ok(()),
        _ => Err(SettingsError::Invalid {
            var,
            reason: format!("{:?} is not an http:// or https:// URL with a host", truncate(&redact_url(url))),
        }),
    }
}

/// A log filter as `tracing`'s `EnvFilter` reads it: comma-separated `level` or `target=level`.
fn check_log_filter(filter: &str) -> Result<(), SettingsError> {
    const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];
    for directive in filter.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let (target, level) = match directive.rsplit_once('=') {
            Some((t, l)) => (Some(t), l),
            None if LEVELS.contains(&directive.to_ascii_lowercase().as_str()) => (None, directive),
            None => (Some(directive), "trace"),
        };
        let target_ok = target.is_none_or(|t| !t.is_empty() && t.chars().all(|c| c.is_ascii_alphanumeric() || "_:-.[]{}\"=".contains(c)));
        if !target_ok || !LEVELS.contains(&level.trim().to_ascii_lowercase().as_str()) {
            return Err(SettingsError::Invalid {
                var: "CLANKIE_LOG",
                reason: format!(
                    "{:?} is not a log directive; use `level` or `target=level` with a level of {}",
                    truncate(directive),
                    LEVELS.join(", ")
                ),
            });
        }
    }
    Ok(())
}

fn ids(value: Option<String>, var: &'static str) -> Result<Vec<u64>, SettingsError> {
    let Some(list) = value else { return Ok(Vec::new()) };
    list.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| t.parse::<u64>())
        .collect::<Result<Vec<u64>, _>>()
        .map_err(|_| SettingsError::Invalid { var, reason: format!("{:?} is not comma-separated Discord ids", truncate(&list)) })
}

fn secs(value: Option<String>, var: &'static str, default: u64, min: u64) -> Result<u64, SettingsError> {
    number(value, var, default, min, u64::MAX)
}

fn number(value: Option<String>, var: &'static str, default: u64, min: u64, max: u64) -> Result<u64, SettingsError> {
    let Some(value) = value else { return Ok(default) };
    let n: u64 = value
        .trim()
        .parse()
        .map_err(|_| SettingsError::Invalid { var, reason: format!("expected a whole number, got {:?}", truncate(&value)) })?;
    if n < min || n > max {
        let unit = match catalogue::find(var).map(|s| s.kind) {
            Some(Kind::Duration(u) | Kind::Size(u)) => format!(" {}", u.name()),
            _ => String::new(),
        };
        let range = if max >= u64::MAX / 2 { format!("at least {min}{unit}") } else { format!("from {min} to {max}{unit}") };
        return Err(SettingsError::Invalid { var, reason: format!("{n} is out of range: it must be {range}") });
    }
    Ok(n)
}

fn truncate(s: &str) -> String {
    s.chars().take(40).collect()
}

fn default_state_root(lookup: &impl Fn(&str) -> Option<String>) -> PathBuf {
    let nonempty = |k: &str| lookup(k).filter(|v| !v.is_empty());
    if let Some(xdg) = nonempty("XDG_STATE_HOME").filter(|p| Path::new(p).is_absolute()) {
        return PathBuf::from(xdg).join("clankie");
    }
    if let Some(home) = nonempty("HOME").filter(|p| Path::new(p).is_absolute()) {
        return PathBuf::from(home).join(".local/state/clankie");
    }
    std::env::temp_dir().join("clankie-state")
}

fn default_replica_id(lookup: &impl Fn(&str) -> Option<String>) -> String {
    let host = lookup("HOSTNAME")
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-').take(48).collect::<String>())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "clankie".into());
    format!("{host}-{}", std::process::id())
}
