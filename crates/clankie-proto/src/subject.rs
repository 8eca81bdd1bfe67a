//! The subject catalogue. Every subject string in the workspace is built or
//! parsed here; other crates hold [`Subject`] values, never literals.

use std::fmt;

use crate::{Event, LaneKey};

const ROOT: &str = "clankie";
const DM: &str = "dm";

/// Where a text message was written: a guild, or a DM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Place {
    Guild(u64),
    Dm,
}

/// The dotted kind of a receipt, such as `discord.voice.text_input`.
///
/// Each token is lower-case ASCII letters, digits and `_`, so the kind can be a
/// subject suffix and a column value without escaping.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ReceiptKind(String);

impl ReceiptKind {
    /// Validates a dotted receipt kind.
    pub fn new(kind: &str) -> Result<Self, SubjectError> {
        let valid_token = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if kind.len() <= 128 && kind.split('.').all(valid_token) {
            Ok(ReceiptKind(kind.to_owned()))
        } else {
            Err(SubjectError::BadReceiptKind(truncate(kind)))
        }
    }

    /// The dotted text form.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ReceiptKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One concrete subject an event is published on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Subject {
    /// `clankie.ingress.text.<guild|dm>.<channel>`: a text-lane delivery.
    IngressText { place: Place, channel: u64 },
    /// `clankie.ingress.room.<guild>.<channel>`: text routed into a live voice room.
    IngressRoom { guild: u64, channel: u64 },
    /// `clankie.lane.<lane>.steer`: a delivery forwarded to the live run's owner.
    LaneSteer { lane: LaneKey },
    /// `clankie.lane.<lane>.outcome`: the one outcome of a delivery.
    LaneOutcome { lane: LaneKey },
    /// `clankie.body.typing.<channel>`: light or clear the typing indicator.
    BodyTyping { channel: u64 },
    /// `clankie.body.send.<channel>`: something to post.
    BodySend { channel: u64 },
    /// `clankie.voice.session.<guild>`: which voice channel of a guild is live.
    VoiceSession { guild: u64 },
    /// `clankie.voice.input.<guild>.<channel>`: speech and typed lines entering a voice room.
    VoiceInput { guild: u64, channel: u64 },
    /// `clankie.voice.transcript.<guild>.<channel>`: captured speech only.
    VoiceTranscript { guild: u64, channel: u64 },
    /// `clankie.voice.floor.<guild>.<channel>`: the floor's decisions.
    VoiceFloor { guild: u64, channel: u64 },
    /// `clankie.voice.speak.<guild>.<channel>`: words for the audio body to say.
    VoiceSpeak { guild: u64, channel: u64 },
    /// `clankie.voice.member.<guild>.<user>`: a user's voice state (the last one is current).
    VoiceMember { guild: u64, user: u64 },
    /// `clankie.voice.server.<guild>`: the guild's voice server (endpoint and token).
    VoiceServer { guild: u64 },
    /// `clankie.voice.command.<guild>`: join or leave voice, for the gateway's shard.
    VoiceCommand { guild: u64 },
    /// `clankie.self.experience.<guild|dm>`: a thread's first-person experience, for the shared self.
    SelfExperience { place: Place },
    /// `clankie.schedule.def.<reminder>`: a reminder's schedule definition (its schedule in the
    /// `Nats-Schedule` headers); one schedule per reminder, replaced by publishing again.
    ScheduleDef { reminder: u64 },
    /// `clankie.schedule.due.<reminder>`: a reminder come due, published by nats-server itself.
    ScheduleDue { reminder: u64 },
    /// `clankie.receipt.<kind>`: content-free evidence.
    Receipt { kind: ReceiptKind },
    /// `clankie.signal.typing.<guild|dm>.<channel>`: someone is typing (core NATS, no stream).
    SignalTyping { place: Place, channel: u64 },
    /// `clankie.rpc.history.<channel>`: request/reply for a channel's recent messages (no stream).
    RpcHistory { channel: u64 },
    /// `clankie.rpc.context.<channel>`: request/reply for what a message points at, asked by a lane before its turn (no stream).
    RpcContext { channel: u64 },
    /// `clankie.rpc.ask.<guild>.<channel>`: the voice room's `ask_clankie` handoff to the captain (no stream).
    RpcAsk { guild: u64, channel: u64 },
    /// `clankie.rpc.media.resolve`: an artifact id to its path or bytes (no stream).
    RpcMediaResolve,
    /// `clankie.rpc.media.attachment`: an inbound attachment id to its stored artifact (no stream).
    RpcMediaAttachment,
    /// `clankie.rpc.media.register`: store an artifact a tool produced (no stream).
    RpcMediaRegister,
    /// `clankie.rpc.media.forget`: drop a forgotten person's attachments from the root (no stream).
    RpcMediaForget,
    /// `clankie.rpc.command`: a slash command or button press, answered by a captain (no stream).
    RpcCommand,
    /// `clankie.rpc.command.done.<interaction>`: the final answer of a command answered at once
    /// and finished later (a forget), for the gateway that holds the interaction (no stream).
    RpcCommandDone { interaction: u64 },
}

