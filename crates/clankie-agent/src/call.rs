//! One model call as a run makes it: inside its chat span, streamed, bounded, the first
//! chunk's time recorded, and transient failures retried with backoff.

use futures::StreamExt;

use crate::AgentEvent;
use crate::ctx::{RetryPolicy, RunCtx, RunStats};
use crate::provider::{Accumulator, AssistantTurn, Model, ModelError, ModelRequest, StreamBounds, StreamItem, Usage};
use crate::silence::SilenceGate;

pub(crate) async fn call_with_retries(
    request: &ModelRequest,
    ctx: &RunCtx,
    stats: &mut RunStats,
    gate: bool,
) -> Result<AssistantTurn, ModelError> {
    let policy = ctx.config.retry;
    let mut attempt = 0;
    loop {
        let result = call_once(request, ctx, stats, gate).await;
        match result {
            Ok(turn) => {
                stats.model_calls += 1;
                bill(stats, &turn.usage);
                return Ok(turn);
            }
            Err(ModelError::Transient { code, retry_after, .. }) if attempt < policy.max_retries => {
                attempt += 1;
                let backoff = policy.base_delay.saturating_mul(1 << (attempt - 1).min(16));
                let delay = retry_after.unwrap_or(backoff).min(policy.max_delay);
                ctx.sink.emit(AgentEvent::RetryStart { attempt, delay_ms: delay.as_millis() as u64, code });
                tokio::time::sleep(delay).await;
                ctx.sink.emit(AgentEvent::RetryEnd { attempt });
            }
            Err(e) => {
                stats.model_calls += 1;
                return Err(e);
            }
        }
    }
}

/// Counts what a call cost into the run's figures.
fn bill(stats: &mut RunStats, usage: &crate::provider::Usage) {
    stats.input_tokens += usage.input_tokens;
    stats.output_tokens += usage.output_tokens;
    stats.cached_input_tokens += usage.cached_input_tokens;
    stats.cache_write_input_tokens += usage.cache_write_input_tokens;
    stats.reasoning_tokens += usage.reasoning_tokens;
}

/// One model call as a GenAI span: who was asked, what it cost, why it stopped; never words.
fn chat_span(model: &Model) -> tracing::Span {
    tracing::info_span!(
        "chat",
        otel.name = %format!("chat {}", model.model_name()),
        otel.kind = "client",
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = model.provider_name(),
        gen_ai.request.model = model.model_name(),
        gen_ai.response.finish_reasons = tracing::field::Empty,
        gen_ai.usage.input_tokens = tracing::field::Empty,
        gen_ai.usage.output_tokens = tracing::field::Empty,
        gen_ai.usage.cache_read.input_tokens = tracing::field::Empty,
        gen_ai.usage.cache_creation.input_tokens = tracing::field::Empty,
        gen_ai.usage.reasoning.output_tokens = tracing::field::Empty,
        gen_ai.response.time_to_first_chunk_ms = tracing::field::Empty,
        error.type = tracing::field::Empty,
    )
}

/// Records a finished call's counts on its span; a failure records its code.
fn record_chat(span: &tracing::Span, result: &Result<AssistantTurn, ModelError>) {
    match result {
        Ok(turn) => {
            // A provider's stop reason is one of a few words it defines; anything else is not recorded.
            let reason = match turn.stop_reason.as_str() {
                r @ ("stop" | "length" | "tool_calls" | "content_filter" | "end_turn" | "max_tokens" | "tool_use" | "stop_sequence"
                | "pause_turn" | "refusal") => r,
                "" => "unknown",
                _ => "other",
            };
            span.record("gen_ai.response.finish_reasons", reason);
            span.record("gen_ai.usage.input_tokens", turn.usage.input_tokens as i64);
            span.record("gen_ai.usage.output_tokens", turn.usage.output_tokens as i64);
            span.record("gen_ai.usage.cache_read.input_tokens", turn.usage.cached_input_tokens as i64);
            span.record("gen_ai.usage.cache_creation.input_tokens", turn.usage.cache_write_input_tokens as i64);
            span.record("gen_ai.usage.reasoning.output_tokens", turn.usage.reasoning_tokens as i64);
        }
        Err(e) => {
            span.record("error.type", e.code());
            metrics::counter!("clankie_model_errors_total", "code" => e.code()).increment(1);
        }
    }
}

async fn call_once(request: &ModelRequest, ctx: &RunCtx, stats: &mut RunStats, gate: bool) -> Result<AssistantTurn, ModelError> {
    let span = chat_span(&ctx.model);
    let result = tracing::Instrument::instrument(call_once_inner(request, ctx, stats, gate), span.clone()).await;
    record_chat(&span, &result);
    result
}

