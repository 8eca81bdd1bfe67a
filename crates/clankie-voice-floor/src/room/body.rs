//! The room's audio body task: connects when told, speaks what the room decides to say one
//! sentence at a time, stops when a human speaks over him, and reports what happens to it.

use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clankie_bus::TraceContext;
use clankie_speech::{Audio, TextToSpeech};
use clankie_voice_body::{Body, BodyConfig, BodyError, BodyEvent, Connection};
use tokio::sync::mpsc;

use crate::run::Said;

/// What the room tells its body.
pub(super) enum BodyCommand {
    Connect(Connection),
    Leave,
}

/// What the room's body reports to its room.
pub(super) enum BodyReport {
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

/// A connect attempt's end, for the connection it tried.
type Attempt = (Connection, Result<(), BodyError>);
/// A sentence's synthesis, with the trace of its spoken turn.
type Synthesized = (String, Result<Audio, clankie_speech::SpeechError>, TraceContext);

/// The sentence being played.
struct Playing {
    delivery_id: String,
    began: Instant,
    audio_ms: i64,
    cut: bool,
}

/// The answer a sentence belongs to: its id up to the sentence number.
fn answer_of(sentence: &str) -> &str {
    sentence.rsplit_once('/').map_or(sentence, |(answer, _)| answer)
}

/// What the body task keeps between its events: the voice driver, and his speaking (the lines
/// queued, the one synthesized or playing, the answer being spoken and the answers cut).
struct BodyTask {
    body: Body,
    tts: Arc<dyn TextToSpeech>,
    events: mpsc::UnboundedSender<BodyReport>,
    done_tx: mpsc::UnboundedSender<Attempt>,
    synth_tx: mpsc::UnboundedSender<Synthesized>,
    played_tx: mpsc::UnboundedSender<String>,
    // The answer being spoken (sentences still to come until its end), and the answers cut:
    // nothing more of a cut answer is played, whatever the run still writes.
    answering: Option<String>,
    cut_answers: VecDeque<String>,
    queue: VecDeque<Said>,
    busy: bool,
    playing: Option<Playing>,
}

/// Runs one room's audio body: connects when told, speaks what the room decides to say (one line
/// at a time, each synthesized off this loop), stops when a human speaks over him, and forwards
/// what happens to it.
pub(super) async fn body_task(
    config: BodyConfig,
    tts: Arc<dyn TextToSpeech>,
    turns: Option<Arc<dyn clankie_voice_body::TurnDetector>>,
    mut commands: mpsc::UnboundedReceiver<BodyCommand>,
    mut speech: mpsc::UnboundedReceiver<Said>,
    events: mpsc::UnboundedSender<BodyReport>,
) {
    let (body, mut heard) = Body::with_turns(config, turns);
    let (done_tx, mut done) = mpsc::unbounded_channel::<Attempt>();
    let (synth_tx, mut synthesized) = mpsc::unbounded_channel::<Synthesized>();
    let (played_tx, mut played) = mpsc::unbounded_channel::<String>();
    let mut task = BodyTask {
        body,
        tts,
        events,
        done_tx,
        synth_tx,
        played_tx,
        answering: None,
        cut_answers: VecDeque::new(),
        queue: VecDeque::new(),
        busy: false,
        playing: None,
    };
    loop {
        task.synthesize_next();
        tokio::select! {
            command = commands.recv() => {
                if task.command(command).is_break() {
                    return;
                }
            }
            said = speech.recv() => {
                if task.said(said).is_break() {
                    return;
                }
            }
            Some((connection, result)) = done.recv() => task.connect_done(connection, result),
            Some((delivery_id, result, trace)) = synthesized.recv() => task.synthesized(delivery_id, result, trace),
            Some(delivery_id) = played.recv() => task.played(delivery_id),
            Some(event) = heard.recv() => task.heard(event),
        }
    }
}

/// Reports one of his lines' playback to the room.
fn playback(events: &mpsc::UnboundedSender<BodyReport>, delivery_id: String, code: &'static str, played_ms: i64, audio_ms: i64) {
    let _ = events.send(BodyReport::Playback { delivery_id, code, played_ms, audio_ms });
}

impl BodyTask {
    /// Starts synthesizing the next line queued, unless one is already synthesized or played.
    fn synthesize_next(&mut self) {
        if !self.busy
            && let Some(Said { speak: next, trace }) = self.queue.pop_front()
        {
            self.busy = true;
            let (tts, synth_tx) = (self.tts.clone(), self.synth_tx.clone());
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
    }

    /// The room's command; breaks when the body leaves.
    fn command(&mut self, command: Option<BodyCommand>) -> ControlFlow<()> {
        match command {
            Some(BodyCommand::Connect(connection)) => {
                // Not awaited here: a newer connect (a changed server update) must not wait
                // behind one that is still retrying; the driver discards the older attempt.
                let attempt = self.body.connect(&connection);
                let done_tx = self.done_tx.clone();
                tokio::spawn(async move {
                    let _ = done_tx.send((connection, attempt.await));
                });
                ControlFlow::Continue(())
            }
            Some(BodyCommand::Leave) | None => {
                self.body.leave();
                ControlFlow::Break(())
            }
        }
    }

    /// A line a run wrote; breaks when the room is gone.
    fn said(&mut self, said: Option<Said>) -> ControlFlow<()> {
        match said {
            // An empty line ends its run: nothing more of any of its answers follows.
            Some(Said { speak, .. }) if speak.text.is_empty() => {
                if self.answering.as_deref().is_some_and(|a| a.strip_prefix(speak.delivery_id.as_str()).is_some_and(|r| r.starts_with('~')))
                {
                    self.answering = None;
                }
            }
            Some(Said { speak, .. }) if self.cut_answers.iter().any(|a| a == answer_of(&speak.delivery_id)) => {
                playback(&self.events, speak.delivery_id, "cut_off", 0, 0);
            }
            Some(said) => {
                self.answering = Some(answer_of(&said.speak.delivery_id).to_owned());
                self.queue.push_back(said);
            }
            None => {
                self.body.leave();
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
    }

    /// A connect attempt ended: a failure of the connection still wanted goes to the room.
    fn connect_done(&mut self, connection: Connection, result: Result<(), BodyError>) {
        if let Err(e) = result
            && self.body.connection() == Some(&connection)
        {
            self.body.forget();
            let report = match e {
                BodyError::DaveRequired => BodyReport::DaveRequired,
                e => BodyReport::ConnectFailed(e.to_string()),
            };
            let _ = self.events.send(report);
        }
    }

    /// A line's synthesis came back: played, unless its answer was cut meanwhile or it failed.
    fn synthesized(&mut self, delivery_id: String, result: Result<Audio, clankie_speech::SpeechError>, trace: TraceContext) {
        match result {
            // Synthesized while someone spoke over the answer: it is never played.
            Ok(_) if self.cut_answers.iter().any(|a| a == answer_of(&delivery_id)) => {
                self.busy = false;
                playback(&self.events, delivery_id, "cut_off", 0, 0);
            }
            Ok(audio) => self.play(delivery_id, audio, trace),
            Err(e) => {
                self.busy = false;
                metrics::counter!("clankie_speech_errors_total", "stage" => "synthesize", "code" => e.code()).increment(1);
                playback(&self.events, delivery_id, e.code(), 0, 0);
            }
        }
    }

    /// Plays a synthesized line, reports its first audio, and hears back when it is played out.
    fn play(&mut self, delivery_id: String, audio: Audio, trace: TraceContext) {
        let audio_ms = i64::try_from(audio.duration().as_millis()).unwrap_or(i64::MAX);
        let synthesized_at = std::time::SystemTime::now();
        let finished = self.body.play(&audio.pcm, audio.rate);
        // The first frame leaves on the driver's next 20 ms tick.
        let first_audio = std::time::SystemTime::now() + Duration::from_millis(10);
        clankie_trace::record("voice.playback_start", &trace, synthesized_at, first_audio);
        let _ = self.events.send(BodyReport::FirstAudio { delivery_id: delivery_id.clone(), at: first_audio });
        let played_tx = self.played_tx.clone();
        let id = delivery_id.clone();
        tokio::spawn(async move {
            let _ = finished.await;
            let _ = played_tx.send(id);
        });
        self.playing = Some(Playing { delivery_id, began: Instant::now(), audio_ms, cut: false });
    }

    /// A line finished playing (or was stopped): its playback goes to the room.
    fn played(&mut self, delivery_id: String) {
        if let Some(p) = self.playing.take_if(|p| p.delivery_id == delivery_id) {
            let played_ms = i64::try_from(p.began.elapsed().as_millis()).unwrap_or(i64::MAX).min(p.audio_ms);
            playback(&self.events, p.delivery_id, if p.cut { "cut_off" } else { "played" }, played_ms, p.audio_ms);
        }
        self.busy = false;
    }

    /// What the voice driver heard or did, forwarded to the room after the body acts on it.
    fn heard(&mut self, event: BodyEvent) {
        if matches!(event, BodyEvent::Heard(_)) {
            clankie_settings::fault::panic_once("voice.body");
        }
        match &event {
            BodyEvent::Disconnected { .. } => self.body.forget(),
            BodyEvent::SpeechStarted { .. } => self.barge_in(),
            _ => {}
        }
        let _ = self.events.send(BodyReport::Body(event));
    }

    /// Barge-in: a human has spoken over him for the threshold, during a sentence or between two
    /// of an answer still coming. He stops, and nothing more of that answer is played: what is
    /// queued is dropped, what is being synthesized or still written is dropped when it comes.
    fn barge_in(&mut self) {
        let speaking = self.playing.as_ref().filter(|p| !p.cut).map(|p| answer_of(&p.delivery_id).to_owned());
        if let Some(answer) = speaking.or_else(|| self.answering.clone()) {
            if let Some(p) = self.playing.as_mut().filter(|p| !p.cut) {
                p.cut = true;
                self.body.stop();
            }
            for dropped in self.queue.drain(..) {
                playback(&self.events, dropped.speak.delivery_id, "cut_off", 0, 0);
            }
            if self.answering.as_deref() == Some(answer.as_str()) {
                self.answering = None;
            }
            self.cut_answers.push_back(answer);
            while self.cut_answers.len() > 8 {
                self.cut_answers.pop_front();
            }
        }
    }
}
