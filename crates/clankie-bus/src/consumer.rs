use std::marker::PhantomData;
use std::time::Duration;

use async_nats::jetstream::{self, AckKind, consumer::pull};
use clankie_proto::{Event, Family, ReceiptKind, Subject, v1};
use futures::StreamExt;

use crate::{Bus, BusError, REJECTED, TraceContext, now_ms, stream_for};

/// How a typed durable consumer is declared.
#[derive(Debug, Clone)]
pub struct ConsumerSpec {
    /// The durable name, shared by every replica of a service so they split the work.
    pub durable: String,
    /// The family of subjects it reads; its stream follows from it.
    pub family: Family,
    /// A narrower subject filter inside the family, if any (NATS wildcards allowed).
    pub filter: Option<String>,
    /// How long the server waits for an ack before redelivering.
    pub ack_wait: Duration,
    /// Deliveries before the server gives up on a message; -1 for no limit.
    pub max_deliver: i64,
    /// Where a new consumer starts.
    pub deliver: pull::Config,
    /// Delete a consumer of this name first, so it starts afresh (a replica's own view of state).
    pub fresh: bool,
    /// Messages one pull asks for: what a replica holds undecided at once.
    pub prefetch: usize,
    /// Deliveries the server lets stand unacked across all replicas before it delivers no
    /// more; 0 keeps the server's default (1,000).
    pub max_ack_pending: i64,
}

impl ConsumerSpec {
    /// A durable consumer of every subject in `family`, acked explicitly, starting at the first stored message.
    pub fn durable(durable: impl Into<String>, family: Family) -> ConsumerSpec {
        ConsumerSpec {
            durable: durable.into(),
            family,
            filter: None,
            ack_wait: Duration::from_secs(30),
            max_deliver: -1,
            deliver: pull::Config::default(),
            fresh: false,
            prefetch: DEFAULT_PREFETCH,
            max_ack_pending: 0,
        }
    }

    /// Narrows the consumer to `filter`, which must lie inside the family.
    pub fn with_filter(mut self, filter: impl Into<String>) -> ConsumerSpec {
        self.filter = Some(filter.into());
        self
    }

    /// Sets the ack wait.
    pub fn with_ack_wait(mut self, ack_wait: Duration) -> ConsumerSpec {
        self.ack_wait = ack_wait;
        self
    }

    /// Bounds how often the server delivers one message.
    pub fn with_max_deliver(mut self, max_deliver: i64) -> ConsumerSpec {
        self.max_deliver = max_deliver;
        self
    }

    /// Pulls `prefetch` messages at a time, and lets up to `max_ack_pending` stand unacked.
    ///
    /// What is pulled waits in the client until it is handled, its ack wait running: size the
    /// prefetch so that the replica decides that many well inside the ack wait.
    pub fn with_prefetch(mut self, prefetch: usize, max_ack_pending: i64) -> ConsumerSpec {
        self.prefetch = prefetch.max(1);
        self.max_ack_pending = max_ack_pending;
        self
    }

    /// Replaces any consumer of this name with a new one, for a replica's own consumer of state
    /// that must be read again from its start policy on every start, never resumed.
    pub fn fresh(mut self) -> ConsumerSpec {
        self.fresh = true;
        self
    }

    /// Starts a new consumer with the messages published after it, for commands meant for the living.
    pub fn deliver_new(mut self) -> ConsumerSpec {
        self.deliver.deliver_policy = jetstream::consumer::DeliverPolicy::New;
        self
    }

    /// Starts a new consumer at the last message of each subject, for state such as live voice sessions.
    pub fn last_per_subject(mut self) -> ConsumerSpec {
        self.deliver.deliver_policy = jetstream::consumer::DeliverPolicy::LastPerSubject;
        self
    }
}

