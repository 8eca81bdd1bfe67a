//! What the room's body reports, handled by the room: its connection goes to the keeper, an
//! utterance to the ears (beginning its spoken turn), a playback to the ring and its receipt.

use std::collections::HashMap;

use clankie_bus::{TraceContext, now_ms};
use clankie_speech::Audio;
use clankie_trace::Stage;
use clankie_voice_body::BodyEvent;

use super::actor::{EARS_HELD, Link, REMEMBERED_DELIVERIES, RoomActor};
use super::body::BodyReport;
use super::ears::Utterance;
use super::publisher::room_receipt;
use crate::ring::sentence_of;

impl RoomActor {
    /// One report of the room's body, handed to whoever it is for.
    pub(super) async fn body_report(&mut self, report: BodyReport) {
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
}

/// Lets the oldest remembered turn go (utterance ids end in their start time): it ends now.
fn forget_oldest_turn(turns: &mut HashMap<String, Stage>) {
    let oldest = turns.keys().min_by_key(|id| id.rsplit(':').next().and_then(|t| t.parse::<i64>().ok()).unwrap_or(0)).cloned();
    if let Some(id) = oldest {
        turns.remove(&id);
    }
}
