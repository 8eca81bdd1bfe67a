use std::time::Duration;

use clankie_agent::provider::ToolSpec;
use clankie_agent::{Tool, ToolContext, ToolError};
use clankie_bus::Bus;
use clankie_egress::{EgressError, EgressGuard, FetchOptions};
use futures::StreamExt;
use futures::future::BoxFuture;
use serde_json::json;

use super::Room;

/// `share_picture`: fetches a picture from a URL and saves it through media to go out with the reply.
/// A picture that cannot be fetched or saved costs the picture, never the reply.
pub struct SharePicture {
    bus: Bus,
    room: Room,
    egress: EgressGuard,
    timeout: Duration,
    max_bytes: usize,
}

impl SharePicture {
    /// The tool for one run's room; it fetches through `egress` and takes pictures up to `max_bytes`.
    pub fn new(bus: Bus, room: Room, egress: EgressGuard, timeout: Duration, max_bytes: usize) -> SharePicture {
        SharePicture { bus, room, egress, timeout, max_bytes }
    }

    async fn share(&self, arguments: serde_json::Value, ctx: ToolContext) -> Result<String, ToolError> {
        let url = arguments["url"].as_str().ok_or_else(|| ToolError::Invalid("`url` is required".into()))?;
        let options = FetchOptions { timeout: self.timeout, ..FetchOptions::default() };
        let response = self.egress.get(url, options).await.map_err(|e| match e {
            EgressError::Refused(why) => ToolError::Invalid(format!("that picture is not fetched: {why}")),
            EgressError::Unreachable(_) => ToolError::Failed("the picture could not be reached".into()),
        })?;
        if !response.status().is_success() {
            return Err(ToolError::Failed(format!("the picture answered HTTP {}", response.status().as_u16())));
        }
        let content_type = response.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
        if !content_type.starts_with("image/") {
            return Err(ToolError::Invalid("that URL is not a picture (its content type is not image/*)".into()));
        }
        if response.content_length().is_some_and(|n| n > self.max_bytes as u64) {
            return Err(ToolError::Failed("the picture is too large to share".into()));
        }
        let filename = url.rsplit('/').next().filter(|n| !n.is_empty()).unwrap_or("picture").to_owned();
        let mut data = Vec::new();
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|_| ToolError::Failed("the picture stopped arriving".into()))?;
            ctx.progress();
            data.extend_from_slice(&chunk);
            if data.len() > self.max_bytes {
                return Err(ToolError::Failed("the picture is too large to share".into()));
            }
        }
        let reply = super::register(&self.bus, data, filename, content_type)
            .await
            .map_err(|_| ToolError::Failed("the picture could not be saved; reply without it".into()))?;
        match reply.artifact {
            Some(artifact) if reply.error.is_empty() => {
                self.room.attach(artifact);
                Ok("saved; it goes out with your reply".into())
            }
            _ => Err(ToolError::Failed(format!("the picture could not be saved ({}); reply without it", reply.error))),
        }
    }
}

impl Tool for SharePicture {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "share_picture".into(),
            description: "Attach a picture from a URL to your reply (a screenshot, a map, a bracket).".into(),
            parameters: json!({ "type": "object", "properties": { "url": { "type": "string" } }, "required": ["url"] }),
        }
    }

    fn execute<'a>(&'a self, arguments: serde_json::Value, ctx: ToolContext) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(self.share(arguments, ctx))
    }
}