/// A typed durable pull consumer. [`Consumer::next`] yields only well-formed events of type `E`.
pub struct Consumer<E: Event> {
    bus: Bus,
    name: String,
    stream: &'static str,
    consumer: jetstream::consumer::Consumer<pull::Config>,
    /// What it was declared with, to declare it again if it goes (with its stream, say).
    config: pull::Config,
    messages: pull::Stream,
    prefetch: usize,
    /// Pull errors in a row since the last message: past `HICCUPS_BEFORE_REOPEN` the pull
    /// stream is opened afresh.
    hiccups: u32,
    /// Reopens since the last message: past the first, the consumer is checked to still exist.
    reopens_idle: u32,
    _event: PhantomData<fn() -> E>,
}

/// One received event, held until it is acked, nak'd or terminated.
pub struct Delivery<E> {
    /// The decoded event.
    pub event: E,
    /// The subject it arrived on.
    pub subject: Subject,
    /// Its `Nats-Msg-Id`, if it was published with one.
    pub msg_id: Option<String>,
    /// Its sequence in the stream.
    pub stream_sequence: u64,
    /// When the stream stored it (Unix nanoseconds): with the sequence, it names the message
    /// even across a stream deleted and made again, whose sequences start again at 1.
    pub published_ns: i128,
    /// How many times the server has delivered it, counting this one.
    pub delivered: i64,
    /// The trace it was published in (empty when nothing is traced).
    pub trace: TraceContext,
    message: jetstream::Message,
}

/// Why a message was refused before it reached the service.
#[derive(Debug, Clone, Copy)]
enum Refusal {
    UnknownSubject,
    WrongFamily,
    Undecodable,
}

impl Refusal {
    fn code(self) -> &'static str {
        match self {
            Refusal::UnknownSubject => "subject_unknown",
            Refusal::WrongFamily => "subject_wrong_family",
            Refusal::Undecodable => "payload_decode_failed",
        }
    }
}

async fn pull_stream(
    consumer: &jetstream::consumer::Consumer<pull::Config>,
    prefetch: usize,
) -> Result<pull::Stream, jetstream::consumer::StreamError> {
    consumer.stream().max_messages_per_batch(prefetch).expires(PULL_EXPIRES).heartbeat(PULL_HEARTBEAT).messages().await
}

/// The client library's own pull size.
const DEFAULT_PREFETCH: usize = 200;

/// How long one pull request waits on the server before it is renewed.
const PULL_EXPIRES: Duration = Duration::from_secs(5);
/// How often an idle pull hears from the server; two missed mean the pull is lost.
const PULL_HEARTBEAT: Duration = Duration::from_secs(1);
/// Pull errors in a row (missed heartbeats, about two seconds apart) after which the pull
/// stream is opened afresh: a clustered consumer's new leader gets a new pull request,
/// where the old stream could keep waiting on the dead one.
const HICCUPS_BEFORE_REOPEN: u32 = 3;

/// The server's default for `max_ack_pending` when a consumer asks for none (0).
const SERVER_MAX_ACK_PENDING: i64 = 1000;

/// One setting where the consumer the server holds differs from the one asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Drift {
    pub field: &'static str,
    pub held: String,
    pub asked: String,
    /// Whether JetStream applies a change of this field to an existing consumer.
    pub in_place: bool,
}

/// Where `held` (the server's) differs from `asked`, for the settings a service declares.
pub(crate) fn drift(held: &pull::Config, asked: &pull::Config) -> Vec<Drift> {
    let ack_pending = |n: i64| if n <= 0 { SERVER_MAX_ACK_PENDING } else { n };
    let mut out = Vec::new();
    let mut field = |field: &'static str, held: String, asked: String, in_place: bool| {
        if held != asked {
            out.push(Drift { field, held, asked, in_place });
        }
    };
    field("ack_wait", format!("{:?}", held.ack_wait), format!("{:?}", asked.ack_wait), true);
    field("max_deliver", held.max_deliver.to_string(), asked.max_deliver.to_string(), true);
    field("max_ack_pending", ack_pending(held.max_ack_pending).to_string(), ack_pending(asked.max_ack_pending).to_string(), true);
    // 0 means "as many as the stream": only a number the server holds can differ.
    if held.num_replicas != 0 {
        field("num_replicas", held.num_replicas.to_string(), asked.num_replicas.to_string(), true);
    }
    field("filter_subject", held.filter_subject.clone(), asked.filter_subject.clone(), true);
    field("deliver_policy", format!("{:?}", held.deliver_policy), format!("{:?}", asked.deliver_policy), false);
    field("ack_policy", format!("{:?}", held.ack_policy), format!("{:?}", asked.ack_policy), false);
    out
}

