//! The listener: songbird's events for one room turned into the body's own, each tick of received
//! audio decoded, judged for voice and cut into turns per speaker.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use songbird::events::{Event, EventContext, EventHandler};
use tokio::sync::mpsc;

use crate::config::BodyConfig;
use crate::decode::{Decoders, HEARD_RATE};
use crate::hearing::{AUDIBLE_DB, Levels, ONSET_TICKS, Vad, level_db};
use crate::turns::{Segment, Speaking, TURN_WINDOW, TurnDetector, TurnEnd};
use crate::{dave, drops};

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

/// What the listener keeps per stream between ticks, under one lock the turn detector's late
/// verdicts also take.
#[derive(Default)]
pub(crate) struct Ears {
    /// SSRC → user, as speaking updates announce them: audio from an unknown SSRC is dropped.
    pub(crate) users: HashMap<u32, u64>,
    /// Per SSRC, the segment being spoken now.
    pub(crate) speaking: HashMap<u32, Speaking>,
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
    decoders: Decoders,
}

/// Songbird's event handler for one room: turns its events into [`BodyEvent`]s.
pub(crate) struct Listener {
    /// The per-stream state, shared with the turn detector's tasks.
    pub(crate) ears: Arc<Mutex<Ears>>,
    /// Where the body's events go.
    pub(crate) events: mpsc::UnboundedSender<BodyEvent>,
    /// The thresholds a segment is cut by.
    pub(crate) config: BodyConfig,
    /// The turn detector asked at a pause, if there is one; without it silence alone ends a turn.
    pub(crate) turns: Option<Arc<dyn TurnDetector>>,
    /// Numbers pauses across every speaker and segment, so a late verdict never matches another.
    pub(crate) pauses: Arc<std::sync::atomic::AtomicU32>,
}

/// The config's spans as one tick measures them: in 20 ms ticks, or in samples at [`HEARD_RATE`].
struct Spans {
    /// Quiet ticks that end a segment without the turn detector's word.
    quiet_limit: u32,
    /// Voiced ticks a segment needs to be speech, not a click.
    start_ticks: u32,
    /// Ticks of speech before [`BodyEvent::SpeechStarted`] (the barge-in threshold).
    barge_ticks: u32,
    /// Quiet ticks before the turn detector is asked whether the speaker has finished.
    turn_ticks: u32,
    /// The most samples one segment holds.
    longest: usize,
    /// The most samples of pre-roll kept per speaker.
    pre_roll: usize,
}

/// Appends `samples` to a speaker's pre-roll, keeping only its last `limit` samples.
fn keep_pre_roll(ring: &mut std::collections::VecDeque<i16>, samples: impl IntoIterator<Item = i16>, limit: usize) {
    ring.extend(samples);
    while ring.len() > limit {
        ring.pop_front();
    }
}

impl Listener {
    /// The config's spans, measured once per tick.
    fn spans(&self) -> Spans {
        let ticks = |d: Duration| (d.as_millis() / 20).max(1) as u32;
        Spans {
            quiet_limit: ticks(self.config.end_of_speech),
            start_ticks: ticks(self.config.speech_start),
            barge_ticks: ticks(self.config.barge_in),
            turn_ticks: ticks(self.config.turn_silence),
            longest: (self.config.longest_segment.as_secs_f64() * f64::from(HEARD_RATE)) as usize,
            pre_roll: (self.config.pre_roll.as_secs_f64() * f64::from(HEARD_RATE)) as usize,
        }
    }

    /// One tick of received audio: each speaker's packet heard, the quiet ones counted, the
    /// pauses judged, and the segments that ended sent on as [`BodyEvent::Heard`].
    fn tick(&self, tick: &songbird::events::context_data::VoiceTick) {
        let mut ears = self.ears.lock().unwrap_or_else(|p| p.into_inner());
        let ears = &mut *ears;
        let now = Instant::now();
        let spans = self.spans();
        let mut done = Vec::new();
        for (ssrc, data) in &tick.speaking {
            if let Some(ended_by) = self.hear(ears, *ssrc, data, now, &spans) {
                done.push((*ssrc, ended_by));
            }
        }
        for ssrc in &tick.silent {
            ears.onset.remove(ssrc);
            if let Some(s) = ears.speaking.get_mut(ssrc) {
                s.ticks += 1;
                s.quiet_ticks += 1;
            }
        }
        self.judge_pauses(ears, &spans, &mut done);
        let gone: Vec<u32> = ears.speaking.keys().filter(|s| !tick.speaking.contains_key(s) && !tick.silent.contains(s)).copied().collect();
        done.extend(gone.into_iter().map(|s| (s, TurnEnd::Gone)));
        for (ssrc, ended_by) in done {
            self.end(ears, ssrc, ended_by, now, &spans);
        }
    }

