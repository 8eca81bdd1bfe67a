//! Configuration for every Clankie service: `CLANKIE_*` variables over a TOML config file
//! over the defaults.
//!
//! The [`catalogue`] lists every setting any binary or script reads, one module per area;
//! [`Settings`] reads nothing else, and a name that is not in it stops the service.
//! [`attachment_root`] is the only derivation of the attachment path, so a
//! writer and a reader can never disagree about where a picture lives.

mod allow;
mod area;
pub mod catalogue;
pub mod fault;
mod source;

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use allow::{AllowList, AllowListError};
pub use catalogue::{Area, Kind, Service, Setting, Unit, catalogue};
pub use source::{Effective, Origin, Sources, parse_flag};

/// Whether the `browse` tool runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrowseMode {
    /// On when Chromium and chromedriver are installed.
    Auto,
    /// On; a missing browser is a startup error.
    On,
    Off,
}

/// A variable that is set but unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    #[error("{var} is invalid: {reason}")]
    Invalid { var: &'static str, reason: String },
    /// A `CLANKIE_` variable no service reads: a misspelling, or a setting since renamed.
    #[error("{name} is not a Clankie setting{} (`clankie settings` lists them all)", did_you_mean(closest))]
    Unknown { name: String, closest: Option<&'static str> },
    #[error("the config file {}: {reason}", path.display())]
    File { path: PathBuf, reason: String },
}

fn did_you_mean(closest: &Option<&'static str>) -> String {
    closest.map(|c| format!("; did you mean {c}?")).unwrap_or_default()
}

/// The configuration a service runs with.
#[derive(Clone)]
pub struct Settings {
    /// Root of local state.
    pub state_root: PathBuf,
    attachment_root_override: Option<PathBuf>,
    /// NATS server URL, or a comma-separated list of a cluster's servers.
    pub nats_url: String,
    /// Copies JetStream keeps of every stream.
    pub stream_replicas: usize,
    /// Deliveries of one ingress a captain tries before settling it as failed.
    pub ingress_max_deliver: u32,
    /// PostgreSQL URL; may hold a password, so [`fmt::Debug`] redacts it.
    pub database_url: String,
    /// This process's name in leases and receipts.
    pub replica_id: String,
    /// tracing filter.
    pub log: String,
    /// Deadline for the first NATS connection.
    pub bus_connect_timeout: Duration,
    /// JetStream duplicate window on the ingress stream.
    pub ingress_dedup_window: Duration,
    /// The OpenAI-compatible endpoint; `None` means the rehearsal model.
    pub model_base_url: Option<String>,
    /// Model name sent to the endpoint.
    pub model_name: String,
    /// Bearer token; [`fmt::Debug`] never shows it.
    pub model_api_key: Option<String>,
    /// Retries of transient provider failures.
    pub model_max_retries: u32,
    /// How long a sent model request may wait for its response head before it is retried on
    /// a new connection (a connection whose server is gone can stay open and silent).
    pub model_response_timeout: Duration,
    /// Silence that counts as a stalled run.
    pub stall_silence: Duration,
    /// The stall watchdog's tick.
    pub stall_tick: Duration,
    /// Context budget before compaction.
    pub context_budget_tokens: usize,
    /// Rehearsal model's think delay.
    pub rehearsal_think: Duration,
    /// Rehearsal model's per-token delay.
    pub rehearsal_token: Duration,
    /// Where a service serves health and metrics; `None` for nowhere.
    pub http_addr: Option<std::net::SocketAddr>,
    /// The Discord bot token; [`fmt::Debug`] never shows it.
    pub discord_token: String,
    /// REST stand-in host:port, spoken to over HTTP.
    pub discord_api: Option<String>,
    /// Gateway URL override.
    pub discord_gateway_url: Option<String>,
    /// Guilds whose messages are admitted; empty for all.
    pub discord_guilds: Vec<u64>,
    /// Whether outcomes are shown as reactions.
    pub outcome_reactions: bool,
    /// Typing re-trigger interval.
    pub typing_interval: Duration,
    /// Where the embedded default serves the loopback Discord.
    pub sandbox_addr: std::net::SocketAddr,
    /// Messages each sandbox room keeps, the newest.
    pub sandbox_messages_kept: usize,
    /// The captain's warm-session budget, in MiB.
    pub warm_cache_mib: usize,
    /// Where the operator console listens.
    pub console_addr: std::net::SocketAddr,
    /// The operator console's token; never logged.
    pub console_token: Option<String>,
    /// Live voice rooms (guild, channel).
    pub voice_rooms: Vec<(u64, u64)>,
    /// How long he stays in a voice room after the last human left.
    pub voice_grace: Duration,
    /// How long the gateway waits for JetStream to store a message.
    pub gateway_publish_patience: Duration,
    /// Gateway shards in all; 0 asks Discord.
    pub discord_shards: u32,
    /// How long a gateway replica's shard lease lasts unrenewed.
    pub shard_lease_ttl: Duration,
    /// How long the REST owner's lease lasts unrenewed.
    pub rest_lease_ttl: Duration,
    /// Transcription: an OpenAI-compatible base URL (none: offline), model, key, offline grammar.
    pub stt_base_url: Option<String>,
    pub stt_model: String,
    pub stt_api_key: Option<String>,
    pub stt_grammar: Option<PathBuf>,
    /// Speech: an OpenAI-compatible base URL (none: offline), model, voice, key.
    pub tts_base_url: Option<String>,
    pub tts_model: String,
    pub tts_voice: String,
    pub tts_api_key: Option<String>,
    pub speech_timeout: Duration,
    /// Hearing: shortest utterance, end-of-turn silence, pre-roll, longest utterance.
    pub voice_speech_start: Duration,
    pub voice_end_of_turn: Duration,
    pub voice_turn_silence: Duration,
    pub turn_base_url: Option<String>,
    pub voice_pre_roll: Duration,
    pub voice_max_utterance: Duration,
    /// Utterances of one room transcribed at once.
    pub voice_transcriptions: usize,
    /// How long a human speaks over him before his playback stops.
    pub barge_in: Duration,
    /// The voice room lease's time to live.
    pub voice_lease_ttl: Duration,
    pub voice_dave_refused_hold: Duration,
    /// Other names that address him.
    pub bot_aliases: Vec<String>,
    /// Voice continuation window per speaker.
    pub floor_continuation: Duration,
    /// Minimum gap between unprompted offers.
    pub floor_offer_interval: Duration,
    /// How long a draining captain waits for live runs.
    pub shutdown_grace: Duration,
    /// Largest attachment media handles.
    pub media_max_bytes: u64,
    /// Age past which unused attachments are swept.
    pub media_max_age: Duration,
    /// Total size past which the oldest attachments are swept.
    pub media_max_total_bytes: u64,
    /// Run the captain in the one-shot baseline mode.
    pub captain_one_shot: bool,
    /// His display name.
    pub bot_name: String,
    /// Lane lease time-to-live.
    pub lane_lease_ttl: Duration,
    /// Ack wait of the captain's consumers.
    pub ingress_ack_wait: Duration,
    /// Age at which another captain publishes a committed, unpublished outbox row.
    pub outbox_relay_after: Duration,
    /// Age at which an unpublished outbox row is given up.
    pub outbox_max_age: Duration,
    /// Whether the owner is asked in a DM, with buttons, about each memory he proposes.
    pub memory_dm: bool,
    /// How long a memory button works.
    pub button_lifetime: Duration,
    /// One minute of `/clankie quiet`.
    pub quiet_minute: Duration,
    /// How long receipts, settled records and replaced session entries are kept.
    pub retention_receipts: Duration,
    pub retention_records: Duration,
    pub retention_replaced_entries: Duration,
    /// How long the voice ring keeps a line, and how many it keeps per room.
    pub voice_ring_retention: Duration,
    pub voice_ring_max_lines: u64,
    /// How often the sweepers run.
    pub retention_sweep_every: Duration,
    /// How long a captain waits for one picture from media.
    pub media_timeout: Duration,
    /// How long a room's exchange stays live after a settled turn.
    pub exchange_window: Duration,
    /// Delay before a tool-only phase shows the tool card.
    pub tool_card_delay: Duration,
    /// Messages of history a cold lane is given.
    pub history_limit: u32,
    /// Discord messages one reply may take before it is cut.
    pub reply_max_pieces: usize,
    /// User ids granted the elevated tools.
    pub operator_grants: Vec<u64>,
    /// How long experiences are kept.
    pub experience_ttl: Duration,
    /// The typing hold's bound.
    pub typing_hold: Duration,
    /// Addresses tools may fetch although not public.
    pub egress_allow: AllowList,
    /// Characters of content in a cold lane's history block.
    pub history_max_chars: usize,
    /// Pictures of one message the model is shown.
    pub attachments_per_message: usize,
    /// Tool calls one model step may make.
    pub tool_calls_per_step: usize,
    /// Largest arguments of one tool call, in bytes.
    pub tool_args_max_bytes: usize,
    /// Largest streamed model answer, in bytes.
    pub model_stream_max_bytes: usize,
    /// Admissions one author may have per minute across lanes; 0 turns the flood guard off.
    pub flood_admissions_per_minute: u32,
    /// Whether the `browse` tool runs.
    pub browse: BrowseMode,
    /// Browsers one captain runs at once.
    pub browsers_max: usize,
    /// How long one browse may take once it has a browser.
    pub browse_deadline: Duration,
    /// The browser's viewport in CSS pixels.
    pub browser_viewport: (u32, u32),
    pub chromium: PathBuf,
    pub chromedriver: PathBuf,
    /// The self file a captain applies at start.
    pub self_file: Option<PathBuf>,
    /// The values given and where each came from, for `clankie settings --effective` and the start log.
    pub sources: Sources,
    /// What the operator should hear once at start: clamped values, deprecated settings.
    pub notices: Vec<String>,
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("state_root", &self.state_root)
            .field("attachment_root", &attachment_root(self))
            .field("nats_url", &redact_url(&self.nats_url))
            .field("database_url", &redact_url(&self.database_url))
            .field("replica_id", &self.replica_id)
            .field("log", &self.log)
            .field("bus_connect_timeout", &self.bus_connect_timeout)
            .field("ingress_dedup_window", &self.ingress_dedup_window)
            .field("model_base_url", &self.model_base_url.as_deref().map(redact_url))
            .field("model_name", &self.model_name)
            .field("model_api_key", &self.model_api_key.as_ref().map(|_| "***"))
            .field("model_max_retries", &self.model_max_retries)
            .field("model_response_timeout", &self.model_response_timeout)
            .field("stall_silence", &self.stall_silence)
            .field("stall_tick", &self.stall_tick)
            .field("context_budget_tokens", &self.context_budget_tokens)
            .field("rehearsal_think", &self.rehearsal_think)
            .field("rehearsal_token", &self.rehearsal_token)
            .field("http_addr", &self.http_addr)
            .field("discord_token", &"***")
            .field("discord_api", &self.discord_api)
            .field("discord_gateway_url", &self.discord_gateway_url)
            .field("discord_guilds", &self.discord_guilds)
            .field("outcome_reactions", &self.outcome_reactions)
            .field("typing_interval", &self.typing_interval)
            .field("sandbox_addr", &self.sandbox_addr)
            .field("sandbox_messages_kept", &self.sandbox_messages_kept)
            .field("warm_cache_mib", &self.warm_cache_mib)
            .field("console_addr", &self.console_addr)
            .field("console_token", &self.console_token.as_ref().map(|_| "***"))
            .field("voice_rooms", &self.voice_rooms)
            .field("voice_grace", &self.voice_grace)
            .field("gateway_publish_patience", &self.gateway_publish_patience)
            .field("discord_shards", &self.discord_shards)
            .field("shard_lease_ttl", &self.shard_lease_ttl)
            .field("rest_lease_ttl", &self.rest_lease_ttl)
            .field("stt_base_url", &self.stt_base_url.as_deref().map(redact_url))
            .field("stt_model", &self.stt_model)
            .field("stt_api_key", &self.stt_api_key.as_ref().map(|_| "***"))
            .field("stt_grammar", &self.stt_grammar)
            .field("tts_base_url", &self.tts_base_url.as_deref().map(redact_url))
            .field("tts_model", &self.tts_model)
            .field("tts_voice", &self.tts_voice)
            .field("tts_api_key", &self.tts_api_key.as_ref().map(|_| "***"))
            .field("speech_timeout", &self.speech_timeout)
            .field("voice_speech_start", &self.voice_speech_start)
            .field("voice_end_of_turn", &self.voice_end_of_turn)
            .field("voice_turn_silence", &self.voice_turn_silence)
            .field("turn_base_url", &self.turn_base_url)
            .field("voice_pre_roll", &self.voice_pre_roll)
            .field("voice_max_utterance", &self.voice_max_utterance)
            .field("voice_transcriptions", &self.voice_transcriptions)
            .field("barge_in", &self.barge_in)
            .field("voice_lease_ttl", &self.voice_lease_ttl)
            .field("voice_dave_refused_hold", &self.voice_dave_refused_hold)
            .field("bot_aliases", &self.bot_aliases)
            .field("floor_continuation", &self.floor_continuation)
            .field("floor_offer_interval", &self.floor_offer_interval)
            .field("shutdown_grace", &self.shutdown_grace)
            .field("media_max_bytes", &self.media_max_bytes)
            .field("media_max_age", &self.media_max_age)
            .field("media_max_total_bytes", &self.media_max_total_bytes)
            .field("captain_one_shot", &self.captain_one_shot)
            .field("bot_name", &self.bot_name)
            .field("lane_lease_ttl", &self.lane_lease_ttl)
            .field("ingress_ack_wait", &self.ingress_ack_wait)
            .field("outbox_relay_after", &self.outbox_relay_after)
            .field("outbox_max_age", &self.outbox_max_age)
            .field("memory_dm", &self.memory_dm)
            .field("button_lifetime", &self.button_lifetime)
            .field("quiet_minute", &self.quiet_minute)
            .field("retention_records", &self.retention_records)
            .field("media_timeout", &self.media_timeout)
            .field("exchange_window", &self.exchange_window)
            .field("tool_card_delay", &self.tool_card_delay)
            .field("history_limit", &self.history_limit)
            .field("reply_max_pieces", &self.reply_max_pieces)
            .field("operator_grants", &self.operator_grants)
            .field("experience_ttl", &self.experience_ttl)
            .field("typing_hold", &self.typing_hold)
            .field("egress_allow", &self.egress_allow)
            .field("browse", &self.browse)
            .field("browsers_max", &self.browsers_max)
            .field("browse_deadline", &self.browse_deadline)
            .field("browser_viewport", &self.browser_viewport)
            .field("history_max_chars", &self.history_max_chars)
            .field("attachments_per_message", &self.attachments_per_message)
            .field("tool_calls_per_step", &self.tool_calls_per_step)
            .field("tool_args_max_bytes", &self.tool_args_max_bytes)
            .field("model_stream_max_bytes", &self.model_stream_max_bytes)
            .field("flood_admissions_per_minute", &self.flood_admissions_per_minute)
            .finish()
    }
}

