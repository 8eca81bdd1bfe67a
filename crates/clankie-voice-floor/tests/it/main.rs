//! The voice-floor service as its own processes, with the loopback Discord (voice server and
//! all), a real gateway, nats-server and PostgreSQL. Each voice-floor process trusts the
//! loopback's voice CA through `SSL_CERT_FILE`, as a deployment against it would.

mod dave;
mod join;
mod lease;
mod open_speech;
mod reconnect;
mod smart_turn;
mod speech;
mod speech_service;
mod vad;

use std::path::PathBuf;
use std::time::Duration;

use clankie_bus::Bus;
use clankie_discord_loopback::{DaveConfig, Loopback, LoopbackConfig};
use clankie_gateway::{Gateway, GatewayConfig};
use clankie_model_standin::StandIn;
use clankie_proto::{Family, v1};
use clankie_testkit::{TestDb, TestDir, TestNats, record};

pub use clankie_testkit::{Recorder, until};

pub const GUILD: u64 = 100;
pub const VOICE: u64 = 300;
pub const GRACE_MS: u64 = 1_500;
pub const LEASE_TTL_MS: u64 = 2_000;

pub struct Rig {
    pub nats: TestNats,
    pub db: TestDb,
    pub dir: TestDir,
    pub discord: Loopback,
    pub standin: StandIn,
    pub bus: Bus,
    pub gateway: Gateway,
    pub receipts: Recorder<v1::Receipt>,
    pub sessions: Recorder<v1::VoiceSession>,
    pub members: Recorder<v1::VoiceMember>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Rig {
    pub async fn new() -> Rig {
        Rig::with_dave(DaveConfig::default()).await
    }

    /// A rig whose voice server speaks DAVE as `dave` says.
    pub async fn with_dave(dave: DaveConfig) -> Rig {
        let dir = TestDir::new();
        let config =
            LoopbackConfig { heartbeat_interval_ms: 5_000, voice_dir: Some(dir.path().join("voice")), dave, ..LoopbackConfig::default() };
        let discord = Loopback::serve("127.0.0.1:0".parse().unwrap(), config).await.unwrap();
        let (nats, db) = (TestNats::start().unwrap(), TestDb::create().await);
        let settings = clankie_testkit::settings(&nats, &db, &dir);
        let bus = Bus::connect(&settings, "test").await.unwrap();
        bus.ensure_streams().await.unwrap();
        clankie_store::Store::connect(db.url()).await.unwrap().migrate().await.unwrap();
        let gateway_config = GatewayConfig {
            token: discord.config().token.clone(),
            api: Some(discord.addr().to_string()),
            gateway_url: Some(discord.gateway_url()),
            guilds: vec![],
            outcome_reactions: false,
            typing_interval: Duration::from_millis(200),
            typing_max: Duration::from_secs(30),
            state_dir: dir.path().join("gateway"),
            history_limit: 10,
            reply_max_pieces: 10,
            replica: "gateway-test".into(),
            publish_patience: Duration::from_secs(20),
            shards: 0,
            shard_lease_ttl: Duration::from_secs(15),
            rest_lease_ttl: Duration::from_secs(5),
            create_span: Duration::from_millis(discord.config().limits.message_create_window_ms),
            reply_chain_depth: 3,
            ingest_buffer: clankie_gateway::INGEST_BUFFER,
            places_kept: clankie_gateway::PLACES_KEPT,
        };
        let gateway = Gateway::new(Bus::connect(&settings, "gateway").await.unwrap(), gateway_config);
        let running = gateway.clone();
        let tasks = vec![tokio::spawn(async move {
            let _ = running.run().await;
        })];
        assert!(discord.wait_for_session(Duration::from_secs(20)).await, "the shard never attached");
        until("READY", Duration::from_secs(10), || gateway.bot_id() != 0).await;
        Rig {
            receipts: record(&bus, Family::Receipt).await,
            sessions: record(&bus, Family::VoiceSession).await,
            members: record(&bus, Family::VoiceMember).await,
            standin: StandIn::start().await.unwrap(),
            nats,
            db,
            dir,
            discord,
            bus,
            gateway,
            tasks,
        }
    }

    pub fn ca_bundle(&self) -> PathBuf {
        self.discord.voice().ca_bundle().to_owned()
    }

    /// A captain in this process against the rig's stand-in model: the text lanes answer too.
    pub async fn captain(&self) -> tokio::task::JoinHandle<()> {
        let mut settings = clankie_testkit::settings(&self.nats, &self.db, &self.dir);
        settings.model_base_url = Some(self.standin.base_url());
        let bus = Bus::connect(&settings, "captain").await.unwrap();
        let store = clankie_store::Store::connect(&settings.database_url).await.unwrap();
        let agent = clankie_agent::Agent::new(
            clankie_agent::model_from_settings(&settings).unwrap(),
            clankie_agent::config_from_settings(&settings),
        );
        let captain = clankie_captain::Captain::new(bus, store, agent, clankie_captain::CaptainConfig::from_settings(&settings));
        tokio::spawn(async move {
            let _ = captain.run().await;
        })
    }

    /// A voice-floor replica as its own process, logging to `<replica>.log` in the rig's directory.
    pub fn voice_floor(&self, replica: &str) -> tokio::process::Child {
        self.voice_floor_with(replica, &[])
    }

    /// A voice-floor replica as its own process, once it is reading voice states.
    pub async fn keeping_floor(&self, replica: &str) -> tokio::process::Child {
        let floor = self.voice_floor(replica);
        keeping(self, replica).await;
        floor
    }

    /// A voice-floor replica with extra settings.
    pub fn voice_floor_with(&self, replica: &str, extra: &[(&str, String)]) -> tokio::process::Child {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_clankie-voice-floor"));
        cmd.env("CLANKIE_NATS_URL", self.nats.url())
            .env("CLANKIE_DATABASE_URL", self.db.url())
            .env("CLANKIE_STATE_DIR", self.dir.path())
            .env("CLANKIE_REPLICA_ID", replica)
            .env("CLANKIE_MODEL_BASE_URL", self.standin.base_url())
            .env("CLANKIE_VOICE_ROOMS", format!("{GUILD}:{VOICE}"))
            .env("CLANKIE_VOICE_GRACE_MS", GRACE_MS.to_string())
            .env("CLANKIE_VOICE_LEASE_TTL_MS", LEASE_TTL_MS.to_string())
            .env("SSL_CERT_FILE", self.ca_bundle())
            .env("CLANKIE_LOG", std::env::var("CLANKIE_TEST_VOICE_LOG").unwrap_or_else(|_| "warn,clankie_voice_floor=debug".into()))
            .env("NO_COLOR", "1");
        for (k, v) in extra {
            cmd.env(k, v);
        }
        let log = std::fs::File::create(self.dir.path().join(format!("{replica}.log"))).unwrap();
        cmd.stdout(std::process::Stdio::null()).stderr(log).kill_on_drop(true);
        cmd.spawn().unwrap()
    }

    /// The live channel the latest voice session of the guild announces.
    ///
    /// Read as every consumer reads it (`VoiceSession::live_channel`): a vouch published on its
    /// own task can land after the room's end, and lapses at its `live_until_ms`.
    pub fn live(&self) -> Option<u64> {
        self.sessions.all().last().and_then(|s| s.live_channel(clankie_bus::now_ms()))
    }

    /// Receipts of a kind, in arrival order.
    pub fn receipts(&self, kind: &str) -> Vec<v1::Receipt> {
        self.receipts.all().into_iter().filter(|r| r.kind == kind).collect()
    }

    /// His audio connection is up at the loopback and, with DAVE on, end-to-end encrypted.
    pub async fn connected(&self, within: Duration) {
        until("his voice connection", within, || self.discord.voice().bot_connected(VOICE)).await;
        // As on Discord, his call is end-to-end encrypted before anything is said in it.
        let voice = self.discord.voice();
        if voice.dave_config().on {
            let in_group = || voice.dave(VOICE).is_some_and(|g| g.bot_first_transition_ms.is_some());
            until("his DAVE handshake (in the channel's group, its transition executed)", within, in_group).await;
        }
    }

    pub fn log(&self, replica: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("{replica}.log"))).unwrap_or_default()
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        if std::thread::panicking() {
            for replica in ["floor-a", "floor-b"] {
                eprintln!("===== {replica} =====\n{}", self.log(replica));
            }
        }
    }
}

