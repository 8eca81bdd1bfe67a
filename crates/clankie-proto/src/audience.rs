//! Whose words a text holds, and whether they may reach this lane: the one rule every path
//! that puts other people's words in front of the model, into the store or onto the bus asks
//! (history, reply chains, quoted and linked messages, forwards, thread starters). The
//! gateway asks it before it fetches or publishes, the captain again before a request.
//!
//! A person who asked to be forgotten stays forgotten: words they wrote before the forget,
//! fetched fresh from Discord for someone else's message, come in as [`FORGOTTEN_WORDS`] with
//! no name or id. Words they write after it are theirs again. A linked message is quoted only
//! from a channel the owner admits (an empty list admits every channel) and the poster may
//! view as Discord computes it: a link never shows anyone what they could not read themselves.

use crate::v1;

pub use crate::words::{FORGOTTEN_NAME, FORGOTTEN_WORDS};

/// The people who asked to be forgotten, with when (ms since the epoch).
#[derive(Debug, Clone, Default)]
pub struct Forgotten(Vec<(u64, i64)>);

impl Forgotten {
    /// From the store's `forgotten_users`, or the audience bucket's facts.
    pub fn new(people: Vec<(u64, i64)>) -> Forgotten {
        Forgotten(people)
    }

    /// When the list cannot be read: everyone counts as forgotten, so nothing of anyone's
    /// words slips through for want of the list.
    pub fn unreadable() -> Forgotten {
        Forgotten(vec![(0, i64::MAX)])
    }

    /// Adds (or moves) one person's forget.
    pub fn record(&mut self, author: u64, at_ms: i64) {
        self.0.retain(|(who, _)| *who != author);
        self.0.push((author, at_ms));
    }

    /// Whether words `author` wrote at `written_ms` belong to a forget: written before it.
    pub fn holds(&self, author: u64, written_ms: i64) -> bool {
        self.0.iter().any(|(who, at)| (*who == 0 || *who == author) && written_ms < *at)
    }

    /// Whether nobody was forgotten, so nothing needs to be checked.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Why a link is not followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkRefusal {
    /// The owner does not admit the linked channel.
    NotAdmitted,
    /// The poster may not view the linked channel (or read its history).
    PosterCannotView,
}

impl LinkRefusal {
    /// The receipt code that names it.
    pub fn code(self) -> &'static str {
        match self {
            LinkRefusal::NotAdmitted => "link_not_admitted",
            LinkRefusal::PosterCannotView => "link_poster_cannot_view",
        }
    }
}

/// Whether a message linked into `channel` may be fetched and quoted: the owner admits the
/// channel (`admitted_channels` empty: every one) and the poster may view it (`poster_views`,
/// computed from roles and overwrites as Discord does).
pub fn rule_link(channel: u64, admitted_channels: &[u64], poster_views: bool) -> Result<(), LinkRefusal> {
    if !admitted_channels.is_empty() && !admitted_channels.contains(&channel) {
        return Err(LinkRefusal::NotAdmitted);
    }
    if !poster_views {
        return Err(LinkRefusal::PosterCannotView);
    }
    Ok(())
}

/// What the rule changed in one message's context: quotes dropped (a link into a channel the
/// owner does not admit), quotes whose words were a forgotten person's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ruled {
    pub dropped: usize,
    pub forgotten: usize,
}

/// Applies the rule to what `ingress` carries of other people's words, in place: its quoted
/// messages and its thread's starter. `admitted_channels` is the owner's list (empty for all);
/// whether the poster could view a link was the gateway's to ask before it fetched.
pub fn rule_ingress(ingress: &mut v1::Ingress, forgotten: &Forgotten, admitted_channels: &[u64]) -> Ruled {
    let mut ruled = Ruled::default();
    let before = ingress.quoted.len();
    ingress.quoted.retain(|q| q.kind() != v1::QuotedKind::Linked || rule_link(q.channel_id, admitted_channels, true).is_ok());
    ruled.dropped = before - ingress.quoted.len();
    if forgotten.is_empty() {
        return ruled;
    }
    ruled.forgotten = crate::words::forget_carried(ingress, |author, written| forgotten.holds(author, written));
    ruled
}

/// Whether a history line `author` wrote as message `message_id` may be shown: not a
/// forgotten person's from before their forget.
pub fn history_shows(forgotten: &Forgotten, author: u64, message_id: u64) -> bool {
    !forgotten.holds(author, crate::time::snowflake_ms(message_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOB: u64 = 42;
    const ADA: u64 = 7;

    fn quote(kind: v1::QuotedKind, author: u64, channel: u64, at_ms: i64, text: &str) -> v1::Quoted {
        v1::Quoted {
            kind: kind as i32,
            message_id: 1,
            channel_id: channel,
            author_id: author,
            author_name: format!("user{author}"),
            text: text.into(),
            at_ms,
            ..Default::default()
        }
    }

    #[test]
    fn erase_a_forgotten_persons_quoted_words_and_starter_become_the_marker_and_later_words_stay() {
        let forgotten = Forgotten::new(vec![(BOB, 1_000)]);
        let mut ingress = v1::Ingress {
            quoted: vec![
                quote(v1::QuotedKind::RepliedTo, BOB, 5, 900, "my cat is called Pim"),
                quote(v1::QuotedKind::ReplyChain, ADA, 5, 900, "ada's line"),
                quote(v1::QuotedKind::Linked, BOB, 5, 2_000, "bob again, after his forget"),
            ],
            thread: Some(v1::ThreadContext {
                starter: Some(quote(v1::QuotedKind::ThreadStarter, BOB, 5, 500, "bob's thread")),
                ..Default::default()
            }),
            ..Default::default()
        };
        let ruled = rule_ingress(&mut ingress, &forgotten, &[]);
        assert_eq!(ruled, Ruled { dropped: 0, forgotten: 2 });
        assert_eq!((ingress.quoted[0].text.as_str(), ingress.quoted[0].author_id), (FORGOTTEN_WORDS, 0));
        assert_eq!(ingress.quoted[0].author_name, FORGOTTEN_NAME);
        assert_eq!(ingress.quoted[1].text, "ada's line");
        assert_eq!(ingress.quoted[2].text, "bob again, after his forget");
        assert_eq!(ingress.thread.unwrap().starter.unwrap().text, FORGOTTEN_WORDS);
        // Unreadable: nobody's old words pass.
        let mut again = v1::Ingress { quoted: vec![quote(v1::QuotedKind::RepliedTo, ADA, 5, 900, "ada's")], ..Default::default() };
        assert_eq!(rule_ingress(&mut again, &Forgotten::unreadable(), &[]).forgotten, 1);
    }

    #[test]
    fn audience_a_link_into_a_channel_the_owner_does_not_admit_is_dropped() {
        let mut ingress = v1::Ingress {
            quoted: vec![
                quote(v1::QuotedKind::Linked, ADA, 5, 900, "admitted"),
                quote(v1::QuotedKind::Linked, ADA, 6, 900, "not admitted"),
                quote(v1::QuotedKind::RepliedTo, ADA, 6, 900, "a reply is in this channel"),
            ],
            ..Default::default()
        };
        let ruled = rule_ingress(&mut ingress, &Forgotten::default(), &[5]);
        assert_eq!(ruled.dropped, 1);
        let texts: Vec<&str> = ingress.quoted.iter().map(|q| q.text.as_str()).collect();
        assert_eq!(texts, ["admitted", "a reply is in this channel"]);
    }
}
