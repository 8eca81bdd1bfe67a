//! The voice room's audio body: songbird's [`Driver`] run standalone, outside the shard's process.
//!
//! The gateway holds the Discord shard; it forwards the bot's voice state and every voice server
//! update over NATS, and the voice-floor service assembles a [`Connection`] from them. The body
//! connects the driver with it, decodes what each person says to mono 16 kHz PCM, cuts it into
//! [`Segment`]s attributed by the SSRC→user map that speaking updates build, and plays PCM into the
//! room. It knows nothing of floors or words: what it hears leaves it only as [`BodyEvent`]s.
//!
//! The driver speaks `wss://` only. A voice server with a private certificate (the loopback
//! Discord's) is trusted through `SSL_CERT_FILE`, which songbird's connector re-reads on each
//! connect; real Discord needs no setting.

pub mod dave;
pub mod drops;

use std::collections::HashMap;
use std::num::NonZeroU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use songbird::driver::DecodeMode;
use songbird::events::{CoreEvent, Event, EventContext, EventHandler, TrackEvent};
use songbird::input::{Input, RawAdapter};
use songbird::packet::{Packet as _, PacketSize as _};
use songbird::{Config, ConnectionInfo, Driver};
use tokio::sync::{mpsc, oneshot};

pub use songbird;

/// The rate of every PCM buffer the body hands out.
pub const HEARD_RATE: u32 = 16_000;

/// Samples in one 20 ms tick at [`HEARD_RATE`].
const TICK_SAMPLES: usize = (HEARD_RATE as usize) / 50;

/// The close code a connect failed on, if the voice socket was closed with one. songbird
/// keeps its socket error type private; its `Debug` names the code.
fn closed_with(e: &songbird::error::ConnectionError) -> Option<u16> {
    let text = format!("{e:?}");
    let (_, rest) = text.split_once("WsClosed(Some(")?;
    let digits: String = rest.chars().skip_while(|c| !c.is_ascii_digit()).take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Why the body could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("voice connection failed: {0}")]
    Connect(#[from] songbird::error::ConnectionError),
    /// Close 4017: the voice server wants DAVE (end-to-end encryption) at a version this build's
    /// songbird does not offer. Trying again cannot help until the build changes.
    #[error("the voice server closed with 4017: it requires DAVE end-to-end encryption at a version this build does not offer")]
    DaveRequired,
    #[error("a voice connection needs non-zero ids (guild {guild}, channel {channel}, user {user})")]
    ZeroId { guild: u64, channel: u64, user: u64 },
    #[error("the driver dropped the track before it ended")]
    TrackLost,
}

/// What a voice connection is made of: the bot's own voice state (session, channel) and the
/// latest voice server update (endpoint, token).
#[derive(Clone, PartialEq, Eq)]
pub struct Connection {
    pub guild_id: u64,
    pub channel_id: u64,
    pub user_id: u64,
    pub session_id: String,
    /// `host:port` of the voice server, without a scheme.
    pub endpoint: String,
    pub token: String,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token is a credential: never printed.
        f.debug_struct("Connection")
            .field("guild_id", &self.guild_id)
            .field("channel_id", &self.channel_id)
            .field("user_id", &self.user_id)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl Connection {
    fn info(&self) -> Result<ConnectionInfo, BodyError> {
        let zero = || BodyError::ZeroId { guild: self.guild_id, channel: self.channel_id, user: self.user_id };
        Ok(ConnectionInfo {
            channel_id: NonZeroU64::new(self.channel_id).ok_or_else(zero)?.into(),
            endpoint: self.endpoint.clone(),
            guild_id: NonZeroU64::new(self.guild_id).ok_or_else(zero)?.into(),
            session_id: self.session_id.clone(),
            token: self.token.clone(),
            user_id: NonZeroU64::new(self.user_id).ok_or_else(zero)?.into(),
        })
    }
}

/// One person's stretch of speech, from the first packet to the end of their turn.
#[derive(Debug, Clone)]
pub struct Segment {
    pub user_id: u64,
    pub ssrc: u32,
    /// Mono 16-bit PCM at [`HEARD_RATE`].
    pub pcm: Vec<i16>,
    pub started: Instant,
    pub ended: Instant,
    /// What ended it.
    pub ended_by: TurnEnd,
}

/// What ended a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnEnd {
    /// The turn detector heard a finished turn after a short pause.
    Finished,
    /// The silence bound, with no turn detector.
    Silence,
    /// The silence bound, after the detector heard the turn as unfinished.
    SilenceAfterUnfinished,
    /// The silence bound, because the detector failed or had not answered by then.
    DetectorUnavailable,
    /// The longest segment.
    Longest,
    /// The speaker's stream went away.
    Gone,
}

