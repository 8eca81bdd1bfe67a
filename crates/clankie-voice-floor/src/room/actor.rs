//! The room actor's state and its one loop: what a room is made from, what it tells its keeper,
//! and how its mailboxes, inputs, body and runs are served in turn. Each job the loop hands on
//! has a file of its own beside this one.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clankie_bus::Bus;
use clankie_proto::v1;
use clankie_speech::{SpeechToText, TextToSpeech};
use clankie_store::{RoomLease, Store};
use clankie_trace::Stage;
use clankie_voice_body::{BodyConfig, Connection};
use tokio::sync::{mpsc, oneshot, watch};

use super::Key;
use super::body::{BodyCommand, BodyReport, body_task};
use super::ears::Ears;
use super::lease::{keep_room_lease, vouch_for};
use super::publisher::Publisher;
use super::transcriber::transcriber;
use crate::floor::{FloorRules, FloorState};
use crate::ring::RingLine;
use crate::run::{RunMsg, Said};
use crate::voice_floor::{RoomInputs, VoiceError, VoiceFloor};

/// Deliveries a room remembers for its dedup window, at most.
pub(super) const REMEMBERED_DELIVERIES: usize = 512;
/// How often a room reads his names from the persona in the background, for the inputs whose
/// own read takes longer than [`RULES_READ`].
const RULES_REFRESH: Duration = Duration::from_secs(5);
/// The longest an input waits for the persona's names before the last ones read decide.
pub(super) const RULES_READ: Duration = Duration::from_millis(200);
/// Utterances a room holds for its transcriber; past this the oldest is dropped (a slow
/// speech engine must not grow memory, nor answer speech long gone).
pub(super) const EARS_HELD: usize = 8;

/// What the owner (the keeper) hears of a room's voice connection.
pub(crate) enum Link {
    Connected,
    Resumed,
    Dropped(String),
    Failed(String),
    /// The voice server closed with 4017: it wants a DAVE version this build does not offer.
    DaveRequired,
    /// The call's end-to-end encryption moved: a new epoch or privacy code.
    Dave(clankie_voice_body::dave::DaveState),
}

/// Everything a room actor is made from.
pub(crate) struct RoomParts {
    pub key: Key,
    pub lease: RoomLease,
    pub lease_ttl: Duration,
    pub floor: Arc<VoiceFloor>,
    pub store: Store,
    pub body: BodyConfig,
    pub tts: Arc<dyn TextToSpeech>,
    pub stt: Arc<dyn SpeechToText>,
    pub turns: Option<Arc<dyn clankie_voice_body::TurnDetector>>,
    pub transcriptions: usize,
    /// Display names of the guild's members, by user id.
    pub names: HashMap<u64, String>,
    /// Where the room reports its connection to the keeper, with its key and epoch.
    pub links: mpsc::UnboundedSender<(Key, i64, Link)>,
    /// The people forgotten so far: their lines from before the forget never enter the ring.
    pub forgotten: clankie_proto::audience::Forgotten,
}

/// What the keeper's handle tells its room.
pub(super) enum RoomMsg {
    Connect(Connection),
    Live(oneshot::Sender<Result<(), VoiceError>>),
    Named(u64, String),
    Forgotten(u64, i64),
}