/// A spoken clip of espeak-ng.
/// A floor (`floor-a`) whose offline transcriber knows `phrases`, keeping the room ada has just
/// joined, with his voice connected; the floor's process and its grammar file.
pub async fn live_room_hearing(rig: &Rig, phrases: &[&str]) -> (tokio::process::Child, std::path::PathBuf) {
    let file = rig.dir.path().join("room.gram");
    std::fs::write(&file, clankie_speech::offline::grammar(phrases)).unwrap();
    let floor = live_room_with(rig, &[("CLANKIE_STT_GRAMMAR", file.display().to_string())]).await;
    (floor, file)
}

/// Clips a voice test says: `CLANKIE_VOICE_CLIPS` (its long mode), else 5; at most `most`.
pub fn voice_clips(most: usize) -> usize {
    std::env::var("CLANKIE_VOICE_CLIPS").ok().and_then(|v| v.parse().ok()).unwrap_or(5).clamp(1, most)
}

/// The local speech service (faster-whisper, Piper, Smart Turn), installed on first use.
pub async fn speech() -> clankie_stack::SpeechServer {
    let started = tokio::task::spawn_blocking(|| clankie_stack::SpeechServer::start(&Default::default(), &mut |m| eprintln!("{m}")));
    started.await.unwrap().expect("the local speech service starts")
}

