use std::sync::atomic::{AtomicU32, Ordering};

use clankie_agent::provider::ToolSpec;
use clankie_agent::{Tool, ToolContext, ToolError};
use clankie_bus::{Bus, now_ms};
use clankie_proto::{ReceiptKind, v1};
use clankie_store::{Lease, Store, StoreError};
use futures::future::BoxFuture;
use serde_json::json;

use super::Room;
use crate::outbox::Outbox;

/// The longest progress note.
pub const MAX_TEXT_UPDATE_CHARS: usize = 600;
/// Notes one turn may post: one short message, as the seed gives it.
const MAX_PER_TURN: u32 = 1;

/// `send_text_update`: one short note to the admitted room mid-turn, threaded
/// onto the message being answered. It does not end the turn or spend the reply.
/// The note is an outbox row committed under the run's lease, so a run that lost
/// its lane posts nothing.
pub struct SendTextUpdate {
    bus: Bus,
    outbox: Outbox,
    store: Store,
    lease: Lease,
    room: Room,
    posted: AtomicU32,
}

impl SendTextUpdate {
    /// The tool for one run's room, under the run's lease.
    pub fn new(bus: Bus, outbox: Outbox, store: Store, lease: Lease, room: Room) -> SendTextUpdate {
        SendTextUpdate { bus, outbox, store, lease, room, posted: AtomicU32::new(0) }
    }

    async fn post(&self, arguments: serde_json::Value) -> Result<String, ToolError> {
        let text = arguments["text"].as_str().ok_or_else(|| ToolError::Invalid("`text` is required".into()))?.trim();
        if text.is_empty() {
            return Err(ToolError::Invalid("`text` is empty".into()));
        }
        let chars = text.chars().count();
        if chars > MAX_TEXT_UPDATE_CHARS {
            return Err(ToolError::Invalid(format!(
                "a text update is at most {MAX_TEXT_UPDATE_CHARS} characters; this one has {chars}. Nothing was posted."
            )));
        }
        if ["attachments", "files", "image", "media"].iter().any(|k| !arguments[*k].is_null()) {
            return Err(ToolError::Invalid("a text update carries no media. Nothing was posted.".into()));
        }
        if let Some(target) = arguments.get("channel_id").filter(|v| !v.is_null()) {
            let same = target.as_str().and_then(|s| s.parse::<u64>().ok()).or(target.as_u64()) == Some(self.room.lane.channel());
            if !same {
                return Err(ToolError::Invalid("send_text_update posts only to the room this turn is in. Nothing was posted.".into()));
            }
        }
        let n = self.posted.fetch_add(1, Ordering::SeqCst) + 1;
        if n > MAX_PER_TURN {
            return Err(ToolError::Invalid(
                "this turn already posted its one update. Nothing was posted; your reply is still to come.".into(),
            ));
        }
        let lane = self.room.lane;
        let key = format!("update:{}:{n}", self.room.turn_id);
        let outbound = v1::OutboundMessage {
            idempotency_key: key,
            kind: v1::OutboundKind::TextUpdate as i32,
            guild_id: lane.guild(),
            channel_id: lane.channel(),
            // A handoff from the voice room answers no message: its update threads onto none.
            reply_to_message_id: Some(self.room.answering()).filter(|m| *m != 0),
            text: text.to_owned(),
            lane: lane.to_string(),
            delivery_id: self.room.answering().to_string(),
            ..Default::default()
        };
        let row = Outbox::post(&self.room.turn_id, &outbound);
        match self.store.enqueue(&self.lease, &row).await {
            Ok(()) => {}
            Err(StoreError::Fenced { .. }) => {
                return Err(ToolError::Failed("this run no longer holds the room. Nothing was posted.".into()));
            }
            Err(e) => return Err(ToolError::Failed(format!("the update could not be queued ({e}). Nothing was posted."))),
        }
        if let Err(e) = self.outbox.relay(&row).await {
            tracing::warn!(error = %e, "text update committed but not published yet; the outbox relay will publish it");
        }
        let kind = ReceiptKind::new("captain.text_update").map_err(|e| ToolError::Failed(e.to_string()))?;
        let receipt = v1::Receipt::new(&kind, self.bus.service(), &self.room.answering().to_string(), now_ms())
            .with_lane(&lane)
            .with_id("turn", &self.room.turn_id)
            .with_count("chars", chars as i64);
        if let Err(e) = self.bus.publish_receipt(&receipt).await {
            tracing::warn!(error = %e, "text update receipt not published");
        }
        Ok("posted; the turn goes on and your reply is still to come".into())
    }
}

impl Tool for SendTextUpdate {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "send_text_update".into(),
            description: format!(
                "Post one short text message (at most {MAX_TEXT_UPDATE_CHARS} characters, no media) to this room now, threaded onto \
the message you are answering, without ending your turn. Use it only when someone is actually waiting on slow work they \
asked for and would otherwise be left hanging."
            ),
            parameters: json!({
                "type": "object",
                "properties": { "text": { "type": "string", "maxLength": MAX_TEXT_UPDATE_CHARS } },
                "required": ["text"],
            }),
        }
    }

    fn execute<'a>(&'a self, arguments: serde_json::Value, _ctx: ToolContext) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(self.post(arguments))
    }
}