/// One room's actor: everything of the room, owned by the one task that serves it.
pub(super) struct RoomActor {
    pub(super) key: Key,
    pub(super) lease: RoomLease,
    pub(super) lease_ttl: Duration,
    pub(super) floor: Arc<VoiceFloor>,
    pub(super) bus: Bus,
    pub(super) store: Store,
    pub(super) vouching: Arc<AtomicBool>,
    pub(super) names: HashMap<u64, String>,
    pub(super) links: mpsc::UnboundedSender<(Key, i64, Link)>,
    pub(super) body: mpsc::UnboundedSender<BodyCommand>,
    pub(super) body_events: mpsc::UnboundedReceiver<BodyReport>,
    pub(super) mouth: mpsc::UnboundedSender<Said>,
    pub(super) ears: Ears,
    pub(super) inputs: Option<RoomInputs>,
    pub(super) ring: VecDeque<RingLine>,
    pub(super) forgotten: clankie_proto::audience::Forgotten,
    pub(super) state: FloorState,
    pub(super) seen: VecDeque<(String, Instant)>,
    /// The live run's steers, while it takes more inputs.
    pub(super) run: Option<mpsc::UnboundedSender<v1::RoomInput>>,
    /// Every run of the room, the one settling included: they end with the room.
    pub(super) runs: tokio::task::JoinSet<()>,
    pub(super) run_tx: mpsc::UnboundedSender<RunMsg>,
    pub(super) run_rx: mpsc::UnboundedReceiver<RunMsg>,
    /// Where someone spoke over each recent run's answer: the sentence cut (its index among the
    /// run's sentences) and how much of it played.
    pub(super) cuts: HashMap<String, (usize, f64)>,
    /// The sentences each recent run handed to the body, for a cut that comes after the run's
    /// line is in the ring.
    pub(super) sentences: HashMap<String, Vec<(usize, String)>>,
    /// Transcripts, decisions, receipts and ring rows, sent in order off the loop.
    pub(super) publisher: Publisher,
    /// The floor's rules (his names from the persona), refreshed off the loop.
    pub(super) rules: watch::Receiver<FloorRules>,
    /// Each recent utterance's spoken turn, from her speech's end until his first audio (or the
    /// floor's decision not to answer): the root of its trace.
    pub(super) turns: HashMap<String, Stage>,
    _lease_keeping: clankie_http::Aborting,
    _transcriber: clankie_http::Aborting,
    /// Not aborted with the room: it ends once the room is gone and what it queued is sent.
    _publishing: tokio::task::JoinHandle<()>,
    _rules: clankie_http::Aborting,
}

impl RoomActor {
    /// The room's actor, with its lease keeping, body, transcriber, publisher and rules
    /// already running.
    pub(super) fn start(parts: RoomParts, fenced: watch::Sender<bool>) -> RoomActor {
        let RoomParts { key, lease, lease_ttl, floor, store, body, tts, stt, turns, transcriptions, names, links, forgotten } = parts;
        let bus = floor.bus().clone();
        let vouching = Arc::new(AtomicBool::new(false));
        let lease_keeping = tokio::spawn(keep_room_lease(store.clone(), bus.clone(), lease.clone(), lease_ttl, vouching.clone(), fenced));
        let (body_tx, commands) = mpsc::unbounded_channel();
        let (mouth, speech) = mpsc::unbounded_channel();
        let (reports, body_events) = mpsc::unbounded_channel();
        tokio::spawn(body_task(body, tts, turns, commands, speech, reports));
        let ears = Ears::new(EARS_HELD);
        // A transcriber that panicked is started again on the same ears: the room never goes deaf.
        let (t_bus, t_ears, parts) = (bus.clone(), ears.clone(), floor.parts());
        let transcriber = tokio::spawn(async move {
            let make = || transcriber(t_bus.clone(), stt.clone(), key, transcriptions, t_ears.clone());
            clankie_http::supervise("voice.transcriber", &parts, |_| {}, make).await
        });
        let (run_tx, run_rx) = mpsc::unbounded_channel();
        let (publisher, publishing) = Publisher::start();
        let (rules_tx, rules) = watch::channel(floor.config().rules.clone());
        let rules_floor = floor.clone();
        let parts = floor.parts();
        let rules_task = tokio::spawn(clankie_http::supervise::keep_running("voice.rules", parts, move || {
            let (rules_tx, rules_floor) = (rules_tx.clone(), rules_floor.clone());
            async move {
                loop {
                    let _ = rules_tx.send(rules_floor.rules().await);
                    tokio::time::sleep(RULES_REFRESH).await;
                }
            }
        }));
        RoomActor {
            key,
            lease,
            lease_ttl,
            floor,
            bus,
            store,
            vouching,
            names,
            links,
            body: body_tx,
            body_events,
            mouth,
            ears,
            inputs: None,
            ring: VecDeque::new(),
            forgotten,
            state: FloorState::default(),
            seen: VecDeque::new(),
            run: None,
            runs: tokio::task::JoinSet::new(),
            run_tx,
            run_rx,
            cuts: HashMap::new(),
            sentences: HashMap::new(),
            publisher,
            rules,
            turns: HashMap::new(),
            _lease_keeping: clankie_http::Aborting(lease_keeping),
            _transcriber: clankie_http::Aborting(transcriber),
            _publishing: publishing,
            _rules: clankie_http::Aborting(rules_task),
        }
    }