/// A live room whose floor hears, speaks and tells the end of a turn through the local speech service.
pub async fn live_room_on(rig: &Rig, speech: &clankie_stack::SpeechServer) -> tokio::process::Child {
    live_room_with(
        rig,
        &[
            ("CLANKIE_STT_BASE_URL", speech.base_url()),
            ("CLANKIE_TTS_BASE_URL", speech.base_url()),
            ("CLANKIE_TURN_BASE_URL", speech.base_url()),
        ],
    )
    .await
}

/// A live room whose floor runs with `settings`.
pub async fn live_room_with(rig: &Rig, settings: &[(&str, String)]) -> tokio::process::Child {
    let floor = rig.voice_floor_with("floor-a", settings);
    keeping(rig, "floor-a").await;
    rig.discord.voice_join(VOICE, "ada").unwrap();
    until("the room live", Duration::from_secs(10), || rig.live() == Some(VOICE)).await;
    rig.connected(Duration::from_secs(10)).await;
    floor
}

/// `text` said aloud in Piper's voice, by the local speech service.
pub async fn piper_clip(speech: &clankie_stack::SpeechServer, text: &str) -> (Vec<i16>, u32) {
    use clankie_speech::TextToSpeech as _;
    let piper = clankie_speech::openai::OpenAiSpeaker::new(&speech.base_url(), "piper", "joe", None, Duration::from_secs(30)).unwrap();
    let audio = piper.synthesize(text).await.expect("Piper speaks");
    (audio.pcm, audio.rate)
}

/// The word error rate of `heard` against `said`: word edits (substitutions, insertions,
/// deletions) over the words said, case and punctuation aside.
pub fn word_errors(said: &str, heard: &str) -> (usize, usize) {
    let words = |s: &str| -> Vec<String> {
        s.to_lowercase().split(|c: char| !c.is_alphanumeric() && c != '\'').filter(|w| !w.is_empty()).map(str::to_owned).collect()
    };
    let (a, b) = (words(said), words(heard));
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, wa) in a.iter().enumerate() {
        let mut next = vec![i + 1; b.len() + 1];
        for (j, wb) in b.iter().enumerate() {
            next[j + 1] = (row[j] + usize::from(wa != wb)).min(row[j + 1] + 1).min(next[j] + 1);
        }
        row = next;
    }
    (row[b.len()], a.len())
}