impl TurnEnd {
    /// A content-free code for receipts.
    pub fn code(self) -> &'static str {
        match self {
            TurnEnd::Finished => "turn_finished",
            TurnEnd::Silence => "silence",
            TurnEnd::SilenceAfterUnfinished => "silence_after_unfinished",
            TurnEnd::DetectorUnavailable => "turn_detector_unavailable",
            TurnEnd::Longest => "longest",
            TurnEnd::Gone => "gone",
        }
    }
}

/// Tells a finished turn from a pause in the middle of one, by how the speech so far sounds
/// (Smart Turn, for one). Asked after a short silence; the silence bound ends a turn whatever
/// it says, or when it is slow or down.
#[async_trait::async_trait]
pub trait TurnDetector: Send + Sync {
    /// Whether the turn in `pcm` (mono 16-bit at [`HEARD_RATE`], its last seconds) of the
    /// speaker on stream `ssrc` sounds finished. The detector may keep at most one piece of work
    /// per speaker (the speech service transcribes the turn early), so it is told whose turn it is.
    async fn finished(&self, ssrc: u32, pcm: Vec<i16>) -> Result<bool, String>;
}

/// The audio a turn detector judges: the last 8 s, as Smart Turn was trained.
const TURN_WINDOW: usize = 8 * HEARD_RATE as usize;

impl Segment {
    /// Its length as audio.
    pub fn duration(&self) -> Duration {
        Duration::from_secs_f64(self.pcm.len() as f64 / f64::from(HEARD_RATE))
    }
}

/// What happens to the body, in order.
#[derive(Debug)]
pub enum BodyEvent {
    /// The driver connected (or connected again after a fresh op 4).
    Connected { ssrc: u32 },
    /// The driver resumed or reconnected by itself (close codes 4009 and 4015).
    Reconnected { ssrc: u32 },
    /// The driver is gone; only a new op 4 (a new session or server update) brings it back.
    Disconnected { reason: String },
    /// A person has been speaking for the barge-in threshold (once per utterance): if he is
    /// speaking too, he should stop.
    SpeechStarted { user_id: u64 },
    /// A person spoke and paused.
    Heard(Segment),
    /// The call's DAVE state changed: a new epoch, privacy code or protocol version.
    Dave(dave::DaveState),
}

/// How the body cuts speech.
#[derive(Debug, Clone, Copy)]
pub struct BodyConfig {
    /// Speech shorter than this is noise: it is not a segment (it stays as pre-roll).
    pub speech_start: Duration,
    /// A pause this long ends a segment, whatever the turn detector says: the silence bound.
    pub end_of_speech: Duration,
    /// A pause this long asks the turn detector (when there is one) whether the turn is over.
    pub turn_silence: Duration,
    /// Audio from just before a segment opened (noise too short to be speech) that it keeps.
    pub pre_roll: Duration,
    /// A person speaking this long raises [`BodyEvent::SpeechStarted`].
    pub barge_in: Duration,
    /// A segment is cut here even without a pause, so a monologue cannot grow without bound.
    pub longest_segment: Duration,
    /// How long a (re)connect may take before it fails.
    pub connect_timeout: Duration,
    /// The AEAD mode asked for (the voice server offers both `_rtpsize` modes; AES-GCM is Discord's preferred).
    pub crypto_mode: songbird::driver::CryptoMode,
    /// The voice activity detector's score (0–1) from which a packet counts as speech: Discord
    /// clients send whatever passes their noise gate, so a packet alone proves nothing.
    pub vad_threshold: f32,
    /// How much a speaker's loudness must vary (the standard deviation of 20 ms levels, in dB,
    /// over 400 ms) for voice to count: speech rises and falls with its syllables, while held
    /// tones, which the detector takes for voice, stay level.
    pub min_modulation_db: f32,
}

impl Default for BodyConfig {
    fn default() -> Self {
        BodyConfig {
            speech_start: Duration::from_millis(200),
            end_of_speech: Duration::from_millis(400),
            turn_silence: Duration::from_millis(200),
            pre_roll: Duration::from_millis(300),
            barge_in: Duration::from_millis(500),
            longest_segment: Duration::from_secs(15),
            connect_timeout: Duration::from_secs(10),
            crypto_mode: songbird::driver::CryptoMode::Aes256Gcm,
            vad_threshold: 0.5,
            min_modulation_db: 1.5,
        }
    }
}

