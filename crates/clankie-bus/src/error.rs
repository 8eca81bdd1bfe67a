//! Why a bus operation failed, and the nats-server releases the services speak to.

use std::time::Duration;

use clankie_proto::SubjectError;

/// Why a bus operation failed.
#[derive(Debug, thiserror::Error)]
pub enum BusError {
    #[error("could not reach NATS at {url} within {waited:?} ({attempts} attempts): {last}")]
    Connect { url: String, waited: Duration, attempts: u32, last: String },
    #[error("JetStream stream {stream}: {detail}")]
    Stream { stream: &'static str, detail: String },
    #[error("consumer {consumer}: {detail}")]
    Consumer { consumer: String, detail: String },
    /// The server holds the durable consumer with settings JetStream cannot change in place.
    #[error(
        "consumer {consumer} of {stream} differs from what the settings ask in {fields} (held: {held}; asked: {asked}), which JetStream cannot change in place: delete the consumer (`nats consumer rm {stream} {consumer}`) and start the service again"
    )]
    ConsumerFixed { consumer: String, stream: &'static str, fields: String, held: String, asked: String },
    #[error("publish to {subject}: {detail}")]
    Publish { subject: String, detail: String },
    #[error("ack of stream sequence {sequence}: {detail}")]
    Ack { sequence: u64, detail: String },
    #[error("the consumer's message stream ended")]
    Closed,
    #[error("request on {subject}: {detail}")]
    Request { subject: String, detail: String },
    #[error(transparent)]
    Subject(#[from] SubjectError),
    /// A one-off reminder asked for a time that has already passed (by this host's clock).
    #[error("reminder {reminder}: its time {at} has passed (now {now}); a reminder is set for a time to come")]
    ScheduleInPast { reminder: u64, at: String, now: String },
    /// A schedule that cannot be defined as given: refused before it is sent (a cron of the wrong
    /// shape, an interval under a second), or by nats-server (a pattern or time zone it cannot read).
    #[error("reminder {reminder}: schedule {schedule:?} refused: {detail}")]
    ScheduleRefused { reminder: u64, schedule: String, detail: String },
    /// The server is older than the JetStream API the services speak; it would fail later, inside
    /// a stream or consumer call, with a reply the client cannot read.
    #[error(
        "nats-server {found} at {url} is older than {needs}, the oldest Clankie runs on: upgrade it (the local stack, compose and the Kubernetes manifests pin {PINNED_NATS_SERVER})"
    )]
    ServerTooOld { url: String, found: String, needs: String },
}

/// The nats-server release the local stack, compose and Kubernetes pin, and the tests run.
pub const PINNED_NATS_SERVER: &str = "2.15.1";

/// The oldest nats-server whose JetStream API the services speak (major, minor, patch).
pub const OLDEST_NATS_SERVER: (u32, u32, u32) = (2, 12, 0);

/// Whether a server's version string (`2.15.1`, `2.12.0-RC.2`) is at least [`OLDEST_NATS_SERVER`];
/// a version that cannot be read is given the benefit of the doubt.
pub fn server_version_suffices(version: &str) -> bool {
    let mut parts = version.trim_start_matches('v').split(['.', '-', '+']).map(|p| p.parse::<u32>());
    match (parts.next(), parts.next(), parts.next()) {
        (Some(Ok(major)), Some(Ok(minor)), patch) => (major, minor, patch.and_then(Result::ok).unwrap_or(0)) >= OLDEST_NATS_SERVER,
        _ => true,
    }
}
