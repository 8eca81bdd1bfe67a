//! Who gets a turn: DMs, mentions and replies to him always; other guild
//! messages only while the room's exchange is live; bots never.

use clankie_proto::v1;

/// Why a delivery was admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admitted {
    Dm,
    Mention,
    ReplyToHim,
    /// The room is in a live exchange with him (recently settled, or a run is live).
    LiveExchange,
}

/// Why a delivery was not admitted; the code goes into a receipt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    BotAuthor,
    NotAddressed,
}

impl Refused {
    /// The receipt code.
    pub fn code(self) -> &'static str {
        match self {
            Refused::BotAuthor => "bot_author",
            Refused::NotAddressed => "not_addressed",
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
            Admitted::LiveExchange => "live_exchange",
        }
    }
}

/// Whether the delivery needs the room's exchange state to be decided.
pub fn needs_exchange(ingress: &v1::Ingress) -> bool {
    !ingress.author_is_bot && ingress.guild_id.is_some() && !ingress.mentions_him && !ingress.reply_to_him
}

/// Decides admission; `exchange_live` is only read for unaddressed guild messages.
pub fn admit(ingress: &v1::Ingress, exchange_live: bool) -> Result<Admitted, Refused> {
    if ingress.author_is_bot {
        return Err(Refused::BotAuthor);
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
        assert_eq!(admit(&msg(None, false, false, false), false), Ok(Admitted::Dm));
        assert_eq!(admit(&msg(Some(1), true, false, false), false), Ok(Admitted::Mention));
        assert_eq!(admit(&msg(Some(1), false, true, false), false), Ok(Admitted::ReplyToHim));
        assert_eq!(admit(&msg(Some(1), false, false, false), true), Ok(Admitted::LiveExchange));
        assert_eq!(admit(&msg(Some(1), false, false, false), false), Err(Refused::NotAddressed));
        assert_eq!(admit(&msg(None, true, false, true), true), Err(Refused::BotAuthor));
        assert!(!needs_exchange(&msg(None, false, false, false)));
        assert!(needs_exchange(&msg(Some(1), false, false, false)));
    }
}