pub async fn clip(text: &str) -> (Vec<i16>, u32) {
    Loopback::synthesize(text).await.expect("espeak-ng speaks")
}

/// A receipt field's numeric value.
pub fn count(r: &v1::Receipt, name: &str) -> Option<i64> {
    r.counts.get(name).copied()
}

/// A receipt's id field.
pub fn id(r: &v1::Receipt, name: &str) -> Option<String> {
    r.ids.get(name).cloned()
}

/// When a heard segment began (ms since the epoch), from its utterance id `utt:<g>:<c>:<ssrc>:<ms>`.
pub fn started_ms(r: &v1::Receipt) -> i64 {
    r.delivery_id.rsplit(':').next().and_then(|t| t.parse().ok()).unwrap_or(0)
}

/// Waits until the room's keeper consumers of `replica` exist: the process is reading voice states.
pub async fn keeping(rig: &Rig, replica: &str) {
    let name = format!("voice-floor-members-{replica}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let stream = rig.bus.jetstream().get_stream("CLANKIE_VOICE").await.unwrap();
        if stream.consumer_info(&name).await.is_ok() {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{replica} never started keeping rooms:\n{}", rig.log(replica));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Voices `author` in short clips with pauses until a clip spoken wholly after `since` is heard
/// by the voice floor (a `voice.heard` receipt of a segment that began after the clip did, from
/// `by_pid` when given). Returns when that clip began.
pub async fn audio_restored(rig: &Rig, author: &str, since: i64, by_pid: Option<u32>, within: Duration) -> i64 {
    let (pcm, rate) = clip("testing one two").await;
    let pcm = &pcm[..pcm.len().min(rate as usize / 2)];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let begun = clankie_bus::now_ms();
        let sent = rig.discord.voice_speak(VOICE, author, pcm, rate).await.unwrap_or(0);
        if sent > 0 {
            let heard_deadline = tokio::time::Instant::now() + Duration::from_millis(1500);
            while tokio::time::Instant::now() < heard_deadline {
                let heard = rig.receipts("voice.heard").into_iter().any(|r| {
                    started_ms(&r) >= begun - 100
                        && started_ms(&r) > since
                        && by_pid.is_none_or(|pid| id(&r, "replica_pid") == Some(pid.to_string()))
                });
                if heard {
                    return begun;
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        } else {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(tokio::time::Instant::now() < deadline, "no audio reached the voice floor within {within:?}");
    }
}

/// Whether a receipt carries a code.
pub fn has_code(r: &v1::Receipt, code: &str) -> bool {
    r.codes.iter().any(|c| c == code)
}

/// A TCP relay in front of nats-server that the test can cut: every connection through it
/// closed, and new ones refused, until it is mended. What a process sees when its network to
/// NATS fails while the server and everyone else carry on.
pub struct Relay {
    port: u16,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
    links: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::AbortHandle>>>,
    _accepting: clankie_http::Aborting,
}

impl Relay {
    /// A relay to nats-server on `to` (a loopback port).
    pub async fn start(to: u16) -> Relay {
        use std::sync::atomic::Ordering;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let links: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::AbortHandle>>> = Default::default();
        let (c, l) = (cut.clone(), links.clone());
        let accepting = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if c.load(Ordering::SeqCst) {
                    continue;
                }
                let link = tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(("127.0.0.1", to)).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                l.lock().unwrap().push(link.abort_handle());
            }
        });
        Relay { port, cut, links, _accepting: clankie_http::Aborting(accepting) }
    }

    /// The URL a process connects to NATS through.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Closes every connection through the relay and refuses new ones.
    pub fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::SeqCst);
        for link in self.links.lock().unwrap().drain(..) {
            link.abort();
        }
    }

    /// Lets connections through again.
    pub fn mend(&self) {
        self.cut.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}
