//! A model turn's tool calls, run side by side within their bounds; every call the model
//! made gets a result, one that did not run says why.

use crate::ctx::RunCtx;
use crate::provider::AssistantTurn;
use crate::session::{EntryBody, Session};
use crate::{AgentError, AgentEvent, ToolContext, ToolError};

pub(crate) async fn run_tools(turn: &AssistantTurn, session: &mut Session, ctx: &RunCtx) -> Result<(), AgentError> {
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
