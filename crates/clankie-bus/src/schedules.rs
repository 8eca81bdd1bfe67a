//! Reminders that nats-server keeps and fires by itself (JetStream message schedules, 2.12+).
//!
//! A reminder's definition is the one stored message on `clankie.schedule.def.<id>`: its body is
//! the [`v1::Reminder`], its headers the schedule (`Nats-Schedule`: `@at <RFC 3339>`,
//! `@every <duration>` or a six-field cron with `Nats-Schedule-Time-Zone`) and its target,
//! `clankie.schedule.due.<id>`, a subject of the same stream. When it is due, the server
//! publishes the body there and stores it like any message, with `Nats-Scheduler` (the
//! definition's subject) and `Nats-Schedule-Next` (`purge` for a one-off, which the server then
//! removes; the next time for a repeating one). Publishing the definition again replaces it;
//! purging its subject cancels it. A durable consumer of the due subjects
//! ([`Bus::due_reminders`]), shared by every replica, hands each firing to one of them.

use std::error::Error as _;
use std::time::{Duration, SystemTime};

use async_nats::header::{self, HeaderName};
use async_nats::jetstream;
use bytes::Bytes;
use clankie_proto::time::rfc3339;
use clankie_proto::{Family, Subject, v1};
use prost::Message as _;

use crate::{Bus, BusError, Consumer, ConsumerSpec, Delivery, Published, SCHEDULES_STREAM, TraceContext, unique_msg_id};

/// How long a firing stays in the stream after the server publishes it (its `Nats-TTL`): the
/// stream keeps definitions until they are removed, so a firing goes by its own age.
pub const FIRING_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// A header of our own on a definition, which the server copies onto each of its firings: the
/// definition's revision (unique per publish), so a handler tells two definitions of one
/// reminder apart.
const REVISION: HeaderName = HeaderName::from_static("Clankie-Schedule-Revision");

/// The cron shorthands nats-server reads.
const PREDEFINED: [&str; 7] = ["@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"];

/// When a reminder comes due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Schedule {
    /// Once, at this time, which must be to come.
    At(SystemTime),
    /// Repeatedly, every interval (at least a second), the first an interval after it is defined.
    Every(Duration),
    /// Repeatedly, on a cron expression as nats-server reads it: six fields, seconds first
    /// (`0 30 9 * * 1-5`: 09:30:00 on weekdays), or `@hourly`, `@daily`, `@weekly`, `@monthly`,
    /// `@yearly`; in `time_zone`, an IANA name such as `Europe/Berlin` (`None`: UTC).
    Cron { expression: String, time_zone: Option<String> },
}

impl Schedule {
    /// The `Nats-Schedule` value and the time zone, checked as far as it can be here; the
    /// server checks the rest (that a cron's values are in range, that a time zone exists).
    fn pattern(&self, now: SystemTime) -> Result<(String, Option<String>), Refusal> {
        match self {
            Schedule::At(at) if *at <= now => Err(Refusal::Past { at: rfc3339(*at), now: rfc3339(now) }),
            Schedule::At(at) => Ok((format!("@at {}", rfc3339(*at)), None)),
            Schedule::Every(every) if *every < Duration::from_secs(1) => {
                Err(Refusal::Shape(format!("an interval of {every:?} is under the server's least, a second")))
            }
            Schedule::Every(every) if every.subsec_millis() == 0 => Ok((format!("@every {}s", every.as_secs()), None)),
            Schedule::Every(every) => Ok((format!("@every {}ms", every.as_millis()), None)),
            Schedule::Cron { expression, time_zone } => {
                let expression = expression.split_whitespace().collect::<Vec<_>>().join(" ");
                let fields = expression.split(' ').count();
                let in_field = |c: char| c.is_ascii_alphanumeric() || matches!(c, '*' | '/' | ',' | '-' | '?' | ' ');
                if !PREDEFINED.contains(&expression.as_str()) && (fields != 6 || !expression.chars().all(in_field)) {
                    return Err(Refusal::Shape(format!(
                        "a cron expression is six fields, seconds first (`0 30 9 * * 1-5`), or one of {PREDEFINED:?}; this has {fields}"
                    )));
                }
                let zone = match time_zone.as_deref().map(str::trim) {
                    None | Some("") => None,
                    Some(zone)
                        if zone.len() <= 64 && zone.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '_' | '-' | '+')) =>
                    {
                        Some(zone.to_owned())
                    }
                    Some(zone) => {
                        return Err(Refusal::Shape(format!(
                            "{:?} is not an IANA time zone name",
                            zone.chars().take(64).collect::<String>()
                        )));
                    }
                };
                Ok((expression, zone))
            }
        }
    }
}

/// Why a schedule was refused before it was sent.
enum Refusal {
    Past { at: String, now: String },
    Shape(String),
}

/// What comes after a firing, as its `Nats-Schedule-Next` header says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// A one-off: nothing; the server removes the definition with this firing (`purge`).
    Done,
    /// A repeating schedule: when it is next due, as the server wrote it (RFC 3339, in the
    /// schedule's time zone).
    At(String),
    /// Not published by the scheduler (no header): an event put on the due subject directly.
    Absent,
}

