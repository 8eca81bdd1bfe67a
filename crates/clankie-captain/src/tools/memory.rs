use clankie_agent::provider::ToolSpec;
use clankie_agent::{Tool, ToolContext, ToolError};
use clankie_proto::LaneKey;
use clankie_self::SelfSource;
use futures::future::BoxFuture;
use serde_json::json;

/// The longest fact he may propose.
pub const MAX_FACT_CHARS: usize = 300;

/// `propose_memory`: he suggests a fact for the shared self. It reaches no
/// prompt until the owner or an operator approves it with `clankie self approve`.
pub struct ProposeMemory {
    pub source: SelfSource,
    pub thread: LaneKey,
    /// Where the owner is asked about it (a DM with buttons); `None` when that is turned off.
    pub ask: Option<crate::commands::OwnerAsk>,
}

impl Tool for ProposeMemory {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "propose_memory".into(),
            description: "Suggest one short fact worth remembering in every room (a standing arrangement, a preference someone \
stated about themselves). Your owner reviews it; until approved it is not part of you. Never propose what someone said in \
confidence."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": { "fact": { "type": "string", "description": "One sentence, at most 300 characters." } },
                "required": ["fact"]
            }),
        }
    }

    fn execute<'a>(&'a self, arguments: serde_json::Value, _ctx: ToolContext) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let fact = arguments["fact"].as_str().map(str::trim).unwrap_or_default();
            if fact.is_empty() {
                return Err(ToolError::Invalid("fact is required".into()));
            }
            if fact.chars().count() > MAX_FACT_CHARS {
                return Err(ToolError::Invalid(format!("a fact is at most {MAX_FACT_CHARS} characters")));
            }
            let id = self.source.propose_memory(&self.thread, fact).await.map_err(|e| ToolError::Failed(e.to_string()))?;
            tracing::info!(memory = id, lane = %self.thread, "memory proposed");
            if let Some(ask) = &self.ask {
                ask.about(id, fact, &self.thread).await;
            }
            Ok(format!("proposed as memory #{id}; it becomes yours once your owner approves it"))
        })
    }
}
