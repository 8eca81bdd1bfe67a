//! The bus: NATS JetStream wiring shared by every service.
//!
//! - [`Bus::connect`] retries with backoff until the configured deadline.
//! - [`Bus::ensure_streams`] declares the [`STREAMS`], idempotently.
//! - [`Bus::publish`] sends a typed event, with a `Nats-Msg-Id` when the event has a natural identity.
//! - [`Bus::consumer`] opens a typed durable pull consumer. A payload that does not
//!   decode is answered with a rejection receipt and a terminal ack, so one bad
//!   message never panics a service or loops in redelivery.
//! - [`Bus::schedule`] defines a reminder that nats-server itself publishes when it is due, and
//!   [`Bus::due_reminders`] consumes what comes due ([`Firing`] names each firing).
//! - [`tap`] renders any clankie message as one JSON line.

mod audience;
mod blobs;
mod sent;
pub use sent::Ack;
mod consumer;
mod erase;
mod error;
mod kv;
mod schedules;
mod streams;
pub mod tap;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::jetstream;
use bytes::Bytes;
use clankie_proto::{Event, Family, ReceiptKind, Subject, v1};
use clankie_settings::{Settings, redact_url};
pub use clankie_trace::TraceContext;

pub use async_nats::Message as Request;
/// A core NATS subscription, for taps that read every message of a subject as it passes.
pub use async_nats::Subscriber;
pub use async_nats::connection::State as ConnectionState;
pub use async_nats::jetstream::consumer::DeliverPolicy;
pub use async_nats::jetstream::kv::{Operation as KeyValueOperation, Store as KeyValue, UpdateErrorKind as KeyValueUpdateErrorKind};
pub use audience::{AUDIENCE_BUCKET, AudienceFact};
pub use blobs::{BLOB_BUCKET, INLINE_MAX, blob_name};
pub use consumer::{Consumer, ConsumerSpec, Delivery, Progress};
pub use erase::{ErasedMessages, Erasure};
pub use error::{BusError, OLDEST_NATS_SERVER, PINNED_NATS_SERVER, server_version_suffices};
pub use kv::kv_key;
pub use schedules::{FIRING_TTL, Firing, Next, Schedule};
pub use streams::{SCHEDULES_STREAM, STREAMS, StreamSpec, stream_for};

/// Whether `subject` is one receipts are published on.
fn is_receipt(subject: &str) -> bool {
    static PREFIX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    subject.starts_with(PREFIX.get_or_init(|| Family::Receipt.wildcard().trim_end_matches(['*', '>']).to_owned()).as_str())
}

/// The receipts that name the trace they were written in (`ids.trace`): the first of each
/// delivery's trail (a message received, an utterance heard) and each turn's, which is where a
/// takeover's trace shows. Only these, so the refusals of a busy room cost no more with
/// tracing on.
pub const TRACED_RECEIPTS: [&str; 3] = ["gateway.ingress", "voice.heard", "captain.turn"];

/// The receipt kind of a message a consumer could not accept.
pub const REJECTED: &str = "bus.rejected";

/// A JetStream deduplication id (`Nats-Msg-Id`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MsgId(String);

impl MsgId {
    /// The dedup id of a Discord message: `discord:message:<id>`.
    pub fn discord_message(message_id: u64) -> MsgId {
        MsgId(format!("discord:message:{message_id}"))
    }

    /// A dedup id of the caller's making; it should be stable across redelivery.
    pub fn new(id: impl Into<String>) -> MsgId {
        MsgId(id.into())
    }

    /// The header value.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// What JetStream said about a publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    pub stream: String,
    pub sequence: u64,
    /// The same `Nats-Msg-Id` was already stored inside the duplicate window.
    pub duplicate: bool,
}

/// A connection to NATS and JetStream, named after the service that holds it.
#[derive(Clone)]
pub struct Bus {
    client: async_nats::Client,
    js: jetstream::Context,
    service: String,
    ingress_dedup_window: Duration,
    /// Copies of every stream JetStream keeps (1 on a single server, 3 on a cluster).
    stream_replicas: usize,
}

/// How long [`Bus::barrier`] waits for its own message to come back.
const BARRIER_WITHIN: Duration = Duration::from_secs(10);

/// How long one publish keeps trying through a stream's leader election or a reconnect.
const PUBLISH_PATIENCE: Duration = Duration::from_secs(15);

