use std::sync::Arc;

use clankie_agent::provider::ToolSpec;
use clankie_agent::{Tool, ToolContext, ToolError};
use clankie_browser::{BrowseError, BrowserHost};
use clankie_bus::Bus;
use clankie_self::blocks::{escape_attr, escape_text};
use futures::future::BoxFuture;
use serde_json::json;

use super::Room;

/// `browse`: opens a page in the captain's browser host, returns its text inside an
/// untrusted block and, if asked, saves a screenshot through media to go out with the
/// reply. A screenshot that cannot be saved costs the picture (the reply says so), never
/// the words; a page past its deadline is a tool error, never a stall.
pub struct Browse {
    host: Arc<BrowserHost>,
    bus: Bus,
    room: Room,
}

impl Browse {
    /// The tool for one run's room, over the captain's one browser host.
    pub fn new(host: Arc<BrowserHost>, bus: Bus, room: Room) -> Browse {
        Browse { host, bus, room }
    }

    async fn browse(&self, arguments: serde_json::Value, ctx: ToolContext) -> Result<String, ToolError> {
        let url = arguments["url"].as_str().ok_or_else(|| ToolError::Invalid("`url` is required".into()))?;
        let screenshot = arguments["screenshot"].as_bool().unwrap_or(false);
        let alive = || ctx.progress();
        let page = tokio::select! {
            page = self.host.browse(url, screenshot, &alive) => page,
            _ = ctx.cancelled() => return Err(ToolError::Failed("the run was stopped".into())),
        };
        let page = page.map_err(|e| match e {
            BrowseError::Refused(_) => ToolError::Invalid(e.to_string()),
            _ => ToolError::Failed(e.to_string()),
        })?;
        let mut result = format!(
            "<untrusted_page url=\"{}\" title=\"{}\">\n{}\n</untrusted_page>",
            escape_attr(&page.url),
            escape_attr(&page.title),
            escape_text(&page.text)
        );
        if let Some(png) = page.screenshot {
            let host = host_of(&page.url);
            result.push_str(&match self.save(png, &host).await {
                Ok(()) => "\nThe screenshot is saved; it goes out with your reply.".to_owned(),
                Err(why) => {
                    self.room.lost(format!("the screenshot of {host}"));
                    format!("\nThe screenshot could not be saved ({why}); reply without it.")
                }
            });
        }
        Ok(result)
    }

    async fn save(&self, png: Vec<u8>, host: &str) -> Result<(), String> {
        let reply = super::register(&self.bus, png, format!("{host}.png"), "image/png".into())
            .await
            .map_err(|_| "media did not answer".to_owned())?;
        match reply.artifact {
            Some(artifact) if reply.error.is_empty() => {
                self.room.attach(artifact);
                Ok(())
            }
            _ => Err(reply.error),
        }
    }
}

/// A URL's host, for names and labels; "the page" when it has none.
fn host_of(url: &str) -> String {
    clankie_egress::Url::parse(url).ok().and_then(|u| u.host_str().map(str::to_owned)).unwrap_or_else(|| "the page".into())
}

impl Tool for Browse {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "browse".into(),
            description: "Open a web page in a real browser and read it. Set `screenshot` to attach a picture of the page to your reply."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": { "url": { "type": "string" }, "screenshot": { "type": "boolean" } },
                "required": ["url"]
            }),
        }
    }

    fn activity(&self, arguments: &serde_json::Value) -> Option<String> {
        arguments["url"].as_str().map(|u| format!("browsing {}", host_of(u)))
    }

    fn execute<'a>(&'a self, arguments: serde_json::Value, ctx: ToolContext) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(self.browse(arguments, ctx))
    }
}
