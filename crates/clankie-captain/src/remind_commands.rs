//! `/clankie remind`, `/clankie reminders` and `/clankie timezone`, which anyone may run for
//! themselves, and the Cancel buttons of a reminders list. A repeating check-in is the owner's
//! and operators' alone; the owner's list shows everyone's reminders, other people's without
//! their words.

use clankie_proto::v1;

use crate::Captain;
use crate::commands::{pressed, refused, said, store_unavailable};
use crate::reminders::{Ask, Refused, reminder_id};

/// Discord's permission bits a post needs: to see the channel, and to send in it or its threads.
const VIEW_CHANNEL: u64 = 1 << 10;
const SEND_MESSAGES: u64 = 1 << 11;
const SEND_MESSAGES_IN_THREADS: u64 = 1 << 38;
const ADMINISTRATOR: u64 = 1 << 3;

/// Reminders a list shows at most: Discord shows five rows of five buttons.
const LISTED: usize = 25;

/// The custom id of a reminder's Cancel button.
pub fn cancel_button(id: u64) -> String {
    format!("reminder:cancel:{id}")
}

/// Whether the permissions Discord gave for the person in the channel let them write there: a
/// thread takes SEND_MESSAGES_IN_THREADS, any other channel SEND_MESSAGES. Unknown permissions
/// (a DM) let them.
pub fn may_write(permissions: Option<u64>, in_thread: bool) -> bool {
    let send = if in_thread { SEND_MESSAGES_IN_THREADS } else { SEND_MESSAGES };
    permissions.is_none_or(|p| p & ADMINISTRATOR != 0 || (p & VIEW_CHANNEL != 0 && p & send != 0))
}

fn refusal(r: &Refused) -> v1::CommandReply {
    refused(r.code(), &r.to_string())
}

impl Captain {
    /// Answers the reminder commands and buttons; `None` for any other command.
    pub(crate) async fn reminder_command(&self, req: &v1::CommandRequest) -> Option<v1::CommandReply> {
        Some(match req.command.as_str() {
            "remind" => self.remind_command(req).await,
            "reminders" => self.reminders_list(req).await,
            "timezone" => self.timezone_command(req).await,
            "button" if req.custom_id.starts_with("reminder:") => self.reminder_button(req).await,
            _ => return None,
        })
    }

    async fn remind_command(&self, req: &v1::CommandRequest) -> v1::CommandReply {
        let direct = req.direct && req.guild_id.is_some();
        if !direct && !may_write(req.member_permissions, req.in_thread) {
            return refusal(&Refused::CannotWrite);
        }
        if !req.cron.trim().is_empty() && !self.may_repeat(req.user_id).await {
            return refused("not_owner", "Only my owner and operators can set a repeating check-in. Leave out `every` for a one-off.");
        }
        let ask = Ask {
            id: reminder_id(&["command", &req.interaction_id]),
            asker_id: req.user_id,
            asker_name: String::new(),
            guild_id: req.guild_id,
            channel_id: req.channel_id,
            text: req.text.clone(),
            when: req.when.clone(),
            cron: req.cron.clone(),
            direct,
            delivery_id: req.interaction_id.clone(),
        };
        match self.set_reminder(ask).await {
            Ok(set) => said(set.line),
            Err(r) => refusal(&r),
        }
    }

    async fn reminders_list(&self, req: &v1::CommandRequest) -> v1::CommandReply {
        let owner = self.may_repeat(req.user_id).await;
        let pending = match self.inner.store.pending_reminders((!owner).then_some(req.user_id)).await {
            Ok(p) => p,
            Err(_) => return store_unavailable(),
        };
        if pending.is_empty() {
            return said("No reminders are waiting.".into());
        }
        let (zone, _) = match self.zone_of(req.user_id).await {
            Ok(z) => z,
            Err(r) => return refusal(&r),
        };
        let mut lines = vec![format!("{} waiting:", if owner { "Reminders" } else { "Your reminders" })];
        let mut buttons = Vec::new();
        for r in pending.iter().take(LISTED) {
            let when = if r.cron.is_empty() {
                jiff::Timestamp::from_millisecond(r.due_at_ms)
                    .map(|t| crate::when::spoken(&t.to_zoned(zone.clone())))
                    .unwrap_or_else(|_| "?".into())
            } else {
                format!("on `{}` ({})", r.cron, r.time_zone)
            };
            let place = if r.direct { "by DM".to_owned() } else { format!("in <#{}>", r.channel_id) };
            // Other people's words stay theirs: the owner sees that they have one, not what it says.
            let what = if r.asker_id == req.user_id { format!("\"{}\"", r.text) } else { format!("for <@{}>", r.asker_id) };
            lines.push(format!("{} {what}, {when}, {place}", r.reminder_id));
            buttons.push(v1::CommandButton {
                custom_id: cancel_button(r.reminder_id),
                label: format!("Cancel {}", r.reminder_id),
                danger: true,
            });
        }
        if pending.len() > LISTED {
            lines.push(format!("…and {} more.", pending.len() - LISTED));
        }
        v1::CommandReply { text: lines.join("\n"), buttons, ..Default::default() }
    }