/// A kind of subject, independent of its ids: what wildcards and payload types hang off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    IngressText,
    IngressRoom,
    LaneSteer,
    LaneOutcome,
    BodyTyping,
    BodySend,
    VoiceSession,
    VoiceInput,
    VoiceTranscript,
    VoiceFloor,
    VoiceSpeak,
    VoiceMember,
    VoiceServer,
    VoiceCommand,
    SelfExperience,
    ScheduleDef,
    ScheduleDue,
    Receipt,
    SignalTyping,
    RpcHistory,
    RpcContext,
    RpcAsk,
    RpcMediaResolve,
    RpcMediaAttachment,
    RpcMediaRegister,
    RpcMediaForget,
    RpcCommand,
    RpcCommandDone,
}

/// The second token of a subject: what JetStream streams are cut along.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Area {
    Ingress,
    Lane,
    Body,
    Voice,
    /// What the shared self learns from its threads.
    Shared,
    /// Reminders: their schedule definitions and the firings nats-server publishes when due.
    Schedule,
    Receipt,
    /// Ephemeral signals on core NATS: outside every stream, since a lost one costs nothing.
    Signal,
    /// Request/reply subjects; deliberately outside every stream, so JetStream never answers them.
    Rpc,
}

/// A subject string that is not in the catalogue, or an invalid part of one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubjectError {
    #[error("subject {0:?} is not a clankie subject")]
    Unknown(String),
    #[error("subject {subject:?} has an invalid id in token {token}")]
    BadId { subject: String, token: usize },
    #[error("subject {0:?} names an invalid lane")]
    BadLane(String),
    #[error("receipt kind {0:?} must be dot-separated tokens of [a-z0-9_]")]
    BadReceiptKind(String),
    #[error("a {payload} cannot travel on {subject:?}, which carries {expected}")]
    WrongPayload { subject: String, payload: String, expected: &'static str },
}

fn truncate(s: &str) -> String {
    s.chars().take(120).collect()
}

impl Family {
    /// Every family, in catalogue order.
    pub const ALL: [Family; 28] = [
        Family::IngressText,
        Family::IngressRoom,
        Family::LaneSteer,
        Family::LaneOutcome,
        Family::BodyTyping,
        Family::BodySend,
        Family::VoiceSession,
        Family::VoiceInput,
        Family::VoiceTranscript,
        Family::VoiceFloor,
        Family::VoiceSpeak,
        Family::VoiceMember,
        Family::VoiceServer,
        Family::VoiceCommand,
        Family::SelfExperience,
        Family::ScheduleDef,
        Family::ScheduleDue,
        Family::Receipt,
        Family::SignalTyping,
        Family::RpcHistory,
        Family::RpcContext,
        Family::RpcAsk,
        Family::RpcMediaResolve,
        Family::RpcMediaAttachment,
        Family::RpcMediaRegister,
        Family::RpcMediaForget,
        Family::RpcCommand,
        Family::RpcCommandDone,
    ];

