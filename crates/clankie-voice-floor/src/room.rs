//! One voice room as one task: the room actor.
//!
//! The keeper ([`crate::rooms`]) spawns a room actor when it takes a room's lease and holds only
//! its [`RoomHandle`]; dropping the handle ends the room. The actor owns everything of the room:
//! its lease keeping (a child task, so nothing the actor waits on can hold up a renewal), its
//! audio body (the ears that cut utterances and the mouth that plays his sentences), its
//! transcriber, and once live its input consumers, its ring, its floor state and its persona
//! runs. A run holds the actor's run mailbox, never the room's state: it asks for the room block
//! and reports its end, and the actor writes the ring. A room reopened is a new actor; its runs
//! end with it.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clankie_agent::silence;
use clankie_bus::{Bus, MsgId, TraceContext, now_ms};
use clankie_proto::{LaneKey, ReceiptKind, Subject, v1};
use clankie_speech::{Audio, SpeechToText, TextToSpeech};
use clankie_store::{RoomLease, Store, StoreError};
use clankie_trace::Stage;
use clankie_voice_body::{Body, BodyConfig, BodyEvent, Connection};
use tokio::sync::{mpsc, oneshot, watch};

use crate::floor::{self, FloorRules, FloorState};
use crate::{RingLine, RoomInputs, VoiceError, VoiceFloor, heard_of, sentence_of};

pub(crate) type Key = (u64, u64);

/// Runs a room remembers the sentences and cuts of.
const REMEMBERED_ANSWERS: usize = 16;
/// Deliveries a room remembers for its dedup window, at most.
const REMEMBERED_DELIVERIES: usize = 512;
/// How often a room reads his names from the persona in the background, for the inputs whose
/// own read takes longer than [`RULES_READ`].
const RULES_REFRESH: Duration = Duration::from_secs(5);
/// The longest an input waits for the persona's names before the last ones read decide.
const RULES_READ: Duration = Duration::from_millis(200);
/// Utterances a room holds for its transcriber; past this the oldest is dropped (a slow
/// speech engine must not grow memory, nor answer speech long gone).
const EARS_HELD: usize = 8;

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

enum RoomMsg {
    Connect(Connection),
    Live(oneshot::Sender<Result<(), VoiceError>>),
    Named(u64, String),
    Forgotten(u64, i64),
}

/// The keeper's handle on one room actor. Dropping it ends the room, its body and its runs.
pub(crate) struct RoomHandle {
    pub lease: RoomLease,
    /// Set by the room's lease keeping when another replica took the room.
    pub fenced: watch::Receiver<bool>,
    mailbox: mpsc::UnboundedSender<RoomMsg>,
    _actor: clankie_http::Aborting,
}

impl RoomHandle {
    /// Spawns the room's actor, which starts keeping its lease and its body at once.
    pub fn spawn(parts: RoomParts) -> RoomHandle {
        let (mailbox, inbox) = mpsc::unbounded_channel();
        let (fenced_tx, fenced) = watch::channel(false);
        let lease = parts.lease.clone();
        let actor = tokio::spawn(RoomActor::start(parts, fenced_tx).serve(inbox));
        RoomHandle { lease, fenced, mailbox, _actor: clankie_http::Aborting(actor) }
    }

    /// Connects (or reconnects) the room's body.
    pub fn connect(&self, connection: Connection) {
        let _ = self.mailbox.send(RoomMsg::Connect(connection));
    }

    /// Makes the room live: its input consumers open, its stored conversation is read back, and its
    /// session is vouched for at each renewal from now on.
    pub async fn go_live(&self) -> Result<(), VoiceError> {
        let (reply, answer) = oneshot::channel();
        let _ = self.mailbox.send(RoomMsg::Live(reply));
        answer.await.unwrap_or(Err(VoiceError::Gone))
    }

    /// A member's display name, for the utterances they speak.
    pub fn named(&self, user: u64, name: String) {
        let _ = self.mailbox.send(RoomMsg::Named(user, name));
    }

    /// A person was forgotten at `at_ms`: the room drops their lines from its ring, and any
    /// of theirs from before it that reaches the room later.
    pub fn forgotten(&self, user: u64, at_ms: i64) {
        let _ = self.mailbox.send(RoomMsg::Forgotten(user, at_ms));
    }

    /// Whether a part of the room ended without being told to: its actor (a panic, or its body
    /// gone) or its lease keeping (a panic, not a fence). Such a room hears nobody; the keeper
    /// lets go of it and takes it again.
    pub fn broken(&self) -> bool {
        self._actor.0.is_finished() || (self.fenced.has_changed().is_err() && !*self.fenced.borrow())
    }
}

/// What a persona run tells its room.
pub(crate) enum RunMsg {
    /// The room block as the room has it now.
    RoomBlock(oneshot::Sender<String>),
    /// The run is over: the room writes his line and hands on what was steered in too late.
    Ended(RunEnd),
}

/// How a run ended.
pub(crate) struct RunEnd {
    pub first: v1::RoomInput,
    pub covered: Vec<v1::RoomInput>,
    pub verdict: v1::FloorVerdict,
    /// The sentences handed to the body, with the model call (round) that wrote each.
    pub said: Vec<(usize, String)>,
    /// Everything said in one line, or the failure code.
    pub result: Result<String, &'static str>,
    /// The run's steers: what was sent to it after its last look is handed on.
    pub steers: mpsc::UnboundedReceiver<v1::RoomInput>,
}

/// A run's way back to its room.
pub(crate) struct RunRoom {
    pub key: Key,
    pub mouth: mpsc::UnboundedSender<Said>,
    room: mpsc::UnboundedSender<RunMsg>,
}

/// A line for the body to say, with the trace of the run that wrote it: its synthesis and
/// playback are stages of the spoken turn.
pub(crate) struct Said {
    pub speak: v1::Speak,
    pub trace: TraceContext,
}

impl Said {
    /// `speak`, in the trace the caller is in.
    pub fn now(speak: v1::Speak) -> Said {
        Said { speak, trace: TraceContext::current() }
    }
}