struct Speaking {
    user_id: u64,
    pcm: Vec<i16>,
    started: Instant,
    quiet_ticks: u32,
    voiced_ticks: u32,
    /// Ticks since its first voiced one, voiced or not.
    ticks: u32,
    /// The audible ticks that led into it (at most [`ONSET_TICKS`]), which count towards barge-in.
    onset: u32,
    /// The current pause's number: a verdict on an earlier one is stale.
    pause: u32,
    /// Whether the turn detector was asked about the current pause.
    asked: bool,
    announced: bool,
    /// The loudness of every tick heard in it, for the segment's own modulation.
    levels: Levels,
}

/// Running statistics of 20 ms loudness levels, in dB.
#[derive(Default, Clone, Copy)]
struct Levels {
    n: u32,
    sum: f64,
    sum_sq: f64,
}

impl Levels {
    fn add(&mut self, db: f32) {
        self.n += 1;
        self.sum += f64::from(db);
        self.sum_sq += f64::from(db) * f64::from(db);
    }

    fn deviation(&self) -> f32 {
        if self.n == 0 {
            return 0.0;
        }
        let mean = self.sum / f64::from(self.n);
        (self.sum_sq / f64::from(self.n) - mean * mean).max(0.0).sqrt() as f32
    }
}

/// A tick's loudness in dB (of 16-bit full scale squared, plus one so silence is 0).
fn level_db(pcm: &[i16]) -> f32 {
    let power = pcm.iter().map(|&s| f32::from(s).powi(2)).sum::<f32>() / pcm.len().max(1) as f32;
    10.0 * (power + 1.0).log10()
}

/// Audible ticks before a voice is recognised that count as part of it: 80 ms, the frames the
/// detector needs at a voice's onset.
const ONSET_TICKS: u32 = 4;
/// A tick quieter than this ([`level_db`]'s scale: an RMS of about 30 in 16-bit samples) is no
/// onset of anything.
const AUDIBLE_DB: f32 = 30.0;

/// Ticks of loudness a speaker's modulation is judged over: 400 ms.
const MODULATION_TICKS: usize = 20;

#[derive(Default)]
struct Ears {
    users: HashMap<u32, u64>,
    speaking: HashMap<u32, Speaking>,
    /// Per SSRC, the audio just before any speech (noise, or speech not yet long enough),
    /// kept as the next segment's pre-roll.
    pre_roll: HashMap<u32, std::collections::VecDeque<i16>>,
    /// Per SSRC, the voice activity detector that tells its speech from its noise.
    vad: HashMap<u32, Vad>,
    /// Per SSRC, the audible ticks just before now that the detector did not call voice: the
    /// onset of a voice, which it needs a few frames of to recognise.
    onset: HashMap<u32, u32>,
    /// Per SSRC, the turn detector's verdict on a pause (its number): finished or not, or failed.
    verdicts: HashMap<u32, (u32, Result<bool, ()>)>,
    /// Per SSRC, the Opus decoder of its stream (mono, at [`HEARD_RATE`]).
    decoders: HashMap<u32, opus2::Decoder>,
}

impl Ears {
    /// A received packet's audio, mono at [`HEARD_RATE`]; `None` when it will not decode.
    fn decode(&mut self, ssrc: u32, packet: &songbird::events::context_data::RtpData, suffix: usize) -> Option<Vec<i16>> {
        let frame = opus_frame(&packet.packet, suffix)?;
        let decoder = match self.decoders.entry(ssrc) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => v.insert(opus2::Decoder::new(HEARD_RATE, opus2::Channels::Mono).ok()?),
        };
        // Up to 120 ms, Opus's longest packet.
        let mut out = vec![0i16; HEARD_RATE as usize / 1000 * 120];
        match decoder.decode(frame, &mut out, false) {
            Ok(n) => {
                out.truncate(n);
                Some(out)
            }
            Err(_) => {
                drops::count(drops::Drop::BadOpus);
                None
            }
        }
    }

    /// A tick's audio for a packet that did not come in time: the decoder's loss concealment,
    /// which carries the voice on for the tick, as songbird's own decoding did. Without it a
    /// lost packet in the middle of a word would be a tick of quiet, and a loaded machine's
    /// late packets would end turns early. `None` before the stream's first packet.
    fn conceal(&mut self, ssrc: u32) -> Option<Vec<i16>> {
        let decoder = self.decoders.get_mut(&ssrc)?;
        let mut out = vec![0i16; TICK_SAMPLES];
        let n = decoder.decode(&[], &mut out, false).ok()?;
        out.truncate(n);
        Some(out)
    }
}