/// Creates the durable consumer, or brings the one the server holds to `config`.
///
/// An operator who changes a setting (an ack wait, say) expects the next start to apply it;
/// a change JetStream cannot make in place is refused by name rather than ignored.
async fn declare(
    stream: &jetstream::stream::Stream,
    stream_name: &'static str,
    config: pull::Config,
) -> Result<jetstream::consumer::Consumer<pull::Config>, BusError> {
    let name = config.durable_name.clone().unwrap_or_default();
    let fail = |detail: String| BusError::Consumer { consumer: name.clone(), detail };
    let held = match stream.consumer_info(&name).await {
        Ok(info) => Some(info.config.clone()),
        Err(e) if e.kind() == jetstream::context::ConsumerInfoErrorKind::NotFound => None,
        Err(e) => return Err(fail(e.to_string())),
    };
    let Some(held) = held else {
        return stream.create_consumer(config).await.map_err(|e| fail(e.to_string()));
    };
    let held = <pull::Config as jetstream::consumer::FromConsumer>::try_from_consumer_config(held).map_err(|e| fail(e.to_string()))?;
    let drifted = drift(&held, &config);
    if drifted.is_empty() {
        return stream.get_consumer(&name).await.map_err(|e| fail(e.to_string()));
    }
    let fixed: Vec<&Drift> = drifted.iter().filter(|d| !d.in_place).collect();
    if !fixed.is_empty() {
        let join = |f: fn(&Drift) -> String| fixed.iter().map(|d| format!("{} {}", d.field, f(d))).collect::<Vec<_>>().join(", ");
        return Err(BusError::ConsumerFixed {
            consumer: name.clone(),
            stream: stream_name,
            fields: fixed.iter().map(|d| d.field).collect::<Vec<_>>().join(", "),
            held: join(|d| d.held.clone()),
            asked: join(|d| d.asked.clone()),
        });
    }
    let fields: Vec<&str> = drifted.iter().map(|d| d.field).collect();
    tracing::info!(consumer = %name, stream = stream_name, fields = ?fields, "bringing the durable consumer to the settings");
    stream.update_consumer(config).await.map_err(|e| fail(e.to_string()))
}

impl<E: Event> Consumer<E> {
    pub(crate) async fn open(bus: Bus, spec: ConsumerSpec) -> Result<Consumer<E>, BusError> {
        let Some(stream_spec) = stream_for(spec.family) else {
            return Err(BusError::Consumer { consumer: spec.durable, detail: format!("{:?} is request/reply, not streamed", spec.family) });
        };
        if spec.family.payload() != E::full_name() {
            return Err(BusError::Consumer {
                consumer: spec.durable,
                detail: format!("{:?} carries {}, not {}", spec.family, spec.family.payload(), E::full_name()),
            });
        }
        let fail = |detail: String| BusError::Consumer { consumer: spec.durable.clone(), detail };
        let stream = bus.js.get_stream(stream_spec.name).await.map_err(|e| fail(e.to_string()))?;
        if spec.fresh {
            // Absent is fine; anything else shows up when it is created below.
            let _ = stream.delete_consumer(&spec.durable).await;
        }
        let config = pull::Config {
            durable_name: Some(spec.durable.clone()),
            // A stream that holds only this family is read unfiltered (cheaper for the server).
            filter_subject: match &spec.filter {
                Some(filter) => filter.clone(),
                None if stream_spec.holds_only(spec.family) => String::new(),
                None => spec.family.wildcard(),
            },
            ack_policy: jetstream::consumer::AckPolicy::Explicit,
            ack_wait: spec.ack_wait,
            max_deliver: spec.max_deliver,
            max_ack_pending: spec.max_ack_pending,
            num_replicas: bus.stream_replicas.max(1),
            ..spec.deliver.clone()
        };
        let consumer = declare(&stream, stream_spec.name, config.clone()).await?;
        // A pull request lives on the consumer's leader; when a clustered leader dies, its pending
        // pulls die with it. Short pulls with a fast idle heartbeat notice that within seconds
        // (the library default, 30 s pulls and 15 s heartbeats, left a burst stalled past its run).
        let messages = pull_stream(&consumer, spec.prefetch).await.map_err(|e| fail(e.to_string()))?;
        Ok(Consumer {
            bus,
            name: spec.durable,
            stream: stream_spec.name,
            consumer,
            config,
            messages,
            prefetch: spec.prefetch,
            hiccups: 0,
            reopens_idle: 0,
            _event: PhantomData,
        })
    }

