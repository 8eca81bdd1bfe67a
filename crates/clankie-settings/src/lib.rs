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
pub mod dotenv;
pub mod fault;
mod read;
mod setting;
mod source;

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use allow::{AllowList, AllowListError};
pub use catalogue::{Area, Kind, Service, Setting, Unit, catalogue};
pub use source::{Effective, Origin, Sources, parse_flag};

/// The wire the model endpoint speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ModelProvider {
    /// OpenAI's Chat Completions, and every server that copies it.
    #[default]
    OpenAi,
    /// Anthropic's Messages API.
    Anthropic,
}

/// Whether the `browse` tool runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BrowseMode {
    /// On when Chromium and chromedriver are installed.
    #[default]
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

/// The configuration a service runs with. Its `Default` is the blank each area's reader fills
/// in (`Settings::from_sources`), not a configuration to run with.
#[derive(Clone, Default)]
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
    /// The wire the endpoint speaks.
    pub model_provider: ModelProvider,
    /// The most tokens one answer may take.
    pub model_max_tokens: u32,
    /// How long Anthropic keeps a cached prompt unread: 5 minutes or an hour.
    pub model_cache_ttl: Duration,
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
    /// Where the embedded default serves the loopback Discord ([`Settings::sandbox_addr`]).
    sandbox_addr: Option<std::net::SocketAddr>,
    /// Messages each sandbox room keeps, the newest.
    pub sandbox_messages_kept: usize,
    /// The captain's warm-session budget, in MiB.
    pub warm_cache_mib: usize,
    /// Where the operator console listens ([`Settings::console_addr`]).
    console_addr: Option<std::net::SocketAddr>,
    /// The operator console's token; never logged.
    pub console_token: Option<String>,
    /// The trace viewer's page for one trace, `{trace_id}` where the id goes (`CLANKIE_TRACE_URL`).
    pub trace_url: Option<String>,
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
    /// Messages of a reply chain a reply is shown with.
    pub reply_chain_depth: usize,
    /// A guild message that names him is admitted (`named`).
    pub named_admission: bool,
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
    /// Whose list prices the bill reckons at, and of when (`CLANKIE_PRICE_MODEL`).
    pub price_model: String,
    /// The bill's prices, US dollars per million tokens: plain input, output, cache reads, cache writes.
    pub price_input: f64,
    pub price_output: f64,
    pub price_cache_read: f64,
    pub price_cache_write: f64,
    /// Admissions one author may have per minute across lanes; 0 turns the flood guard off.
    pub flood_admissions_per_minute: u32,
    /// Reminders one person, and one room, may have pending; 0 is no bound.
    pub reminders_per_person: u32,
    pub reminders_per_room: u32,
    /// How many days ahead a reminder may be set.
    pub reminder_horizon_days: u32,
    /// The time zone reminders are read in for someone who set none (an IANA name).
    pub time_zone: String,
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

/// `CLANKIE_SANDBOX_ADDR`'s default.
pub(crate) const SANDBOX_ADDR: std::net::SocketAddr =
    std::net::SocketAddr::V4(std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 8700));
/// `CLANKIE_CONSOLE_ADDR`'s default.
pub(crate) const CONSOLE_ADDR: std::net::SocketAddr =
    std::net::SocketAddr::V4(std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 8790));

impl Settings {
    /// Where the embedded default serves the loopback Discord.
    pub fn sandbox_addr(&self) -> std::net::SocketAddr {
        self.sandbox_addr.unwrap_or(SANDBOX_ADDR)
    }

    /// Where the operator console listens.
    pub fn console_addr(&self) -> std::net::SocketAddr {
        self.console_addr.unwrap_or(CONSOLE_ADDR)
    }
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
            .field("sandbox_addr", &self.sandbox_addr())
            .field("sandbox_messages_kept", &self.sandbox_messages_kept)
            .field("warm_cache_mib", &self.warm_cache_mib)
            .field("console_addr", &self.console_addr())
            .field("console_token", &self.console_token.as_ref().map(|_| "***"))
            .field("trace_url", &self.trace_url)
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
            .field("reply_chain_depth", &self.reply_chain_depth)
            .field("named_admission", &self.named_admission)
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
            .field("prices", &(&self.price_model, self.price_input, self.price_output, self.price_cache_read, self.price_cache_write))
            .field("flood_admissions_per_minute", &self.flood_admissions_per_minute)
            .field("reminders", &(self.reminders_per_person, self.reminders_per_room, self.reminder_horizon_days, &self.time_zone))
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
    // A list of servers (`nats://tok@a:4222,tok@b:4222`): each one's credentials go.
    if url.contains(',') && url.split(',').all(|u| u.contains("://") || u.contains('@')) {
        return url.split(',').map(|u| redact_url(u.trim())).collect::<Vec<_>>().join(",");
    }
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (format!("{scheme}://"), rest),
        None => (String::new(), url),
    };
    // User-info runs to the last `@`: a password may hold `/`, `?` or `#`, and a string with no
    // scheme (`user:pw@host/db`) carries one as well. An `@` later in the path only hides more.
    let (userinfo, after) = match rest.rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    };
    let end = after.find(['/', '?', '#']).unwrap_or(after.len());
    let (host, tail) = after.split_at(end);
    let userinfo = match userinfo.map(|u| u.split_once(':')) {
        None => String::new(),
        Some(Some((user, _))) if !user.is_empty() && !user.contains(['/', '?', '#']) => format!("{user}:***@"),
        Some(_) => "***@".to_owned(),
    };
    format!("{scheme}{userinfo}{host}{}", redact_query(tail))
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

#[cfg(test)]
mod tests;
