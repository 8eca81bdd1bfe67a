//! A run: model call, tool batch, steered messages, model call … until the
//! model stops with nothing queued. Wrapped, always, in the stall watchdog.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clankie_proto::v1::FailureCode;
use futures::StreamExt;
use tokio::sync::{mpsc, watch};

use crate::compaction::{self, CompactionPolicy};
use crate::provider::{Accumulator, AssistantTurn, Model, ModelError, ModelRequest, StreamBounds, StreamItem};
use crate::session::{EntryBody, Session, UserMessage};
use crate::silence::{SilenceGate, is_silent, strip_token};
use crate::watchdog::{self, StallPolicy};
use crate::{AgentError, AgentEvent, BootClock, Clock, EventSink, Tool, ToolContext, ToolError};

/// Bounded retries of transient provider failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// The first backoff; it doubles each retry.
    pub base_delay: Duration,
    /// No backoff, nor honoured Retry-After, waits longer than this.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy { max_retries: 4, base_delay: Duration::from_millis(500), max_delay: Duration::from_secs(30) }
    }
}

/// How runs behave; every duration is configuration so tests can compress it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AgentConfig {
    pub stall: StallPolicy,
    pub retry: RetryPolicy,
    pub compaction: CompactionPolicy,
    pub bounds: StreamBounds,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunReply {
    /// The final reply, with any copy of the silence token removed.
    Words(String),
    /// The model declined with exactly `[[stay-silent]]`.
    Silent,
    /// The run failed with this code.
    Failed(FailureCode),
}

/// Content-free counts of one run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunStats {
    /// Model calls, counting retries once and compaction calls.
    pub model_calls: u32,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Of `input_tokens`, those the provider read from its prompt cache.
    pub cached_input_tokens: u64,
    /// Of `input_tokens`, those written to the prompt cache (Anthropic bills them above the input price).
    pub cache_write_input_tokens: u64,
    /// Of `output_tokens`, those the provider said were spent reasoning.
    pub reasoning_tokens: u64,
    /// Delivery ids of the steered messages that entered the session.
    pub steered: Vec<String>,
    /// Whether the silence gate ever said words were coming.
    pub words_came: bool,
}

/// What a finished run hands back.
pub struct RunResult {
    /// The reply, or the infrastructure error that stopped the run (a lost lease, say).
    pub outcome: Result<RunReply, AgentError>,
    pub stats: RunStats,
    /// Steered messages the run closed on without delivering (only after a failure).
    pub undelivered: Vec<UserMessage>,
    /// The session, for the lane's next run.
    pub session: Session,
}

#[derive(Default)]
struct Queue {
    closed: bool,
    pending: VecDeque<UserMessage>,
}

/// Queues messages into a live run. Cheap to clone.
#[derive(Clone, Default)]
pub struct Steerer {
    queue: Arc<Mutex<Queue>>,
}

impl Steerer {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `message` for delivery at the run's next turn boundary. When the
    /// run has already ended the message is handed back, so it is never lost.
    pub fn steer(&self, message: UserMessage) -> Result<(), UserMessage> {
        let mut q = self.lock();
        if q.closed {
            return Err(message);
        }
        q.pending.push_back(message);
        Ok(())
    }

    /// Takes back a queued message of `delivery_id` the run has not yet read (its author
    /// deleted it). False when there is none: it was read already, or never queued.
    pub fn withdraw(&self, delivery_id: &str) -> bool {
        let mut q = self.lock();
        let before = q.pending.len();
        q.pending.retain(|m| m.delivery_id != delivery_id);
        q.pending.len() < before
    }

    /// Whether the run still takes steers.
    pub fn is_open(&self) -> bool {
        !self.lock().closed
    }

    fn drain(&self) -> Vec<UserMessage> {
        self.lock().pending.drain(..).collect()
    }

    /// Closes the queue if nothing is waiting; the atomic check that lets a run end without losing a steer.
    fn close_if_empty(&self) -> bool {
        let mut q = self.lock();
        if q.pending.is_empty() {
            q.closed = true;
        }
        q.closed
    }

