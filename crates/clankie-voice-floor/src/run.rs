//! One persona run: the voice lane's turn, from the input that opened it to the words (or the
//! silence) it settles with. A run holds only its way back to its room, never the room's state.

use std::sync::Arc;
use std::time::SystemTime;

use clankie_agent::provider::{AssistantTurn, CachePlan, ChatMessage, ModelRequest, ToolSpec, Usage};
use clankie_agent::{RetryPolicy, silence};
use clankie_bus::{MsgId, TraceContext, now_ms};
use clankie_proto::{LaneKey, Subject, v1};
use clankie_self::experience;
use serde_json::json;
use tokio::sync::{mpsc, oneshot};

use crate::ring::{answer_id, sentence_id};
use crate::room::Key;
use crate::sentences::Sentences;
use crate::voice_floor::{ASK, VoiceFloor};

/// Model calls one persona run may make (tool rounds and steered re-calls together).
const MAX_ROUNDS: usize = 6;

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
    /// The way back to the room `key`, whose body hears `mouth` and whose actor hears `room`:
    /// the room makes one for each run it starts.
    pub fn new(key: Key, mouth: mpsc::UnboundedSender<Said>, room: mpsc::UnboundedSender<RunMsg>) -> RunRoom {
        RunRoom { key, mouth, room }
    }

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

/// The sentences a run has handed to its room's body so far, with the model call (round) that
/// wrote each.
struct Spoken<'a> {
    mouth: &'a mpsc::UnboundedSender<Said>,
    key: Key,
    /// The delivery id of the input that opened the run: its answers' ids start with it.
    run: &'a str,
    /// When the run started (before its prompt was read), for the stage up to its first sentence.
    began: SystemTime,
    said: Vec<(usize, String)>,
}

impl Spoken<'_> {
    /// Hands one sentence (the silence token stripped) to the room's body and remembers it as said.
    fn say(&mut self, round: usize, sentence: &str) {
        let words = silence::strip_token(sentence);
        if words.is_empty() {
            return;
        }
        if self.said.is_empty() {
            // A stage of the spoken turn: from the run's start to its first sentence.
            clankie_trace::record("voice.first_sentence", &TraceContext::current(), self.began, SystemTime::now());
        }
        let speak = v1::Speak {
            delivery_id: sentence_id(&answer_id(self.run, round), self.said.len()),
            guild_id: self.key.0,
            channel_id: self.key.1,
            text: words.clone(),
            at_ms: now_ms(),
        };
        let _ = self.mouth.send(Said::now(speak));
        self.said.push((round, words));
    }
}

/// How one model call of a run came out.
enum Round {
    /// The answer is spoken: the run is over.
    Answered,
    /// A tool was called, or more was said meanwhile: the run calls again.
    Again,
    /// The model failed, with its code.
    Failed(&'static str),
}

/// One run under way: what it asks the model with and what it has heard and said so far.
struct Run<'a> {
    floor: &'a VoiceFloor,
    room: &'a RunRoom,
    first: &'a v1::RoomInput,
    system: String,
    context: String,
    ask: ToolSpec,
    retry: RetryPolicy,
    covered: Vec<v1::RoomInput>,
    tail: Vec<ChatMessage>,
    calls: u32,
    /// What the run's calls cost, as the provider reported it: on the run's response receipt.
    billed: Usage,
    steers: mpsc::UnboundedReceiver<v1::RoomInput>,
    spoken: Spoken<'a>,
}

