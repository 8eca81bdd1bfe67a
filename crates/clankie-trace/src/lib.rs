//! OpenTelemetry for every service: one Discord message is one trace across the gateway, the
//! captain, media and the voice floor.
//!
//! - [`layer_to`] is the `tracing` layer that exports Clankie's spans over OTLP/HTTP with protobuf,
//!   only when `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set.
//!   The SDK's batch processor sends from a thread of its own, so no delivery ever waits on a
//!   collector; spans a collector did not take are counted (`clankie_trace_spans_dropped_total`).
//! - [`TraceContext`] is the W3C trace context (`traceparent`, `tracestate`) a publish carries in
//!   its NATS headers and a consumer makes the parent of the span that handles the delivery.
//! - [`attr`] names the span attributes as the semantic conventions do.
//!
//! Spans only, never log events: a span's fields are ids, counts and codes, so what is exported
//! is as content-free as a receipt. Log lines stay on stderr.

pub mod attr;

use std::collections::HashMap;

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator as _};
use opentelemetry::trace::{TraceContextExt as _, TracerProvider as _};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::registry::LookupSpan;

/// The standard variables that turn exporting on, the traces-only one first.
const ENDPOINTS: [&str; 2] = ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"];

/// The metric a span that never reached the collector is counted in.
pub const DROPPED_METRIC: &str = "clankie_trace_spans_dropped_total";

/// Why tracing could not start.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("the OTLP exporter for {endpoint} could not be built: {detail}")]
    Exporter { endpoint: String, detail: String },
}

/// The collector's address from the environment, when exporting is on.
pub fn endpoint() -> Option<String> {
    ENDPOINTS.iter().find_map(|name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()))
}

/// Keeps the exporter alive; dropping it sends what is still queued (bounded by the SDK's
/// shutdown timeout), so a service that stops cleanly loses no span.
pub struct Telemetry {
    provider: SdkTracerProvider,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        let _ = self.provider.force_flush();
        let _ = self.provider.shutdown();
    }
}

/// Where and how often to export, for a process that says so itself (a test, the bench) rather
/// than through the environment.
#[derive(Debug, Clone)]
pub struct Export {
    /// The collector's base URL (`/v1/traces` is appended).
    pub endpoint: String,
    /// Whether `endpoint` was given in code; otherwise the exporter reads the `OTEL_*` variables.
    pub given: bool,
    /// How often a batch is sent (`OTEL_BSP_SCHEDULE_DELAY`, 5 s, when `None`).
    pub every: Option<std::time::Duration>,
}

impl Export {
    /// What the environment asks for, `None` when no collector is configured.
    pub fn from_env() -> Option<Export> {
        endpoint().map(|endpoint| Export { endpoint, given: false, every: None })
    }

    /// Exporting to `endpoint` every `every`.
    pub fn to(endpoint: impl Into<String>, every: std::time::Duration) -> Export {
        Export { endpoint: endpoint.into(), given: true, every: Some(every) }
    }
}

/// The exporting layer for `service`, sending as `export` says ([`Export::from_env`] for a
/// service). The service is named `OTEL_SERVICE_NAME` when set, else `clankie-<service>`;
/// `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER` (parent-based always-on by default),
/// `OTEL_TRACES_SAMPLER_ARG` and the `OTEL_BSP_*` batch settings are read by the SDK as the
/// specification says.
pub fn layer_to<S>(service: &str, export: Export) -> Result<(impl Layer<S> + Send + Sync + 'static, Telemetry), TraceError>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    // reqwest is built without a TLS provider of its own: ring, as for every other client here.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let fail =
        |e: opentelemetry_otlp::ExporterBuildError| TraceError::Exporter { endpoint: export.endpoint.clone(), detail: e.to_string() };
    let exporter = if export.given {
        use opentelemetry_otlp::WithExportConfig as _;
        let url = format!("{}/v1/traces", export.endpoint.trim_end_matches('/'));
        opentelemetry_otlp::SpanExporter::builder().with_http().with_endpoint(url).build().map_err(fail)?
    } else {
        opentelemetry_otlp::SpanExporter::builder().with_http().build().map_err(fail)?
    };
    let name = std::env::var("OTEL_SERVICE_NAME").ok().filter(|n| !n.trim().is_empty()).unwrap_or_else(|| format!("clankie-{service}"));
    let resource = opentelemetry_sdk::Resource::builder().with_service_name(name).build();
    let mut batch = opentelemetry_sdk::trace::BatchConfigBuilder::default();
    if let Some(every) = export.every {
        batch = batch.with_scheduled_delay(every);
    }
    let processor = opentelemetry_sdk::trace::BatchSpanProcessor::builder(Counting(exporter)).with_batch_config(batch.build()).build();
    let provider = SdkTracerProvider::builder().with_span_processor(processor).with_resource(resource).build();
    let tracer = provider.tracer("clankie");
    let _ = STAGES.set(tracer.clone());
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_level(false)
        .with_tracked_inactivity(false)
        .with_filter(filter_fn(|meta| meta.is_span() && meta.target().starts_with("clankie")));
    Ok((layer, Telemetry { provider }))
}