    /// A NATS wildcard matching every subject of this family.
    pub fn wildcard(self) -> String {
        match self {
            Family::IngressText => format!("{ROOT}.ingress.text.*.*"),
            Family::IngressRoom => format!("{ROOT}.ingress.room.*.*"),
            Family::LaneSteer => format!("{ROOT}.lane.*.steer"),
            Family::LaneOutcome => format!("{ROOT}.lane.*.outcome"),
            Family::BodyTyping => format!("{ROOT}.body.typing.*"),
            Family::BodySend => format!("{ROOT}.body.send.*"),
            Family::VoiceSession => format!("{ROOT}.voice.session.*"),
            Family::VoiceInput => format!("{ROOT}.voice.input.*.*"),
            Family::VoiceTranscript => format!("{ROOT}.voice.transcript.*.*"),
            Family::VoiceFloor => format!("{ROOT}.voice.floor.*.*"),
            Family::VoiceSpeak => format!("{ROOT}.voice.speak.*.*"),
            Family::VoiceMember => format!("{ROOT}.voice.member.*.*"),
            Family::VoiceServer => format!("{ROOT}.voice.server.*"),
            Family::VoiceCommand => format!("{ROOT}.voice.command.*"),
            Family::SelfExperience => format!("{ROOT}.self.experience.*"),
            Family::ScheduleDef => format!("{ROOT}.schedule.def.*"),
            Family::ScheduleDue => format!("{ROOT}.schedule.due.*"),
            Family::Receipt => format!("{ROOT}.receipt.>"),
            Family::SignalTyping => format!("{ROOT}.signal.typing.*.*"),
            Family::RpcHistory => format!("{ROOT}.rpc.history.*"),
            Family::RpcContext => format!("{ROOT}.rpc.context.*"),
            Family::RpcAsk => format!("{ROOT}.rpc.ask.*.*"),
            Family::RpcMediaResolve => format!("{ROOT}.rpc.media.resolve"),
            Family::RpcMediaAttachment => format!("{ROOT}.rpc.media.attachment"),
            Family::RpcMediaRegister => format!("{ROOT}.rpc.media.register"),
            Family::RpcMediaForget => format!("{ROOT}.rpc.media.forget"),
            Family::RpcCommand => format!("{ROOT}.rpc.command"),
            Family::RpcCommandDone => format!("{ROOT}.rpc.command.done.*"),
        }
    }

    /// The fully qualified protobuf name of the payload this family carries.
    pub fn payload(self) -> &'static str {
        match self {
            Family::IngressText => "clankie.v1.Ingress",
            Family::IngressRoom | Family::VoiceInput => "clankie.v1.RoomInput",
            Family::LaneSteer => "clankie.v1.Steer",
            Family::LaneOutcome => "clankie.v1.DeliveryOutcome",
            Family::BodyTyping => "clankie.v1.TypingAction",
            Family::BodySend => "clankie.v1.OutboundMessage",
            Family::VoiceSession => "clankie.v1.VoiceSession",
            Family::VoiceTranscript => "clankie.v1.Transcript",
            Family::VoiceFloor => "clankie.v1.FloorDecision",
            Family::VoiceSpeak => "clankie.v1.Speak",
            Family::VoiceMember => "clankie.v1.VoiceMember",
            Family::VoiceServer => "clankie.v1.VoiceServer",
            Family::VoiceCommand => "clankie.v1.VoiceCommand",
            Family::SelfExperience => "clankie.v1.Experience",
            Family::ScheduleDef | Family::ScheduleDue => "clankie.v1.Reminder",
            Family::Receipt => "clankie.v1.Receipt",
            Family::SignalTyping => "clankie.v1.TypingSignal",
            Family::RpcHistory => "clankie.v1.HistoryRequest",
            Family::RpcContext => "clankie.v1.ContextRequest",
            Family::RpcAsk => "clankie.v1.AskRequest",
            Family::RpcMediaResolve => "clankie.v1.MediaResolveRequest",
            Family::RpcMediaAttachment => "clankie.v1.MediaAttachmentRequest",
            Family::RpcMediaRegister => "clankie.v1.MediaRegisterRequest",
            Family::RpcMediaForget => "clankie.v1.MediaForgetRequest",
            Family::RpcCommand => "clankie.v1.CommandRequest",
            Family::RpcCommandDone => "clankie.v1.CommandReply",
        }
    }

    /// The area (and so the stream) this family belongs to.
    pub fn area(self) -> Area {
        match self {
            Family::IngressText | Family::IngressRoom => Area::Ingress,
            Family::LaneSteer | Family::LaneOutcome => Area::Lane,
            Family::BodyTyping | Family::BodySend => Area::Body,
            Family::VoiceSession
            | Family::VoiceInput
            | Family::VoiceTranscript
            | Family::VoiceFloor
            | Family::VoiceSpeak
            | Family::VoiceMember
            | Family::VoiceServer
            | Family::VoiceCommand => Area::Voice,
            Family::SelfExperience => Area::Shared,
            Family::ScheduleDef | Family::ScheduleDue => Area::Schedule,
            Family::Receipt => Area::Receipt,
            Family::SignalTyping => Area::Signal,
            Family::RpcHistory
            | Family::RpcContext
            | Family::RpcAsk
            | Family::RpcMediaResolve
            | Family::RpcMediaAttachment
            | Family::RpcMediaRegister
            | Family::RpcMediaForget
            | Family::RpcCommand
            | Family::RpcCommandDone => Area::Rpc,
        }
    }
}