impl Run<'_> {
    /// Calls the model until an answer is spoken, it fails, or the run is out of rounds.
    async fn rounds(&mut self) -> Result<(), &'static str> {
        for round in 0..MAX_ROUNDS {
            match self.round(round).await {
                Round::Answered => return Ok(()),
                Round::Failed(code) => return Err(code),
                Round::Again => {}
            }
        }
        Err("no_answer")
    }

    /// One model call: what was steered in is taken in first, the answer's sentences go to the
    /// body as they stream unless someone spoke since the call began.
    async fn round(&mut self, round: usize) -> Round {
        while let Ok(steered) = self.steers.try_recv() {
            self.covered.push(steered);
        }
        let latest = self.covered.last().cloned().unwrap_or_else(|| self.first.clone());
        let request = self.request().await;
        self.calls += 1;
        let mut sentences = Sentences::default();
        let mut stale = false;
        let (steers, spoken) = (&self.steers, &mut self.spoken);
        let mut speak_now = |piece: &str| {
            if stale {
                return;
            }
            for sentence in sentences.push(piece) {
                // Someone spoke since this call began: the rest of it answers an older room.
                if !steers.is_empty() {
                    stale = true;
                    return;
                }
                spoken.say(round, &sentence);
            }
        };
        let turn = match clankie_agent::complete_streaming(self.floor.model(), &request, self.retry, &mut speak_now, &mut self.billed).await
        {
            Ok(t) => t,
            Err(e) => return Round::Failed(e.failure_code().code()),
        };
        if !turn.tool_calls.is_empty() {
            self.use_tools(&latest, &turn).await;
            return Round::Again;
        }
        if stale || !self.steers.is_empty() {
            // More was said while this answer was written: it would answer an older room.
            return Round::Again;
        }
        self.spoken.say(round, &sentences.rest());
        Round::Answered
    }

    /// The next model request: the self-context, the room block as the room has it now, and
    /// this run's tool rounds.
    async fn request(&self) -> ModelRequest {
        // The ring already holds every line heard, steered ones included.
        let mut messages = vec![ChatMessage::user(self.context.clone()), ChatMessage::user(self.room.room_block().await)];
        messages.extend(self.tail.iter().cloned());
        // The next run repeats the tools, the system prompt and the self-context; the room block is
        // redrawn at every line heard, so a cache write past it would never be read. A run's
        // second round (after a tool) is rarely followed by a third: it is not written either.
        ModelRequest { system: self.system.clone(), messages, tools: vec![self.ask.clone()], cache: CachePlan::Through(1) }
    }

    /// Answers the tool calls of `turn`, for the next call to read; `latest` is the input they
    /// are made for.
    async fn use_tools(&mut self, latest: &v1::RoomInput, turn: &AssistantTurn) {
        self.tail.push(ChatMessage::Assistant { text: turn.text.clone(), tool_calls: turn.tool_calls.clone() });
        for call in &turn.tool_calls {
            let answer = if call.name == ASK {
                self.floor.ask_clankie(latest, &call.arguments).await
            } else {
                format!("error: no tool named {}", call.name)
            };
            self.tail.push(ChatMessage::Tool { call_id: call.id.clone(), name: call.name.clone(), content: answer });
        }
    }
}

/// The tool the voice persona hands work that needs action with.
fn ask_tool() -> ToolSpec {
    ToolSpec {
        name: ASK.into(),
        description: "Hand a request that needs action to your text-side self, who can use tools; returns the answer.".into(),
        parameters: json!({ "type": "object", "properties": { "request": { "type": "string" } }, "required": ["request"] }),
    }
}