impl RunRoom {
    /// The room block as the room has it now (empty when the room is gone).
    pub async fn room_block(&self) -> String {
        let (reply, block) = oneshot::channel();
        let _ = self.room.send(RunMsg::RoomBlock(reply));
        block.await.unwrap_or_default()
    }

    /// Reports the run's end to the room.
    pub fn ended(&self, end: RunEnd) {
        let _ = self.room.send(RunMsg::Ended(end));
    }
}

struct RoomActor {
    key: Key,
    lease: RoomLease,
    lease_ttl: Duration,
    floor: Arc<VoiceFloor>,
    bus: Bus,
    store: Store,
    vouching: Arc<AtomicBool>,
    names: HashMap<u64, String>,
    links: mpsc::UnboundedSender<(Key, i64, Link)>,
    body: mpsc::UnboundedSender<BodyCommand>,
    body_events: mpsc::UnboundedReceiver<BodyReport>,
    mouth: mpsc::UnboundedSender<Said>,
    ears: Ears,
    inputs: Option<RoomInputs>,
    ring: VecDeque<RingLine>,
    forgotten: clankie_proto::audience::Forgotten,
    state: FloorState,
    seen: VecDeque<(String, Instant)>,
    /// The live run's steers, while it takes more inputs.
    run: Option<mpsc::UnboundedSender<v1::RoomInput>>,
    /// Every run of the room, the one settling included: they end with the room.
    runs: tokio::task::JoinSet<()>,
    run_tx: mpsc::UnboundedSender<RunMsg>,
    run_rx: mpsc::UnboundedReceiver<RunMsg>,
    /// Where someone spoke over each recent run's answer: the sentence cut (its index among the
    /// run's sentences) and how much of it played.
    cuts: HashMap<String, (usize, f64)>,
    /// The sentences each recent run handed to the body, for a cut that comes after the run's
    /// line is in the ring.
    sentences: HashMap<String, Vec<(usize, String)>>,
    /// Transcripts, decisions, receipts and ring rows, sent in order off the loop.
    publisher: Publisher,
    /// The floor's rules (his names from the persona), refreshed off the loop.
    rules: watch::Receiver<FloorRules>,
    /// Each recent utterance's spoken turn, from her speech's end until his first audio (or the
    /// floor's decision not to answer): the root of its trace.
    turns: HashMap<String, Stage>,
    _lease_keeping: clankie_http::Aborting,
    _transcriber: clankie_http::Aborting,
    /// Not aborted with the room: it ends once the room is gone and what it queued is sent.
    _publishing: tokio::task::JoinHandle<()>,
    _rules: clankie_http::Aborting,
}

