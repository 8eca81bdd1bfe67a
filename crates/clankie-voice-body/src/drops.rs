//! Hostile or broken voice traffic, counted by kind.
//!
//! songbird drops what it cannot use (garbage JSON on the voice socket, undersized or
//! unauthenticated datagrams, RTP it cannot parse, Opus it cannot decode) without telling its
//! caller; it only logs. [`layer`] is a tracing layer that turns those log lines of the pinned
//! songbird 0.6.1 into counts (DAVE's failures among them), and the body counts what it drops itself (audio from an SSRC no
//! speaking update named). The counts are per process, read with [`counts`].

use std::sync::atomic::{AtomicU64, Ordering};

use tracing::field::{Field, Visit};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{Targets, filter_fn};
use tracing_subscriber::layer::Context;

/// A kind of dropped input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Drop {
    /// A voice-socket text frame that is not a voice gateway event.
    GarbageJson,
    /// A datagram too small to be anything.
    Undersized,
    /// An RTP packet whose AEAD tag did not verify (forged, or for another key).
    Unauthenticated,
    /// An RTP packet of the wrong version or payload type.
    IllegalRtp,
    /// An Opus frame that would not decode (truncated or malformed).
    BadOpus,
    /// Audio from an SSRC that no speaking update mapped to a user.
    UnknownSsrc,
    /// A DAVE commit he could not process (he answers op 31 and starts over).
    DaveCommitInvalid,
    /// A DAVE welcome he could not process (op 31, as for a commit).
    DaveWelcomeInvalid,
    /// DAVE proposals he refused (an unexpected user, or a message that does not verify).
    DaveProposalsRefused,
    /// An end-to-end encrypted frame that would not decrypt.
    DaveUndecryptable,
}

impl Drop {
    /// Every kind, in a fixed order.
    pub const ALL: [Drop; 10] = [
        Drop::GarbageJson,
        Drop::Undersized,
        Drop::Unauthenticated,
        Drop::IllegalRtp,
        Drop::BadOpus,
        Drop::UnknownSsrc,
        Drop::DaveCommitInvalid,
        Drop::DaveWelcomeInvalid,
        Drop::DaveProposalsRefused,
        Drop::DaveUndecryptable,
    ];

    /// Its name in metrics and receipts.
    pub fn as_str(self) -> &'static str {
        match self {
            Drop::GarbageJson => "garbage_json",
            Drop::Undersized => "undersized",
            Drop::Unauthenticated => "unauthenticated",
            Drop::IllegalRtp => "illegal_rtp",
            Drop::BadOpus => "bad_opus",
            Drop::UnknownSsrc => "unknown_ssrc",
            Drop::DaveCommitInvalid => "dave_commit_invalid",
            Drop::DaveWelcomeInvalid => "dave_welcome_invalid",
            Drop::DaveProposalsRefused => "dave_proposals_refused",
            Drop::DaveUndecryptable => "dave_undecryptable",
        }
    }

    fn slot(self) -> usize {
        Drop::ALL.iter().position(|d| *d == self).unwrap_or(0)
    }

    /// The kind a songbird log line reports, if it reports a drop.
    fn from_songbird(message: &str) -> Option<Drop> {
        if message.starts_with("Unexpected JSON") || message.starts_with("Unexpected binary") {
            Some(Drop::GarbageJson)
        } else if message.starts_with("Illegal UDP packet") || message.starts_with("Failed to parse message") {
            // Shorter than two bytes, or than the fixed header of the type its second byte claims.
            Some(Drop::Undersized)
        } else if message.starts_with("RTP decryption failed") || message.starts_with("RTCP decryption failed") {
            Some(Drop::Unauthenticated)
        } else if message.starts_with("Illegal RTP message") {
            Some(Drop::IllegalRtp)
        } else if message.starts_with("Decode error for SSRC") {
            Some(Drop::BadOpus)
        } else if message.starts_with("MLS commit errored") {
            Some(Drop::DaveCommitInvalid)
        } else if message.starts_with("MLS welcome errored") {
            Some(Drop::DaveWelcomeInvalid)
        } else if message.starts_with("error processing MLS proposals") {
            Some(Drop::DaveProposalsRefused)
        } else if message.starts_with("DAVE decryption failed") {
            Some(Drop::DaveUndecryptable)
        } else {
            None
        }
    }
}

static COUNTS: [AtomicU64; Drop::ALL.len()] = [const { AtomicU64::new(0) }; Drop::ALL.len()];

/// Counts one dropped input.
pub fn count(kind: Drop) {
    COUNTS[kind.slot()].fetch_add(1, Ordering::Relaxed);
    metrics::counter!("clankie_voice_dropped_total", "kind" => kind.as_str()).increment(1);
}

/// How many inputs of each kind were dropped so far in this process.
pub fn counts() -> Vec<(Drop, u64)> {
    Drop::ALL.iter().map(|d| (*d, COUNTS[d.slot()].load(Ordering::Relaxed))).collect()
}

/// How many of one kind were dropped so far.
pub fn dropped(kind: Drop) -> u64 {
    COUNTS[kind.slot()].load(Ordering::Relaxed)
}

struct Message(String);

impl Visit for Message {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0 = value.to_owned();
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

struct Counter;

impl<S: tracing::Subscriber> Layer<S> for Counter {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let mut message = Message(String::new());
        event.record(&mut message);
        if event.metadata().target().starts_with("davey") {
            crate::dave::observe(&message.0);
        } else if let Some(kind) = Drop::from_songbird(&message.0) {
            count(kind);
        }
    }
}

/// The counting layer, to add beside the service's own log layer. It sees songbird's and
/// davey's debug lines whatever the log filter says (davey's feed [`crate::dave`]; its trace
/// lines, which carry secrets, never), and nothing of any other crate.
pub fn layer<S>() -> impl Layer<S> + Send + Sync + 'static
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    let songbird_only = Targets::new().with_target("songbird", tracing::Level::DEBUG).with_target("davey", tracing::Level::DEBUG);
    Counter.with_filter(songbird_only).with_filter(filter_fn(|_| true))
}
