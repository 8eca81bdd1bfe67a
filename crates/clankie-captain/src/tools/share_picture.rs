use std::time::Duration;

use clankie_agent::provider::ToolSpec;
use clankie_agent::{Tool, ToolContext, ToolError};
use clankie_bus::Bus;
use clankie_proto::{Subject, v1};
use futures::StreamExt;
use futures::future::BoxFuture;
use serde_json::json;

use super::Room;

/// `share_picture`: fetches a picture from a URL and saves it through media to go out with the reply.
/// A picture that cannot be fetched or saved costs the picture, never the reply.
pub struct SharePicture {
    bus: Bus,
    room: Room,
    http: reqwest::Client,
    max_bytes: usize,
}

impl SharePicture {
    /// The tool for one run's room.
    pub fn new(bus: Bus, room: Room, timeout: Duration, max_bytes: usize) -> SharePicture {
        clankie_agent::provider::install_tls_provider();
        let http = reqwest::Client::builder().timeout(timeout).build().unwrap_or_default();
        SharePicture { bus, room, http, max_bytes }
    }

    async fn share(&self, arguments: serde_json::Value, ctx: ToolContext) -> Result<String, ToolError> {
        let url = arguments["url"].as_str().ok_or_else(|| ToolError::Invalid("`url` is required".into()))?;
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(ToolError::Invalid("only http and https pictures can be shared".into()));
        }
        let response = self.http.get(url).send().await.map_err(|_| ToolError::Failed("the picture could not be reached".into()))?;
        let content_type = response.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("image/png").to_owned();
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
        let request = v1::MediaRegisterRequest { data, filename, content_type };
        let reply = self
            .bus
            .request::<_, v1::MediaRegisterReply>(&Subject::RpcMediaRegister, &request, Duration::from_secs(10))
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