/// The directory attachments and artifacts live under: the override if set, else `<state>/attachments`.
///
/// This is the one derivation of that path; every service calls it.
pub fn attachment_root(settings: &Settings) -> PathBuf {
    match &settings.attachment_root_override {
        Some(root) => root.clone(),
        None => settings.state_root.join("attachments"),
    }
}

/// Hides what a URL can carry as a secret: its user-info in any scheme (`nats://TOKEN@host`
/// becomes `nats://***@host`, `postgres://me:pw@host` becomes `postgres://me:***@host`) and the
/// values of secret-looking query parameters (`?token=`, `password=`, `api_key=`, `sig=` …).
pub fn redact_url(url: &str) -> String {
    // A list of servers: each one's credentials go.
    if url.contains(',') && url.split(',').all(|u| u.contains("://")) {
        return url.split(',').map(|u| redact_url(u.trim())).collect::<Vec<_>>().join(",");
    }
    let Some((scheme, rest)) = url.split_once("://") else { return redact_query(url) };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) if !user.is_empty() => format!("{user}:***@{host}"),
            _ => format!("***@{host}"),
        },
        None => authority.to_owned(),
    };
    format!("{scheme}://{authority}{}", redact_query(tail))
}

/// Query parameter names that carry secrets, matched as parts of the lower-cased name.
const SECRET_PARAMS: &[&str] = &["pass", "pwd", "token", "secret", "key", "auth", "sig", "credential", "session"];

