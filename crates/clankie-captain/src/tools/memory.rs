use clankie_agent::provider::ToolSpec;
use clankie_agent::{Tool, ToolContext, ToolError};
use futures::future::BoxFuture;
use serde_json::json;

/// The longest fact he may propose.
pub const MAX_FACT_CHARS: usize = 300;

/// `propose_memory`: he suggests a fact for the shared self. The proposal is recorded, and
/// put to the owner in a DM, in the transaction that settles the turn: a run that dies
/// before settling proposes nothing, and its retry's proposal is the one the owner sees, once.
/// It reaches no prompt until the owner or an operator approves it.
pub struct ProposeMemory {
    pub room: super::Room,
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
                "properties": {
                    "fact": { "type": "string", "description": "One sentence, at most 300 characters." },
                    "from": {
                        "type": "array",
                        "items": { "type": "string" },
                        "description": "The author_id of each person whose words the fact comes from."
                    }
                },
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
            // Whose words it came from: a forget of that person takes the fact with it.
            let named: Vec<u64> = arguments["from"]
                .as_array()
                .map(|ids| ids.iter().filter_map(|v| v.as_str().and_then(|s| s.trim().parse().ok()).or_else(|| v.as_u64())).collect())
                .unwrap_or_default();
            if !self.room.propose(fact, named) {
                return Ok("you already proposed that in this turn".into());
            }
            tracing::info!(lane = %self.room.lane, turn = %self.room.turn_id, "memory proposed");
            Ok("proposed; your owner is asked when this turn ends, and it becomes yours once approved".into())
        })
    }
}