/// The Opus frame a received packet carries: after the RTP header (and extension), before the
/// transport's tag and nonce (`suffix` bytes), without RTP padding and without DAVE's trailer.
///
/// songbird 0.6.1 finds padding and the DAVE frame's end when it decrypts, but decodes from the
/// stored packet with neither taken off; Discord's clients pad a few percent of their packets.
///
/// songbird 0.6.1 decrypts a DAVE frame in place but decodes it at its encrypted length, so its
/// decoder also reads the 12 or so stale bytes of the trailer, which garbles every CELT-coded
/// frame (music, tones, much wideband speech). The plaintext is shorter by exactly the trailer,
/// whose size byte (just before the `0xFAFA` marker) the in-place copy left untouched. songbird
/// keeps no frame it could not decrypt, so a marked frame here is one it decrypted.
fn opus_frame(packet: &[u8], suffix: usize) -> Option<&[u8]> {
    let (header, extension, padded) = {
        let rtp = songbird::packet::rtp::RtpPacket::new(packet)?;
        (packet.len() - rtp.payload().len(), rtp.get_extension() != 0, rtp.get_padding() != 0)
    };
    let mut body = packet.get(header..packet.len().checked_sub(suffix)?)?;
    if padded {
        // RFC 3550 5.1: the last octet counts the padding, itself included.
        let count = usize::from(*body.last()?);
        body = body.get(..body.len().checked_sub(count.max(1))?)?;
    }
    if extension {
        let skip = songbird::packet::rtp::RtpExtensionPacket::new(body).map(|e| e.packet_size())?;
        body = body.get(skip..)?;
    }
    if body.len() >= 11 && body.ends_with(&[0xFA, 0xFA]) {
        let trailer = usize::from(body[body.len() - 3]);
        if (11..=body.len()).contains(&trailer) {
            body = &body[..body.len() - trailer];
        }
    }
    (!body.is_empty()).then_some(body)
}

/// Samples earshot judges at once: 16 ms at [`HEARD_RATE`].
const VAD_FRAME: usize = 256;

/// One speaker's voice activity detector (earshot's small network, weights in the crate).
struct Vad {
    detector: Box<earshot::Detector>,
    /// Samples waiting for a whole frame.
    carry: Vec<i16>,
    /// The last frame's score, for a tick that completed no frame.
    score: f32,
    /// The loudness of this speaker's last ticks heard.
    recent: std::collections::VecDeque<f32>,
}

impl Vad {
    fn new() -> Vad {
        Vad { detector: Box::default(), carry: Vec::with_capacity(2 * VAD_FRAME), score: 0.0, recent: Default::default() }
    }

    /// Whether a tick of `pcm` is voice: the detector hears speech in it and, once there is
    /// 400 ms to judge by, the speaker's loudness moves as speech does.
    fn voiced(&mut self, pcm: &[i16], config: &BodyConfig) -> bool {
        let score = self.score(pcm);
        self.recent.push_back(level_db(pcm));
        while self.recent.len() > MODULATION_TICKS {
            self.recent.pop_front();
        }
        let mut window = Levels::default();
        self.recent.iter().for_each(|&db| window.add(db));
        let modulated = self.recent.len() < MODULATION_TICKS || window.deviation() >= config.min_modulation_db;
        score >= config.vad_threshold && modulated
    }

    /// The highest speech score among the frames `pcm` completes.
    fn score(&mut self, pcm: &[i16]) -> f32 {
        self.carry.extend_from_slice(pcm);
        let mut best: Option<f32> = None;
        let mut at = 0;
        while self.carry.len() - at >= VAD_FRAME {
            let score = self.detector.predict_i16(&self.carry[at..at + VAD_FRAME]);
            best = Some(best.map_or(score, |b: f32| b.max(score)));
            at += VAD_FRAME;
        }
        self.carry.drain(..at);
        if let Some(best) = best {
            self.score = best;
        }
        self.score
    }
}

struct Listener {
    ears: Arc<Mutex<Ears>>,
    events: mpsc::UnboundedSender<BodyEvent>,
    config: BodyConfig,
    turns: Option<Arc<dyn TurnDetector>>,
    /// Numbers pauses across every speaker and segment, so a late verdict never matches another.
    pauses: Arc<std::sync::atomic::AtomicU32>,
}