    fn close(&self) -> Vec<UserMessage> {
        let mut q = self.lock();
        q.closed = true;
        q.pending.drain(..).collect()
    }
}

/// A live run: steer into it, read its events, await its result.
pub struct Run {
    steerer: Steerer,
    events: mpsc::UnboundedReceiver<AgentEvent>,
    handle: tokio::task::JoinHandle<RunResult>,
}

impl Run {
    /// A handle for steering messages into this run.
    pub fn steerer(&self) -> Steerer {
        self.steerer.clone()
    }

    /// The next event, or `None` once the run is over and all events are read.
    pub async fn next_event(&mut self) -> Option<AgentEvent> {
        self.events.recv().await
    }

    /// Takes the event receiver, for a consumer that reads events in its own task.
    pub fn take_events(&mut self) -> mpsc::UnboundedReceiver<AgentEvent> {
        let (_, empty) = mpsc::unbounded_channel();
        std::mem::replace(&mut self.events, empty)
    }

    /// Stops the run where it is: an in-flight model call or tool is dropped, nothing more is
    /// written. For a run whose lane another replica has taken: it must not go on.
    pub fn abort(self) {
        self.steerer.close();
        self.handle.abort();
    }

    /// Waits for the run to end.
    pub async fn finish(self) -> Result<RunResult, AgentError> {
        self.handle.await.map_err(|e| AgentError::Session(format!("run task failed: {e}")))
    }

    /// Waits for the run to end, renewing `lease` every third of `ttl` meanwhile, for a run
    /// whose lane is held only as long as it lasts (a handoff, a console line). A renewal
    /// that fails is logged; a fenced one shows as the run's own fenced write.
    pub async fn finish_keeping(
        self,
        store: &clankie_store::Store,
        lease: &clankie_store::Lease,
        ttl: Duration,
    ) -> Result<RunResult, AgentError> {
        let mut renew = tokio::time::interval((ttl / 3).max(Duration::from_millis(10)));
        renew.tick().await;
        let finished = self.finish();
        tokio::pin!(finished);
        loop {
            tokio::select! {
                r = &mut finished => return r,
                _ = renew.tick() => {
                    if let Err(e) = store.renew_lease(lease, ttl).await {
                        tracing::warn!(lane = %lease.lane, error = %e, "lease not renewed");
                    }
                }
            }
        }
    }
}

/// Runs a model with tools over sessions.
#[derive(Clone)]
pub struct Agent {
    model: Model,
    tools: Vec<Arc<dyn Tool>>,
    config: AgentConfig,
    clock: Arc<dyn Clock>,
}

struct RunCtx {
    model: Model,
    tools: Vec<Arc<dyn Tool>>,
    config: AgentConfig,
    sink: EventSink,
    steerer: Steerer,
    system: String,
    cancel: watch::Receiver<bool>,
}

impl Agent {
    /// An agent over `model`, timed by the boot clock.
    pub fn new(model: Model, config: AgentConfig) -> Agent {
        Agent { model, tools: Vec::new(), config, clock: Arc::new(BootClock) }
    }