    /// Opens the pull stream again after the client's one ended (a clustered consumer that lost
    /// its leader can end it). Retries with backoff until it opens: a service's consumer never
    /// stops for good while the process lives.
    async fn reopen(&mut self) {
        self.reopens_idle = self.reopens_idle.saturating_add(1);
        let mut delay = Duration::from_millis(100);
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            // Gone with its stream (deleted, lost storage, a new cluster): declared again, and
            // the stream too, so a service's consumer outlives them rather than failing forever.
            // Only a consumer the server says is gone is declared again: during a leader
            // election every request fails for a moment, and a reopen must not declare into it.
            // Asked only when the last reopen (or this one's first try) brought nothing, and
            // briefly: the first reopen after a node's death must not wait on an election.
            let gone = if self.reopens_idle < 2 && attempts < 2 {
                None
            } else {
                match tokio::time::timeout(Duration::from_secs(1), self.consumer.info()).await {
                    Ok(Err(e)) if e.kind() == jetstream::context::ConsumerInfoErrorKind::NotFound => Some(false),
                    Ok(Err(e)) if e.kind() == jetstream::context::ConsumerInfoErrorKind::StreamNotFound => Some(true),
                    _ => None,
                }
            };
            if let Some(stream_gone) = gone
                && let Err(e) = self.declare_again(stream_gone).await
            {
                tracing::warn!(consumer = %self.name, error = %e, retry_in_ms = delay.as_millis() as u64, "consumer not declared again yet");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
                continue;
            }
            match pull_stream(&self.consumer, self.prefetch).await {
                Ok(messages) => {
                    tracing::info!(consumer = %self.name, "pull stream reopened");
                    self.messages = messages;
                    return;
                }
                Err(e) => {
                    tracing::warn!(consumer = %self.name, error = %e, retry_in_ms = delay.as_millis() as u64, "pull stream not reopened yet");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
            }
        }
    }

    /// Declares the consumer again, and its stream first if that is gone too.
    async fn declare_again(&mut self, stream_gone: bool) -> Result<(), BusError> {
        tracing::warn!(consumer = %self.name, stream = self.stream, stream_gone, "the consumer is gone; declaring it again");
        if stream_gone {
            self.bus.ensure_streams().await?;
        }
        let stream = self
            .bus
            .js
            .get_stream(self.stream)
            .await
            .map_err(|e| BusError::Consumer { consumer: self.name.clone(), detail: e.to_string() })?;
        self.consumer = declare(&stream, self.stream, self.config.clone()).await?;
        Ok(())
    }