/// Which firing of which definition a due reminder is: what a handler keys its work on, so a
/// firing delivered again (or, across a stream leader's change, published twice) is run once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Firing {
    /// The reminder's id (the due subject's).
    pub reminder: u64,
    /// The definition that fired (`Nats-Scheduler`), as the server named it.
    pub scheduler: Option<String>,
    /// What comes after it (`Nats-Schedule-Next`).
    pub next: Next,
    /// The definition's revision (unique per publish of it); `None` when not defined by [`Bus::schedule`].
    pub revision: Option<String>,
    /// The firing's sequence in the schedules stream.
    pub stream_sequence: u64,
    /// When the server stored the firing (Unix nanoseconds): when it fired.
    pub fired_ns: i128,
}

impl Firing {
    /// A key naming this firing, the same for every copy of it: the definition's revision and
    /// the schedule's next time (`once` for a one-off), so each firing of a repeating reminder
    /// has its own. An event that no definition published falls back to its stream sequence.
    pub fn key(&self) -> String {
        let revision = self.revision.clone().unwrap_or_else(|| format!("seq{}", self.stream_sequence));
        match &self.next {
            Next::Done => format!("{}:{revision}:once", self.reminder),
            Next::At(next) => format!("{}:{revision}:{next}", self.reminder),
            Next::Absent => format!("{}:seq{}", self.reminder, self.stream_sequence),
        }
    }
}

impl Delivery<v1::Reminder> {
    /// Which firing this due reminder is (see [`Firing::key`]).
    pub fn firing(&self) -> Firing {
        let reminder = match self.subject {
            Subject::ScheduleDue { reminder } => reminder,
            _ => self.event.reminder_id,
        };
        let next = match self.header(header::NATS_SCHEDULE_NEXT.as_ref()) {
            None => Next::Absent,
            Some("purge") => Next::Done,
            Some(at) => Next::At(at.to_owned()),
        };
        Firing {
            reminder,
            scheduler: self.header(header::NATS_SCHEDULER.as_ref()).map(str::to_owned),
            next,
            revision: self.header(REVISION.as_ref()).map(str::to_owned),
            stream_sequence: self.stream_sequence,
            fired_ns: self.published_ns,
        }
    }
}

impl Bus {
    /// Defines reminder `id`: nats-server publishes `reminder` on `clankie.schedule.due.<id>`
    /// when `schedule` says, by itself, whichever service is up then. A definition of `id`
    /// already stored is replaced (its pending firings with it). Returns where the definition
    /// was stored.
    ///
    /// A time that has passed is refused with [`BusError::ScheduleInPast`], a schedule of the
    /// wrong shape or one the server cannot read with [`BusError::ScheduleRefused`].
    pub async fn schedule(&self, id: u64, schedule: &Schedule, reminder: &v1::Reminder) -> Result<Published, BusError> {
        let (pattern, zone) = schedule.pattern(SystemTime::now()).map_err(|refusal| match refusal {
            Refusal::Past { at, now } => BusError::ScheduleInPast { reminder: id, at, now },
            Refusal::Shape(detail) => BusError::ScheduleRefused { reminder: id, schedule: format!("{schedule:?}"), detail },
        })?;
        let (def, due) = (Subject::ScheduleDef { reminder: id }, Subject::ScheduleDue { reminder: id });
        // Unique per definition (so a replacement inside the duplicate window is stored), the
        // same across this publish's retries; copied by the server onto every firing.
        let revision = unique_msg_id();
        let mut headers = vec![
            (header::NATS_SCHEDULE, pattern.clone()),
            (header::NATS_SCHEDULE_TARGET, due.to_string()),
            (header::NATS_SCHEDULE_TTL, format!("{}s", FIRING_TTL.as_secs())),
            (REVISION, revision.clone()),
        ];
        if let Some(zone) = &zone {
            headers.push((header::NATS_SCHEDULE_TIME_ZONE, zone.clone()));
        }
        let subject = def.to_string();
        // No trace context: every firing carries the definition's headers, and a reminder's
        // turn, days later, is no part of the turn that set it.
        let published = self
            .publish_headed(&subject, Bytes::from(reminder.encode_to_vec()), &revision, &TraceContext::default(), &headers)
            .await
            .map_err(|e| match e.source().and_then(|s| s.downcast_ref::<jetstream::Error>()) {
                // The server read the definition and said no: the schedule is what is wrong.
                Some(refused) => BusError::ScheduleRefused { reminder: id, schedule: pattern.clone(), detail: refused.to_string() },
                None => BusError::Publish { subject: subject.clone(), detail: e.to_string() },
            })?;
        tracing::debug!(reminder = id, schedule = %pattern, time_zone = zone.as_deref().unwrap_or(""), sequence = published.sequence, "reminder defined");
        Ok(published)
    }

