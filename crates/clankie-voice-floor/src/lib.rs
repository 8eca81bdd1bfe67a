//! The voice floor: live voice rooms and what happens to each line heard in them.
//!
//! The house is keeper → room actor → {ears, floor, run, mouth}. The keeper ([`rooms`]) decides
//! which rooms are wanted and takes their leases; each room it owns is one actor ([`room`]) that
//! owns its lease keeping, its audio body, its transcriber, its ring and its runs. Every room
//! input (typed chat the gateway routes, an utterance's words) enters the actor's one path: the
//! floor decides (a pure function, [`floor`]), the ring keeps the line with its source (only
//! speech reaches transcript subscribers), and for wake, continue or a permitted offer a persona
//! run ([`VoiceFloor`]'s, shared by every room) asks the voice persona for words to say or
//! silence. Silence is a real outcome here: nothing falls through to a text reply. Every receipt
//! carries the delivery id and no words.

pub mod floor;
pub mod room;
pub mod rooms;
pub mod sentences;
pub mod service;

use std::sync::Arc;
use std::time::Duration;

use clankie_agent::provider::{ChatMessage, ModelRequest, ToolSpec};
use clankie_agent::{Model, RetryPolicy, silence};
use clankie_bus::{Bus, BusError, ConsumerSpec, MsgId, now_ms};
use clankie_proto::{Family, LaneKey, ReceiptKind, Subject, v1};
use clankie_self::{SelfSource, Surface, experience};
use clankie_settings::Settings;
use serde_json::json;

use floor::FloorRules;

/// Why the voice floor stopped.
#[derive(Debug, thiserror::Error)]
pub enum VoiceError {
    #[error(transparent)]
    Bus(#[from] BusError),
    #[error("the room is gone")]
    Gone,
}

/// How the floor behaves.
#[derive(Debug, Clone)]
pub struct VoiceConfig {
    pub bot_name: String,
    pub rules: FloorRules,
    /// A delivery seen again inside this window opens no second response.
    pub dedup_window: Duration,
    pub ring_size: usize,
    pub ask_timeout: Duration,
}

impl VoiceConfig {
    /// The floor's configuration from settings.
    pub fn from_settings(settings: &Settings) -> VoiceConfig {
        let mut names = vec![settings.bot_name.clone()];
        names.extend(settings.bot_aliases.iter().cloned());
        VoiceConfig {
            bot_name: settings.bot_name.clone(),
            rules: FloorRules { names, continuation: settings.floor_continuation, offer_interval: settings.floor_offer_interval },
            dedup_window: Duration::from_secs(600),
            ring_size: 50,
            ask_timeout: Duration::from_secs(120),
        }
    }
}

/// One line of a voice room's conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingLine {
    pub delivery_id: String,
    pub source: v1::RoomInputSource,
    pub author_id: u64,
    pub author_name: String,
    /// His own line, marked by the system (a name can never make a line his).
    pub is_him: bool,
    pub text: String,
    pub at_ms: i64,
    /// His line, stopped by someone speaking over him: `text` is what he got to say.
    pub cut_off: bool,
}

/// The answer one model call (`round`) of the run answering `run` writes: what a barge-in cuts.
pub fn answer_id(run: &str, round: usize) -> String {
    format!("{run}~{round}")
}

/// The id of sentence `n` (counted over the whole run) of `answer`, as the body reports its playback.
pub fn sentence_id(answer: &str, n: usize) -> String {
    format!("{answer}/{n}")
}

/// The run and the sentence an id from [`sentence_id`] names.
fn sentence_of(id: &str) -> Option<(&str, usize)> {
    let (answer, n) = id.rsplit_once('/')?;
    let (run, _round) = answer.rsplit_once('~')?;
    Some((run, n.parse().ok()?))
}

/// What the room heard of a run whose sentence `n` was cut after `played` of it: the sentences
/// before it whole, that one's first words by the played fraction, none after it of the same
/// answer; what a later model call of the run said (after the interruption was heard) stays.
pub fn heard_of(sentences: &[(usize, String)], n: usize, played: f64) -> String {
    let cut_round = sentences.get(n).map_or(usize::MAX, |(round, _)| *round);
    let mut before: Vec<&str> = sentences.iter().take(n).flat_map(|(_, s)| s.split_whitespace()).collect();
    if let Some((_, cut)) = sentences.get(n) {
        let all: Vec<&str> = cut.split_whitespace().collect();
        let kept = ((all.len() as f64) * played.clamp(0.0, 1.0)).floor() as usize;
        before.extend(&all[..kept.min(all.len())]);
    }
    let after: Vec<&str> = sentences.iter().skip(n + 1).filter(|(round, _)| *round > cut_round).map(|(_, s)| s.as_str()).collect();
    let mut heard = format!("{}…", before.join(" "));
    if !after.is_empty() {
        heard.push(' ');
        heard.push_str(&after.join(" "));
    }
    heard
}