    /// Waits for the next well-formed event.
    ///
    /// Malformed messages are refused on the way: a `bus.rejected` receipt
    /// naming the stream sequence and a terminal ack, then the wait goes on.
    /// Transient pull errors are logged and the wait goes on.
    pub async fn next(&mut self) -> Result<Delivery<E>, BusError> {
        loop {
            let message = match self.messages.next().await {
                None => {
                    tracing::warn!(consumer = %self.name, "pull stream ended; reopening it");
                    self.reopen().await;
                    continue;
                }
                Some(Err(e)) => {
                    self.hiccups += 1;
                    if self.hiccups >= HICCUPS_BEFORE_REOPEN {
                        tracing::warn!(consumer = %self.name, error = %e, hiccups = self.hiccups, "pull consumer keeps failing; reopening it");
                        self.hiccups = 0;
                        self.reopen().await;
                        continue;
                    }
                    tracing::warn!(consumer = %self.name, error = %e, "pull consumer hiccup; continuing");
                    // An error that repeats at once (a consumer without a leader) must not spin.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                Some(Ok(m)) => {
                    self.hiccups = 0;
                    self.reopens_idle = 0;
                    m
                }
            };
            let (stream_sequence, delivered, published_ns) = match message.info() {
                Ok(info) => {
                    // How far behind the stream this consumer is: what ingress lag alerts read.
                    metrics::gauge!("clankie_bus_consumer_pending", "consumer" => self.name.clone()).set(info.pending as f64);
                    (info.stream_sequence, info.delivered, info.published.unix_timestamp_nanos())
                }
                Err(_) => (0, 1, 0),
            };
            match decode::<E>(&message) {
                Ok((subject, event)) => {
                    let msg_id =
                        message.headers.as_ref().and_then(|h| h.get(async_nats::header::NATS_MESSAGE_ID)).map(|v| v.as_str().to_owned());
                    let trace = TraceContext::from_headers(|name| message.headers.as_ref().and_then(|h| h.get(name)).map(|v| v.as_str()));
                    return Ok(Delivery { event, subject, msg_id, stream_sequence, published_ns, delivered, trace, message });
                }
                Err(refusal) => self.refuse(message, refusal, stream_sequence, delivered).await,
            }
        }
    }

    async fn refuse(&self, message: jetstream::Message, refusal: Refusal, stream_sequence: u64, delivered: i64) {
        tracing::warn!(
            consumer = %self.name,
            stream = self.stream,
            stream_sequence,
            code = refusal.code(),
            "refused a malformed message"
        );
        let receipt = v1::Receipt::new(&rejected_kind(), self.bus.service(), "", now_ms())
            .with_id("stream", self.stream)
            .with_id("consumer", &self.name)
            .with_id("stream_sequence", stream_sequence)
            .with_count("payload_bytes", message.payload.len() as i64)
            .with_count("delivered", delivered)
            .with_code(refusal.code());
        if let Err(e) = self.bus.publish_receipt(&receipt).await {
            tracing::error!(consumer = %self.name, stream_sequence, error = %e, "could not publish rejection receipt");
        }
        if let Err(e) = message.ack_with(AckKind::Term).await {
            tracing::error!(consumer = %self.name, stream_sequence, error = %e, "could not terminate a refused message");
        }
    }
}

fn rejected_kind() -> ReceiptKind {
    ReceiptKind::new(REJECTED).unwrap_or_else(|_| unreachable!("REJECTED is a valid kind"))
}

fn decode<E: Event>(message: &jetstream::Message) -> Result<(Subject, E), Refusal> {
    let subject = Subject::parse(message.subject.as_str()).map_err(|_| Refusal::UnknownSubject)?;
    subject.check_payload::<E>().map_err(|_| Refusal::WrongFamily)?;
    let event = E::decode(message.payload.clone()).map_err(|_| Refusal::Undecodable)?;
    Ok((subject, event))
}

impl<E> Delivery<E> {
    /// Makes `span` (not yet entered) the consumer's side of this message: a child of the span
    /// that published it, with the messaging attributes. A redelivery is a span of its own in the
    /// same trace, linked to where the message began and counting its deliveries.
    pub fn traced(&self, span: &tracing::Span) {
        use clankie_trace::attr;
        if !self.trace.consumed(span, self.subject.to_string()) {
            return;
        }
        if self.delivered > 1 {
            self.trace.link(span);
        }
        clankie_trace::set(span, attr::MESSAGING_DELIVERY_COUNT, self.delivered);
        if let Some(id) = &self.msg_id {
            clankie_trace::set(span, attr::MESSAGING_MESSAGE_ID, id.clone());
        }
    }