    /// Defines reminder `id` to come due once, at `at` (see [`Bus::schedule`]).
    pub async fn schedule_once(&self, id: u64, at: SystemTime, reminder: &v1::Reminder) -> Result<Published, BusError> {
        self.schedule(id, &Schedule::At(at), reminder).await
    }

    /// Defines reminder `id` to come due on `cron` (six fields, seconds first) in `time_zone`
    /// (an IANA name; `None`: UTC) until it is cancelled (see [`Bus::schedule`]).
    pub async fn schedule_cron(
        &self,
        id: u64,
        cron: &str,
        time_zone: Option<&str>,
        reminder: &v1::Reminder,
    ) -> Result<Published, BusError> {
        self.schedule(id, &Schedule::Cron { expression: cron.to_owned(), time_zone: time_zone.map(str::to_owned) }, reminder).await
    }

    /// Cancels reminder `id`: its definition is purged, so it never fires again (a firing
    /// already published stays for its consumer). Returns how many definitions went: 0 when
    /// there was none (never defined, cancelled before, or a one-off that has fired).
    pub async fn cancel_schedule(&self, id: u64) -> Result<u64, BusError> {
        let fail = |detail: String| BusError::Stream { stream: SCHEDULES_STREAM, detail };
        let stream = self.js.get_stream(SCHEDULES_STREAM).await.map_err(|e| fail(e.to_string()))?;
        let purged = stream.purge().filter(Subject::ScheduleDef { reminder: id }.to_string()).await.map_err(|e| fail(e.to_string()))?;
        tracing::debug!(reminder = id, purged = purged.purged, "reminder cancelled");
        Ok(purged.purged)
    }

    /// Opens (creating if needed) the durable consumer `durable` of every reminder that comes
    /// due, acked explicitly: replicas that share the name share the firings, each delivered to
    /// one of them, and again only if it is not acked within the ack wait.
    /// [`Delivery::firing`] names the firing, for a handler that must run each once.
    pub async fn due_reminders(&self, durable: &str) -> Result<Consumer<v1::Reminder>, BusError> {
        self.consumer(ConsumerSpec::durable(durable, Family::ScheduleDue)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(schedule: Schedule) -> Result<(String, Option<String>), String> {
        schedule.pattern(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000)).map_err(|r| match r {
            Refusal::Past { at, now } => format!("past {at} {now}"),
            Refusal::Shape(detail) => detail,
        })
    }

    #[test]
    fn schedules_are_written_as_nats_server_reads_them() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_millis(1_001_250);
        assert_eq!(pattern(Schedule::At(at)), Ok(("@at 1970-01-01T00:16:41.250Z".into(), None)));
        assert_eq!(pattern(Schedule::Every(Duration::from_secs(2))), Ok(("@every 2s".into(), None)));
        assert_eq!(pattern(Schedule::Every(Duration::from_millis(1500))), Ok(("@every 1500ms".into(), None)));
        let cron = |e: &str, z: Option<&str>| pattern(Schedule::Cron { expression: e.into(), time_zone: z.map(Into::into) });
        assert_eq!(cron(" 0  30 9 * * 1-5 ", Some("Europe/Berlin")), Ok(("0 30 9 * * 1-5".into(), Some("Europe/Berlin".into()))));
        assert_eq!(cron("@daily", Some("")), Ok(("@daily".into(), None)));
    }

    #[test]
    fn a_past_time_and_a_misshapen_schedule_are_refused_before_they_are_sent() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        assert!(pattern(Schedule::At(now)).unwrap_err().starts_with("past 1970-01-01T00:16:40.000Z"));
        assert!(pattern(Schedule::At(now - Duration::from_secs(1))).is_err());
        assert!(pattern(Schedule::Every(Duration::from_millis(999))).is_err());
        let cron = |e: &str, z: Option<&str>| pattern(Schedule::Cron { expression: e.into(), time_zone: z.map(Into::into) });
        for bad in ["* * * * *", "* * * * * * *", "", "@every 1s", "0 0 9 * * 1\r\nNats-Schedule: x"] {
            assert!(cron(bad, None).is_err(), "{bad:?}");
        }
        assert!(cron("0 0 9 * * *", Some("Europe/Berlin\r\nX: y")).is_err());
    }

    #[test]
    fn a_firing_key_is_one_per_firing_and_the_same_for_its_copies() {
        let firing = |next: Next, seq: u64| Firing {
            reminder: 7,
            scheduler: Some(Subject::ScheduleDef { reminder: 7 }.to_string()),
            next,
            revision: Some("r1".into()),
            stream_sequence: seq,
            fired_ns: 0,
        };
        assert_eq!(firing(Next::Done, 3).key(), firing(Next::Done, 9).key());
        assert_eq!(firing(Next::At("t2".into()), 3).key(), firing(Next::At("t2".into()), 4).key());
        assert_ne!(firing(Next::At("t2".into()), 3).key(), firing(Next::At("t3".into()), 5).key());
        assert_ne!(firing(Next::Absent, 3).key(), firing(Next::Absent, 4).key());
    }
}
