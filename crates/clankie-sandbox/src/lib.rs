//! The embedded default: everything Clankie needs on one machine, in one
//! process, against the loopback Discord.
//!
//! [`Sandbox::start`] serves the loopback Discord (with the sandbox page a
//! person chats in), then a gateway, captain, voice floor and media wired to it, over the
//! configured NATS and PostgreSQL. `clankie run` uses it; so do the
//! cross-service tests, so what a person sees is what the tests prove.

use std::net::SocketAddr;

use clankie_captain::{Captain, CaptainConfig};
use clankie_discord_loopback::{Loopback, LoopbackConfig};
use clankie_gateway::{Gateway, GatewayConfig};
use clankie_settings::Settings;
use clankie_voice_floor::rooms::{RoomConfig, RoomKeeper};
use clankie_voice_floor::{VoiceConfig, VoiceFloor};

/// Where the loopback's voice server keeps its CA bundle; `clankie run` points `SSL_CERT_FILE` at
/// `voice-ca.pem` in it before anything starts, so the embedded audio body trusts the loopback.
pub fn voice_dir(settings: &Settings) -> std::path::PathBuf {
    settings.state_root.join("voice")
}

#[cfg(feature = "rig")]
pub mod rig;

/// Why the sandbox could not start.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("could not serve the loopback Discord on {addr}: {source}")]
    Loopback { addr: SocketAddr, source: std::io::Error },
    #[error(transparent)]
    Bus(#[from] clankie_bus::BusError),
    #[error(transparent)]
    Store(#[from] clankie_store::StoreError),
    #[error("the self file {path} (CLANKIE_SELF_FILE): {source}")]
    SelfFile { path: std::path::PathBuf, source: clankie_store::SelfFileError },
    #[error("model: {0}")]
    Model(#[from] clankie_agent::ModelError),
    #[error("media: {0}")]
    Media(#[from] clankie_media::MediaError),
    #[error("browser host: {0}")]
    Browser(#[from] clankie_browser::BrowseError),
    #[error("voice rooms: {0}")]
    Rooms(#[from] clankie_voice_floor::rooms::RoomError),
    #[error("console: {0}")]
    Console(#[from] clankie_console::ConsoleError),
    #[error("could not serve the console on {addr}: {source}")]
    ConsoleListen { addr: SocketAddr, source: std::io::Error },
}

/// What [`Sandbox::start_with`] may change from the plain start.
#[derive(Default)]
pub struct SandboxOptions {
    /// Times the captain's runs (tests simulate a host suspend with it).
    pub clock: Option<std::sync::Arc<dyn clankie_agent::Clock>>,
    /// The roots the voice CA bundle holds besides the loopback's CA; the system bundle when unset.
    pub voice_roots: Option<std::path::PathBuf>,
    /// The loopback's Discord limits; Discord's own when unset.
    pub limits: Option<clankie_discord_loopback::Limits>,
    /// The speech API the loopback voices typed "say aloud" lines with (Piper, when `clankie run`
    /// started the local speech service); espeak-ng when unset.
    pub say_aloud_tts: Option<String>,
    /// DAVE on the loopback's voice server; on (unless `CLANKIE_LOOPBACK_DAVE=off`) when unset.
    pub dave: Option<clankie_discord_loopback::DaveConfig>,
    /// Channels the loopback has beside its own (a test's second voice channel, say).
    pub extra_channels: Vec<clankie_discord_loopback::ChannelSpec>,
}

/// A running embedded stack. Dropping it stops the services.
pub struct Sandbox {
    pub discord: Loopback,
    pub gateway: Gateway,
    pub captain: Captain,
    pub voice: std::sync::Arc<VoiceFloor>,
    /// The operator console's address and its token.
    pub console: (SocketAddr, String),
    /// The console's supervised parts (its bus followers).
    pub console_parts: clankie_http::supervise::Parts,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    ended: tokio::sync::Mutex<tokio::sync::mpsc::UnboundedReceiver<(&'static str, String)>>,
}

/// The sandbox's service tasks, each watched: one that ends, fails or panics is logged by name
/// and reported through [`Sandbox::a_service_stopped`], so `clankie run` exits non-zero instead
/// of living on without it (the gateway restarts its own parts first; see `clankie_http::supervise`).
struct Services {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    ended: tokio::sync::mpsc::UnboundedSender<(&'static str, String)>,
}

impl Services {
    fn watch<E: std::fmt::Display>(
        &mut self,
        name: &'static str,
        service: impl std::future::Future<Output = Result<(), E>> + Send + 'static,
    ) {
        let ended = self.ended.clone();
        self.tasks.push(tokio::spawn(async move {
            let why = match futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(service)).await {
                Ok(Ok(())) => "it ended".to_owned(),
                Ok(Err(e)) => e.to_string(),
                Err(panic) => format!("it panicked: {}", clankie_http::supervise::panic_message(panic.as_ref())),
            };
            tracing::error!(service = name, error = %why, "a service of the sandbox stopped");
            let _ = ended.send((name, why));
        }));
    }
}

/// A captain replica of the sandbox over `store`: the configured model, its runs timed by
/// `clock`; named `replica` when given, else as the settings name it.
pub(crate) async fn sandbox_captain(
    settings: &Settings,
    store: clankie_store::Store,
    discord: SocketAddr,
    replica: Option<&str>,
    clock: Option<std::sync::Arc<dyn clankie_agent::Clock>>,
) -> Result<Captain, SandboxError> {
    let mut agent = clankie_agent::Agent::new(clankie_agent::model_from_settings(settings)?, clankie_agent::config_from_settings(settings));
    if let Some(clock) = clock {
        agent = agent.with_clock(clock);
    }
    let mut config = CaptainConfig::from_settings(settings);
    if let Some(replica) = replica {
        config.replica = replica.to_owned();
    }
    // The sandbox's pictures are served by its own loopback Discord at `discord`: its tools may
    // fetch from there, and nowhere else private.
    config.egress = clankie_egress::EgressGuard::new(settings.egress_allow.clone().with(discord));
    // The browse tool runs against the same allow list when a browser is installed.
    config.browser = clankie_browser::host_from_settings(settings, config.egress.clone()).await?;
    Ok(Captain::new(clankie_bus::Bus::connect(settings, "captain").await?, store, agent, config))
}

impl Sandbox {
    /// Starts the loopback Discord on `addr`, then a gateway and a captain against it.
    pub async fn start(settings: &Settings, addr: SocketAddr) -> Result<Sandbox, SandboxError> {
        Sandbox::start_with(settings, addr, SandboxOptions::default()).await
    }

    /// Like [`Sandbox::start`], with the choices only `clankie run` and tests make.
    pub async fn start_with(settings: &Settings, addr: SocketAddr, options: SandboxOptions) -> Result<Sandbox, SandboxError> {
        let SandboxOptions { clock, voice_roots, limits, say_aloud_tts, dave, extra_channels } = options;
        let mut channels = LoopbackConfig::default().channels;
        channels.extend(extra_channels);
        let config = LoopbackConfig {
            channels,
            token: settings.discord_token.clone(),
            bot_name: settings.bot_name.clone(),
            voice_dir: Some(voice_dir(settings)),
            voice_roots,
            say_aloud_tts,
            limits: limits.unwrap_or_default(),
            dave: dave.unwrap_or_default(),
            messages_kept_per_channel: settings.sandbox_messages_kept,
            ..LoopbackConfig::default()
        };
        let discord = Loopback::serve(addr, config).await.map_err(|source| SandboxError::Loopback { addr, source })?;

        let bus = clankie_bus::Bus::connect(settings, "gateway").await?;
        bus.ensure_streams().await?;
        let mut gateway_config = GatewayConfig::from_settings(settings);
        gateway_config.api = Some(discord.addr().to_string());
        gateway_config.gateway_url = Some(discord.gateway_url());
        gateway_config.token = discord.config().token.clone();
        gateway_config.outcome_reactions = true;
        // Each sandbox is a fresh Discord: a session saved against another one cannot resume here.
        let _ = std::fs::remove_dir_all(&gateway_config.state_dir);
        let gateway = Gateway::new(bus, gateway_config);

        let store = clankie_store::Store::connect(&settings.database_url).await?;
        store.migrate().await?;
        // As a captain of its own would: the file is in effect before the first turn.
        if let Some(path) = &settings.self_file {
            let file = clankie_store::SelfFile::read(path).map_err(|source| SandboxError::SelfFile { path: path.clone(), source })?;
            let report = store.apply_self_file(&file).await?;
            tracing::info!(file = %path.display(), written = %report, "self file applied");
        }
        let model = clankie_agent::model_from_settings(settings)?;
        if model.is_rehearsal() {
            tracing::warn!("no CLANKIE_MODEL_BASE_URL: the offline rehearsal model answers; its words start with [rehearsal]");
        }
        let captain = sandbox_captain(settings, store, discord.addr(), None, clock).await?;

        let voice_config = VoiceConfig::from_settings(settings);
        let mut room_config = RoomConfig::from_settings(settings);
        if room_config.speech.stt_base_url.is_none() && room_config.speech.stt_grammar.is_none() {
            // Offline transcription hears only what the sandbox page lets people say aloud.
            room_config.speech.stt_grammar = Some(voice_dir(settings).join(clankie_discord_loopback::voice::SANDBOX_GRAMMAR));
        }
        if room_config.allow.is_empty() {
            // He may join the loopback's voice channels: a person entering one on the page makes it live.
            let guild = discord.config().guild_id;
            room_config.allow = discord.config().channels.iter().filter(|c| c.voice).map(|c| (guild, c.id)).collect();
        }
        let voice_bus = clankie_bus::Bus::connect(settings, "voice-floor").await?;
        let selfhood = clankie_self::SelfSource::new(
            clankie_store::Store::connect(&settings.database_url).await?,
            Some(voice_bus.clone()),
            &settings.bot_name,
            &settings.bot_aliases,
            settings.exchange_window,
        );
        let voice =
            std::sync::Arc::new(VoiceFloor::new(voice_bus.clone(), clankie_agent::model_from_settings(settings)?, selfhood, voice_config));

        let media = clankie_media::Media::new(
            clankie_bus::Bus::connect(settings, "media").await?,
            settings,
            clankie_media::MediaConfig::from_settings(settings),
        )?;
        let (ended_tx, ended) = tokio::sync::mpsc::unbounded_channel();
        let mut tasks = Services { tasks: Vec::new(), ended: ended_tx };
        tasks.watch("media", async move { media.run().await });
        let mut rooms =
            RoomKeeper::new(voice_bus.clone(), clankie_store::Store::connect(&settings.database_url).await?, voice.clone(), room_config)?;
        tasks.watch("voice rooms", async move { rooms.run().await });
        // Until speech is synthesized, what the voice room says also shows on the sandbox page.
        let speaker = discord.speaker();
        tasks.watch("voice page", async move {
            let mut said = voice_bus.client().subscribe(clankie_proto::Family::VoiceSpeak.wildcard()).await.map_err(|e| e.to_string())?;
            while let Some(msg) = futures::StreamExt::next(&mut said).await {
                if let Ok(speak) = <clankie_proto::v1::Speak as prost::Message>::decode(msg.payload) {
                    speaker.say(speak.channel_id, speak.text, speak.delivery_id.parse().ok());
                }
            }
            Ok::<(), String>(())
        });
        let g = gateway.clone();
        tasks.watch("gateway", async move { g.run().await });
        let c = captain.clone();
        tasks.watch("captain", async move { c.run().await });
        let (console, console_parts) = Self::console(settings, &mut tasks).await?;
        Ok(Sandbox { discord, gateway, captain, voice, console, console_parts, tasks: tasks.tasks, ended: tokio::sync::Mutex::new(ended) })
    }

    /// The operator console, with the configured token or a fresh one.
    async fn console(
        settings: &Settings,
        tasks: &mut Services,
    ) -> Result<((SocketAddr, String), clankie_http::supervise::Parts), SandboxError> {
        let addr = settings.console_addr();
        let token = match &settings.console_token {
            Some(t) => t.clone(),
            None => clankie_console::auth::fresh_token().map_err(|source| SandboxError::ConsoleListen { addr, source })?,
        };
        let console = clankie_console::Console::from_settings(settings, token.clone()).await?;
        let listener = tokio::net::TcpListener::bind(addr).await.map_err(|source| SandboxError::ConsoleListen { addr, source })?;
        let bound = listener.local_addr().map_err(|source| SandboxError::ConsoleListen { addr, source })?;
        let parts = console.parts();
        tasks.watch("console", async move { console.serve(listener).await });
        Ok(((bound, token), parts))
    }

    /// The operator console's page, token included.
    pub fn console_url(&self) -> String {
        format!("http://{}/?token={}", self.console.0, self.console.1)
    }

    /// Waits until one of the sandbox's services stops (it should not): its name and why.
    pub async fn a_service_stopped(&self) -> (&'static str, String) {
        match self.ended.lock().await.recv().await {
            Some(ended) => ended,
            None => std::future::pending().await,
        }
    }

    /// Resolves once the gateway's shard is identified with the loopback: a message typed on
    /// the page from then on is heard.
    pub async fn identified(&self) {
        self.gateway.identified().await;
    }

    /// The sandbox page's address.
    pub fn url(&self) -> String {
        self.discord.url()
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}