impl Listener {
    fn tick(&self, tick: &songbird::events::context_data::VoiceTick) {
        let mut ears = self.ears.lock().unwrap_or_else(|p| p.into_inner());
        let ears = &mut *ears;
        let now = Instant::now();
        let ticks = |d: Duration| (d.as_millis() / 20).max(1) as u32;
        let (quiet_limit, start_ticks, barge_ticks, turn_ticks) = (
            ticks(self.config.end_of_speech),
            ticks(self.config.speech_start),
            ticks(self.config.barge_in),
            ticks(self.config.turn_silence),
        );
        let longest = (self.config.longest_segment.as_secs_f64() * f64::from(HEARD_RATE)) as usize;
        let pre_roll = (self.config.pre_roll.as_secs_f64() * f64::from(HEARD_RATE)) as usize;
        let mut done = Vec::new();
        for (ssrc, data) in &tick.speaking {
            let Some(user_id) = ears.users.get(ssrc).copied() else {
                if data.packet.is_some() {
                    drops::count(drops::Drop::UnknownSsrc);
                }
                continue;
            };
            // Speech is what the detector hears as speech; a packet of noise is a quiet tick.
            let decoded = match &data.packet {
                Some(p) => ears.decode(*ssrc, p, self.config.crypto_mode.payload_suffix_len()),
                None => ears.conceal(*ssrc),
            };
            let heard = decoded.as_deref();
            let voiced = heard.is_some_and(|pcm| ears.vad.entry(*ssrc).or_insert_with(Vad::new).voiced(pcm, &self.config));
            if !voiced && !ears.speaking.contains_key(ssrc) {
                let onset = ears.onset.entry(*ssrc).or_default();
                *onset = if heard.is_some_and(|pcm| level_db(pcm) > AUDIBLE_DB) { (*onset + 1).min(ONSET_TICKS) } else { 0 };
                if let Some(pcm) = heard {
                    let ring = ears.pre_roll.entry(*ssrc).or_default();
                    ring.extend(pcm.iter().copied());
                    while ring.len() > pre_roll {
                        ring.pop_front();
                    }
                }
                continue;
            }
            let entry = ears.speaking.entry(*ssrc).or_insert_with(|| Speaking {
                user_id,
                pcm: ears.pre_roll.remove(ssrc).map(Vec::from).unwrap_or_default(),
                started: now - Duration::from_millis(20),
                quiet_ticks: 0,
                voiced_ticks: 0,
                ticks: 0,
                onset: ears.onset.remove(ssrc).unwrap_or(0),
                pause: self.pauses.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                asked: false,
                announced: false,
                levels: Levels::default(),
            });
            if let Some(pcm) = heard {
                entry.levels.add(level_db(pcm));
            }
            entry.ticks += 1;
            if voiced {
                if entry.quiet_ticks > 0 {
                    entry.pause = self.pauses.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    entry.asked = false;
                }
                entry.quiet_ticks = 0;
                entry.voiced_ticks += 1;
                // Voiced means heard: a tick without audio (none decoded, none concealed) is quiet.
                entry.pcm.extend_from_slice(heard.unwrap_or_default());
                // Speech that has gone on for the threshold, voiced for most of it: the short
                // unvoiced ticks inside words and between them are part of speaking.
                if !entry.announced && entry.onset + entry.ticks >= barge_ticks && entry.voiced_ticks * 4 >= entry.ticks * 3 {
                    entry.announced = true;
                    let _ = self.events.send(BodyEvent::SpeechStarted { user_id });
                }
            } else {
                // Noise between words stays in the segment, as the pause it is.
                if let Some(pcm) = heard {
                    entry.pcm.extend_from_slice(pcm);
                }
                entry.quiet_ticks += 1;
            }
            if entry.pcm.len() >= longest {
                done.push((*ssrc, TurnEnd::Longest));
            }
        }
        for ssrc in &tick.silent {
            ears.onset.remove(ssrc);
            if let Some(s) = ears.speaking.get_mut(ssrc) {
                s.ticks += 1;
                s.quiet_ticks += 1;
            }
        }
        let (speaking, verdicts) = (&mut ears.speaking, &ears.verdicts);
        for (ssrc, s) in speaking.iter_mut() {
            if s.quiet_ticks == 0 || done.iter().any(|(d, _)| d == ssrc) {
                continue;
            }
            let verdict = verdicts.get(ssrc).filter(|(pause, _)| *pause == s.pause).map(|(_, v)| *v);
            if let Some(turns) = &self.turns
                && !s.asked
                && s.quiet_ticks >= turn_ticks
                && s.voiced_ticks >= start_ticks
            {
                s.asked = true;
                let recent = s.pcm[s.pcm.len().saturating_sub(TURN_WINDOW)..].to_vec();
                let (turns, ears, ssrc, pause) = (turns.clone(), self.ears.clone(), *ssrc, s.pause);
                tokio::spawn(async move {
                    let verdict = turns.finished(ssrc, recent).await.map_err(|e| tracing::warn!(error = %e, "the turn detector failed"));
                    ears.lock().unwrap_or_else(|p| p.into_inner()).verdicts.insert(ssrc, (pause, verdict));
                });
            }
            if verdict == Some(Ok(true)) {
                done.push((*ssrc, TurnEnd::Finished));
            } else if s.quiet_ticks >= quiet_limit {
                let why = match (&self.turns, verdict) {
                    (None, _) => TurnEnd::Silence,
                    (Some(_), Some(Ok(false))) => TurnEnd::SilenceAfterUnfinished,
                    (Some(_), _) => TurnEnd::DetectorUnavailable,
                };
                done.push((*ssrc, why));
            }
        }
        let gone: Vec<u32> = ears.speaking.keys().filter(|s| !tick.speaking.contains_key(s) && !tick.silent.contains(s)).copied().collect();
        done.extend(gone.into_iter().map(|s| (s, TurnEnd::Gone)));
        for (ssrc, ended_by) in done {
            ears.verdicts.remove(&ssrc);
            let Some(s) = ears.speaking.remove(&ssrc) else { continue };
            if s.voiced_ticks < start_ticks {
                // Too short to be speech: it becomes pre-roll for whatever this person says next.
                let ring = ears.pre_roll.entry(ssrc).or_default();
                ring.extend(s.pcm);
                while ring.len() > pre_roll {
                    ring.pop_front();
                }
                continue;
            }
            if s.levels.deviation() < self.config.min_modulation_db {
                // Level the whole way through: a held tone the detector took for voice, not speech.
                metrics::counter!("clankie_voice_noise_segments_total").increment(1);
                continue;
            }
            let segment = Segment { user_id: s.user_id, ssrc, pcm: s.pcm, started: s.started, ended: now, ended_by };
            let _ = self.events.send(BodyEvent::Heard(segment));
        }
    }
}