/// A live room's input consumers, opened by [`VoiceFloor::room_inputs`].
pub struct RoomInputs {
    typed: clankie_bus::Consumer<v1::RoomInput>,
    bodies: clankie_bus::Consumer<v1::RoomInput>,
}

/// The voice floor. Cheap to share behind an `Arc`.
pub struct VoiceFloor {
    bus: Bus,
    model: Model,
    selfhood: SelfSource,
    config: VoiceConfig,
    /// The supervised parts of this process's rooms (each room's transcriber and rules).
    parts: clankie_http::Parts,
}

const ASK: &str = "ask_clankie";
/// Model calls one persona run may make (tool rounds and steered re-calls together).
const MAX_ROUNDS: usize = 6;

impl VoiceFloor {
    /// A floor over `bus`, answering with `model` as the shared self `selfhood` describes him.
    pub fn new(bus: Bus, model: Model, selfhood: SelfSource, config: VoiceConfig) -> VoiceFloor {
        VoiceFloor { bus, model, selfhood, config, parts: clankie_http::Parts::default() }
    }

    /// The supervised parts of this process's rooms, for its readiness.
    pub fn parts(&self) -> clankie_http::Parts {
        self.parts.clone()
    }

    /// A room's conversation as the store has it (what its owners heard and said), oldest first.
    pub async fn ring(&self, guild: u64, channel: u64) -> Result<Vec<RingLine>, clankie_store::StoreError> {
        let rows = self.selfhood.store().ring(guild, channel, self.config.ring_size as i64).await?;
        Ok(rows.into_iter().map(RingLine::from).collect())
    }

    /// Tells the shared self he joined a voice room.
    pub async fn joined(&self, guild: u64, channel: u64) {
        self.experience(experience::voice_joined(guild, channel, now_ms())).await;
    }

    /// Tells the shared self he left a voice room.
    pub async fn left(&self, guild: u64, channel: u64) {
        self.experience(experience::voice_left(guild, channel, now_ms())).await;
    }

    async fn experience(&self, lived: v1::Experience) {
        if let Err(e) = experience::publish(&self.bus, &lived).await {
            tracing::warn!(error = %e, "experience not published");
        }
    }

    /// Opens one room's input consumers, typed and from bodies. They are durable and the room's
    /// own, so the next owner goes on where this one stopped; a new one starts at what is
    /// published from now on, so lines from a room's earlier life are never heard late. Open them
    /// before the room is announced live, so nothing routed to it is missed.
    pub async fn room_inputs(&self, guild: u64, channel: u64) -> Result<RoomInputs, VoiceError> {
        let typed_spec = ConsumerSpec::durable(format!("voice-floor-room-{guild}-{channel}"), Family::IngressRoom)
            .with_filter(Subject::IngressRoom { guild, channel }.to_string())
            .deliver_new()
            .fresh();
        // Made afresh by each owner: it hears what is said from its taking of the room on,
        // never a backlog an owner that died left unread.
        let bodies_spec = ConsumerSpec::durable(format!("voice-floor-input-{guild}-{channel}"), Family::VoiceInput)
            .with_filter(Subject::VoiceInput { guild, channel }.to_string())
            .deliver_new()
            .fresh();
        Ok(RoomInputs {
            typed: self.bus.consumer::<v1::RoomInput>(typed_spec).await?,
            bodies: self.bus.consumer::<v1::RoomInput>(bodies_spec).await?,
        })
    }