    /// The value of the header `name` the message carries, if any (the first, when repeated).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.message.headers.as_ref()?.get(name).map(|v| v.as_str())
    }

    fn ack_error(&self, e: impl std::fmt::Display) -> BusError {
        BusError::Ack { sequence: self.stream_sequence, detail: e.to_string() }
    }

    /// Acknowledges the event and waits for the server to confirm it, so a
    /// confirmed ack is never redelivered.
    pub async fn ack(&self) -> Result<(), BusError> {
        self.message.double_ack().await.map_err(|e| self.ack_error(e))
    }

    /// Asks for redelivery after `delay`.
    pub async fn nak_after(&self, delay: Duration) -> Result<(), BusError> {
        self.message.ack_with(AckKind::Nak(Some(delay))).await.map_err(|e| self.ack_error(e))
    }

    /// Asks for redelivery now and waits until the server has taken the request, so naks
    /// made one after another are redelivered in that order.
    pub async fn nak_confirmed(&self) -> Result<(), BusError> {
        self.message.double_ack_with(AckKind::Nak(None)).await.map_err(|e| self.ack_error(e))
    }

    /// Tells the server work is still going, restarting its ack wait.
    pub async fn in_progress(&self) -> Result<(), BusError> {
        self.message.ack_with(AckKind::Progress).await.map_err(|e| self.ack_error(e))
    }

    /// A handle that keeps telling the server work on this event is still going, from
    /// another task than the one holding the delivery.
    pub fn progress(&self) -> Progress {
        Progress(self.message.clone())
    }

    /// Ends redelivery without success; for events the service can never handle.
    pub async fn term(&self) -> Result<(), BusError> {
        self.message.ack_with(AckKind::Term).await.map_err(|e| self.ack_error(e))
    }
}

/// Tells the server a held event is still being worked on (restarting its ack wait).
#[derive(Clone, Debug)]
pub struct Progress(jetstream::Message);

impl Progress {
    /// Restarts the event's ack wait.
    pub async fn in_progress(&self) -> Result<(), BusError> {
        self.0.ack_with(AckKind::Progress).await.map_err(|e| BusError::Ack { sequence: 0, detail: e.to_string() })
    }

    /// Runs `work`, restarting the event's ack wait every `every` until it is done: a live
    /// replica keeps what it works on however long it takes, while a dead one's comes back
    /// after one short ack wait.
    pub async fn while_working<F: std::future::Future>(&self, work: F, every: Duration) -> F::Output {
        let mut work = std::pin::pin!(work);
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        loop {
            tokio::select! {
                done = &mut work => return done,
                _ = tick.tick() => {
                    let _ = self.in_progress().await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked() -> pull::Config {
        pull::Config {
            durable_name: Some("captain".into()),
            ack_policy: jetstream::consumer::AckPolicy::Explicit,
            ack_wait: Duration::from_secs(5),
            max_deliver: -1,
            num_replicas: 1,
            ..Default::default()
        }
    }

    #[test]
    fn drift_names_each_changed_setting_and_whether_it_applies_in_place() {
        assert!(drift(&asked(), &asked()).is_empty());
        let held = pull::Config { ack_wait: Duration::from_secs(30), max_ack_pending: 1000, ..asked() };
        let found = drift(&held, &asked());
        assert_eq!(found.len(), 1, "the server's default ack pending is what 0 asks for: {found:?}");
        assert_eq!((found[0].field, found[0].held.as_str(), found[0].asked.as_str(), found[0].in_place), ("ack_wait", "30s", "5s", true));
        let held = pull::Config { deliver_policy: jetstream::consumer::DeliverPolicy::New, max_deliver: 5, ..asked() };
        let fields: Vec<(&str, bool)> = drift(&held, &asked()).iter().map(|d| (d.field, d.in_place)).collect();
        assert_eq!(fields, [("max_deliver", true), ("deliver_policy", false)]);
        let inherited = pull::Config { num_replicas: 0, ..asked() };
        assert!(drift(&inherited, &asked()).is_empty(), "a consumer that follows its stream's replicas is not drift");
    }
}
