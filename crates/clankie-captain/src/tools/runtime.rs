use clankie_agent::provider::ToolSpec;
use clankie_agent::{Tool, ToolContext, ToolError};
use futures::future::BoxFuture;
use serde_json::json;

/// `describe_runtime`: an elevated tool for operators, reporting this replica's state.
pub struct DescribeRuntime {
    pub replica: String,
    pub live_lanes: usize,
}

impl Tool for DescribeRuntime {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "describe_runtime".into(),
            description: "Operator only: report which captain replica runs this turn and how many lanes it has live.".into(),
            parameters: json!({ "type": "object", "properties": {} }),
        }
    }

    fn execute<'a>(&'a self, _arguments: serde_json::Value, _ctx: ToolContext) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move { Ok(format!("replica {} with {} live lane(s)", self.replica, self.live_lanes)) })
    }
}