impl RoomActor {
    fn start(parts: RoomParts, fenced: watch::Sender<bool>) -> RoomActor {
        let RoomParts { key, lease, lease_ttl, floor, store, body, tts, stt, turns, transcriptions, names, links, forgotten } = parts;
        let bus = floor.bus.clone();
        let vouching = Arc::new(AtomicBool::new(false));
        let lease_keeping = tokio::spawn(keep_room_lease(store.clone(), bus.clone(), lease.clone(), lease_ttl, vouching.clone(), fenced));
        let (body_tx, commands) = mpsc::unbounded_channel();
        let (mouth, speech) = mpsc::unbounded_channel();
        let (reports, body_events) = mpsc::unbounded_channel();
        tokio::spawn(body_task(body, tts, turns, commands, speech, reports));
        let ears = Ears::new(EARS_HELD);
        // A transcriber that panicked is started again on the same ears: the room never goes deaf.
        let (t_bus, t_ears, parts) = (bus.clone(), ears.clone(), floor.parts.clone());
        let transcriber = tokio::spawn(async move {
            let make = || transcriber(t_bus.clone(), stt.clone(), key, transcriptions, t_ears.clone());
            clankie_http::supervise("voice.transcriber", &parts, |_| {}, make).await
        });
        let (run_tx, run_rx) = mpsc::unbounded_channel();
        let (publisher, publishing) = Publisher::start();
        let (rules_tx, rules) = watch::channel(floor.config.rules.clone());
        let rules_floor = floor.clone();
        let parts = floor.parts.clone();
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
    fn bodiless(&self, without: bool) {
        metrics::gauge!("clankie_voice_room_without_body", "channel" => self.key.1.to_string()).set(if without { 1.0 } else { 0.0 });
    }

    async fn serve(mut self, mut inbox: mpsc::UnboundedReceiver<RoomMsg>) {
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

    /// An edit or a deletion of a line typed in the room's chat: the ring's line is rewritten or
    /// dropped here, by the room's owner, and its stored copy with it, so the next room block
    /// says what the chat says now. A change never reaches the floor's rules.
    fn change_line(&mut self, change: v1::RoomInput) {
        let target = change.changed_message_id.to_string();
        let delete = change.change() == v1::MessageChange::Delete;
        let lines = if delete {
            let before = self.ring.len();
            self.ring.retain(|l| l.delivery_id != target);
            before - self.ring.len()
        } else {
            let mut n = 0;
            for line in self.ring.iter_mut().filter(|l| l.delivery_id == target) {
                line.text = change.text.clone();
                n += 1;
            }
            n
        };
        let (store, floor) = (self.store.clone(), self.floor.clone());
        self.publisher.send("ring", async move {
            let stored = if delete { store.withdraw_ring_lines(&target).await } else { store.edit_ring_lines(&target, &change.text).await };
            if let Err(e) = stored {
                tracing::warn!(error = %e, "a changed line's stored copy was not changed; the room's ring has it right");
            }
            floor
                .receipt("voice.changed", &change, |r| {
                    r.with_code(if delete { "delete" } else { "edit" })
                        .with_id("message", change.changed_message_id)
                        .with_count("ring_lines", lines as i64)
                })
                .await;
        });
    }

    /// A forgotten person's lines leave the ring here, by the room's owner, so no later room
    /// block holds them; their stored copies go after the room's pending writes (one of theirs
    /// may still be on its way to the store). His own lines stay.
    fn forget(&mut self, user: u64, at_ms: i64) {
        self.forgotten.record(user, at_ms);
        let before = self.ring.len();
        self.ring.retain(|l| l.is_him || l.author_id != user);
        let dropped = before - self.ring.len();
        let (store, bus, key) = (self.store.clone(), self.bus.clone(), self.key);
        self.publisher.send("ring", async move {
            let stored = store.withdraw_ring_lines_of(user).await;
            if let Err(e) = &stored {
                tracing::warn!(error = %e, "a forgotten person's stored ring lines were not removed; the room's ring has none");
            }
            room_receipt(&bus, &format!("forget:{user}"), "voice.forgotten", key, |r| {
                r.with_id("user", user)
                    .with_count("ring_lines", dropped as i64)
                    .with_count("stored_lines", *stored.as_ref().unwrap_or(&0) as i64)
            });
        });
    }

    async fn go_live(&mut self) -> Result<(), VoiceError> {
        if self.inputs.is_some() {
            return Ok(());
        }
        let (guild, channel) = self.key;
        let inputs = self.floor.room_inputs(guild, channel).await?;
        match self.store.ring(guild, channel, self.floor.config.ring_size as i64).await {
            Ok(rows) => self.ring = rows.into_iter().map(RingLine::from).collect(),
            Err(e) => tracing::warn!(error = %e, "the room's stored conversation is unavailable; it starts afresh here"),
        }
        self.inputs = Some(inputs);
        self.vouching.store(true, Ordering::SeqCst);
        vouch_for(&self.bus, self.key, self.lease.epoch, self.lease_ttl);
        Ok(())
    }

    async fn body_report(&mut self, report: BodyReport) {
        let link = match report {
            BodyReport::Body(BodyEvent::Connected { .. }) => Link::Connected,
            BodyReport::Body(BodyEvent::Reconnected { .. }) => Link::Resumed,
            BodyReport::Body(BodyEvent::Disconnected { reason }) => Link::Dropped(reason),
            BodyReport::ConnectFailed(why) => Link::Failed(why),
            BodyReport::DaveRequired => Link::DaveRequired,
            BodyReport::Body(BodyEvent::Dave(state)) => Link::Dave(state),
            BodyReport::Body(BodyEvent::Heard(segment)) => return self.heard_audio(segment).await,
            BodyReport::FirstAudio { delivery_id, at } => {
                // The first sentence of a run's answer: the spoken turn it answers is over.
                if let Some((run, 0)) = sentence_of(&delivery_id)
                    && let Some(mut turn) = self.turns.remove(run)
                {
                    turn.event_at("first_audio", at);
                    turn.end_at(at);
                }
                return;
            }
            BodyReport::Playback { delivery_id, code, played_ms, audio_ms } => {
                if code == "cut_off" {
                    let played = if audio_ms > 0 { played_ms as f64 / audio_ms as f64 } else { 0.0 };
                    self.cut_off(&delivery_id, played).await;
                }
                room_receipt(&self.bus, &delivery_id, "voice.playback", self.key, |r| {
                    r.with_code(code).with_count("played_ms", played_ms).with_count("audio_ms", audio_ms)
                });
                return;
            }
            BodyReport::Body(_) => return,
        };
        self.bodiless(!matches!(link, Link::Connected | Link::Resumed | Link::Dave(_)));
        let _ = self.links.send((self.key, self.lease.epoch, link));
    }

    /// An utterance heard: to the room's transcriber, whose words come back as one room input
    /// through the same path as typed lines.
    async fn heard_audio(&mut self, segment: clankie_voice_body::Segment) {
        let key = self.key;
        let started_ms = now_ms() - i64::try_from(segment.ended.elapsed().as_millis() + segment.duration().as_millis()).unwrap_or(0);
        let utterance = format!("utt:{}:{}:{}:{}", key.0, key.1, segment.ssrc, started_ms);
        let audio_ms = i64::try_from(segment.duration().as_millis()).unwrap_or(i64::MAX);
        metrics::counter!("clankie_voice_utterances_total").increment(1);
        let epoch = self.lease.epoch;
        let ended_by = segment.ended_by.code();
        // The spoken turn's trace begins where her speech ended as she sent it: the jitter buffer
        // held its last packets before the body heard the quiet, and the turn detector's wait
        // (or the silence bound) came after.
        let heard_until = clankie_trace::wall_time_of(segment.speech_ended);
        let spoke_until = heard_until - clankie_voice_body::PLAYOUT_DELAY;
        let mut turn = Stage::begin("voice.turn", &TraceContext::default(), spoke_until);
        turn.count("audio_ms", audio_ms);
        let trace = turn.context();
        clankie_trace::record("voice.reception", &trace, spoke_until, heard_until);
        clankie_trace::record("voice.turn_detection", &trace, heard_until, std::time::SystemTime::now());
        if self.turns.len() >= REMEMBERED_DELIVERIES {
            forget_oldest_turn(&mut self.turns);
        }
        self.turns.insert(utterance.clone(), turn);
        let trace_id = trace.trace_id().to_owned();
        room_receipt(&self.bus, &utterance, "voice.heard", key, |r| {
            let r = r.with_id("speaker", segment.user_id).with_code(ended_by).with_count("audio_ms", audio_ms).with_count("epoch", epoch);
            if trace_id.is_empty() { r } else { r.with_id("trace", trace_id) }
        });
        let author_name = self.names.get(&segment.user_id).cloned().unwrap_or_else(|| format!("user {}", segment.user_id));
        let dropped = self.ears.hear(Utterance {
            id: utterance,
            speaker: segment.user_id,
            author_name,
            audio: Audio { pcm: segment.pcm, rate: clankie_voice_body::HEARD_RATE },
            trace,
        });
        if let Some(old) = dropped {
            metrics::counter!("clankie_voice_utterances_dropped_total").increment(1);
            tracing::warn!(guild = key.0, channel = key.1, held = EARS_HELD, "the transcriber is behind; the oldest utterance was dropped");
            room_receipt(&self.bus, &old.id, "voice.heard_dropped", key, |r| {
                r.with_id("speaker", old.speaker).with_count("held", EARS_HELD as i64)
            });
        }
    }

    /// Whether `delivery_id` is new inside the dedup window (and the last deliveries it holds).
    fn first_sighting(&mut self, delivery_id: &str) -> bool {
        let window = self.floor.config.dedup_window;
        while self.seen.front().is_some_and(|(_, at)| at.elapsed() >= window) || self.seen.len() > REMEMBERED_DELIVERIES {
            self.seen.pop_front();
        }
        if self.seen.iter().any(|(s, _)| s == delivery_id) {
            return false;
        }
        self.seen.push_back((delivery_id.to_owned(), Instant::now()));
        true
    }

    /// The one room-input path, whatever body heard the line. It decides and hands on; it never
    /// waits for an answer, so the room keeps hearing while its persona thinks or asks.
    async fn hear(&mut self, input: v1::RoomInput) {
        clankie_settings::fault::panic_once("voice.room");
        let floor = self.floor.clone();
        if !self.first_sighting(&input.delivery_id) {
            let dup = input.clone();
            self.publisher.send("receipt", async move { floor.receipt("voice.duplicate", &dup, |r| r).await });
            return;
        }
        if input.change() != v1::MessageChange::None {
            return self.change_line(input);
        }
        let source = v1::RoomInputSource::try_from(input.source).unwrap_or(v1::RoomInputSource::Unspecified);
        // His names as the persona has them now (an alias added a moment ago wakes him), read
        // for at most RULES_READ; a store that slow leaves the last names read in force.
        let rules = match tokio::time::timeout(RULES_READ, floor.rules()).await {
            Ok(rules) => rules,
            Err(_) => self.rules.borrow().clone(),
        };
        let (verdict, reason) = tracing::info_span!("voice.floor").in_scope(|| floor::decide(&input, &self.state, &rules, Instant::now()));
        let addressed = matches!(verdict, v1::FloorVerdict::Wake);
        match source {
            v1::RoomInputSource::Text => {
                let (floor, typed) = (floor.clone(), input.clone());
                self.publisher.send("receipt", async move {
                    floor
                        .receipt("discord.voice.text_input", &typed, |r| {
                            r.with_id("author", typed.author_id)
                                .with_count("chars", typed.text.chars().count() as i64)
                                .with_flag("addressed", addressed)
                        })
                        .await
                });
            }
            _ => {
                let transcript = v1::Transcript {
                    delivery_id: input.delivery_id.clone(),
                    guild_id: input.guild_id,
                    channel_id: input.channel_id,
                    speaker_id: input.author_id,
                    text: input.text.clone(),
                    started_at_ms: input.received_at_ms,
                    ended_at_ms: input.received_at_ms,
                };
                let subject = Subject::VoiceTranscript { guild: self.key.0, channel: self.key.1 };
                let bus = self.bus.clone();
                self.publisher.send("transcript", async move {
                    if let Err(e) = bus.publish(&subject, &transcript, None).await {
                        tracing::warn!(error = %e, "transcript not published");
                    }
                });
            }
        }
        self.push_line(RingLine {
            delivery_id: input.delivery_id.clone(),
            source,
            author_id: input.author_id,
            author_name: input.author_name.clone(),
            is_him: false,
            text: input.text.clone(),
            at_ms: input.received_at_ms,
            cut_off: false,
        })
        .await;
        let decision = v1::FloorDecision {
            delivery_id: input.delivery_id.clone(),
            guild_id: self.key.0,
            channel_id: self.key.1,
            author_id: input.author_id,
            source: input.source,
            verdict: verdict as i32,
            reason: reason.to_owned(),
            decided_at_ms: now_ms(),
        };
        let id = MsgId::new(format!("floor:{}", input.delivery_id));
        let (bus, key, decided) = (self.bus.clone(), self.key, input.clone());
        self.publisher.send("decision", async move {
            if let Err(e) = bus.publish(&Subject::VoiceFloor { guild: key.0, channel: key.1 }, &decision, Some(&id)).await {
                tracing::warn!(error = %e, "floor decision not published");
            }
            floor.receipt("voice.floor", &decided, |r| r.with_code(verdict.as_str_name()).with_code(reason)).await;
        });
        if floor::responds(verdict) {
            self.hand_to_run(input, verdict);
        } else if let Some(turn) = self.turns.remove(&input.delivery_id) {
            // Not his to answer: the spoken turn ends at the floor's decision.
            turn.end_at(std::time::SystemTime::now());
        }
    }

    /// Steers `input` into the room's live run, or starts one with it.
    fn hand_to_run(&mut self, input: v1::RoomInput, verdict: v1::FloorVerdict) {
        let input = match self.run.as_ref() {
            Some(run) => match run.send(input) {
                Ok(()) => return,
                Err(back) => back.0,
            },
            None => input,
        };
        let (steer, steers) = mpsc::unbounded_channel();
        self.run = Some(steer);
        let room = RunRoom { key: self.key, mouth: self.mouth.clone(), room: self.run_tx.clone() };
        let span = tracing::info_span!("voice.persona", delivery_id = %input.delivery_id);
        self.runs.spawn(tracing::Instrument::instrument(self.floor.clone().run_room(room, input, verdict, steers), span));
    }

    /// A run is over. The actor is the only one that steers, so whatever it sent the run after the
    /// run's last look is still in the run's steers: it starts the next run.
    async fn run_ended(&mut self, end: RunEnd) {
        let RunEnd { first, covered, verdict, said, result, mut steers } = end;
        self.run = None;
        let mut leftovers = Vec::new();
        while let Ok(steered) = steers.try_recv() {
            leftovers.push(steered);
        }
        self.sentences.insert(first.delivery_id.clone(), said);
        forget_oldest(&mut self.sentences);
        if let Ok(text) = &result
            && !silence::is_silent(text)
            && !silence::strip_token(text).is_empty()
        {
            // Someone may have spoken over him already: the ring holds what the room heard.
            let (text, cut_off) = match (self.cuts.get(&first.delivery_id), self.sentences.get(&first.delivery_id)) {
                (Some(&(n, played)), Some(sentences)) => (heard_of(sentences, n, played), true),
                _ => (silence::strip_token(text), false),
            };
            self.push_line(RingLine {
                delivery_id: first.delivery_id.clone(),
                source: v1::RoomInputSource::Speech,
                author_id: 0,
                author_name: self.floor.config.bot_name.clone(),
                is_him: true,
                text,
                at_ms: now_ms(),
                cut_off,
            })
            .await;
            for input in &covered {
                self.state.last_exchange.insert(input.author_id, Instant::now());
            }
            if verdict == v1::FloorVerdict::Offer {
                self.state.last_offer = Some(Instant::now());
            }
        }
        for next in leftovers {
            self.hand_to_run(next, v1::FloorVerdict::Continue);
        }
    }

    /// Sentence `sentence` (a [`crate::sentence_id`]) of one of his answers was stopped by someone
    /// speaking over him after `said` of it (0 for one never played): the ring keeps only the
    /// words the room heard, marked as cut off, whether the answer's line is in it yet or not.
    async fn cut_off(&mut self, sentence: &str, said: f64) {
        let Some((answer, n)) = sentence_of(sentence) else { return };
        let cut = self.cuts.entry(answer.to_owned()).or_insert((n, said));
        if (n, said) < *cut {
            *cut = (n, said);
        }
        let (n, said) = *cut;
        forget_oldest(&mut self.cuts);
        let Some(sentences) = self.sentences.get(answer) else { return };
        let kept = heard_of(sentences, n, said);
        let Some(line) = self.ring.iter_mut().rev().find(|l| l.is_him && l.delivery_id == answer) else { return };
        line.text.clone_from(&kept);
        line.cut_off = true;
        // After the line's own row, through the same ordered publisher.
        let (store, lease, answer) = (self.store.clone(), self.lease.clone(), answer.to_owned());
        self.publisher.send("ring", async move {
            if let Err(e) = store.cut_ring(&lease, &answer, &kept).await {
                tracing::warn!(error = %e, "the cut-off line was not stored");
            }
        });
    }

    /// Adds a line to the ring, and to the store under the room's lease, so the conversation
    /// outlives this owner.
    async fn push_line(&mut self, line: RingLine) {
        if !line.is_him && self.forgotten.holds(line.author_id, line.at_ms) {
            return;
        }
        let row = clankie_store::RingRow {
            delivery_id: line.delivery_id.clone(),
            source: line.source as i32,
            author_id: line.author_id,
            author_name: line.author_name.clone(),
            is_him: line.is_him,
            text: line.text.clone(),
            cut_off: line.cut_off,
            at_ms: line.at_ms,
        };
        self.ring.push_back(line);
        while self.ring.len() > self.floor.config.ring_size {
            self.ring.pop_front();
        }
        let (store, lease) = (self.store.clone(), self.lease.clone());
        self.publisher.send("ring", async move {
            if let Err(e) = store.append_ring(&lease, &row).await {
                tracing::warn!(error = %e, "a line of the room's conversation was not stored");
            }
        });
    }

    fn room_block(&self) -> String {
        let lines: Vec<clankie_self::blocks::Line<'_>> = self
            .ring
            .iter()
            .map(|line| clankie_self::blocks::Line {
                said: clankie_self::blocks::Said { author_name: &line.author_name, author_id: line.author_id, text: &line.text },
                is_him: line.is_him,
                how: if line.source == v1::RoomInputSource::Text {
                    "typed"
                } else if line.cut_off {
                    "said, cut off"
                } else {
                    "said"
                },
            })
            .collect();
        clankie_self::blocks::room(&lines)
    }
}

/// Keeps a per-answer map to its last [`REMEMBERED_ANSWERS`] (answer ids grow with time).
/// Lets the oldest remembered turn go (utterance ids end in their start time): it ends now.
fn forget_oldest_turn(turns: &mut HashMap<String, Stage>) {
    let oldest = turns.keys().min_by_key(|id| id.rsplit(':').next().and_then(|t| t.parse::<i64>().ok()).unwrap_or(0)).cloned();
    if let Some(id) = oldest {
        turns.remove(&id);
    }
}

fn forget_oldest<V>(map: &mut HashMap<String, V>) {
    while map.len() > REMEMBERED_ANSWERS {
        let Some(oldest) = map.keys().min().cloned() else { return };
        map.remove(&oldest);
    }
}

/// The next room input, once the room is live; never, before.
async fn next_input(inputs: &mut Option<RoomInputs>) -> Result<clankie_bus::Delivery<v1::RoomInput>, clankie_bus::BusError> {
    match inputs {
        Some(inputs) => tokio::select! {
            d = inputs.typed.next() => d,
            d = inputs.bodies.next() => d,
        },
        None => std::future::pending().await,
    }
}

impl From<clankie_store::RingRow> for RingLine {
    fn from(r: clankie_store::RingRow) -> RingLine {
        RingLine {
            delivery_id: r.delivery_id,
            source: v1::RoomInputSource::try_from(r.source).unwrap_or(v1::RoomInputSource::Unspecified),
            author_id: r.author_id,
            author_name: r.author_name,
            is_him: r.is_him,
            text: r.text,
            at_ms: r.at_ms,
            cut_off: r.cut_off,
        }
    }
}

/// Keeps one room's lease: renews it every third of its time to live, on a task of its own,
/// and while the room is live vouches for its session (published off this path too). Reports a
/// fence on `fenced` and ends; a failed renewal (the database away) is tried again next tick.
async fn keep_room_lease(store: Store, bus: Bus, lease: RoomLease, ttl: Duration, vouching: Arc<AtomicBool>, fenced: watch::Sender<bool>) {
    let (guild, channel, epoch) = (lease.guild, lease.channel, lease.epoch);
    let mut tick = tokio::time::interval(ttl / 3);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        match store.renew_room(&lease, ttl).await {
            Ok(()) => {
                if vouching.load(Ordering::SeqCst) {
                    vouch_for(&bus, (guild, channel), epoch, ttl);
                }
            }
            Err(StoreError::Fenced { .. }) => {
                let _ = fenced.send(true);
                return;
            }
            Err(e) => tracing::warn!(error = %e, guild, channel, "voice room lease not renewed yet; trying again"),
        }
    }
}

/// The end-of-turn detector at `base` (the local speech service's Smart Turn). It must answer
/// within the silence bound to matter, so it gets two seconds at most.
pub(crate) fn turn_detector(base: &str) -> Result<Arc<dyn clankie_voice_body::TurnDetector>, clankie_speech::SpeechError> {
    Ok(Arc::new(SmartTurn(clankie_speech::openai::HttpTurnDetector::new(base, Duration::from_secs(2))?)))
}

struct SmartTurn(clankie_speech::openai::HttpTurnDetector);

#[async_trait::async_trait]
impl clankie_voice_body::TurnDetector for SmartTurn {
    async fn finished(&self, ssrc: u32, pcm: Vec<i16>) -> Result<bool, String> {
        let speaker = ssrc.to_string();
        self.0.finished(&Audio { pcm, rate: clankie_voice_body::HEARD_RATE }, Some(&speaker)).await.map_err(|e| e.code().to_owned())
    }
}

/// One utterance heard, waiting for its words.
struct Utterance {
    id: String,
    speaker: u64,
    author_name: String,
    audio: Audio,
    /// The spoken turn it begins.
    trace: TraceContext,
}

/// The utterances waiting for a room's transcriber, at most `held`: a new one past that drops
/// the oldest. Cheap to clone; the room's actor hears, its transcriber takes.
#[derive(Clone)]
struct Ears {
    inner: Arc<(std::sync::Mutex<EarsQueue>, tokio::sync::Notify)>,
}

struct EarsQueue {
    waiting: VecDeque<Utterance>,
    held: usize,
}

impl Ears {
    fn new(held: usize) -> Ears {
        let queue = EarsQueue { waiting: VecDeque::new(), held: held.max(1) };
        Ears { inner: Arc::new((std::sync::Mutex::new(queue), tokio::sync::Notify::new())) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, EarsQueue> {
        self.inner.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues an utterance; gives back the oldest one it dropped to make room.
    fn hear(&self, u: Utterance) -> Option<Utterance> {
        let dropped = {
            let mut q = self.lock();
            q.waiting.push_back(u);
            if q.waiting.len() > q.held { q.waiting.pop_front() } else { None }
        };
        self.inner.1.notify_one();
        dropped
    }

    /// How many wait now.
    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.lock().waiting.len()
    }

    /// The next utterance, oldest first (the transcriber ends with its room, aborted).
    async fn next(&self) -> Option<Utterance> {
        loop {
            let notified = self.inner.1.notified();
            if let Some(u) = self.lock().waiting.pop_front() {
                return Some(u);
            }
            notified.await;
        }
    }
}

/// A room's transcriber: at most `limit` utterances transcribed at once, and each one's words
/// enter the room in the order they were said, however long each took: a room input published
/// out of order would have the floor hear people out of order.
async fn transcriber(bus: Bus, stt: Arc<dyn SpeechToText>, key: Key, limit: usize, heard: Ears) {
    use futures::StreamExt as _;
    use tracing::Instrument as _;
    let mut running = futures::stream::FuturesOrdered::new();
    loop {
        tokio::select! {
            next = heard.next(), if running.len() < limit.max(1) => {
                let Some(u) = next else { break };
                clankie_settings::fault::panic_once("voice.transcriber");
                let stt = stt.clone();
                // A stage of the spoken turn, until its words are published as a room input.
                let span = tracing::info_span!("voice.transcribe", delivery_id = %u.id);
                u.trace.parent(&span);
                running.push_back(
                    async move {
                        let began = Instant::now();
                        let result = stt.transcribe(&u.audio).await;
                        (u, result, began.elapsed(), tracing::Span::current())
                    }
                    .instrument(span),
                );
            }
            Some((u, result, took, span)) = running.next() => publish_heard(&bus, key, u, result, took).instrument(span).await,
            else => break,
        }
    }
    while let Some((u, result, took, span)) = running.next().await {
        publish_heard(&bus, key, u, result, took).instrument(span).await;
    }
}

/// An utterance's transcription: its receipt, then its words as a room input.
async fn publish_heard(bus: &Bus, key: Key, u: Utterance, result: Result<String, clankie_speech::SpeechError>, took: Duration) {
    let took_ms = i64::try_from(took.as_millis()).unwrap_or(i64::MAX);
    let code = match &result {
        Ok(text) if text.trim().is_empty() => "empty",
        Ok(_) => "transcribed",
        Err(e) => e.code(),
    };
    let chars = result.as_ref().map(|t| t.chars().count() as i64).unwrap_or(0);
    if let Err(e) = &result {
        metrics::counter!("clankie_speech_errors_total", "stage" => "transcribe", "code" => e.code()).increment(1);
    }
    room_receipt(bus, &u.id, "voice.transcribed", key, |r| {
        r.with_id("speaker", u.speaker).with_code(code).with_count("chars", chars).with_count("took_ms", took_ms)
    });
    let Ok(text) = result else { return };
    if text.trim().is_empty() {
        return;
    }
    let input = v1::RoomInput {
        delivery_id: u.id.clone(),
        guild_id: key.0,
        channel_id: key.1,
        author_id: u.speaker,
        author_name: u.author_name,
        source: v1::RoomInputSource::Speech as i32,
        text,
        received_at_ms: now_ms(),
        ..Default::default()
    };
    let id = MsgId::new(format!("speech:{}", u.id));
    if let Err(e) = bus.publish(&Subject::VoiceInput { guild: key.0, channel: key.1 }, &input, Some(&id)).await {
        tracing::warn!(error = %e, "an utterance's room input was not published");
    }
}

/// Publishes a content-free receipt of a voice room (its lane, guild, channel and the replica's
/// pid) on a task of its own: a slow bus delays evidence, never the room or its lease.
pub(crate) fn room_receipt(bus: &Bus, delivery_id: &str, kind: &'static str, key: Key, build: impl FnOnce(v1::Receipt) -> v1::Receipt) {
    let Ok(kind) = ReceiptKind::new(kind) else { return };
    let lane = LaneKey::Voice { guild: key.0, channel: key.1 };
    let receipt = build(
        v1::Receipt::new(&kind, bus.service(), delivery_id, now_ms())
            .with_lane(&lane)
            .with_id("guild", key.0)
            .with_id("channel", key.1)
            .with_id("replica_pid", u64::from(std::process::id())),
    );
    let bus = bus.clone();
    tokio::spawn(async move {
        held_publish().await;
        if let Err(e) = bus.publish_receipt(&receipt).await {
            tracing::warn!(error = %e, "receipt not published");
        }
    });
}

/// The room's publishes, off its loop: one task sends them in the order they were made, so
/// the actor never waits on the bus (a leader election holds a publish for seconds) and what
/// it decided still reaches the bus in order. Bounded: past [`PUBLISHES_QUEUED`] waiting, a
/// publish is dropped, counted and logged rather than growing memory while the bus is away.
#[derive(Clone)]
struct Publisher {
    jobs: mpsc::Sender<futures::future::BoxFuture<'static, ()>>,
}

/// Publishes a room may have waiting for the bus before it drops new ones.
const PUBLISHES_QUEUED: usize = 1024;

impl Publisher {
    fn start() -> (Publisher, tokio::task::JoinHandle<()>) {
        let (jobs, mut rx) = mpsc::channel::<futures::future::BoxFuture<'static, ()>>(PUBLISHES_QUEUED);
        let task = tokio::spawn(async move {
            while let Some(job) = rx.recv().await {
                held_publish().await;
                job.await;
            }
        });
        (Publisher { jobs }, task)
    }

    fn send(&self, what: &'static str, job: impl std::future::Future<Output = ()> + Send + 'static) {
        if self.jobs.try_send(Box::pin(job)).is_err() {
            metrics::counter!("clankie_voice_publishes_dropped_total", "what" => what).increment(1);
            tracing::warn!(what, "the room's publishes are backed up; one was dropped");
        }
    }
}

/// The named wait a test sets (`CLANKIE_FAULT_HOLD=voice.publish=<ms>`) to make every voice-floor
/// publish as slow as one during a held stream leader.
async fn held_publish() {
    if let Some(held) = clankie_settings::fault::hold("voice.publish") {
        tokio::time::sleep(held).await;
    }
}

/// Vouches for the room's live session for one lease time from now: published on a task of its
/// own, so neither the room nor a renewal waits on the bus.
fn vouch_for(bus: &Bus, key: Key, epoch: i64, ttl: Duration) {
    let (guild, channel) = key;
    let session = v1::VoiceSession {
        guild_id: guild,
        channel_id: Some(channel),
        session_id: format!("voice-{guild}-{channel}-{epoch}"),
        updated_at_ms: now_ms(),
        live_until_ms: now_ms() + i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX),
    };
    let bus = bus.clone();
    tokio::spawn(async move {
        held_publish().await;
        if let Err(e) = bus.publish(&Subject::VoiceSession { guild }, &session, None).await {
            tracing::warn!(error = %e, "voice session not vouched for");
        }
    });
}

enum BodyCommand {
    Connect(Connection),
    Leave,
}

/// What the room's body reports to its room.
enum BodyReport {
    Body(BodyEvent),
    ConnectFailed(String),
    DaveRequired,
    /// His first audio of an answer left for the room (its sentence's id, and when).
    FirstAudio {
        delivery_id: String,
        at: std::time::SystemTime,
    },
    /// One of his lines was played out, cut off by someone speaking, or could not be spoken.
    Playback {
        delivery_id: String,
        code: &'static str,
        played_ms: i64,
        audio_ms: i64,
    },
}
/// Runs one room's audio body: connects when told, speaks what the room decides to say (one line
/// at a time, each synthesized off this loop), stops when a human speaks over him, and forwards
/// what happens to it.
async fn body_task(
    config: BodyConfig,
    tts: Arc<dyn TextToSpeech>,
    turns: Option<Arc<dyn clankie_voice_body::TurnDetector>>,
    mut commands: mpsc::UnboundedReceiver<BodyCommand>,
    mut speech: mpsc::UnboundedReceiver<Said>,
    events: mpsc::UnboundedSender<BodyReport>,
) {
    struct Playing {
        delivery_id: String,
        began: Instant,
        audio_ms: i64,
        cut: bool,
    }
    // The answer a sentence belongs to: its id up to the sentence number.
    fn answer_of(sentence: &str) -> &str {
        sentence.rsplit_once('/').map_or(sentence, |(answer, _)| answer)
    }
    // The answer being spoken (sentences still to come until its end), and the answers cut:
    // nothing more of a cut answer is played, whatever the run still writes.
    let mut answering: Option<String> = None;
    let mut cut_answers: std::collections::VecDeque<String> = std::collections::VecDeque::new();
    let (mut body, mut heard) = Body::with_turns(config, turns);
    let (done_tx, mut done) = mpsc::unbounded_channel::<(Connection, Result<(), clankie_voice_body::BodyError>)>();
    let (synth_tx, mut synthesized) = mpsc::unbounded_channel::<(String, Result<Audio, clankie_speech::SpeechError>, TraceContext)>();
    let (played_tx, mut played) = mpsc::unbounded_channel::<String>();
    let mut queue: std::collections::VecDeque<Said> = std::collections::VecDeque::new();
    let mut busy = false;
    let mut playing: Option<Playing> = None;
    let playback = |delivery_id: String, code: &'static str, played_ms: i64, audio_ms: i64| {
        let _ = events.send(BodyReport::Playback { delivery_id, code, played_ms, audio_ms });
    };
    loop {
        if !busy && let Some(Said { speak: next, trace }) = queue.pop_front() {
            busy = true;
            let (tts, synth_tx) = (tts.clone(), synth_tx.clone());
            let span = tracing::info_span!("voice.synthesize", delivery_id = %next.delivery_id);
            trace.parent(&span);
            tokio::spawn(tracing::Instrument::instrument(
                async move {
                    let result = tts.synthesize(&next.text).await;
                    let _ = synth_tx.send((next.delivery_id, result, TraceContext::current()));
                },
                span,
            ));
        }
        tokio::select! {
            command = commands.recv() => match command {
                Some(BodyCommand::Connect(connection)) => {
                    // Not awaited here: a newer connect (a changed server update) must not wait
                    // behind one that is still retrying; the driver discards the older attempt.
                    let attempt = body.connect(&connection);
                    let done_tx = done_tx.clone();
                    tokio::spawn(async move {
                        let _ = done_tx.send((connection, attempt.await));
                    });
                }
                Some(BodyCommand::Leave) | None => {
                    body.leave();
                    return;
                }
            },
            said = speech.recv() => match said {
                // An empty line ends its run: nothing more of any of its answers follows.
                Some(Said { speak, .. }) if speak.text.is_empty() => {
                    if answering.as_deref().is_some_and(|a| a.strip_prefix(speak.delivery_id.as_str()).is_some_and(|r| r.starts_with('~'))) {
                        answering = None;
                    }
                }
                Some(Said { speak, .. }) if cut_answers.iter().any(|a| a == answer_of(&speak.delivery_id)) => {
                    playback(speak.delivery_id, "cut_off", 0, 0);
                }
                Some(said) => {
                    answering = Some(answer_of(&said.speak.delivery_id).to_owned());
                    queue.push_back(said);
                }
                None => {
                    body.leave();
                    return;
                }
            },
            Some((connection, result)) = done.recv() => {
                if let Err(e) = result && body.connection() == Some(&connection) {
                    body.forget();
                    let report = match e {
                        clankie_voice_body::BodyError::DaveRequired => BodyReport::DaveRequired,
                        e => BodyReport::ConnectFailed(e.to_string()),
                    };
                    let _ = events.send(report);
                }
            }
            Some((delivery_id, result, trace)) = synthesized.recv() => match result {
                // Synthesized while someone spoke over the answer: it is never played.
                Ok(_) if cut_answers.iter().any(|a| a == answer_of(&delivery_id)) => {
                    busy = false;
                    playback(delivery_id, "cut_off", 0, 0);
                }
                Ok(audio) => {
                    let audio_ms = i64::try_from(audio.duration().as_millis()).unwrap_or(i64::MAX);
                    let synthesized_at = std::time::SystemTime::now();
                    let finished = body.play(&audio.pcm, audio.rate);
                    // The first frame leaves on the driver's next 20 ms tick.
                    let first_audio = std::time::SystemTime::now() + Duration::from_millis(10);
                    clankie_trace::record("voice.playback_start", &trace, synthesized_at, first_audio);
                    let _ = events.send(BodyReport::FirstAudio { delivery_id: delivery_id.clone(), at: first_audio });
                    let played_tx = played_tx.clone();
                    let id = delivery_id.clone();
                    tokio::spawn(async move {
                        let _ = finished.await;
                        let _ = played_tx.send(id);
                    });
                    playing = Some(Playing { delivery_id, began: Instant::now(), audio_ms, cut: false });
                }
                Err(e) => {
                    busy = false;
                    metrics::counter!("clankie_speech_errors_total", "stage" => "synthesize", "code" => e.code()).increment(1);
                    playback(delivery_id, e.code(), 0, 0);
                }
            },
            Some(delivery_id) = played.recv() => {
                if let Some(p) = playing.take_if(|p| p.delivery_id == delivery_id) {
                    let played_ms = i64::try_from(p.began.elapsed().as_millis()).unwrap_or(i64::MAX).min(p.audio_ms);
                    playback(p.delivery_id, if p.cut { "cut_off" } else { "played" }, played_ms, p.audio_ms);
                }
                busy = false;
            }
            Some(event) = heard.recv() => {
                if matches!(event, BodyEvent::Heard(_)) {
                    clankie_settings::fault::panic_once("voice.body");
                }
                match &event {
                    BodyEvent::Disconnected { .. } => body.forget(),
                    BodyEvent::SpeechStarted { .. } => {
                        // Barge-in: a human has spoken over him for the threshold, during a
                        // sentence or between two of an answer still coming. He stops, and
                        // nothing more of that answer is played: what is queued is dropped,
                        // what is being synthesized or still written is dropped when it comes.
                        let speaking = playing.as_ref().filter(|p| !p.cut).map(|p| answer_of(&p.delivery_id).to_owned());
                        if let Some(answer) = speaking.or_else(|| answering.clone()) {
                            if let Some(p) = playing.as_mut().filter(|p| !p.cut) {
                                p.cut = true;
                                body.stop();
                            }
                            for dropped in queue.drain(..) {
                                playback(dropped.speak.delivery_id, "cut_off", 0, 0);
                            }
                            if answering.as_deref() == Some(answer.as_str()) {
                                answering = None;
                            }
                            cut_answers.push_back(answer);
                            while cut_answers.len() > 8 {
                                cut_answers.pop_front();
                            }
                        }
                    }
                    _ => {}
                }
                let _ = events.send(BodyReport::Body(event));
            }
        }
    }
}

#[cfg(test)]
mod ears_tests {
    use super::*;

    fn utterance(n: usize) -> Utterance {
        Utterance {
            id: format!("utt:{n}"),
            speaker: 7,
            author_name: "ada".into(),
            audio: Audio { pcm: vec![0; 160], rate: 16_000 },
            trace: TraceContext::default(),
        }
    }

    #[tokio::test]
    async fn voice_actor_the_ears_hold_at_most_their_bound_and_drop_the_oldest() {
        let ears = Ears::new(3);
        let mut dropped = Vec::new();
        for n in 0..10 {
            if let Some(old) = ears.hear(utterance(n)) {
                dropped.push(old.id);
            }
            assert!(ears.waiting() <= 3, "{} waiting", ears.waiting());
        }
        assert_eq!(dropped, (0..7).map(|n| format!("utt:{n}")).collect::<Vec<_>>(), "the oldest go first");
        let mut taken = Vec::new();
        for _ in 0..3 {
            taken.push(ears.next().await.expect("an utterance").id);
        }
        assert_eq!(taken, ["utt:7", "utt:8", "utt:9"], "what is kept is the newest, in order");
        assert_eq!(ears.waiting(), 0);
    }
}