#[async_trait::async_trait]
impl EventHandler for Listener {
    async fn act(&self, ctx: &EventContext<'_>) -> Option<Event> {
        match ctx {
            EventContext::VoiceTick(tick) => self.tick(tick),
            EventContext::SpeakingStateUpdate(s) => {
                if let Some(user) = s.user_id {
                    self.ears.lock().unwrap_or_else(|p| p.into_inner()).users.insert(s.ssrc, user.0);
                }
            }
            EventContext::ClientDisconnect(c) => {
                let mut ears = self.ears.lock().unwrap_or_else(|p| p.into_inner());
                ears.users.retain(|_, u| *u != c.user_id.0);
                let Ears { users, vad, pre_roll, onset, verdicts, decoders, .. } = &mut *ears;
                vad.retain(|ssrc, _| users.contains_key(ssrc));
                decoders.retain(|ssrc, _| users.contains_key(ssrc));
                onset.retain(|ssrc, _| users.contains_key(ssrc));
                verdicts.retain(|ssrc, _| users.contains_key(ssrc));
                pre_roll.retain(|ssrc, _| users.contains_key(ssrc));
            }
            EventContext::DriverConnect(c) => {
                let _ = self.events.send(BodyEvent::Connected { ssrc: c.ssrc });
            }
            EventContext::DriverReconnect(c) => {
                let _ = self.events.send(BodyEvent::Reconnected { ssrc: c.ssrc });
            }
            // A failed connect is reported by the connect's own future.
            EventContext::DriverDisconnect(d) if d.kind == songbird::events::context_data::DisconnectKind::Connect => {}
            EventContext::DriverDisconnect(d) => {
                let reason = match d.reason {
                    Some(r) => format!("{:?}/{r:?}", d.kind),
                    None => format!("{:?}", d.kind),
                };
                let _ = self.events.send(BodyEvent::Disconnected { reason });
            }
            _ => {}
        }
        None
    }
}

struct TrackDone(Mutex<Option<oneshot::Sender<()>>>);

#[async_trait::async_trait]
impl EventHandler for TrackDone {
    async fn act(&self, _ctx: &EventContext<'_>) -> Option<Event> {
        if let Some(tx) = self.0.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = tx.send(());
        }
        Some(Event::Cancel)
    }
}

struct Shared(Arc<TrackDone>);

#[async_trait::async_trait]
impl EventHandler for Shared {
    async fn act(&self, ctx: &EventContext<'_>) -> Option<Event> {
        self.0.act(ctx).await
    }
}

