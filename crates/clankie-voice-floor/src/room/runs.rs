//! The room's side of its persona runs: starting one (or steering into the live one), and
//! writing his line into the ring when it ends.

use std::time::Instant;

use clankie_agent::silence;
use clankie_bus::now_ms;
use clankie_proto::v1;
use tokio::sync::mpsc;

use super::actor::RoomActor;
use super::ring::forget_oldest;
use crate::ring::{RingLine, heard_of};
use crate::run::{RunEnd, RunRoom};

impl RoomActor {
    /// Steers `input` into the room's live run, or starts one with it.
    pub(super) fn hand_to_run(&mut self, input: v1::RoomInput, verdict: v1::FloorVerdict) {
        let input = match self.run.as_ref() {
            Some(run) => match run.send(input) {
                Ok(()) => return,
                Err(back) => back.0,
            },
            None => input,
        };
        let (steer, steers) = mpsc::unbounded_channel();
        self.run = Some(steer);
        let room = RunRoom::new(self.key, self.mouth.clone(), self.run_tx.clone());
        let span = tracing::info_span!("voice.persona", delivery_id = %input.delivery_id);
        self.runs.spawn(tracing::Instrument::instrument(self.floor.clone().run_room(room, input, verdict, steers), span));
    }

    /// A run is over. The actor is the only one that steers, so whatever it sent the run after the
    /// run's last look is still in the run's steers: it starts the next run.
    pub(super) async fn run_ended(&mut self, end: RunEnd) {
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
                author_name: self.floor.config().bot_name.clone(),
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
}