    /// The floor's rules, with the persona's name and aliases (edited with `clankie self persona`)
    /// added to the configured ones, so a new alias wakes him without a restart.
    async fn rules(&self) -> FloorRules {
        let mut rules = self.config.rules.clone();
        match self.selfhood.store().persona().await {
            Ok(p) => {
                for name in std::iter::once(p.name).chain(p.aliases).map(|n| n.trim().to_owned()) {
                    if !name.is_empty() && !rules.names.iter().any(|n| n.eq_ignore_ascii_case(&name)) {
                        rules.names.push(name);
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "persona unavailable; waking on the configured names only"),
        }
        rules
    }

    /// The voice persona: the shared self's prompt for this room (or its bare form when the
    /// store is away), and its self-context, which goes before the room block.
    async fn persona(&self, key: (u64, u64)) -> (String, String) {
        let thread = LaneKey::Voice { guild: key.0, channel: key.1 };
        let snapshot = match self.selfhood.snapshot(&thread).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "shared self unavailable; speaking with the bare persona");
                self.selfhood.bare()
            }
        };
        (clankie_self::assemble(&snapshot, &thread, Surface::Voice { ask_tool: ASK }), clankie_self::self_context(&snapshot, &thread))
    }

    /// One persona run for the room: the voice lane's turn. Inputs that arrive while it thinks
    /// are steered in at the next boundary (before the next model call; a finished answer that
    /// did not hear them is not spoken, the run calls again), and one spoken answer covers all of
    /// them: the first is `replied` (or `silent`, `failed`), the rest `absorbed`.
    async fn run_room(
        self: Arc<Self>,
        room: room::RunRoom,
        first: v1::RoomInput,
        verdict: v1::FloorVerdict,
        mut steers: tokio::sync::mpsc::UnboundedReceiver<v1::RoomInput>,
    ) {
        let key = room.key;
        let ask = ToolSpec {
            name: ASK.into(),
            description: "Hand a request that needs action to your text-side self, who can use tools; returns the answer.".into(),
            parameters: json!({ "type": "object", "properties": { "request": { "type": "string" } }, "required": ["request"] }),
        };
        let retry = RetryPolicy::default();
        let (system, context) = self.persona(key).await;
        let mouth = &room.mouth;
        let mut covered = vec![first.clone()];
        let mut tail: Vec<ChatMessage> = Vec::new();
        let mut calls = 0u32;
        // Sentences already handed to the body, with the model call (round) that wrote each.
        let mut said: Vec<(usize, String)> = Vec::new();
        let began = std::time::SystemTime::now();
        // Hands one sentence (the silence token stripped) to the room's body and remembers it as said.
        let say = |said: &mut Vec<(usize, String)>, round: usize, sentence: &str| {
            let words = silence::strip_token(sentence);
            if words.is_empty() {
                return;
            }
            if said.is_empty() {
                // A stage of the spoken turn: from the run's start to its first sentence.
                clankie_trace::record("voice.first_sentence", &clankie_bus::TraceContext::current(), began, std::time::SystemTime::now());
            }
            let speak = v1::Speak {
                delivery_id: sentence_id(&answer_id(&first.delivery_id, round), said.len()),
                guild_id: key.0,
                channel_id: key.1,
                text: words.clone(),
                at_ms: now_ms(),
            };
            let _ = mouth.send(room::Said::now(speak));
            said.push((round, words));
        };
        let mut result: Result<(), &'static str> = Err("no_answer");
        for round in 0..MAX_ROUNDS {
            while let Ok(steered) = steers.try_recv() {
                covered.push(steered);
            }
            let latest = covered.last().cloned().unwrap_or_else(|| first.clone());
            // The ring already holds every line heard, steered ones included.
            let mut messages = vec![ChatMessage::user(context.clone()), ChatMessage::user(room.room_block().await)];
            messages.extend(tail.iter().cloned());
            let request = ModelRequest { system: system.clone(), messages, tools: vec![ask.clone()] };
            calls += 1;
            let mut sentences = sentences::Sentences::default();
            let mut stale = false;
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
                    say(&mut said, round, &sentence);
                }
            };
            let turn = match clankie_agent::complete_streaming(&self.model, &request, retry, &mut speak_now).await {
                Ok(t) => t,
                Err(e) => {
                    result = Err(e.failure_code().code());
                    break;
                }
            };
            if !turn.tool_calls.is_empty() {
                tail.push(ChatMessage::Assistant { text: turn.text.clone(), tool_calls: turn.tool_calls.clone() });
                for call in &turn.tool_calls {
                    let answer = if call.name == ASK {
                        self.ask_clankie(&latest, &call.arguments).await
                    } else {
                        format!("error: no tool named {}", call.name)
                    };
                    tail.push(ChatMessage::Tool { call_id: call.id.clone(), name: call.name.clone(), content: answer });
                }
                continue;
            }
            if stale || !steers.is_empty() {
                // More was said while this answer was written: it would answer an older room.
                continue;
            }
            say(&mut said, round, &sentences.rest());
            result = Ok(());
            break;
        }
        let result = match result {
            Ok(()) | Err(_) if !said.is_empty() => Ok(said.iter().map(|(_, s)| s.as_str()).collect::<Vec<_>>().join(" ")),
            Ok(()) => Ok(String::new()),
            Err(code) => Err(code),
        };
        // The body hears that nothing more of this answer follows.
        let _ = mouth.send(room::Said::now(v1::Speak {
            delivery_id: first.delivery_id.clone(),
            guild_id: key.0,
            channel_id: key.1,
            ..Default::default()
        }));
        // The room writes his line (what was heard of it) and takes back the steers: whatever
        // it sent after the last look here starts its next run.
        room.ended(room::RunEnd { first: first.clone(), covered: covered.clone(), verdict, said, result: result.clone(), steers });
        self.settle(key, &covered, result, calls).await;
    }

    /// Announces a run's answer, already handed to the body sentence by sentence (or records its
    /// silence or failure), and gives every input it covered its outcome. His line in the ring is
    /// the room's to write.
    async fn settle(&self, key: (u64, u64), covered: &[v1::RoomInput], result: Result<String, &'static str>, calls: u32) {
        let Some(first) = covered.first() else { return };
        let absorbed = |input: &v1::RoomInput| input.delivery_id != first.delivery_id;
        for input in covered.iter().filter(|i| absorbed(i)) {
            self.receipt("voice.outcome", input, |r| r.with_code("absorbed").with_id("into", first.delivery_id.as_str())).await;
        }
        let text = match result {
            Err(code) => {
                self.receipt("voice.response", first, |r| r.with_code("failed").with_code(code)).await;
                self.receipt("voice.outcome", first, |r| r.with_code("failed").with_code(code)).await;
                return;
            }
            Ok(text) => text,
        };
        if silence::is_silent(&text) || silence::strip_token(&text).is_empty() {
            self.receipt("voice.response", first, |r| r.with_code("silent")).await;
            self.receipt("voice.outcome", first, |r| r.with_code("silent")).await;
            return;
        }
        let words = silence::strip_token(&text);
        let speak =
            v1::Speak { delivery_id: first.delivery_id.clone(), guild_id: key.0, channel_id: key.1, text: words.clone(), at_ms: now_ms() };
        let id = MsgId::new(format!("speak:{}", first.delivery_id));
        if let Err(e) = self.bus.publish(&Subject::VoiceSpeak { guild: key.0, channel: key.1 }, &speak, Some(&id)).await {
            tracing::warn!(error = %e, "speak event not published");
            self.receipt("voice.outcome", first, |r| r.with_code("failed").with_code("speak_unpublished")).await;
            return;
        }
        self.receipt("voice.response", first, |r| {
            r.with_code("spoke")
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
        let reply = self.bus.request::<_, v1::AskReply>(&subject, &request, self.config.ask_timeout).await;
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

    async fn receipt(&self, kind: &'static str, input: &v1::RoomInput, build: impl FnOnce(v1::Receipt) -> v1::Receipt) {
        let Ok(kind) = ReceiptKind::new(kind) else { return };
        let lane = clankie_proto::LaneKey::Voice { guild: input.guild_id, channel: input.channel_id };
        let receipt = build(
            v1::Receipt::new(&kind, self.bus.service(), &input.delivery_id, now_ms())
                .with_lane(&lane)
                .with_id("guild", input.guild_id)
                .with_id("channel", input.channel_id),
        );
        if let Err(e) = self.bus.publish_receipt(&receipt).await {
            tracing::warn!(error = %e, "receipt not published");
        }
    }
}

#[cfg(test)]
mod ring_tests {
    use super::*;

    fn run(sentences: &[(usize, &str)]) -> Vec<(usize, String)> {
        sentences.iter().map(|(r, s)| (*r, (*s).to_owned())).collect()
    }

    #[test]
    fn ring_fidelity_a_cut_keeps_what_played_and_what_a_later_answer_said() {
        let said = run(&[(0, "one two three."), (0, "four five six seven."), (0, "eight nine."), (1, "Sorry, go on.")]);
        assert_eq!(heard_of(&said, 1, 0.5), "one two three. four five… Sorry, go on.");
        assert_eq!(heard_of(&said, 0, 0.0), "… Sorry, go on.");
        assert_eq!(heard_of(&said[..3], 2, 1.0), "one two three. four five six seven. eight nine.…");
        assert_eq!(sentence_of(&sentence_id(&answer_id("utt:1:2:3:4", 0), 7)), Some(("utt:1:2:3:4", 7)));
        assert_eq!(sentence_of("no sentence"), None);
    }
}