    /// Whether this owned room has no audio body connected: what the voice alert reads.
    pub(super) fn bodiless(&self, without: bool) {
        metrics::gauge!("clankie_voice_room_without_body", "channel" => self.key.1.to_string()).set(if without { 1.0 } else { 0.0 });
    }

    /// Serves the room until its handle or its body is gone.
    pub(super) async fn serve(mut self, mut inbox: mpsc::UnboundedReceiver<RoomMsg>) {
        self.bodiless(true);
        self.serve_until_gone(&mut inbox).await;
        // No longer this replica's room: not a room without a body.
        self.bodiless(false);
    }

    async fn serve_until_gone(&mut self, inbox: &mut mpsc::UnboundedReceiver<RoomMsg>) {
        loop {
            tokio::select! {
                msg = inbox.recv() => match msg {
                    Some(RoomMsg::Connect(connection)) => {
                        let _ = self.body.send(BodyCommand::Connect(connection));
                    }
                    Some(RoomMsg::Live(reply)) => {
                        let _ = reply.send(self.go_live().await);
                    }
                    Some(RoomMsg::Named(user, name)) => {
                        self.names.insert(user, name);
                    }
                    Some(RoomMsg::Forgotten(user, at_ms)) => self.forget(user, at_ms),
                    None => break,
                },
                d = next_input(&mut self.inputs) => match d {
                    Ok(d) => {
                        let span = tracing::info_span!("delivery", otel.name = "voice.room_input", delivery_id = %d.event.delivery_id);
                        d.traced(&span);
                        tracing::Instrument::instrument(self.hear(d.event.clone()), span).await;
                        let _ = d.ack().await;
                    }
                    Err(e) => {
                        tracing::error!(error = %e, guild = self.key.0, channel = self.key.1, "voice room input failed; trying again");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                },
                report = self.body_events.recv() => match report {
                    Some(report) => self.body_report(report).await,
                    None => {
                        tracing::error!(part = "voice.body", guild = self.key.0, channel = self.key.1, "the voice room's body ended; the room ends and is taken again");
                        break;
                    }
                },
                Some(msg) = self.run_rx.recv() => match msg {
                    RunMsg::RoomBlock(reply) => {
                        let _ = reply.send(self.room_block());
                    }
                    RunMsg::Ended(end) => self.run_ended(end).await,
                },
                Some(_) = self.runs.join_next(), if !self.runs.is_empty() => {}
            }
        }
        let _ = self.body.send(BodyCommand::Leave);
    }

    async fn go_live(&mut self) -> Result<(), VoiceError> {
        if self.inputs.is_some() {
            return Ok(());
        }
        let (guild, channel) = self.key;
        let inputs = self.floor.room_inputs(guild, channel).await?;
        match self.store.ring(guild, channel, self.floor.config().ring_size as i64).await {
            Ok(rows) => self.ring = rows.into_iter().map(RingLine::from).collect(),
            Err(e) => tracing::warn!(error = %e, "the room's stored conversation is unavailable; it starts afresh here"),
        }
        self.inputs = Some(inputs);
        self.vouching.store(true, Ordering::SeqCst);
        vouch_for(&self.bus, self.key, self.lease.epoch, self.lease_ttl);
        Ok(())
    }
}

/// The next room input, once the room is live; never, before.
async fn next_input(inputs: &mut Option<RoomInputs>) -> Result<clankie_bus::Delivery<v1::RoomInput>, clankie_bus::BusError> {
    match inputs {
        Some(inputs) => inputs.next().await,
        None => std::future::pending().await,
    }
}
