//! The event contract every Clankie service speaks.
//!
//! - [`v1`]: the protobuf messages generated from `proto/clankie/v1`.
//! - [`LaneKey`]: the durable identity of a room's conversation.
//! - [`Subject`] and [`Family`]: the only place subject strings are built or parsed.
//! - [`Event`]: ties each message type to the subjects that carry it.
//! - [`json`]: decodes any event to proto3 JSON for taps and trails.
//! - [`words`]: whose words an event holds, for the audience rule and a forget.

pub mod audience;
pub mod json;
mod lane;
pub mod receipt;
mod subject;
pub mod time;
pub mod words;

pub use lane::{LaneKey, LaneKeyError};
pub use subject::{Area, Family, Place, ReceiptKind, Subject, SubjectError};

/// Generated protobuf types for package `clankie.v1`.
#[allow(clippy::all, missing_docs)]
pub mod v1 {
    include!(concat!(env!("OUT_DIR"), "/clankie.v1.rs"));
}

/// The encoded `FileDescriptorSet` of every `clankie.v1` file.
pub const DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/clankie_descriptor.bin"));

/// A protobuf message that travels on the bus.
pub trait Event: prost::Message + prost::Name + Default + Clone + Send + Sync + 'static {}

impl Event for v1::Ingress {}
impl Event for v1::RoomInput {}
impl Event for v1::Steer {}
impl Event for v1::DeliveryOutcome {}
impl Event for v1::TypingAction {}
impl Event for v1::OutboundMessage {}
impl Event for v1::VoiceSession {}
impl Event for v1::Transcript {}
impl Event for v1::FloorDecision {}
impl Event for v1::Receipt {}
impl Event for v1::Experience {}
impl Event for v1::TypingSignal {}
impl Event for v1::HistoryRequest {}
impl Event for v1::HistoryReply {}
impl Event for v1::ContextRequest {}
impl Event for v1::ContextReply {}
impl Event for v1::Speak {}
impl Event for v1::VoiceMember {}
impl Event for v1::VoiceServer {}
impl Event for v1::VoiceCommand {}
impl Event for v1::AskRequest {}
impl Event for v1::AskReply {}
impl Event for v1::CommandRequest {}
impl Event for v1::CommandReply {}
impl Event for v1::MediaResolveRequest {}
impl Event for v1::MediaResolveReply {}
impl Event for v1::MediaAttachmentRequest {}
impl Event for v1::MediaRegisterRequest {}
impl Event for v1::MediaRegisterReply {}
impl Event for v1::MediaForgetRequest {}
impl Event for v1::MediaForgetReply {}
impl Event for v1::Reminder {}

impl v1::FailureCode {
    /// The stable snake-case code written to outcomes, receipts and metrics.
    pub fn code(self) -> &'static str {
        match self {
            v1::FailureCode::Unspecified => "unspecified",
            v1::FailureCode::CaptainUsageLimitReached => "captain_usage_limit_reached",
            v1::FailureCode::CaptainModelFailed => "captain_model_failed",
            v1::FailureCode::CaptainResponseMissing => "captain_response_missing",
            v1::FailureCode::CaptainTurnStalled => "captain_turn_stalled",
            v1::FailureCode::CaptainLaneUnavailable => "captain_lane_unavailable",
        }
    }

    /// Parses a code written by [`FailureCode::code`](v1::FailureCode::code).
    pub fn from_code(code: &str) -> Option<Self> {
        [
            v1::FailureCode::CaptainUsageLimitReached,
            v1::FailureCode::CaptainModelFailed,
            v1::FailureCode::CaptainResponseMissing,
            v1::FailureCode::CaptainTurnStalled,
            v1::FailureCode::CaptainLaneUnavailable,
        ]
        .into_iter()
        .find(|c| c.code() == code)
    }
}

impl v1::OutcomeKind {
    /// The stable snake-case name stored in the deliveries table.
    pub fn code(self) -> &'static str {
        match self {
            v1::OutcomeKind::Unspecified => "unspecified",
            v1::OutcomeKind::Replied => "replied",
            v1::OutcomeKind::Absorbed => "absorbed",
            v1::OutcomeKind::Silent => "silent",
            v1::OutcomeKind::Failed => "failed",
            v1::OutcomeKind::Withdrawn => "withdrawn",
        }
    }

    /// The reaction the body puts on a delivery to show its outcome (the sandbox reads it back).
    pub fn reaction(self) -> &'static str {
        match self {
            v1::OutcomeKind::Unspecified => "❔",
            v1::OutcomeKind::Replied => "✅",
            v1::OutcomeKind::Absorbed => "🫧",
            v1::OutcomeKind::Silent => "🤐",
            v1::OutcomeKind::Failed => "⚠️",
            // Never put on a message: it is gone.
            v1::OutcomeKind::Withdrawn => "🗑️",
        }
    }

    /// The outcome a reaction stands for.
    pub fn from_reaction(emoji: &str) -> Option<Self> {
        [v1::OutcomeKind::Replied, v1::OutcomeKind::Absorbed, v1::OutcomeKind::Silent, v1::OutcomeKind::Failed]
            .into_iter()
            .find(|k| k.reaction() == emoji)
    }

    /// Parses a name written by [`OutcomeKind::code`](v1::OutcomeKind::code).
    pub fn from_code(code: &str) -> Option<Self> {
        [v1::OutcomeKind::Replied, v1::OutcomeKind::Absorbed, v1::OutcomeKind::Silent, v1::OutcomeKind::Failed, v1::OutcomeKind::Withdrawn]
            .into_iter()
            .find(|c| c.code() == code)
    }
}

/// The `reason` of a `VoiceCommand` the owner gave (`/clankie voice`): the voice floor's keeper
/// checks it against `CLANKIE_VOICE_ROOMS` and asks for op 4 itself; the gateway sends op 4 only
/// for the keeper's own commands.
pub const OWNER_VOICE_REASON: &str = "owner";

/// The codes a [`v1::CommandReply`] may carry, so a receipt can name one as a static code.
pub const COMMAND_REPLY_CODES: &[&str] = &[
    "not_owner",
    "expired",
    "already_decided",
    "unknown_button",
    "unknown_command",
    "store_unavailable",
    "bus_unavailable",
    "bad_channel",
    "bad_minutes",
    "bad_days",
    "not_in_guild",
    "lanes_busy",
    "forget_running",
    "media_unavailable",
    "request_undecodable",
    "captain_unavailable",
];

/// A command reply's code as a receipt code: `done` when empty, `other` when not one of ours.
pub fn command_reply_code(code: &str) -> &'static str {
    if code.is_empty() {
        return "done";
    }
    COMMAND_REPLY_CODES.iter().copied().find(|c| *c == code).unwrap_or("other")
}

impl v1::Reminder {
    /// The lane the reminder posts in: its guild channel, or its DM channel.
    pub fn lane(&self) -> LaneKey {
        match self.guild_id {
            Some(guild) => LaneKey::Room { guild, channel: self.channel_id },
            None => LaneKey::Dm { channel: self.channel_id },
        }
    }
}

impl v1::VoiceSession {
    /// The live voice channel this session says he is in at `now_ms`: none once its owner has
    /// stopped vouching for it.
    pub fn live_channel(&self, now_ms: i64) -> Option<u64> {
        self.channel_id.filter(|_| self.live_until_ms == 0 || now_ms <= self.live_until_ms)
    }
}