impl Area {
    /// Every area, in catalogue order.
    pub const ALL: [Area; 9] =
        [Area::Ingress, Area::Lane, Area::Body, Area::Voice, Area::Shared, Area::Schedule, Area::Receipt, Area::Signal, Area::Rpc];

    /// Whether JetStream stores this area's subjects.
    pub fn is_streamed(self) -> bool {
        !matches!(self, Area::Rpc | Area::Signal)
    }

    /// A NATS wildcard matching every subject in this area.
    pub fn wildcard(self) -> String {
        let token = match self {
            Area::Ingress => "ingress",
            Area::Lane => "lane",
            Area::Body => "body",
            Area::Voice => "voice",
            Area::Shared => "self",
            Area::Schedule => "schedule",
            Area::Receipt => "receipt",
            Area::Signal => "signal",
            Area::Rpc => "rpc",
        };
        format!("{ROOT}.{token}.>")
    }
}

impl Subject {
    /// A wildcard matching every clankie subject, for taps.
    pub fn everything() -> String {
        format!("{ROOT}.>")
    }

    /// Whether a subject filter stays inside clankie's subjects (a tap may not read NATS' own).
    pub fn filter_is_ours(filter: &str) -> bool {
        filter.strip_prefix(ROOT).is_some_and(|rest| rest.starts_with('.'))
    }

    /// The subject a text message is published on.
    pub fn ingress_text(guild: Option<u64>, channel: u64) -> Subject {
        let place = guild.map_or(Place::Dm, Place::Guild);
        Subject::IngressText { place, channel }
    }

    /// The receipt subject for a dotted kind.
    pub fn receipt(kind: &str) -> Result<Subject, SubjectError> {
        Ok(Subject::Receipt { kind: ReceiptKind::new(kind)? })
    }

    /// The family this subject belongs to.
    pub fn family(&self) -> Family {
        match self {
            Subject::IngressText { .. } => Family::IngressText,
            Subject::IngressRoom { .. } => Family::IngressRoom,
            Subject::LaneSteer { .. } => Family::LaneSteer,
            Subject::LaneOutcome { .. } => Family::LaneOutcome,
            Subject::BodyTyping { .. } => Family::BodyTyping,
            Subject::BodySend { .. } => Family::BodySend,
            Subject::VoiceSession { .. } => Family::VoiceSession,
            Subject::VoiceInput { .. } => Family::VoiceInput,
            Subject::VoiceTranscript { .. } => Family::VoiceTranscript,
            Subject::VoiceFloor { .. } => Family::VoiceFloor,
            Subject::VoiceSpeak { .. } => Family::VoiceSpeak,
            Subject::VoiceMember { .. } => Family::VoiceMember,
            Subject::VoiceServer { .. } => Family::VoiceServer,
            Subject::VoiceCommand { .. } => Family::VoiceCommand,
            Subject::SelfExperience { .. } => Family::SelfExperience,
            Subject::ScheduleDef { .. } => Family::ScheduleDef,
            Subject::ScheduleDue { .. } => Family::ScheduleDue,
            Subject::Receipt { .. } => Family::Receipt,
            Subject::SignalTyping { .. } => Family::SignalTyping,
            Subject::RpcHistory { .. } => Family::RpcHistory,
            Subject::RpcContext { .. } => Family::RpcContext,
            Subject::RpcAsk { .. } => Family::RpcAsk,
            Subject::RpcMediaResolve => Family::RpcMediaResolve,
            Subject::RpcMediaAttachment => Family::RpcMediaAttachment,
            Subject::RpcMediaRegister => Family::RpcMediaRegister,
            Subject::RpcMediaForget => Family::RpcMediaForget,
            Subject::RpcCommand => Family::RpcCommand,
            Subject::RpcCommandDone { .. } => Family::RpcCommandDone,
        }
    }