/// Everything a run said, in one line (what was said before a failure still counts), or why it
/// failed.
fn outcome(result: Result<(), &'static str>, said: &[(usize, String)]) -> Result<String, &'static str> {
    match result {
        Ok(()) | Err(_) if !said.is_empty() => Ok(said.iter().map(|(_, s)| s.as_str()).collect::<Vec<_>>().join(" ")),
        Ok(()) => Ok(String::new()),
        Err(code) => Err(code),
    }
}

impl VoiceFloor {
    /// One persona run for the room: the voice lane's turn. Inputs that arrive while it thinks
    /// are steered in at the next boundary (before the next model call; a finished answer that
    /// did not hear them is not spoken, the run calls again), and one spoken answer covers all of
    /// them: the first is `replied` (or `silent`, `failed`), the rest `absorbed`.
    pub(crate) async fn run_room(
        self: Arc<Self>,
        room: RunRoom,
        first: v1::RoomInput,
        verdict: v1::FloorVerdict,
        steers: mpsc::UnboundedReceiver<v1::RoomInput>,
    ) {
        let key = room.key;
        // The first sentence's stage starts here: reading the self for the prompt is part of it.
        let began = SystemTime::now();
        let (system, context) = self.persona(key).await;
        let mut run = Run {
            floor: &self,
            room: &room,
            first: &first,
            system,
            context,
            ask: ask_tool(),
            retry: RetryPolicy::default(),
            covered: vec![first.clone()],
            tail: Vec::new(),
            calls: 0,
            billed: Usage::default(),
            steers,
            spoken: Spoken { mouth: &room.mouth, key, run: &first.delivery_id, began, said: Vec::new() },
        };
        let result = run.rounds().await;
        let Run { covered, calls, billed, steers, spoken: Spoken { said, .. }, .. } = run;
        let result = outcome(result, &said);
        // The body hears that nothing more of this answer follows.
        let _ = room.mouth.send(Said::now(v1::Speak {
            delivery_id: first.delivery_id.clone(),
            guild_id: key.0,
            channel_id: key.1,
            ..Default::default()
        }));
        // The room writes his line (what was heard of it) and takes back the steers: whatever
        // it sent after the last look here starts its next run.
        room.ended(RunEnd { first: first.clone(), covered: covered.clone(), verdict, said, result: result.clone(), steers });
        self.settle(key, &covered, result, calls, billed).await;
    }

    /// Announces a run's answer, already handed to the body sentence by sentence (or records its
    /// silence or failure), and gives every input it covered its outcome. His line in the ring is
    /// the room's to write.
    async fn settle(&self, key: Key, covered: &[v1::RoomInput], result: Result<String, &'static str>, calls: u32, billed: Usage) {
        let Some(first) = covered.first() else { return };
        // Every response receipt carries what its calls cost, for the owner's bill.
        let tokens = |r: v1::Receipt| {
            r.with_count("input_tokens", billed.input_tokens as i64)
                .with_count("output_tokens", billed.output_tokens as i64)
                .with_count("cached_input_tokens", billed.cached_input_tokens as i64)
                .with_count("cache_write_input_tokens", billed.cache_write_input_tokens as i64)
        };
        let absorbed = |input: &v1::RoomInput| input.delivery_id != first.delivery_id;
        for input in covered.iter().filter(|i| absorbed(i)) {
            self.receipt("voice.outcome", input, |r| r.with_code("absorbed").with_id("into", first.delivery_id.as_str())).await;
        }
        let text = match result {
            Err(code) => {
                self.receipt("voice.response", first, |r| tokens(r.with_code("failed").with_code(code))).await;
                self.receipt("voice.outcome", first, |r| r.with_code("failed").with_code(code)).await;
                return;
            }
            Ok(text) => text,
        };
        if silence::is_silent(&text) || silence::strip_token(&text).is_empty() {
            self.receipt("voice.response", first, |r| tokens(r.with_code("silent"))).await;
            self.receipt("voice.outcome", first, |r| r.with_code("silent")).await;
            return;
        }
        let words = silence::strip_token(&text);
        let speak =
            v1::Speak { delivery_id: first.delivery_id.clone(), guild_id: key.0, channel_id: key.1, text: words.clone(), at_ms: now_ms() };
        let id = MsgId::new(format!("speak:{}", first.delivery_id));
        if let Err(e) = self.bus().publish(&Subject::VoiceSpeak { guild: key.0, channel: key.1 }, &speak, Some(&id)).await {
            tracing::warn!(error = %e, "speak event not published");
            self.receipt("voice.outcome", first, |r| r.with_code("failed").with_code("speak_unpublished")).await;
            return;
        }
        self.receipt("voice.response", first, |r| {
            tokens(r)
                .with_code("spoke")
                .with_count("chars", words.chars().count() as i64)
                .with_count("heard", covered.len() as i64)
                .with_count("calls", i64::from(calls))
        })
        .await;
        self.receipt("voice.outcome", first, |r| r.with_code("replied").with_count("heard", covered.len() as i64)).await;
        self.receipt("voice.playback", first, |r| r.with_code("queued")).await;
        let thread = LaneKey::Voice { guild: key.0, channel: key.1 };
        let people: Vec<experience::Participant<'_>> =
            covered.iter().map(|input| experience::Participant { id: input.author_id, name: &input.author_name }).collect();
        self.experience(experience::talked(&thread, &people, &first.delivery_id, now_ms())).await;
    }

    async fn ask_clankie(&self, input: &v1::RoomInput, arguments: &str) -> String {
        let request_text = serde_json::from_str::<serde_json::Value>(arguments)
            .ok()
            .and_then(|v| v["request"].as_str().map(str::to_owned))
            .unwrap_or_default();
        let request = v1::AskRequest {
            delivery_id: input.delivery_id.clone(),
            guild_id: input.guild_id,
            channel_id: input.channel_id,
            author_name: input.author_name.clone(),
            request: request_text,
            author_id: input.author_id,
        };
        let subject = Subject::RpcAsk { guild: input.guild_id, channel: input.channel_id };
        let reply = self.bus().request::<_, v1::AskReply>(&subject, &request, self.config().ask_timeout).await;
        let code = match &reply {
            Ok(r) if r.failure_code.is_empty() => "answered",
            Ok(_) => "failed",
            Err(_) => "unreachable",
        };
        self.receipt("voice.handoff", input, |r| r.with_code(code)).await;
        match reply {
            Ok(r) if r.silent => "(your text-side self had nothing to add)".into(),
            Ok(r) if r.failure_code.is_empty() => r.answer,
            Ok(r) => format!("error: the request failed ({})", r.failure_code),
            Err(_) => "error: your text-side self could not be reached".into(),
        }
    }
}
