//! The one room-input path: every typed line and every utterance's words are deduplicated,
//! decided by the floor, kept in the ring and handed to a run here, whatever body heard them.

use std::time::Instant;

use clankie_bus::{MsgId, now_ms};
use clankie_proto::{Subject, v1};

use super::actor::{REMEMBERED_DELIVERIES, RULES_READ, RoomActor};
use crate::floor;
use crate::ring::RingLine;

impl RoomActor {
    /// Whether `delivery_id` is new inside the dedup window (and the last deliveries it holds).
    fn first_sighting(&mut self, delivery_id: &str) -> bool {
        let window = self.floor.config().dedup_window;
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
    pub(super) async fn hear(&mut self, input: v1::RoomInput) {
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
}