    /// Replaces the clock (tests use it to simulate a host suspend).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Agent {
        self.clock = clock;
        self
    }

    /// The clock its runs are timed by.
    pub fn clock(&self) -> Arc<dyn Clock> {
        self.clock.clone()
    }

    /// Adds a tool.
    pub fn with_tool(mut self, tool: Arc<dyn Tool>) -> Agent {
        self.tools.push(tool);
        self
    }

    /// The configured model.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// Starts a run over `session` with `system` as the system prompt and `first` as the opening messages.
    pub fn start(&self, session: Session, system: String, first: Vec<UserMessage>) -> Run {
        self.start_with_tools(session, system, first, Vec::new())
    }

    /// Like [`Agent::start`], with extra tools for this run only (tools bound to the run's room, say).
    pub fn start_with_tools(&self, session: Session, system: String, first: Vec<UserMessage>, extra: Vec<Arc<dyn Tool>>) -> Run {
        self.start_held(session, system, first, extra, None)
    }

    /// Like [`Agent::start_with_tools`], but the first model call waits for `hold` (a
    /// bounded wait while the person being answered is still typing, say). Steers that
    /// arrive meanwhile are delivered before that first call; the stall watchdog starts
    /// after the hold.
    pub fn start_held(
        &self,
        mut session: Session,
        system: String,
        first: Vec<UserMessage>,
        extra: Vec<Arc<dyn Tool>>,
        hold: Option<futures::future::BoxFuture<'static, ()>>,
    ) -> Run {
        let (sink, events) = EventSink::new(self.clock.clone());
        let steerer = Steerer::default();
        let (cancel_tx, cancel) = watch::channel(false);
        let mut tools = self.tools.clone();
        tools.extend(extra);
        let ctx = RunCtx { model: self.model.clone(), tools, config: self.config, sink, steerer: steerer.clone(), system, cancel };
        // The run is a span of the turn that started it, on a task of its own.
        let span = tracing::info_span!("agent.run");
        let handle = tokio::spawn(tracing::Instrument::instrument(
            async move {
                if let Some(hold) = hold {
                    hold.await;
                }
                let mut stats = RunStats::default();
                ctx.sink.emit(AgentEvent::RunStart);
                let outcome = {
                    let work = run_loop(&mut session, &mut stats, &ctx, first);
                    tokio::select! {
                        outcome = work => outcome,
                        silent_for = watchdog::watch(&ctx.sink, ctx.config.stall) => {
                            tracing::warn!(tree = session.tree(), silent_ms = silent_for.as_millis() as u64, "run stalled; aborting");
                            Ok(RunReply::Failed(FailureCode::CaptainTurnStalled))
                        }
                    }
                };
                let _ = cancel_tx.send(true);
                let undelivered = ctx.steerer.close();
                ctx.sink.emit(AgentEvent::RunEnd);
                RunResult { outcome, stats, undelivered, session }
            },
            span,
        ));
        Run { steerer, events, handle }
    }
}

fn final_reply(text: &str) -> RunReply {
    if is_silent(text) {
        return RunReply::Silent;
    }
    let words = strip_token(text);
    if words.is_empty() { RunReply::Failed(FailureCode::CaptainResponseMissing) } else { RunReply::Words(words) }
}

async fn run_loop(session: &mut Session, stats: &mut RunStats, ctx: &RunCtx, first: Vec<UserMessage>) -> Result<RunReply, AgentError> {
    // Everything before this run's first message belongs to answers already given.
    let settled = session.entries().len();
    for m in first {
        session
            .append(EntryBody::User { author: m.author, delivery_id: m.delivery_id, text: m.text, images: m.images, lines: m.lines })
            .await?;
    }
    let specs: Vec<_> = ctx.tools.iter().map(|t| t.spec()).collect();
    let mut n = 0;
    loop {
        compact_if_needed(session, stats, ctx).await?;
        deliver_steers(session, stats, ctx).await?;
        n += 1;
        ctx.sink.emit(AgentEvent::TurnStart { n });
        let request = ModelRequest { system: ctx.system.clone(), messages: session.context_settled_before(settled), tools: specs.clone() };
        let answer = call_with_retries(&request, ctx, stats, true).await;
        let turn = match answer {
            Err(e) => {
                tracing::warn!(tree = session.tree(), code = e.code(), "model call failed");
                session
                    .append(EntryBody::Assistant {
                        text: String::new(),
                        tool_calls: Vec::new(),
                        stop_reason: "error".into(),
                        usage: Default::default(),
                        provider_error: Some(e.provider_message().to_owned()),
                        forgotten_asker: false,
                    })
                    .await?;
                ctx.sink.emit(AgentEvent::TurnEnd { n });
                return Ok(RunReply::Failed(e.failure_code()));
            }
            Ok(turn) => turn,
        };
        session
            .append(EntryBody::Assistant {
                text: turn.text.clone(),
                tool_calls: turn.tool_calls.clone(),
                stop_reason: turn.stop_reason.clone(),
                usage: turn.usage,
                provider_error: None,
                forgotten_asker: false,
            })
            .await?;
        ctx.sink.emit(AgentEvent::TurnEnd { n });
        if !turn.tool_calls.is_empty() {
            run_tools(&turn, session, ctx).await?;
            continue;
        }
        if ctx.steerer.close_if_empty() {
            return Ok(final_reply(&turn.text));
        }
    }
}