async fn call_once_inner(request: &ModelRequest, ctx: &RunCtx, stats: &mut RunStats, gate: bool) -> Result<AssistantTurn, ModelError> {
    let sink = ctx.sink.clone();
    let uploaded = std::sync::Arc::new(move |bytes| sink.emit(AgentEvent::RequestSent { bytes }));
    let mut silence = SilenceGate::new();
    // The usage the provider reported before an answer broke off: billed all the same.
    let mut billed = None;
    let result = streamed(&ctx.model, request, uploaded, ctx.config.bounds, &mut |item| match item {
        StreamItem::Text(t) => {
            ctx.sink.emit(AgentEvent::TextDelta { chars: t.chars().count() });
            if gate && silence.push(t) {
                stats.words_came = true;
                ctx.sink.emit(AgentEvent::WordsComing);
            }
        }
        StreamItem::ToolCallDelta { arguments, .. } => ctx.sink.emit(AgentEvent::TextDelta { chars: arguments.chars().count() }),
        StreamItem::Alive => ctx.sink.emit(AgentEvent::ProviderAlive),
        StreamItem::Usage(u) => billed = Some(*u),
        StreamItem::Finish(_) | StreamItem::Done => {}
    })
    .await;
    if let (Err(_), Some(usage)) = (&result, billed) {
        bill(stats, &usage);
    }
    result
}

/// One streamed model call, inside its chat span: each item handed to `seen`, then gathered
/// into the turn; when the first words or tool call came is recorded on the span and in the
/// first-chunk histogram.
async fn streamed(
    model: &Model,
    request: &ModelRequest,
    uploaded: crate::provider::Uploaded,
    bounds: StreamBounds,
    seen: &mut (dyn FnMut(&StreamItem) + Send),
) -> Result<AssistantTurn, ModelError> {
    let asked = std::time::Instant::now();
    let mut stream = model.open(request, uploaded).await?;
    let mut acc = Accumulator::new(bounds);
    let mut first = true;
    while let Some(item) = stream.next().await {
        let item = item?;
        if first && matches!(item, StreamItem::Text(_) | StreamItem::ToolCallDelta { .. }) {
            first = false;
            tracing::Span::current().record("gen_ai.response.time_to_first_chunk_ms", asked.elapsed().as_millis() as i64);
            metrics::histogram!("clankie_model_first_chunk_seconds").record(asked.elapsed().as_secs_f64());
        }
        seen(&item);
        acc.push(item)?;
    }
    acc.finish()
}

/// One model call with bounded retries of transient failures, outside any session: for
/// callers (the voice floor's responder) that keep their own context.
pub async fn complete(model: &Model, request: &ModelRequest, retry: RetryPolicy) -> Result<AssistantTurn, ModelError> {
    complete_streaming(model, request, retry, &mut |_| {}, &mut Usage::default()).await
}

/// Like [`complete`], handing each piece of text to `on_text` as it streams in (the voice room
/// speaks sentence by sentence). A call that already handed text on is not retried: what was
/// said cannot be unsaid. Every attempt's usage is added to `billed`, one that broke off after
/// the provider reported it included, as the provider bills it.
pub async fn complete_streaming(
    model: &Model,
    request: &ModelRequest,
    retry: RetryPolicy,
    on_text: &mut (dyn FnMut(&str) + Send),
    billed: &mut Usage,
) -> Result<AssistantTurn, ModelError> {
    let mut attempt = 0;
    loop {
        let mut handed_on = false;
        let mut reported = None;
        let span = chat_span(model);
        let mut seen = |item: &StreamItem| match item {
            StreamItem::Text(t) => {
                handed_on |= !t.is_empty();
                on_text(t);
            }
            StreamItem::Usage(u) => reported = Some(*u),
            _ => {}
        };
        let call = streamed(model, request, std::sync::Arc::new(|_| {}), StreamBounds::default(), &mut seen);
        let result = tracing::Instrument::instrument(call, span.clone()).await;
        record_chat(&span, &result);
        match &result {
            Ok(turn) => *billed += turn.usage,
            Err(_) => *billed += reported.unwrap_or_default(),
        }
        match result {
            Err(ModelError::Transient { retry_after, .. }) if attempt < retry.max_retries && !handed_on => {
                attempt += 1;
                let backoff = retry.base_delay.saturating_mul(1 << (attempt - 1).min(16));
                tokio::time::sleep(retry_after.unwrap_or(backoff).min(retry.max_delay)).await;
            }
            other => return other,
        }
    }
}
