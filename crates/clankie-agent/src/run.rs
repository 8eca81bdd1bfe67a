//! A run: model call, tool batch, steered messages, model call … until the
//! model stops with nothing queued. Wrapped, always, in the stall watchdog.

use std::sync::Arc;
use std::time::Duration;

use clankie_proto::v1::FailureCode;
use tokio::sync::{mpsc, watch};

use crate::call::call_with_retries;
use crate::compaction::{self};
use crate::ctx::{AgentConfig, RunCtx, RunStats};
use crate::provider::{CachePlan, Model, ModelRequest};
use crate::session::{EntryBody, Session, UserMessage};
use crate::silence::{is_silent, strip_token};
use crate::steer::Steerer;
use crate::tool_batch::run_tools;
use crate::watchdog::{self};
use crate::{AgentError, AgentEvent, BootClock, Clock, EventSink, Tool};

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
        let request = ModelRequest {
            system: ctx.system.clone(),
            messages: session.context_settled_before(settled),
            tools: specs.clone(),
            cache: CachePlan::Conversation,
        };
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::silence::{SILENT_TOKEN, SilenceGate};
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