/// The tracer [`Stage`]s are made with, once a layer exports.
static STAGES: std::sync::OnceLock<opentelemetry_sdk::trace::SdkTracer> = std::sync::OnceLock::new();

/// A span whose start and end are times the code measured rather than the moments it was made
/// and dropped: a stage that began before anyone could open a span for it (the body heard
/// speech end, the turn detector decided later) or that ends on another task (a spoken turn
/// ends at its first audio). Nothing when no layer exports. Dropped unended, it ends then.
pub struct Stage(Option<opentelemetry_sdk::trace::Span>);

impl Stage {
    /// Begins `name` at `at`, a child of `parent` (a root when `parent` is empty).
    pub fn begin(name: &'static str, parent: &TraceContext, at: std::time::SystemTime) -> Stage {
        use opentelemetry::trace::Tracer as _;
        let Some(tracer) = STAGES.get() else { return Stage(None) };
        let parent = parent.context().unwrap_or_default();
        Stage(Some(tracer.span_builder(name).with_start_time(at).start_with_context(tracer, &parent)))
    }

    /// Its context, for the stages and messages that follow from it.
    pub fn context(&self) -> TraceContext {
        use opentelemetry::trace::Span as _;
        let Some(span) = &self.0 else { return TraceContext::default() };
        TraceContext::injected(&opentelemetry::Context::new().with_remote_span_context(span.span_context().clone()))
    }

    /// Sets a count on it.
    pub fn count(&mut self, key: &'static str, value: i64) {
        use opentelemetry::trace::Span as _;
        if let Some(span) = &mut self.0 {
            span.set_attribute(opentelemetry::KeyValue::new(key, value));
        }
    }

    /// Records a named moment on it (his first audio).
    pub fn event_at(&mut self, name: &'static str, at: std::time::SystemTime) {
        use opentelemetry::trace::Span as _;
        if let Some(span) = &mut self.0 {
            span.add_event_with_timestamp(name, at, Vec::new());
        }
    }

    /// Ends it at `at`.
    pub fn end_at(mut self, at: std::time::SystemTime) {
        use opentelemetry::trace::Span as _;
        if let Some(span) = &mut self.0 {
            span.end_with_timestamp(at);
        }
    }
}

/// Records a stage that is already over, from `start` to `end`, under `parent`.
pub fn record(name: &'static str, parent: &TraceContext, start: std::time::SystemTime, end: std::time::SystemTime) {
    Stage::begin(name, parent, start).end_at(end);
}

/// The wall-clock time of a monotonic instant in the past: when a stage measured with
/// [`std::time::Instant`] began, for a [`Stage`].
pub fn wall_time_of(at: std::time::Instant) -> std::time::SystemTime {
    std::time::SystemTime::now() - at.elapsed()
}

/// The OTLP exporter, counting the spans of every batch it could not hand over.
#[derive(Debug)]
struct Counting<E>(E);

impl<E: SpanExporter> SpanExporter for Counting<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len() as u64;
        let result = self.0.export(batch).await;
        if result.is_err() {
            metrics::counter!(DROPPED_METRIC).increment(spans);
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: std::time::Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.0.set_resource(resource)
    }
}

/// A span's W3C trace context as it travels: the `traceparent` and `tracestate` headers of a
/// NATS message, or the value an outbox row keeps. Empty where nothing is traced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TraceContext(HashMap<String, String>);

struct Headers<'a>(&'a mut HashMap<String, String>);

impl Injector for Headers<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key.to_owned(), value);
    }
}