    /// One speaker's packet (or its concealment): noise before speech goes to the pre-roll,
    /// speech into the segment; [`TurnEnd::Longest`] when the segment is full.
    fn hear(
        &self,
        ears: &mut Ears,
        ssrc: u32,
        data: &songbird::events::context_data::VoiceData,
        now: Instant,
        spans: &Spans,
    ) -> Option<TurnEnd> {
        let Some(user_id) = ears.users.get(&ssrc).copied() else {
            if data.packet.is_some() {
                drops::count(drops::Drop::UnknownSsrc);
            }
            return None;
        };
        // Speech is what the detector hears as speech; a packet of noise is a quiet tick.
        let decoded = match &data.packet {
            Some(p) => ears.decoders.decode(ssrc, p, self.config.crypto_mode.payload_suffix_len()),
            None => ears.decoders.conceal(ssrc),
        };
        let heard = decoded.as_deref();
        let voiced = heard.is_some_and(|pcm| ears.vad.entry(ssrc).or_insert_with(Vad::new).voiced(pcm, &self.config));
        if !voiced && !ears.speaking.contains_key(&ssrc) {
            let onset = ears.onset.entry(ssrc).or_default();
            *onset = if heard.is_some_and(|pcm| level_db(pcm) > AUDIBLE_DB) { (*onset + 1).min(ONSET_TICKS) } else { 0 };
            if let Some(pcm) = heard {
                keep_pre_roll(ears.pre_roll.entry(ssrc).or_default(), pcm.iter().copied(), spans.pre_roll);
            }
            return None;
        }
        let entry = ears.speaking.entry(ssrc).or_insert_with(|| Speaking {
            user_id,
            pcm: ears.pre_roll.remove(&ssrc).map(Vec::from).unwrap_or_default(),
            started: now - Duration::from_millis(20),
            quiet_ticks: 0,
            voiced_ticks: 0,
            ticks: 0,
            onset: ears.onset.remove(&ssrc).unwrap_or(0),
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
            if !entry.announced && entry.onset + entry.ticks >= spans.barge_ticks && entry.voiced_ticks * 4 >= entry.ticks * 3 {
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
        (entry.pcm.len() >= spans.longest).then_some(TurnEnd::Longest)
    }

    /// Each pausing speaker not already done: the turn detector asked once per pause, and the
    /// segment ended on its verdict or on the silence limit.
    fn judge_pauses(&self, ears: &mut Ears, spans: &Spans, done: &mut Vec<(u32, TurnEnd)>) {
        let (speaking, verdicts) = (&mut ears.speaking, &ears.verdicts);
        for (ssrc, s) in speaking.iter_mut() {
            if s.quiet_ticks == 0 || done.iter().any(|(d, _)| d == ssrc) {
                continue;
            }
            let verdict = verdicts.get(ssrc).filter(|(pause, _)| *pause == s.pause).map(|(_, v)| *v);
            if let Some(turns) = &self.turns
                && !s.asked
                && s.quiet_ticks >= spans.turn_ticks
                && s.voiced_ticks >= spans.start_ticks
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
            } else if s.quiet_ticks >= spans.quiet_limit {
                let why = match (&self.turns, verdict) {
                    (None, _) => TurnEnd::Silence,
                    (Some(_), Some(Ok(false))) => TurnEnd::SilenceAfterUnfinished,
                    (Some(_), _) => TurnEnd::DetectorUnavailable,
                };
                done.push((*ssrc, why));
            }
        }
    }

    /// A speaker's segment ended: too short to be speech it becomes pre-roll, level the whole
    /// way through it is dropped as noise, else it is sent on as [`BodyEvent::Heard`].
    fn end(&self, ears: &mut Ears, ssrc: u32, ended_by: TurnEnd, now: Instant, spans: &Spans) {
        ears.verdicts.remove(&ssrc);
        let Some(s) = ears.speaking.remove(&ssrc) else { return };
        if s.voiced_ticks < spans.start_ticks {
            // Too short to be speech: it becomes pre-roll for whatever this person says next.
            keep_pre_roll(ears.pre_roll.entry(ssrc).or_default(), s.pcm, spans.pre_roll);
            return;
        }
        if s.levels.deviation() < self.config.min_modulation_db {
            // Level the whole way through: a held tone the detector took for voice, not speech.
            metrics::counter!("clankie_voice_noise_segments_total").increment(1);
            return;
        }
        let quiet = Duration::from_millis(20 * u64::from(s.quiet_ticks));
        let speech_ended = now.checked_sub(quiet).unwrap_or(now);
        let segment = Segment { user_id: s.user_id, ssrc, pcm: s.pcm, started: s.started, ended: now, speech_ended, ended_by };
        let _ = self.events.send(BodyEvent::Heard(segment));
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
                decoders.retain(|ssrc| users.contains_key(ssrc));
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