/// The audio body of one voice room.
pub struct Body {
    driver: Driver,
    ears: Arc<Mutex<Ears>>,
    config: BodyConfig,
    current: Option<Connection>,
    events: mpsc::UnboundedSender<BodyEvent>,
    /// Forwards the connection's DAVE state as [`BodyEvent::Dave`]; one per connection.
    dave_watch: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Body {
    fn drop(&mut self) {
        if let Some(watch) = self.dave_watch.take() {
            watch.abort();
        }
    }
}

impl Body {
    /// A body not yet connected, and the stream of what happens to it; turns end on silence.
    pub fn new(config: BodyConfig) -> (Body, mpsc::UnboundedReceiver<BodyEvent>) {
        Body::with_turns(config, None)
    }

    /// A body whose turns end when `turns` hears them finished after a short pause, or on the
    /// silence bound.
    pub fn with_turns(config: BodyConfig, turns: Option<Arc<dyn TurnDetector>>) -> (Body, mpsc::UnboundedReceiver<BodyEvent>) {
        // Three packets of jitter buffer (60 ms) rather than five: barge-in is judged on what has
        // come out of it, and loopback and LAN jitter fit.
        let driver_config = Config::default()
            // The body decodes itself (`opus_frame`): songbird 0.6.1 garbles DAVE frames it decodes.
            .decode_mode(DecodeMode::Decrypt)
            .playout_buffer_length(std::num::NonZeroU8::new(3).unwrap_or(std::num::NonZeroU8::MIN))
            .driver_timeout(Some(config.connect_timeout))
            .crypto_mode(config.crypto_mode);
        let mut driver = Driver::new(driver_config);
        let ears = Arc::new(Mutex::new(Ears::default()));
        let (tx, rx) = mpsc::unbounded_channel();
        let pauses = Arc::new(std::sync::atomic::AtomicU32::new(0));
        for event in [
            CoreEvent::VoiceTick,
            CoreEvent::SpeakingStateUpdate,
            CoreEvent::ClientDisconnect,
            CoreEvent::DriverConnect,
            CoreEvent::DriverReconnect,
            CoreEvent::DriverDisconnect,
        ] {
            driver.add_global_event(
                event.into(),
                Listener { ears: ears.clone(), events: tx.clone(), config, turns: turns.clone(), pauses: pauses.clone() },
            );
        }
        (Body { driver, ears, config, current: None, events: tx, dave_watch: None }, rx)
    }

    /// Connects with `connection`. The same connection again is a no-op; a changed one (a new
    /// session, endpoint or token) reconnects, and a newer connect discards an older one still
    /// under way. The future does not borrow the body, so a caller can wait for it elsewhere;
    /// after a failure, call [`Body::forget`] if this connection is still the current one.
    pub fn connect(&mut self, connection: &Connection) -> impl Future<Output = Result<(), BodyError>> + use<> {
        let attempt = if self.current.as_ref() == Some(connection) {
            None
        } else {
            match connection.info() {
                Ok(info) => {
                    self.current = Some(connection.clone());
                    self.ears.lock().unwrap_or_else(|p| p.into_inner()).speaking.clear();
                    self.watch_dave(connection.channel_id);
                    Some(Ok(self.driver.connect(info)))
                }
                Err(e) => Some(Err(e)),
            }
        };
        async move {
            match attempt {
                None => Ok(()),
                Some(Ok(connect)) => {
                    connect.await.map_err(|e| if closed_with(&e) == Some(4017) { BodyError::DaveRequired } else { e.into() })
                }
                Some(Err(e)) => Err(e),
            }
        }
    }

    /// Starts forwarding the channel's DAVE state, from nothing, for a new connection.
    fn watch_dave(&mut self, channel: u64) {
        if let Some(old) = self.dave_watch.take() {
            old.abort();
        }
        dave::reset(channel);
        let mut states = dave::watch(channel);
        let events = self.events.clone();
        self.dave_watch = Some(tokio::spawn(async move {
            while states.changed().await.is_ok() {
                let state = states.borrow_and_update().clone();
                if events.send(BodyEvent::Dave(state)).is_err() {
                    break;
                }
            }
        }));
    }

    /// The DAVE state of its call now (protocol version 0 when it is not connected).
    pub fn dave(&self) -> dave::DaveState {
        self.current.as_ref().map(|c| dave::state(c.channel_id)).unwrap_or_default()
    }

    /// The connection it was last asked to use, if it still holds it.
    pub fn connection(&self) -> Option<&Connection> {
        self.current.as_ref()
    }

    /// Forgets the connection after the driver dropped it, so the next `connect` is not a no-op.
    pub fn forget(&mut self) {
        self.current = None;
    }

    /// Leaves the voice channel.
    pub fn leave(&mut self) {
        self.current = None;
        self.driver.leave();
    }