fn redact_query(tail: &str) -> String {
    let Some((path, query)) = tail.split_once('?') else { return tail.to_owned() };
    let (query, fragment) = match query.split_once('#') {
        Some((q, f)) => (q, Some(f)),
        None => (query, None),
    };
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) if SECRET_PARAMS.iter().any(|s| name.to_ascii_lowercase().contains(s)) => format!("{name}=***"),
            _ => pair.to_owned(),
        })
        .collect();
    let mut out = format!("{path}?{}", pairs.join("&"));
    if let Some(f) = fragment {
        out.push('#');
        out.push_str(f);
    }
    out
}

impl Settings {
    /// Reads the process environment and the config file `CLANKIE_CONFIG` names. A
    /// `CLANKIE_` variable or config key that is not a setting is an error naming the closest one.
    pub fn from_env() -> Result<Settings, SettingsError> {
        Settings::from_sources(Sources::from_process()?, |name| std::env::var(name).ok())
    }

    /// Reads settings through `lookup`, so tests can supply an environment of their own.
    ///
    /// Empty values count as unset.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Settings, SettingsError> {
        Settings::from_sources(Sources::from_lookup(&lookup), lookup)
    }

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
                return Err(SettingsError::Invalid { var: name, reason: "expected a URL such as scheme://host:port".into() });
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
        let model_max_retries = number(var("CLANKIE_MODEL_MAX_RETRIES"), "CLANKIE_MODEL_MAX_RETRIES", 4, 0, 20)? as u32;
        let stall_silence =
            Duration::from_millis(number(var("CLANKIE_STALL_SILENCE_MS"), "CLANKIE_STALL_SILENCE_MS", 300_000, 10, u64::MAX)?);
        let stall_tick = Duration::from_millis(number(var("CLANKIE_STALL_TICK_MS"), "CLANKIE_STALL_TICK_MS", 5_000, 1, u64::MAX)?);
        if stall_tick > stall_silence {
            return Err(SettingsError::Invalid { var: "CLANKIE_STALL_TICK_MS", reason: "must not exceed CLANKIE_STALL_SILENCE_MS".into() });
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
        let http_addr = var("CLANKIE_HTTP_ADDR")
            .map(|a| a.trim().parse::<std::net::SocketAddr>())
            .transpose()
            .map_err(|_| SettingsError::Invalid { var: "CLANKIE_HTTP_ADDR", reason: "expected host:port, e.g. 0.0.0.0:9470".into() })?;
        let sandbox_addr =
            var("CLANKIE_SANDBOX_ADDR").unwrap_or_else(|| "127.0.0.1:8700".into()).trim().parse::<std::net::SocketAddr>().map_err(
                |_| SettingsError::Invalid { var: "CLANKIE_SANDBOX_ADDR", reason: "expected host:port, e.g. 127.0.0.1:8700".into() },
            )?;
        let sandbox_messages_kept =
            number(var("CLANKIE_SANDBOX_MESSAGES_KEPT"), "CLANKIE_SANDBOX_MESSAGES_KEPT", 200, 1, 100_000)? as usize;
        let console_addr =
            var("CLANKIE_CONSOLE_ADDR").unwrap_or_else(|| "127.0.0.1:8790".into()).trim().parse::<std::net::SocketAddr>().map_err(
                |_| SettingsError::Invalid { var: "CLANKIE_CONSOLE_ADDR", reason: "expected host:port, e.g. 127.0.0.1:8790".into() },
            )?;
        let warm_cache_mib = number(var("CLANKIE_WARM_CACHE_MIB"), "CLANKIE_WARM_CACHE_MIB", 64, 1, 1 << 20)? as usize;
        let console_token = var("CLANKIE_CONSOLE_TOKEN").map(|t| t.trim().to_owned()).filter(|t| !t.is_empty());
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
                .ok_or(SettingsError::Invalid {
                    var: "CLANKIE_VOICE_ROOMS",
                    reason: "expected comma-separated guild:channel pairs".into(),
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
                        truncate(api)
                    ),
                });
            }
        }
        let discord_gateway_url = var("CLANKIE_DISCORD_GATEWAY_URL");
        if let Some(url) = &discord_gateway_url
            && !(url.starts_with("ws://") || url.starts_with("wss://"))
        {
            return Err(SettingsError::Invalid { var: "CLANKIE_DISCORD_GATEWAY_URL", reason: "expected a ws:// or wss:// URL".into() });
        }
        let outcome_reactions = flag(var("CLANKIE_OUTCOME_REACTIONS"), "CLANKIE_OUTCOME_REACTIONS")?;
        let captain_one_shot = flag(var("CLANKIE_CAPTAIN_ONE_SHOT"), "CLANKIE_CAPTAIN_ONE_SHOT")?;
        let typing_interval = ms("CLANKIE_TYPING_INTERVAL_MS", 8_000, 50)?;
        if typing_interval >= Duration::from_secs(10) {
            return Err(SettingsError::Invalid {
                var: "CLANKIE_TYPING_INTERVAL_MS",
                reason: "must be under 10000: Discord's indicator expires after 10 s".into(),
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
            reply_max_pieces,
            operator_grants,
            experience_ttl,
            typing_hold,
            model_base_url,
            model_name,
            model_api_key,
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

    /// Settings pointing at the given bus and database, everything else default; for tests and tools.
    pub fn for_endpoints(nats_url: &str, database_url: &str, state_root: &Path) -> Result<Settings, SettingsError> {
        let state = state_root.display().to_string();
        Settings::from_lookup(|name| match name {
            "CLANKIE_NATS_URL" => Some(nats_url.to_owned()),
            "CLANKIE_DATABASE_URL" => Some(database_url.to_owned()),
            "CLANKIE_STATE_DIR" => Some(state.clone()),
            _ => None,
        })
    }

    /// Whether the services speak to Discord itself: no stand-in is named in
    /// `CLANKIE_DISCORD_API`, so the token and the model meet real people.
    pub fn against_real_discord(&self) -> bool {
        self.discord_api.is_none()
    }

    /// Refuses a token that is no bot's (unset, the loopback's, or the example file's
    /// placeholder) when the gateway would present it to Discord itself: Discord would close
    /// the connection and the operator would learn only that from the log.
    pub fn check_token_for_real_discord(&self) -> Result<(), SettingsError> {
        if !self.against_real_discord() || !PLACEHOLDER_TOKENS.contains(&self.discord_token.trim()) {
            return Ok(());
        }
        Err(SettingsError::Invalid {
            var: "CLANKIE_DISCORD_TOKEN",
            reason: "it is unset or a placeholder, and CLANKIE_DISCORD_API is unset, so it would go to Discord itself. \
                     Put your bot's token in CLANKIE_DISCORD_TOKEN (Developer Portal, your application, Bot, Reset Token), \
                     or set CLANKIE_DISCORD_API to the loopback (e.g. 127.0.0.1:8700) for a sandbox"
                .into(),
        })
    }

    /// Refuses the rehearsal model when Discord is the real one: it would answer "[rehearsal]"
    /// into a real server. It stays the sandbox's default.
    pub fn check_model_for_real_discord(&self) -> Result<(), SettingsError> {
        if !self.against_real_discord() || self.model_base_url.is_some() {
            return Ok(());
        }
        Err(SettingsError::Invalid {
            var: "CLANKIE_MODEL_BASE_URL",
            reason: "it is unset, so the offline rehearsal model would answer real people on Discord. \
                     Set CLANKIE_MODEL_BASE_URL (e.g. https://api.openai.com/v1) and CLANKIE_MODEL_API_KEY, \
                     or set CLANKIE_DISCORD_API to the loopback for a sandbox"
                .into(),
        })
    }
}

/// Tokens that are never a bot's: unset, the loopback's default and `.env.example`'s placeholder.
const PLACEHOLDER_TOKENS: [&str; 3] = ["", "loopback-token", "replace-me"];

fn absolute(var: &'static str, value: &str) -> Result<PathBuf, SettingsError> {
    let path = PathBuf::from(value);
    if path.is_absolute() { Ok(path) } else { Err(SettingsError::Invalid { var, reason: "must be an absolute path".into() }) }
}

fn viewport(value: Option<String>) -> Result<(u32, u32), SettingsError> {
    let Some(value) = value else { return Ok((1280, 800)) };
    let bad = || SettingsError::Invalid { var: "CLANKIE_BROWSER_VIEWPORT", reason: "expected WIDTHxHEIGHT, each 200 to 4000".into() };
    let (w, h) = value.trim().split_once(['x', 'X']).ok_or_else(bad)?;
    let (w, h): (u32, u32) = (w.trim().parse().map_err(|_| bad())?, h.trim().parse().map_err(|_| bad())?);
    if !(200..=4000).contains(&w) || !(200..=4000).contains(&h) {
        return Err(bad());
    }
    Ok((w, h))
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
        .map_err(|_| SettingsError::Invalid { var, reason: "expected comma-separated ids".into() })
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

#[cfg(test)]
mod tests {
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
}