    /// Checks that `E` is the payload this subject carries.
    pub fn check_payload<E: Event>(&self) -> Result<(), SubjectError> {
        let expected = self.family().payload();
        if E::full_name() == expected {
            Ok(())
        } else {
            Err(SubjectError::WrongPayload { subject: self.to_string(), payload: E::full_name(), expected })
        }
    }

    /// Parses a concrete subject string.
    pub fn parse(subject: &str) -> Result<Subject, SubjectError> {
        let tokens: Vec<&str> = subject.split('.').collect();
        let unknown = || SubjectError::Unknown(truncate(subject));
        let id = |i: usize| -> Result<u64, SubjectError> {
            let t = tokens[i];
            if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
                return Err(SubjectError::BadId { subject: truncate(subject), token: i });
            }
            t.parse().map_err(|_| SubjectError::BadId { subject: truncate(subject), token: i })
        };
        let lane = |i: usize| -> Result<LaneKey, SubjectError> { tokens[i].parse().map_err(|_| SubjectError::BadLane(truncate(subject))) };
        if tokens.first() != Some(&ROOT) {
            return Err(unknown());
        }
        match tokens[1..] {
            ["ingress", "text", place, _] => {
                let place = if place == DM { Place::Dm } else { Place::Guild(id(3)?) };
                Ok(Subject::IngressText { place, channel: id(4)? })
            }
            ["ingress", "room", _, _] => Ok(Subject::IngressRoom { guild: id(3)?, channel: id(4)? }),
            ["lane", _, "steer"] => Ok(Subject::LaneSteer { lane: lane(2)? }),
            ["lane", _, "outcome"] => Ok(Subject::LaneOutcome { lane: lane(2)? }),
            ["body", "typing", _] => Ok(Subject::BodyTyping { channel: id(3)? }),
            ["body", "send", _] => Ok(Subject::BodySend { channel: id(3)? }),
            ["voice", "session", _] => Ok(Subject::VoiceSession { guild: id(3)? }),
            ["voice", "input", _, _] => Ok(Subject::VoiceInput { guild: id(3)?, channel: id(4)? }),
            ["voice", "transcript", _, _] => Ok(Subject::VoiceTranscript { guild: id(3)?, channel: id(4)? }),
            ["voice", "floor", _, _] => Ok(Subject::VoiceFloor { guild: id(3)?, channel: id(4)? }),
            ["voice", "speak", _, _] => Ok(Subject::VoiceSpeak { guild: id(3)?, channel: id(4)? }),
            ["voice", "member", _, _] => Ok(Subject::VoiceMember { guild: id(3)?, user: id(4)? }),
            ["voice", "server", _] => Ok(Subject::VoiceServer { guild: id(3)? }),
            ["voice", "command", _] => Ok(Subject::VoiceCommand { guild: id(3)? }),
            ["self", "experience", place] => {
                let place = if place == DM { Place::Dm } else { Place::Guild(id(3)?) };
                Ok(Subject::SelfExperience { place })
            }
            ["schedule", "def", _] => Ok(Subject::ScheduleDef { reminder: id(3)? }),
            ["schedule", "due", _] => Ok(Subject::ScheduleDue { reminder: id(3)? }),
            ["signal", "typing", place, _] => {
                let place = if place == DM { Place::Dm } else { Place::Guild(id(3)?) };
                Ok(Subject::SignalTyping { place, channel: id(4)? })
            }
            ["rpc", "ask", _, _] => Ok(Subject::RpcAsk { guild: id(3)?, channel: id(4)? }),
            ["rpc", "media", "resolve"] => Ok(Subject::RpcMediaResolve),
            ["rpc", "media", "attachment"] => Ok(Subject::RpcMediaAttachment),
            ["rpc", "media", "register"] => Ok(Subject::RpcMediaRegister),
            ["rpc", "media", "forget"] => Ok(Subject::RpcMediaForget),
            ["rpc", "command"] => Ok(Subject::RpcCommand),
            ["rpc", "command", "done", _] => Ok(Subject::RpcCommandDone { interaction: id(4)? }),
            ["rpc", "history", _] => Ok(Subject::RpcHistory { channel: id(3)? }),
            ["rpc", "context", _] => Ok(Subject::RpcContext { channel: id(3)? }),
            ["receipt", ..] if tokens.len() > 2 => Ok(Subject::Receipt { kind: ReceiptKind::new(&tokens[2..].join("."))? }),
            _ => Err(unknown()),
        }
    }
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Subject::IngressText { place: Place::Guild(g), channel } => write!(f, "{ROOT}.ingress.text.{g}.{channel}"),
            Subject::IngressText { place: Place::Dm, channel } => write!(f, "{ROOT}.ingress.text.{DM}.{channel}"),
            Subject::IngressRoom { guild, channel } => write!(f, "{ROOT}.ingress.room.{guild}.{channel}"),
            Subject::LaneSteer { lane } => write!(f, "{ROOT}.lane.{lane}.steer"),
            Subject::LaneOutcome { lane } => write!(f, "{ROOT}.lane.{lane}.outcome"),
            Subject::BodyTyping { channel } => write!(f, "{ROOT}.body.typing.{channel}"),
            Subject::BodySend { channel } => write!(f, "{ROOT}.body.send.{channel}"),
            Subject::VoiceSession { guild } => write!(f, "{ROOT}.voice.session.{guild}"),
            Subject::VoiceInput { guild, channel } => write!(f, "{ROOT}.voice.input.{guild}.{channel}"),
            Subject::VoiceTranscript { guild, channel } => write!(f, "{ROOT}.voice.transcript.{guild}.{channel}"),
            Subject::VoiceFloor { guild, channel } => write!(f, "{ROOT}.voice.floor.{guild}.{channel}"),
            Subject::VoiceSpeak { guild, channel } => write!(f, "{ROOT}.voice.speak.{guild}.{channel}"),
            Subject::VoiceMember { guild, user } => write!(f, "{ROOT}.voice.member.{guild}.{user}"),
            Subject::VoiceServer { guild } => write!(f, "{ROOT}.voice.server.{guild}"),
            Subject::VoiceCommand { guild } => write!(f, "{ROOT}.voice.command.{guild}"),
            Subject::RpcAsk { guild, channel } => write!(f, "{ROOT}.rpc.ask.{guild}.{channel}"),
            Subject::RpcMediaResolve => write!(f, "{ROOT}.rpc.media.resolve"),
            Subject::RpcMediaAttachment => write!(f, "{ROOT}.rpc.media.attachment"),
            Subject::RpcMediaRegister => write!(f, "{ROOT}.rpc.media.register"),
            Subject::RpcMediaForget => write!(f, "{ROOT}.rpc.media.forget"),
            Subject::RpcCommand => write!(f, "{ROOT}.rpc.command"),
            Subject::RpcCommandDone { interaction } => write!(f, "{ROOT}.rpc.command.done.{interaction}"),
            Subject::SelfExperience { place: Place::Guild(g) } => write!(f, "{ROOT}.self.experience.{g}"),
            Subject::SelfExperience { place: Place::Dm } => write!(f, "{ROOT}.self.experience.{DM}"),
            Subject::ScheduleDef { reminder } => write!(f, "{ROOT}.schedule.def.{reminder}"),
            Subject::ScheduleDue { reminder } => write!(f, "{ROOT}.schedule.due.{reminder}"),
            Subject::Receipt { kind } => write!(f, "{ROOT}.receipt.{kind}"),
            Subject::SignalTyping { place: Place::Guild(g), channel } => write!(f, "{ROOT}.signal.typing.{g}.{channel}"),
            Subject::SignalTyping { place: Place::Dm, channel } => write!(f, "{ROOT}.signal.typing.{DM}.{channel}"),
            Subject::RpcHistory { channel } => write!(f, "{ROOT}.rpc.history.{channel}"),
            Subject::RpcContext { channel } => write!(f, "{ROOT}.rpc.context.{channel}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v1;

    fn samples() -> Vec<Subject> {
        let lane = LaneKey::Room { guild: 10, channel: 20 };
        vec![
            Subject::ingress_text(Some(1), 2),
            Subject::ingress_text(None, 3),
            Subject::IngressRoom { guild: 4, channel: 5 },
            Subject::LaneSteer { lane },
            Subject::LaneOutcome { lane: LaneKey::Dm { channel: 7 } },
            Subject::BodyTyping { channel: 8 },
            Subject::BodySend { channel: 9 },
            Subject::VoiceSession { guild: 11 },
            Subject::VoiceInput { guild: 12, channel: 13 },
            Subject::VoiceTranscript { guild: 14, channel: 15 },
            Subject::VoiceFloor { guild: 16, channel: 17 },
            Subject::receipt("discord.voice.text_input").unwrap(),
            Subject::RpcHistory { channel: 18 },
            Subject::RpcContext { channel: 18 },
            Subject::VoiceSpeak { guild: 19, channel: 20 },
            Subject::VoiceMember { guild: 23, user: 24 },
            Subject::VoiceServer { guild: 25 },
            Subject::VoiceCommand { guild: 26 },
            Subject::RpcAsk { guild: 21, channel: 22 },
            Subject::RpcMediaResolve,
            Subject::RpcMediaAttachment,
            Subject::RpcMediaRegister,
            Subject::RpcMediaForget,
            Subject::RpcCommand,
            Subject::RpcCommandDone { interaction: 25 },
            Subject::SelfExperience { place: Place::Guild(23) },
            Subject::SelfExperience { place: Place::Dm },
            Subject::SignalTyping { place: Place::Guild(24), channel: 25 },
            Subject::SignalTyping { place: Place::Dm, channel: 26 },
            Subject::ScheduleDef { reminder: 27 },
            Subject::ScheduleDue { reminder: 28 },
        ]
    }

    #[test]
    fn every_subject_round_trips_through_its_string() {
        for s in samples() {
            assert_eq!(Subject::parse(&s.to_string()), Ok(s.clone()), "{s}");
        }
    }

    #[test]
    fn every_family_is_sampled_and_its_wildcard_matches() {
        for family in Family::ALL {
            let s = samples().into_iter().find(|s| s.family() == family).expect("sampled");
            assert!(wildcard_matches(&family.wildcard(), &s.to_string()), "{family:?}");
            assert!(wildcard_matches(&family.area().wildcard(), &s.to_string()));
        }
    }

    #[test]
    fn strangers_and_bad_ids_are_rejected() {
        for bad in [
            "",
            "clankie",
            "other.ingress.text.1.2",
            "clankie.ingress.text.1",
            "clankie.ingress.text.x.2",
            "clankie.ingress.text.1.-2",
            "clankie.body.send.18446744073709551616",
            "clankie.lane.room:1.steer",
            "clankie.receipt",
            "clankie.receipt.Bad",
            "clankie.voice.floor.1.2.3",
            "clankie.schedule.def",
            "clankie.schedule.def.x",
            "clankie.schedule.due.1.2",
            "clankie.schedule.next.1",
        ] {
            assert!(Subject::parse(bad).is_err(), "{bad} parsed");
        }
    }

    #[test]
    fn a_reminders_definition_and_its_firings_share_a_streamed_area_and_never_collide() {
        // nats-server publishes a firing only on a subject of the definition's own stream, and
        // refuses a target that collides with the definition's subject.
        let (def, due) = (Subject::ScheduleDef { reminder: 7 }, Subject::ScheduleDue { reminder: 7 });
        assert_eq!(def.family().area(), Area::Schedule);
        assert_eq!(due.family().area(), Area::Schedule);
        assert!(Area::Schedule.is_streamed());
        assert!(!wildcard_matches(&Family::ScheduleDef.wildcard(), &due.to_string()));
        assert!(!wildcard_matches(&Family::ScheduleDue.wildcard(), &def.to_string()));
        assert_eq!(Family::ScheduleDef.payload(), Family::ScheduleDue.payload());
        assert!(due.check_payload::<v1::Reminder>().is_ok());
    }

    #[test]
    fn payload_check_refuses_the_wrong_type() {
        assert!(Subject::BodySend { channel: 1 }.check_payload::<v1::OutboundMessage>().is_ok());
        assert!(Subject::BodySend { channel: 1 }.check_payload::<v1::Ingress>().is_err());
    }

    fn wildcard_matches(pattern: &str, subject: &str) -> bool {
        let p: Vec<&str> = pattern.split('.').collect();
        let s: Vec<&str> = subject.split('.').collect();
        for (i, tok) in p.iter().enumerate() {
            match *tok {
                ">" => return s.len() > i,
                "*" if i < s.len() => {}
                t if s.get(i) == Some(&t) => {}
                _ => return false,
            }
        }
        p.len() == s.len()
    }
}
