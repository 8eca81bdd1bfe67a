//! Who gets a turn: DMs, mentions, replies to him and messages that name him
//! always; other guild messages only while the room's exchange is live; bots
//! never; and nothing from a guild or channel the owner has not admitted (a
//! thread is admitted where its parent channel is).

use clankie_proto::v1;
use clankie_store::OwnerSettings;

/// Why a delivery was admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admitted {
    Dm,
    Mention,
    ReplyToHim,
    /// The message names him (his name or an alias, as a word).
    Named,
    /// The room is in a live exchange with him (recently settled, or a run is live).
    LiveExchange,
    /// A reminder he set for someone came due: he keeps his word whoever else is talking.
    Reminder,
}

/// Why a delivery was not admitted; the code goes into a receipt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    BotAuthor,
    NotAddressed,
    /// A guild or channel outside the owner's admitted lists.
    NotAdmittedHere,
    /// The author already had the flood guard's share of admissions this minute, across lanes.
    FloodGuard,
}

impl Refused {
    /// The receipt code.
    pub fn code(self) -> &'static str {
        match self {
            Refused::BotAuthor => "bot_author",
            Refused::NotAddressed => "not_addressed",
            Refused::NotAdmittedHere => "not_admitted_here",
            Refused::FloodGuard => "flood_guard",
        }
    }
}

impl Admitted {
    /// The receipt code.
    pub fn code(self) -> &'static str {
        match self {
            Admitted::Dm => "dm",
            Admitted::Mention => "mention",
            Admitted::ReplyToHim => "reply_to_him",
            Admitted::Named => "named",
            Admitted::LiveExchange => "live_exchange",
            Admitted::Reminder => "reminder",
        }
    }
}

/// Whether the owner's settings admit the place a delivery comes from. Empty lists admit
/// everywhere; DMs are not governed by them; a thread or forum post is admitted where its
/// parent channel is (or where the owner admitted the thread itself).
pub fn owner_admits(owner: &OwnerSettings, ingress: &v1::Ingress) -> bool {
    let Some(guild) = ingress.guild_id else { return true };
    let parent = ingress.thread.as_ref().map(|t| t.parent_id).filter(|p| *p != 0);
    (owner.guilds.is_empty() || owner.guilds.contains(&guild))
        && (owner.channels.is_empty()
            || owner.channels.contains(&ingress.channel_id)
            || parent.is_some_and(|p| owner.channels.contains(&p)))
}

/// The channel whose settings a delivery's room follows: a thread's parent, else its own.
pub fn home_channel(ingress: &v1::Ingress) -> u64 {
    ingress.thread.as_ref().map(|t| t.parent_id).filter(|p| *p != 0).unwrap_or(ingress.channel_id)
}

/// Whether the flood guard counts this author: the owner, operators and granted ids (`grants`), known by id, never are.
pub fn flood_guarded(owner: &OwnerSettings, exempt: &std::collections::HashSet<u64>, author_id: u64) -> bool {
    owner.owner_id != Some(author_id) && !owner.operators.contains(&author_id) && !exempt.contains(&author_id)
}

/// Whether the delivery needs the room's exchange state to be decided.
pub fn needs_exchange(ingress: &v1::Ingress) -> bool {
    !ingress.author_is_bot && ingress.guild_id.is_some() && !ingress.mentions_him && !ingress.reply_to_him
}

/// Decides admission; `exchange_live` is only read for unaddressed guild messages, and
/// `named` says whether the message names him (and naming admits).
pub fn admit(ingress: &v1::Ingress, exchange_live: bool, named: bool) -> Result<Admitted, Refused> {
    if ingress.author_is_bot {
        return Err(Refused::BotAuthor);
    }
    if ingress.reminder.is_some() {
        return Ok(Admitted::Reminder);
    }
    if ingress.guild_id.is_none() {
        return Ok(Admitted::Dm);
    }
    if ingress.mentions_him {
        return Ok(Admitted::Mention);
    }
    if ingress.reply_to_him {
        return Ok(Admitted::ReplyToHim);
    }
    if named {
        return Ok(Admitted::Named);
    }
    if exchange_live { Ok(Admitted::LiveExchange) } else { Err(Refused::NotAddressed) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(guild: Option<u64>, mention: bool, reply: bool, bot: bool) -> v1::Ingress {
        v1::Ingress { guild_id: guild, mentions_him: mention, reply_to_him: reply, author_is_bot: bot, ..Default::default() }
    }

    #[test]
    fn the_admission_table() {
        assert_eq!(admit(&msg(None, false, false, false), false, false), Ok(Admitted::Dm));
        assert_eq!(admit(&msg(Some(1), true, false, false), false, false), Ok(Admitted::Mention));
        assert_eq!(admit(&msg(Some(1), false, true, false), false, false), Ok(Admitted::ReplyToHim));
        assert_eq!(admit(&msg(Some(1), false, false, false), true, false), Ok(Admitted::LiveExchange));
        assert_eq!(admit(&msg(Some(1), false, false, false), false, false), Err(Refused::NotAddressed));
        assert_eq!(admit(&msg(Some(1), false, false, false), false, true), Ok(Admitted::Named));
        assert_eq!(admit(&msg(Some(1), false, false, true), false, true), Err(Refused::BotAuthor), "a bot naming him is still a bot");
        assert_eq!(admit(&msg(None, true, false, true), true, false), Err(Refused::BotAuthor));
        let mut due = msg(Some(1), false, false, false);
        due.reminder = Some(v1::Reminder::default());
        assert_eq!(admit(&due, false, false), Ok(Admitted::Reminder), "a reminder come due needs no exchange");
        assert!(!needs_exchange(&msg(None, false, false, false)));
        assert!(needs_exchange(&msg(Some(1), false, false, false)));
    }

    #[test]
    fn owner_lists_narrow_guild_admission_and_leave_dms_alone() {
        let everywhere = OwnerSettings::default();
        assert!(owner_admits(&everywhere, &msg(Some(1), true, false, false)));
        let narrow = OwnerSettings { guilds: vec![1], channels: vec![5], ..Default::default() };
        let mut here = msg(Some(1), true, false, false);
        here.channel_id = 5;
        assert!(owner_admits(&narrow, &here));
        here.channel_id = 6;
        assert!(!owner_admits(&narrow, &here));
        assert!(!owner_admits(&narrow, &msg(Some(2), true, false, false)));
        assert!(owner_admits(&narrow, &msg(None, false, false, false)));
        let mut thread = msg(Some(1), true, false, false);
        thread.channel_id = 77;
        thread.thread = Some(v1::ThreadContext { parent_id: 5, ..Default::default() });
        assert!(owner_admits(&narrow, &thread), "a thread follows its parent");
        thread.thread = Some(v1::ThreadContext { parent_id: 6, ..Default::default() });
        assert!(!owner_admits(&narrow, &thread));
        assert_eq!(home_channel(&thread), 6);
    }
}