    async fn reminder_button(&self, req: &v1::CommandRequest) -> v1::CommandReply {
        let Some(id) = req.custom_id.strip_prefix("reminder:cancel:").and_then(|id| id.parse::<u64>().ok()) else {
            return refused("unknown_button", "I don't know that button.");
        };
        let owner = self.may_repeat(req.user_id).await;
        let note = match self.cancel_reminder(id, req.user_id, owner).await {
            Ok(true) => "cancelled",
            Ok(false) => "not waiting any more",
            Err(r) => return refusal(&r),
        };
        pressed(req, (&format!("{id} "), &format!("Reminder {id}")), note, "", |b| b.custom_id != cancel_button(id))
    }

    /// Anyone's own zone; the owner's and operators' for someone else too (`user`).
    async fn timezone_command(&self, req: &v1::CommandRequest) -> v1::CommandReply {
        let zone = req.time_zone.trim();
        let whose = req.for_user.filter(|u| *u != req.user_id);
        if let Some(user) = whose {
            if !self.may_repeat(req.user_id).await {
                return refused("not_owner", "Only my owner and operators can set someone else's time zone.");
            }
            if zone.is_empty() {
                return refused("zone_required", "Give the zone to set, such as Europe/Berlin.");
            }
            let Some(found) = crate::when::zone(zone) else { return refusal(&Refused::BadZone(zone.to_owned())) };
            let name = found.iana_name().unwrap_or("UTC").to_owned();
            return match self.inner.store.set_time_zone(user, &name).await {
                Ok(()) => said(format!("<@{user}>'s time zone is now {name}.")),
                Err(_) => store_unavailable(),
            };
        }
        if zone.is_empty() {
            return match self.inner.store.time_zone(req.user_id).await {
                Ok(Some(z)) => said(format!("Your time zone is {z}.")),
                Ok(None) => said(format!(
                    "You have not set a time zone; yours are read in {} (this deployment's default). Set yours with `/clankie timezone zone:Europe/Berlin`.",
                    if self.inner.config.time_zone.trim().is_empty() { "UTC" } else { self.inner.config.time_zone.trim() }
                )),
                Err(_) => store_unavailable(),
            };
        }
        let Some(found) = crate::when::zone(zone) else { return refusal(&Refused::BadZone(zone.to_owned())) };
        let name = found.iana_name().unwrap_or("UTC").to_owned();
        match self.inner.store.set_time_zone(req.user_id, &name).await {
            Ok(()) => {
                let now = jiff::Timestamp::now().to_zoned(found);
                said(format!("Your time zone is now {name}; it is {} there.", now.strftime("%a %-d %b, %H:%M")))
            }
            Err(_) => store_unavailable(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remind_a_person_who_cannot_write_in_the_channel_is_known_by_their_permissions() {
        assert!(may_write(None, false), "a DM");
        assert!(may_write(Some(VIEW_CHANNEL | SEND_MESSAGES), false));
        assert!(!may_write(Some(VIEW_CHANNEL | SEND_MESSAGES_IN_THREADS), false), "threads only, and this is no thread");
        assert!(may_write(Some(VIEW_CHANNEL | SEND_MESSAGES_IN_THREADS), true));
        assert!(!may_write(Some(VIEW_CHANNEL | SEND_MESSAGES), true), "a thread needs its own right");
        assert!(may_write(Some(ADMINISTRATOR), false));
        assert!(!may_write(Some(VIEW_CHANNEL), false), "read-only");
        assert!(!may_write(Some(SEND_MESSAGES), false), "cannot see it");
        assert!(!may_write(Some(0), false));
    }
}