    /// How the body cuts speech.
    pub fn config(&self) -> BodyConfig {
        self.config
    }

    /// Plays mono PCM at `rate` into the room; resolves when it has been played out.
    pub fn play(&mut self, pcm: &[i16], rate: u32) -> impl Future<Output = Result<(), BodyError>> + use<> {
        let bytes = clankie_pcm::f32le(pcm);
        let input: Input = RawAdapter::new(std::io::Cursor::new(bytes), rate, 1).into();
        let track = self.driver.play_input(input);
        let (tx, rx) = oneshot::channel();
        let done = TrackDone(Mutex::new(Some(tx)));
        let done = Arc::new(done);
        let added = track
            .add_event(Event::Track(TrackEvent::End), Shared(done.clone()))
            .and_then(|()| track.add_event(Event::Track(TrackEvent::Error), Shared(done)));
        async move {
            added.map_err(|_| BodyError::TrackLost)?;
            rx.await.map_err(|_| BodyError::TrackLost)
        }
    }

    /// Whom each SSRC is speaking for, as speaking updates and client disconnects left it.
    pub fn speakers(&self) -> Vec<(u32, u64)> {
        let mut speakers: Vec<(u32, u64)> =
            self.ears.lock().unwrap_or_else(|p| p.into_inner()).users.iter().map(|(s, u)| (*s, *u)).collect();
        speakers.sort_unstable();
        speakers
    }

    /// Stops whatever is playing.
    pub fn stop(&mut self) {
        self.driver.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A received packet as songbird 0.6.1 keeps one it DAVE-decrypted in place: the plaintext
    /// at the front, then the stale rest of the trailer (ending in its size byte and the marker),
    /// then the transport's 16-byte tag and 4-byte nonce.
    fn packet_as_songbird_keeps_it(opus: &[u8], trailer: usize) -> Vec<u8> {
        let mut packet = vec![0x80, 0x78, 0, 1, 0, 0, 0, 0, 0, 0, 0, 9];
        packet.extend_from_slice(opus);
        packet.extend((0..trailer - 3).map(|i| i as u8 ^ 0x5A));
        packet.extend([trailer as u8, 0xFA, 0xFA]);
        packet.extend([0u8; 20]);
        packet
    }

    #[test]
    fn dave_frames_songbird_decrypted_in_place_are_decoded_without_their_stale_trailer() {
        let mut encoder = opus2::Encoder::new(48_000, opus2::Channels::Mono, opus2::Application::Audio).unwrap();
        let tone: Vec<i16> = (0..960).map(|i| ((i as f64 * 0.11).sin() * 9000.0 + (i as f64 * 0.37).sin() * 4000.0) as i16).collect();
        let opus = encoder.encode_vec(&tone, 4000).unwrap();
        let suffix = songbird::driver::CryptoMode::Aes256Gcm.payload_suffix_len();
        for trailer in [12, 13] {
            let packet = packet_as_songbird_keeps_it(&opus, trailer);
            assert_eq!(opus_frame(&packet, suffix), Some(&opus[..]), "a {trailer}-byte trailer comes off");
        }
        // Padding (the P bit, its count last) comes off before the trailer.
        let mut padded = packet_as_songbird_keeps_it(&opus, 12);
        let tail = padded.split_off(padded.len() - 20);
        padded[0] |= 0x20;
        padded.extend([0, 0, 3]);
        padded.extend(tail);
        assert_eq!(opus_frame(&padded, suffix), Some(&opus[..]), "padding and trailer come off");
        // A plain frame (no marker) is what it is.
        let mut plain = vec![0x80, 0x78, 0, 1, 0, 0, 0, 0, 0, 0, 0, 9];
        plain.extend_from_slice(&opus);
        plain.extend([0u8; 20]);
        assert_eq!(opus_frame(&plain, suffix), Some(&opus[..]));
        // What decoding with the trailer on does to a CELT frame: the audio is not the tone's.
        let mut decoder = opus2::Decoder::new(48_000, opus2::Channels::Mono).unwrap();
        let mut clean = vec![0i16; 960];
        decoder.decode(&opus, &mut clean, false).unwrap();
        let mut decoder = opus2::Decoder::new(48_000, opus2::Channels::Mono).unwrap();
        let mut garbled = vec![0i16; 960];
        let with_trailer = packet_as_songbird_keeps_it(&opus, 12);
        decoder.decode(&with_trailer[12..with_trailer.len() - suffix], &mut garbled, false).unwrap();
        assert_ne!(clean, garbled, "the stale trailer changes what a CELT frame decodes to");
    }
}
