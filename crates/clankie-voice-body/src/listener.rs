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

#[derive(Default)]
pub(crate) struct Ears {
    pub(crate) users: HashMap<u32, u64>,
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

pub(crate) struct Listener {
    pub(crate) ears: Arc<Mutex<Ears>>,
    pub(crate) events: mpsc::UnboundedSender<BodyEvent>,
    pub(crate) config: BodyConfig,
    pub(crate) turns: Option<Arc<dyn TurnDetector>>,
    /// Numbers pauses across every speaker and segment, so a late verdict never matches another.
    pub(crate) pauses: Arc<std::sync::atomic::AtomicU32>,
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
                Some(p) => ears.decoders.decode(*ssrc, p, self.config.crypto_mode.payload_suffix_len()),
                None => ears.decoders.conceal(*ssrc),
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
            let quiet = Duration::from_millis(20 * u64::from(s.quiet_ticks));
            let speech_ended = now.checked_sub(quiet).unwrap_or(now);
            let segment = Segment { user_id: s.user_id, ssrc, pcm: s.pcm, started: s.started, ended: now, speech_ended, ended_by };
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