fn transient(kind: jetstream::context::PublishErrorKind) -> bool {
    use jetstream::context::PublishErrorKind as K;
    matches!(kind, K::StreamNotFound | K::TimedOut | K::BrokenPipe | K::MaxAckPending)
}

/// A dedup id for a publish that named none: unique per call, the same across its retries.
fn unique_msg_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("p:{}:{nanos}:{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Milliseconds since the Unix epoch, the time unit of every event.
pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// What a NATS URL's user-info carries.
#[derive(Debug, PartialEq, Eq)]
enum Credentials {
    Token(String),
    UserPassword(String, String),
}

/// Splits `nats://[token@|user:password@]host:port` into the bare address and its credentials.
fn split_credentials(url: &str) -> (String, Option<Credentials>) {
    let Some((scheme, rest)) = url.split_once("://") else { return (url.to_owned(), None) };
    let end = rest.find('/').unwrap_or(rest.len());
    let Some((userinfo, host)) = rest[..end].rsplit_once('@') else { return (url.to_owned(), None) };
    let bare = format!("{scheme}://{host}{}", &rest[end..]);
    let credentials = match userinfo.split_once(':') {
        Some((user, password)) => Credentials::UserPassword(user.to_owned(), password.to_owned()),
        None => Credentials::Token(userinfo.to_owned()),
    };
    (bare, Some(credentials))
}

impl Bus {
    /// Connects to the configured NATS, retrying with exponential backoff until
    /// `bus_connect_timeout` has passed. Each failed attempt is logged.
    pub async fn connect(settings: &Settings, service: &str) -> Result<Bus, BusError> {
        let started = tokio::time::Instant::now();
        let deadline = started + settings.bus_connect_timeout;
        let url = redact_url(&settings.nats_url);
        // A list of servers (a cluster's seeds): the client reconnects to whichever of them is up.
        let split: Vec<(String, Option<Credentials>)> = settings.nats_url.split(',').map(|u| split_credentials(u.trim())).collect();
        let addresses: Vec<String> = split.iter().map(|(a, _)| a.clone()).collect();
        let credentials = split.into_iter().find_map(|(_, c)| c);
        let mut delay = Duration::from_millis(100);
        let mut attempts = 0;
        loop {
            attempts += 1;
            let mut options =
                async_nats::ConnectOptions::new().name(format!("clankie-{service}")).connection_timeout(Duration::from_secs(5));
            // Credentials go to the client as options, never inside the URL, which async-nats logs as it connects.
            options = match &credentials {
                Some(Credentials::Token(token)) => options.token(token.clone()),
                Some(Credentials::UserPassword(user, password)) => options.user_and_password(user.clone(), password.clone()),
                None => options,
            };
            match options.connect(addresses.as_slice()).await {
                Ok(client) => {
                    let found = client.server_info().version;
                    if !server_version_suffices(&found) {
                        let (major, minor, patch) = OLDEST_NATS_SERVER;
                        return Err(BusError::ServerTooOld { url, found, needs: format!("{major}.{minor}.{patch}") });
                    }
                    tracing::info!(%url, attempts, server_version = %found, "connected to NATS");
                    return Ok(Bus {
                        js: jetstream::new(client.clone()),
                        client,
                        service: service.to_owned(),
                        ingress_dedup_window: settings.ingress_dedup_window,
                        stream_replicas: settings.stream_replicas,
                    });
                }
                Err(e) if tokio::time::Instant::now() + delay < deadline => {
                    tracing::warn!(%url, attempts, retry_in_ms = delay.as_millis() as u64, error = %e, "NATS not reachable yet");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
                Err(e) => {
                    return Err(BusError::Connect { url, waited: started.elapsed(), attempts, last: e.to_string() });
                }
            }
        }
    }

    /// The service name this bus writes into receipts.
    pub fn service(&self) -> &str {
        &self.service
    }

    /// The raw NATS client, for request/reply and core subscriptions.
    pub fn client(&self) -> &async_nats::Client {
        &self.client
    }

    /// The JetStream context.
    pub fn jetstream(&self) -> &jetstream::Context {
        &self.js
    }

    /// Declares every stream in [`STREAMS`], creating or updating each, and the blob bucket;
    /// safe to call from every replica.
    pub async fn ensure_streams(&self) -> Result<(), BusError> {
        for spec in STREAMS {
            let config = spec.config(self.ingress_dedup_window, self.stream_replicas);
            self.js.create_or_update_stream(config).await.map_err(|e| BusError::Stream { stream: spec.name, detail: e.to_string() })?;
        }
        self.ensure_blobs().await
    }

    /// The streams of [`STREAMS`] the server does not hold; an error when JetStream does not answer.
    pub async fn missing_streams(&self) -> Result<Vec<&'static str>, BusError> {
        let mut missing = Vec::new();
        for spec in STREAMS {
            match self.js.get_stream(spec.name).await {
                Ok(_) => {}
                Err(e)
                    if matches!(e.kind(), jetstream::context::GetStreamErrorKind::JetStream(j)
                        if j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND) =>
                {
                    missing.push(spec.name)
                }
                Err(e) => return Err(BusError::Stream { stream: spec.name, detail: e.to_string() }),
            }
        }
        Ok(missing)
    }

    /// Publishes `event` on `subject` and waits for JetStream's ack.
    ///
    /// The subject must be one that carries `E`. With a `msg_id`, a second
    /// publish of the same id inside the stream's duplicate window is stored
    /// once and reported as `duplicate`.
    pub async fn publish<E: Event>(&self, subject: &Subject, event: &E, msg_id: Option<&MsgId>) -> Result<Published, BusError> {
        subject.check_payload::<E>()?;
        if subject.family() == Family::ScheduleDef {
            // A definition without its schedule headers would never fire: it goes through `schedule`.
            return Err(BusError::Publish {
                subject: subject.to_string(),
                detail: "a schedule definition is published by Bus::schedule".into(),
            });
        }
        self.publish_bytes(subject.to_string(), Bytes::from(event.encode_to_vec()), msg_id).await
    }

    /// Publishes raw bytes on a subject string, bypassing the contract; for tests of hostile input.
    pub async fn publish_bytes(&self, subject: String, payload: Bytes, msg_id: Option<&MsgId>) -> Result<Published, BusError> {
        // Every publish carries a dedup id, so a retry after a lost ack stores the message once.
        let id = msg_id.map_or_else(unique_msg_id, |m| m.as_str().to_owned());
        // Within a traced span, the publish is a span of its own whose context travels with the
        // message, so its consumer carries the trace on.
        // A receipt is evidence, not a step of the flow, and no span of its own: a busy
        // admission path pays for one span, not two.
        let span = if is_receipt(&subject) || TraceContext::current().is_empty() {
            tracing::Span::none()
        } else {
            tracing::info_span!(
                "publish",
                otel.name = %format!("send {}", subject.split('.').take(3).collect::<Vec<_>>().join(".")),
                otel.kind = "producer",
                messaging.system = clankie_trace::attr::NATS,
                messaging.operation.type = "send",
                messaging.destination.name = %subject,
                messaging.message.id = %id,
            )
        };
        let trace = TraceContext::of(&span);
        tracing::Instrument::instrument(self.publish_with(subject, payload, id, trace), span).await
    }

    async fn publish_with(&self, subject: String, payload: Bytes, id: String, trace: TraceContext) -> Result<Published, BusError> {
        self.publish_headed(&subject, payload, &id, &trace, &[])
            .await
            .map_err(|e| BusError::Publish { subject: subject.clone(), detail: e.to_string() })
    }

    /// Publishes with `headers` besides the dedup id and the trace, trying again through a
    /// leader election or a reconnect for up to [`PUBLISH_PATIENCE`]; the client's own error
    /// otherwise, so a caller can tell the server's refusal from a lost connection.
    pub(crate) async fn publish_headed(
        &self,
        subject: &str,
        payload: Bytes,
        id: &str,
        trace: &TraceContext,
        headers: &[(async_nats::header::HeaderName, String)],
    ) -> Result<Published, jetstream::context::PublishError> {
        let started = tokio::time::Instant::now();
        let mut delay = Duration::from_millis(100);
        loop {
            let mut publish = jetstream::message::PublishMessage::build().payload(payload.clone()).message_id(id);
            for (name, value) in trace.headers() {
                publish = publish.header(name, value);
            }
            for (name, value) in headers {
                publish = publish.header(name.clone(), value.as_str());
            }
            let result = async { self.js.send_publish(subject.to_owned(), publish).await?.await }.await;
            match result {
                Ok(ack) => return Ok(Published { stream: ack.stream, sequence: ack.sequence, duplicate: ack.duplicate }),
                // A stream between leaders answers "no stream found" and a lost connection loses the
                // ack: both pass within seconds on a cluster, so the publish is tried again.
                Err(e) if transient(e.kind()) && started.elapsed() + delay < PUBLISH_PATIENCE => {
                    tracing::debug!(%subject, error = %e, retry_in_ms = delay.as_millis() as u64, "publish not acked; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(2));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Returns once the server has taken everything this connection sent before, its new
    /// subscriptions among them, so events published anywhere from now on reach them.
    ///
    /// A flush only empties the client's buffer; a message to itself comes back only after the
    /// server has read what came before it on this connection.
    pub async fn barrier(&self) -> Result<(), BusError> {
        let fail = |detail: String| BusError::Request { subject: "(barrier)".into(), detail };
        let inbox = self.client.new_inbox();
        let mut echo = self.client.subscribe(inbox.clone()).await.map_err(|e| fail(e.to_string()))?;
        self.client.publish(inbox, Vec::new().into()).await.map_err(|e| fail(e.to_string()))?;
        self.client.flush().await.map_err(|e| fail(e.to_string()))?;
        match tokio::time::timeout(BARRIER_WITHIN, futures::StreamExt::next(&mut echo)).await {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err(fail("the connection closed".into())),
            Err(_) => Err(fail(format!("no echo within {BARRIER_WITHIN:?}"))),
        }
    }

    /// Publishes an ephemeral signal on core NATS: no stream, no ack, no redelivery.
    pub async fn signal<E: Event>(&self, subject: &Subject, event: &E) -> Result<(), BusError> {
        subject.check_payload::<E>()?;
        let name = subject.to_string();
        if subject.family().area() != clankie_proto::Area::Signal {
            return Err(BusError::Publish { subject: name, detail: "not a signal subject".into() });
        }
        self.client
            .publish(name.clone(), Bytes::from(event.encode_to_vec()))
            .await
            .map_err(|e| BusError::Publish { subject: name, detail: e.to_string() })
    }

    /// Publishes a later answer on a request/reply subject (core NATS, no request to reply
    /// to): the final answer of a command answered at once, for whoever [`Bus::listen`]s.
    pub async fn answer_later<E: Event>(&self, subject: &Subject, event: &E) -> Result<(), BusError> {
        subject.check_payload::<E>()?;
        let name = subject.to_string();
        if subject.family().area() != clankie_proto::Area::Rpc {
            return Err(BusError::Publish { subject: name, detail: "not a request/reply subject".into() });
        }
        self.client
            .publish(name.clone(), Bytes::from(event.encode_to_vec()))
            .await
            .map_err(|e| BusError::Publish { subject: name.clone(), detail: e.to_string() })?;
        self.client.flush().await.map_err(|e| BusError::Publish { subject: name, detail: e.to_string() })
    }

    /// Listens on one concrete subject for answers published with [`Bus::answer_later`];
    /// taken before the request is sent, so the answer cannot come first. Undecodable
    /// messages are skipped with a warning.
    pub async fn listen<E: Event>(&self, subject: &Subject) -> Result<impl futures::Stream<Item = E> + Send + Unpin + 'static, BusError> {
        subject.check_payload::<E>()?;
        let name = subject.to_string();
        let sub = self.client.subscribe(name.clone()).await.map_err(|e| BusError::Consumer { consumer: name, detail: e.to_string() })?;
        Ok(Box::pin(futures::StreamExt::filter_map(sub, |m| async move {
            match E::decode(m.payload) {
                Ok(e) => Some(e),
                Err(_) => {
                    tracing::warn!(subject = %m.subject, "undecodable answer skipped");
                    None
                }
            }
        })))
    }

    /// Every signal of `family` from now on, decoded; undecodable ones are skipped with a warning.
    pub async fn signals<E: Event>(&self, family: Family) -> Result<impl futures::Stream<Item = E> + Send + 'static, BusError> {
        let filter = family.wildcard();
        let sub = self
            .client
            .subscribe(filter.clone())
            .await
            .map_err(|e| BusError::Consumer { consumer: filter.clone(), detail: e.to_string() })?;
        Ok(futures::StreamExt::filter_map(sub, |m| async move {
            match E::decode(m.payload) {
                Ok(e) => Some(e),
                Err(_) => {
                    tracing::warn!(subject = %m.subject, "undecodable signal skipped");
                    None
                }
            }
        }))
    }

    /// Publishes a receipt on `clankie.receipt.<kind>`; one of [`TRACED_RECEIPTS`] written inside
    /// a traced span carries its trace id (`ids.trace`), so `clankie trail` leads to the trace.
    pub async fn publish_receipt(&self, receipt: &v1::Receipt) -> Result<Published, BusError> {
        let subject = Subject::Receipt { kind: ReceiptKind::new(&receipt.kind)? };
        if !TRACED_RECEIPTS.contains(&receipt.kind.as_str()) || receipt.ids.contains_key("trace") {
            return self.publish(&subject, receipt, None).await;
        }
        let trace = clankie_trace::current_trace_id();
        if trace.is_empty() {
            return self.publish(&subject, receipt, None).await;
        }
        self.publish(&subject, &receipt.clone().with_id("trace", trace), None).await
    }

    /// Sends a core-NATS request and decodes the typed reply; for request/reply subjects only.
    ///
    /// While nobody serves the subject yet (a responder starting or restarting), it
    /// asks again until `timeout` runs out.
    pub async fn request<Q: Event, A: Event>(&self, subject: &Subject, request: &Q, timeout: Duration) -> Result<A, BusError> {
        self.request_within(subject, request, timeout, timeout).await
    }

    /// [`Bus::request`], asking again while nobody serves the subject for at most
    /// `no_responders_for` (a responder restarting): past it, no responders is the answer.
    pub async fn request_within<Q: Event, A: Event>(
        &self,
        subject: &Subject,
        request: &Q,
        timeout: Duration,
        no_responders_for: Duration,
    ) -> Result<A, BusError> {
        subject.check_payload::<Q>()?;
        let name = subject.to_string();
        let span = if TraceContext::current().is_empty() {
            tracing::Span::none()
        } else {
            tracing::info_span!(
                "request",
                otel.name = %format!("request {name}"),
                otel.kind = "client",
                messaging.system = clankie_trace::attr::NATS,
                messaging.operation.type = "send",
                messaging.destination.name = %name,
            )
        };
        let trace = TraceContext::of(&span);
        tracing::Instrument::instrument(self.request_traced(name, request, timeout, no_responders_for, trace), span).await
    }

    async fn request_traced<Q: Event, A: Event>(
        &self,
        name: String,
        request: &Q,
        timeout: Duration,
        no_responders_for: Duration,
        trace: TraceContext,
    ) -> Result<A, BusError> {
        let fail = |detail: String| BusError::Request { subject: name.clone(), detail };
        let payload = Bytes::from(request.encode_to_vec());
        let headers = (!trace.is_empty()).then(|| {
            let mut headers = async_nats::HeaderMap::new();
            for (k, v) in trace.headers() {
                headers.insert(k, v);
            }
            headers
        });
        let deadline = tokio::time::Instant::now() + timeout;
        let patience = tokio::time::Instant::now() + no_responders_for.min(timeout);
        let mut pause = Duration::from_millis(20);
        let reply = loop {
            // The client's own request timeout (10 s) would cut a longer wait short: this one's is the caller's.
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let mut ask = async_nats::Request::new().payload(payload.clone()).timeout(Some(left));
            if let Some(headers) = &headers {
                ask = ask.headers(headers.clone());
            }
            let attempt = tokio::time::timeout_at(deadline, self.client.send_request(name.clone(), ask)).await;
            match attempt {
                Err(_) => return Err(fail(format!("no reply within {timeout:?}"))),
                Ok(Ok(reply)) => break reply,
                Ok(Err(e)) if e.kind() == async_nats::RequestErrorKind::NoResponders && tokio::time::Instant::now() + pause < patience => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(500));
                }
                Ok(Err(e)) => return Err(fail(e.to_string())),
            }
        };
        A::decode(reply.payload).map_err(|e| fail(format!("undecodable reply: {e}")))
    }

    /// Subscribes to request/reply subjects matching `filter` (queue group `group`) for a responder.
    pub async fn serve(&self, filter: String, group: &str) -> Result<async_nats::Subscriber, BusError> {
        self.client
            .queue_subscribe(filter.clone(), group.to_owned())
            .await
            .map_err(|e| BusError::Request { subject: filter, detail: e.to_string() })
    }

    /// A span (not yet entered) answering `request`, made the child of the asker's span when it
    /// was traced: a media fetch is part of the turn that asked for it.
    pub fn serving(request: &async_nats::Message, span: &tracing::Span) {
        let trace = TraceContext::from_headers(|name| request.headers.as_ref().and_then(|h| h.get(name)).map(|v| v.as_str()));
        trace.consumed(span, request.subject.to_string());
    }

    /// Answers one request received through [`Bus::serve`].
    pub async fn respond<A: Event>(&self, request: &async_nats::Message, answer: &A) -> Result<(), BusError> {
        let Some(reply) = request.reply.clone() else { return Ok(()) };
        self.client
            .publish(reply, Bytes::from(answer.encode_to_vec()))
            .await
            .map_err(|e| BusError::Request { subject: request.subject.to_string(), detail: e.to_string() })
    }

    /// The newest stored event on `subject`, if its stream holds one; state such as
    /// "which voice channel is live" is read from here rather than kept twice.
    pub async fn last<E: Event>(&self, subject: &Subject) -> Result<Option<E>, BusError> {
        subject.check_payload::<E>()?;
        let Some(spec) = stream_for(subject.family()) else { return Ok(None) };
        let fail = |detail: String| BusError::Stream { stream: spec.name, detail };
        let stream = self.js.get_stream(spec.name).await.map_err(|e| fail(e.to_string()))?;
        match stream.get_last_raw_message_by_subject(&subject.to_string()).await {
            Ok(m) => E::decode(m.payload).map(Some).map_err(|e| fail(format!("undecodable last event: {e}"))),
            Err(e) if e.kind() == jetstream::stream::LastRawMessageErrorKind::NoMessageFound => Ok(None),
            Err(e) => Err(fail(e.to_string())),
        }
    }

    /// The event stored at `sequence` in `family`'s stream, if the stream still holds it there;
    /// how a replica reads a delivery another replica received and died holding.
    pub async fn stored<E: Event>(&self, family: Family, sequence: u64) -> Result<Option<E>, BusError> {
        Ok(self.stored_traced(family, sequence).await?.map(|(event, _)| event))
    }

    /// [`Bus::stored`] with the trace context the event was published in: a takeover's spans
    /// join the trace of the message it takes over.
    pub async fn stored_traced<E: Event>(&self, family: Family, sequence: u64) -> Result<Option<(E, TraceContext)>, BusError> {
        let Some(spec) = stream_for(family) else { return Ok(None) };
        let fail = |detail: String| BusError::Stream { stream: spec.name, detail };
        let stream = self.js.get_stream(spec.name).await.map_err(|e| fail(e.to_string()))?;
        match stream.get_raw_message(sequence).await {
            Ok(m) if Subject::parse(&m.subject).is_ok_and(|s| s.family() == family) => {
                let trace = TraceContext::from_headers(|name| m.headers.get(name).map(|v| v.as_str()));
                let event = E::decode(m.payload).map_err(|e| fail(format!("undecodable stored event: {e}")))?;
                Ok(Some((event, trace)))
            }
            Ok(_) => Ok(None),
            Err(e) if e.kind() == jetstream::stream::RawMessageErrorKind::NoMessageFound => Ok(None),
            Err(e) => Err(fail(e.to_string())),
        }
    }

    /// Opens (creating if needed) a typed durable pull consumer.
    pub async fn consumer<E: Event>(&self, spec: ConsumerSpec) -> Result<Consumer<E>, BusError> {
        Consumer::open(self.clone(), spec).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nats_credentials_leave_the_url_before_it_is_connected_to() {
        assert_eq!(split_credentials("nats://tok@h:4222"), ("nats://h:4222".into(), Some(Credentials::Token("tok".into()))));
        assert_eq!(
            split_credentials("nats://u:p@h:4222"),
            ("nats://h:4222".into(), Some(Credentials::UserPassword("u".into(), "p".into())))
        );
        assert_eq!(split_credentials("nats://h:4222"), ("nats://h:4222".into(), None));
    }
}