async fn deliver_steers(session: &mut Session, stats: &mut RunStats, ctx: &RunCtx) -> Result<(), AgentError> {
    for m in ctx.steerer.drain() {
        let delivery_id = m.delivery_id.clone();
        session
            .append(EntryBody::User { author: m.author, delivery_id: m.delivery_id, text: m.text, images: m.images, lines: m.lines })
            .await?;
        stats.steered.push(delivery_id.clone());
        ctx.sink.emit(AgentEvent::SteerDelivered { delivery_id });
    }
    Ok(())
}

async fn compact_if_needed(session: &mut Session, stats: &mut RunStats, ctx: &RunCtx) -> Result<(), AgentError> {
    let Some(plan) = compaction::plan(session, &ctx.config.compaction) else { return Ok(()) };
    ctx.sink.emit(AgentEvent::CompactionStart);
    match call_with_retries(&plan.request, ctx, stats, false).await {
        Ok(summary) if !summary.text.trim().is_empty() => {
            session.append(EntryBody::Compaction { summary: summary.text, first_kept_id: plan.first_kept_id }).await?;
        }
        Ok(_) => tracing::warn!(tree = session.tree(), "compaction produced no summary; continuing uncompacted"),
        Err(e) => tracing::warn!(tree = session.tree(), code = e.code(), "compaction failed; continuing uncompacted"),
    }
    ctx.sink.emit(AgentEvent::CompactionEnd);
    Ok(())
}