struct Read<'a>(&'a HashMap<String, String>);

impl Extractor for Read<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

/// The header names the W3C propagator reads and writes.
pub const HEADERS: [&str; 2] = ["traceparent", "tracestate"];

impl TraceContext {
    /// The context of the span the caller is in.
    pub fn current() -> TraceContext {
        TraceContext::of(&tracing::Span::current())
    }

    /// The context of `span`; empty when it is not exported.
    pub fn of(span: &tracing::Span) -> TraceContext {
        TraceContext::injected(&span.context())
    }

    /// The headers the W3C propagator writes for `cx`; empty when it names no valid span.
    fn injected(cx: &opentelemetry::Context) -> TraceContext {
        if !cx.span().span_context().is_valid() {
            return TraceContext::default();
        }
        let mut headers = HashMap::new();
        TraceContextPropagator::new().inject_context(cx, &mut Headers(&mut headers));
        TraceContext(headers)
    }

    /// The context a message's headers carry, read through `get`.
    pub fn from_headers<'a>(get: impl Fn(&str) -> Option<&'a str>) -> TraceContext {
        TraceContext(HEADERS.iter().filter_map(|h| get(h).map(|v| ((*h).to_owned(), v.to_owned()))).collect())
    }

    /// The headers to put on a message, none when nothing is traced.
    pub fn headers(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The `traceparent` value, empty when nothing is traced.
    pub fn traceparent(&self) -> &str {
        self.0.get("traceparent").map_or("", String::as_str)
    }

    /// The trace id (32 hex digits), empty when nothing is traced.
    pub fn trace_id(&self) -> &str {
        self.traceparent().split('-').nth(1).unwrap_or("")
    }

    /// Whether it names no trace.
    pub fn is_empty(&self) -> bool {
        self.trace_id().is_empty()
    }

    fn context(&self) -> Option<opentelemetry::Context> {
        if self.is_empty() {
            return None;
        }
        let cx = TraceContextPropagator::new().extract(&Read(&self.0));
        cx.span().span_context().is_valid().then_some(cx)
    }

    /// Makes this context the parent of `span`, which must not have been entered yet. Nothing
    /// when it is empty or malformed: the span then starts a trace of its own.
    pub fn parent(&self, span: &tracing::Span) {
        if let Some(cx) = self.context() {
            let _ = span.set_parent(cx);
        }
    }

    /// Makes `span` (not yet entered) the consumer's side of a message from `destination` this
    /// context was published in: its child, with the messaging attributes. Nothing when empty.
    pub fn consumed(&self, span: &tracing::Span, destination: String) -> bool {
        if self.is_empty() {
            return false;
        }
        self.parent(span);
        set(span, attr::MESSAGING_SYSTEM, attr::NATS);
        set(span, attr::MESSAGING_OPERATION, "process");
        set(span, attr::MESSAGING_DESTINATION, destination);
        true
    }

    /// Links `span` to this context: a redelivery or a delivery absorbed into another's turn
    /// points at the trace it began in.
    pub fn link(&self, span: &tracing::Span) {
        if let Some(cx) = self.context() {
            span.add_link(cx.span().span_context().clone());
        }
    }
}

/// The trace id of the span the caller is in, empty when nothing is exported: what receipts
/// and `clankie trail` show so an operator can open the trace.
pub fn current_trace_id() -> String {
    TraceContext::current().trace_id().to_owned()
}

/// Sets an attribute on `span` whose name is not a Rust identifier (the semantic conventions' dotted names).
pub fn set(span: &tracing::Span, key: &'static str, value: impl Into<opentelemetry::Value>) {
    span.set_attribute(key, value);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn traceparent(value: &str) -> TraceContext {
        TraceContext::from_headers(|name| (name == "traceparent" && !value.is_empty()).then_some(value))
    }

    #[test]
    fn a_traceparent_names_its_trace_and_an_empty_one_none() {
        let t = traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        assert_eq!(t.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert!(!t.is_empty());
        assert!(traceparent("").is_empty());
        assert!(TraceContext::from_headers(|_| None).is_empty());
    }

    #[test]
    fn a_malformed_traceparent_is_no_parent() {
        assert!(traceparent("00-zz-yy-01").context().is_none());
        assert!(traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").context().is_some());
    }
}
