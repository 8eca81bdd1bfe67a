use clankie_agent::provider::ToolSpec;
use clankie_agent::{Tool, ToolContext, ToolError};
use futures::future::BoxFuture;
use serde_json::json;

use crate::Captain;
use crate::reminders::{Ask, MAX_REMINDER_CHARS, reminder_id};

/// `remind`: he sets a reminder for the person he is answering, in this room or by DM. It is
/// defined at once, with an id drawn from the ask itself, so a run that dies and runs again
/// defines the same reminder again rather than a second one. A repeating check-in (`every`) is
/// for the owner and operators alone.
pub struct Remind {
    pub captain: Captain,
    pub room: super::Room,
}

impl Tool for Remind {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "remind".into(),
            description: "Set a reminder for the person you are answering, when they ask you to remind them or check back \
later. When it comes due you are given it here (or in their DM) and tell them. Pass their time as they said it; it is read \
in their time zone, and the answer says the exact time it resolved to: tell them that time."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "what": { "type": "string", "description": format!("What to remind them of, at most {MAX_REMINDER_CHARS} characters.") },
                    "when": {
                        "type": "string",
                        "description": "When, as they said it: \"in 10 minutes\", \"tomorrow 9:00\", \"friday 19:00\", \"2026-12-24 18:00\"."
                    },
                    "dm": { "type": "boolean", "description": "Send it to them alone, by DM, instead of this room." },
                    "every": {
                        "type": "string",
                        "description": "Only when your owner asks for a repeating check-in: cron with seconds first, e.g. \"0 0 19 * * FRI\"."
                    }
                },
                "required": ["what"]
            }),
        }
    }

    fn execute<'a>(&'a self, arguments: serde_json::Value, _ctx: ToolContext) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let text = |k: &str| arguments[k].as_str().map(str::trim).unwrap_or_default().to_owned();
            let (what, when, every) = (text("what"), text("when"), text("every"));
            let (asker_id, asker_name) = self.room.asker();
            if asker_id == 0 {
                return Err(ToolError::Invalid("nobody to remind: this turn answers no one's message".into()));
            }
            if when.is_empty() && every.is_empty() {
                return Err(ToolError::Invalid("when is required".into()));
            }
            if !every.is_empty() && !self.captain.may_repeat(asker_id).await {
                return Ok("Not set: only my owner and operators can set a repeating check-in. Offer a one-off reminder.".into());
            }
            let lane = self.room.lane;
            if lane.channel() == 0 {
                return Ok("Not set: reminders are kept for Discord rooms and DMs, not this console.".into());
            }
            let dm = arguments["dm"].as_bool().unwrap_or(false) && lane.guild().is_some();
            let answering = self.room.answering().to_string();
            let id = reminder_id(&[&lane.to_string(), &answering, &asker_id.to_string(), &what, &when, &every, if dm { "dm" } else { "" }]);
            let ask = Ask {
                id,
                asker_id,
                asker_name,
                guild_id: lane.guild(),
                channel_id: lane.channel(),
                text: what,
                when,
                cron: every,
                direct: dm,
                delivery_id: answering,
            };
            match self.captain.set_reminder(ask).await {
                Ok(set) => Ok(set.line),
                Err(refused) => Ok(format!("Not set: {refused}")),
            }
        })
    }
}