async fn call_with_retries(request: &ModelRequest, ctx: &RunCtx, stats: &mut RunStats, gate: bool) -> Result<AssistantTurn, ModelError> {
    let policy = ctx.config.retry;
    let mut attempt = 0;
    loop {
        let result = call_once(request, ctx, stats, gate).await;
        match result {
            Ok(turn) => {
                stats.model_calls += 1;
                stats.input_tokens += turn.usage.input_tokens;
                stats.output_tokens += turn.usage.output_tokens;
                stats.cached_input_tokens += turn.usage.cached_input_tokens;
                stats.cache_write_input_tokens += turn.usage.cache_write_input_tokens;
                stats.reasoning_tokens += turn.usage.reasoning_tokens;
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
    let result = tracing::Instrument::instrument(call_once_inner(request, ctx, stats, gate, &span), span.clone()).await;
    record_chat(&span, &result);
    result
}

async fn call_once_inner(
    request: &ModelRequest,
    ctx: &RunCtx,
    stats: &mut RunStats,
    gate: bool,
    span: &tracing::Span,
) -> Result<AssistantTurn, ModelError> {
    let asked = std::time::Instant::now();
    let mut first = true;
    let sink = ctx.sink.clone();
    let mut stream = ctx.model.open(request, std::sync::Arc::new(move |bytes| sink.emit(AgentEvent::RequestSent { bytes }))).await?;
    let mut acc = Accumulator::new(ctx.config.bounds);
    let mut silence = SilenceGate::new();
    while let Some(item) = stream.next().await {
        let item = item?;
        if first && matches!(item, StreamItem::Text(_) | StreamItem::ToolCallDelta { .. }) {
            first = false;
            span.record("gen_ai.response.time_to_first_chunk_ms", asked.elapsed().as_millis() as i64);
            metrics::histogram!("clankie_model_first_chunk_seconds").record(asked.elapsed().as_secs_f64());
        }
        match &item {
            StreamItem::Text(t) => {
                ctx.sink.emit(AgentEvent::TextDelta { chars: t.chars().count() });
                if gate && silence.push(t) {
                    stats.words_came = true;
                    ctx.sink.emit(AgentEvent::WordsComing);
                }
            }
            StreamItem::ToolCallDelta { arguments, .. } => ctx.sink.emit(AgentEvent::TextDelta { chars: arguments.chars().count() }),
            StreamItem::Alive => ctx.sink.emit(AgentEvent::ProviderAlive),
            StreamItem::Finish(_) | StreamItem::Usage(_) | StreamItem::Done => {}
        }
        acc.push(item)?;
    }
    acc.finish()
}

/// One model call with bounded retries of transient failures, outside any session: for
/// callers (the voice floor's responder) that keep their own context.
pub async fn complete(model: &Model, request: &ModelRequest, retry: RetryPolicy) -> Result<AssistantTurn, ModelError> {
    complete_streaming(model, request, retry, &mut |_| {}).await
}

/// Like [`complete`], handing each piece of text to `on_text` as it streams in (the voice room
/// speaks sentence by sentence). A call that already handed text on is not retried: what was
/// said cannot be unsaid.
pub async fn complete_streaming(
    model: &Model,
    request: &ModelRequest,
    retry: RetryPolicy,
    on_text: &mut (dyn FnMut(&str) + Send),
) -> Result<AssistantTurn, ModelError> {
    let mut attempt = 0;
    loop {
        let mut handed_on = false;
        let span = chat_span(model);
        let asked = std::time::Instant::now();
        let result = tracing::Instrument::instrument(
            async {
                let mut stream = model.open(request, std::sync::Arc::new(|_| {})).await?;
                let mut acc = Accumulator::new(StreamBounds::default());
                let mut first = true;
                while let Some(item) = stream.next().await {
                    let item = item?;
                    if first && matches!(item, StreamItem::Text(_) | StreamItem::ToolCallDelta { .. }) {
                        first = false;
                        tracing::Span::current().record("gen_ai.response.time_to_first_chunk_ms", asked.elapsed().as_millis() as i64);
                    }
                    if let StreamItem::Text(t) = &item {
                        handed_on |= !t.is_empty();
                        on_text(t);
                    }
                    acc.push(item)?;
                }
                acc.finish()
            },
            span.clone(),
        )
        .await;
        record_chat(&span, &result);
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

async fn run_tools(turn: &AssistantTurn, session: &mut Session, ctx: &RunCtx) -> Result<(), AgentError> {
    let bounds = ctx.config.bounds;
    let calls = turn.tool_calls.iter().enumerate().map(|(i, call)| async move {
        // Past a bound the call is answered, not run: every call the model made gets a result.
        if i >= bounds.tool_calls_per_step {
            let why = format!("only {} tool calls run per step; this one did not run", bounds.tool_calls_per_step);
            return (call, Err(ToolError::Invalid(why)));
        }
        if call.arguments.len() > bounds.tool_args_max_bytes {
            let why = format!(
                "arguments of {} bytes are over the {}-byte bound; it did not run",
                call.arguments.len(),
                bounds.tool_args_max_bytes
            );
            return (call, Err(ToolError::Invalid(why)));
        }
        let tool = ctx.tools.iter().find(|t| t.spec().name == call.name);
        let args = serde_json::from_str::<serde_json::Value>(&call.arguments);
        let activity = match (tool, &args) {
            (Some(tool), Ok(args)) => tool.activity(args),
            _ => None,
        };
        ctx.sink.emit(AgentEvent::ToolStart { call_id: call.id.clone(), name: call.name.clone(), activity });
        // The name is ours (the model may have named a tool that does not exist), never its arguments.
        let name = tool.map_or_else(|| "unknown".to_owned(), |t| t.spec().name.clone());
        let span = tracing::info_span!(
            "tool",
            otel.name = %format!("execute_tool {name}"),
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = %name,
            error.type = tracing::field::Empty,
        );
        let result = tracing::Instrument::instrument(
            async {
                match (tool, args) {
                    (None, _) => Err(ToolError::Invalid(format!("there is no tool named {}", call.name))),
                    (Some(_), Err(e)) => Err(ToolError::Invalid(format!("arguments are not valid JSON: {e}"))),
                    (Some(tool), Ok(args)) => {
                        tool.execute(args, ToolContext::new(call.id.clone(), ctx.sink.clone(), ctx.cancel.clone())).await
                    }
                }
            },
            span.clone(),
        )
        .await;
        if result.is_err() {
            span.record("error.type", "tool_error");
        }
        ctx.sink.emit(AgentEvent::ToolEnd { call_id: call.id.clone(), name: call.name.clone(), is_error: result.is_err() });
        (call, result)
    });
    for (call, result) in futures::future::join_all(calls).await {
        let (content, is_error) = match result {
            Ok(content) => (content, false),
            Err(e) => (format!("error: {e}"), true),
        };
        session.append(EntryBody::ToolResult { call_id: call.id.clone(), name: call.name.clone(), content, is_error }).await?;
    }
    // A test's window between a tool's result and the next model request (a server restarted there).
    if let Some(held) = clankie_settings::fault::hold("agent.after_tools") {
        tokio::time::sleep(held).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::silence::SILENT_TOKEN;
    use proptest::prelude::*;

    fn cases() -> u32 {
        std::env::var("CLANKIE_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000)
    }

    /// Cuts `text` into pieces at the given points (as a stream would deliver it).
    fn chunk(text: &str, cuts: &[usize]) -> Vec<String> {
        let chars: Vec<char> = text.chars().collect();
        let mut points: Vec<usize> = cuts.iter().map(|c| c % (chars.len() + 1)).collect();
        points.extend([0, chars.len()]);
        points.sort_unstable();
        points.dedup();
        points.windows(2).map(|w| chars[w[0]..w[1]].iter().collect()).collect()
    }

    /// What a run would post for this streamed text, and how many times the gate said words were coming.
    fn stream(pieces: &[String]) -> (RunReply, usize) {
        let mut gate = SilenceGate::new();
        let flips = pieces.iter().filter(|p| gate.push(p)).count();
        (final_reply(&pieces.concat()), flips)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn fuzz_silence_gate_any_chunking_of_the_token_never_posts(
            before in "[ \t\n]{0,3}", after in "[ \t\n]{0,3}", cuts in proptest::collection::vec(any::<usize>(), 0..20),
        ) {
            let pieces = chunk(&format!("{before}{SILENT_TOKEN}{after}"), &cuts);
            prop_assert_eq!(stream(&pieces), (RunReply::Silent, 0));
        }

        #[test]
        fn fuzz_silence_gate_any_other_text_posts_exactly_what_was_written(
            text in "(\\PC|\\[|\\]|-|stay|silent| ){1,40}", cuts in proptest::collection::vec(any::<usize>(), 0..20),
        ) {
            let pieces = chunk(&text, &cuts);
            let (reply, flips) = stream(&pieces);
            prop_assert!(flips <= 1);
            if text.trim().is_empty() {
                prop_assert_eq!(reply, RunReply::Failed(FailureCode::CaptainResponseMissing));
            } else if text.trim() == SILENT_TOKEN {
                prop_assert_eq!((reply, flips), (RunReply::Silent, 0));
            } else if !text.contains(SILENT_TOKEN) {
                prop_assert_eq!(reply, RunReply::Words(text.trim().to_owned()));
                // Words that could never be the token light the room exactly once.
                let could_be = SILENT_TOKEN.starts_with(text.trim_start());
                prop_assert_eq!(flips, usize::from(!could_be));
            } else {
                match reply {
                    RunReply::Words(w) => prop_assert!(!w.contains(SILENT_TOKEN), "{}", w),
                    other => prop_assert!(matches!(other, RunReply::Silent | RunReply::Failed(_))),
                }
            }
        }
    }
}
