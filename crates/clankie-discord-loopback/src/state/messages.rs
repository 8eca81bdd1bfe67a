//! Messages as the loopback keeps them: what users and the bot wrote, their files, and what a
//! user's new message carries. Plain data; the state stores them and the wire layers render them.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// Now, in ms since the Unix epoch.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// A file uploaded with a message: name, content type, bytes.
pub(crate) type Upload = (String, String, Vec<u8>);

/// A stored attachment's metadata; bytes live in `State::files`.
#[derive(Debug, Clone, Serialize)]
pub struct AttachmentMeta {
    pub id: u64,
    pub filename: String,
    pub content_type: String,
    pub size: u64,
}

/// A message in a channel, by a user or the bot.
#[derive(Debug, Clone, Serialize)]
pub struct StoredMessage {
    pub id: u64,
    pub channel_id: u64,
    pub guild_id: Option<u64>,
    pub author_id: u64,
    pub author_name: String,
    pub bot: bool,
    pub content: String,
    pub mentions_bot: bool,
    pub reply_to: Option<u64>,
    pub attachments: Vec<AttachmentMeta>,
    pub at_ms: i64,
    pub edited: bool,
    /// When it was last edited; 0 when never.
    #[serde(default)]
    pub edited_at_ms: i64,
    pub deleted: bool,
    /// Reactions the bot added (how the sandbox shows each delivery's outcome).
    pub reactions: Vec<String>,
    /// Said aloud in the voice channel, not posted: the sandbox's stand-in for hearing him.
    #[serde(default)]
    pub spoken: bool,
    /// Its action rows of buttons, as Discord's `components`.
    #[serde(default)]
    pub components: Vec<serde_json::Value>,
    /// An ephemeral interaction answer: only its invoker sees it, so it is in no channel listing.
    #[serde(default)]
    pub ephemeral: bool,
    /// The users its content mentions (`<@id>`), the bot aside ([`StoredMessage::mentions_bot`]).
    #[serde(default)]
    pub mentions: Vec<MentionedUser>,
    /// The roles its content mentions (`<@&id>`).
    #[serde(default)]
    pub mention_roles: Vec<u64>,
    /// Its stickers by name, as `sticker_items`.
    #[serde(default)]
    pub stickers: Vec<String>,
    /// Its poll.
    #[serde(default)]
    pub poll: Option<NewPoll>,
    /// Its rich embeds.
    #[serde(default)]
    pub embeds: Vec<NewEmbed>,
    /// The message it forwards, as that message was when forwarded (Discord's snapshot).
    #[serde(default)]
    pub forwarded: Option<Box<StoredMessage>>,
}

/// A user a message mentions, with the name Discord shows for the user object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MentionedUser {
    pub id: u64,
    pub name: String,
}

impl StoredMessage {
    /// A fresh, unedited message with no author yet; callers set who wrote it.
    pub(crate) fn new(
        id: u64,
        channel_id: u64,
        guild_id: Option<u64>,
        content: String,
        reply_to: Option<u64>,
        attachments: Vec<AttachmentMeta>,
        at_ms: i64,
    ) -> Self {
        StoredMessage {
            id,
            channel_id,
            guild_id,
            author_id: 0,
            author_name: String::new(),
            bot: false,
            content,
            mentions_bot: false,
            reply_to,
            attachments,
            at_ms,
            edited: false,
            edited_at_ms: 0,
            deleted: false,
            reactions: Vec::new(),
            spoken: false,
            components: Vec::new(),
            ephemeral: false,
            mentions: Vec::new(),
            mention_roles: Vec::new(),
            stickers: Vec::new(),
            poll: None,
            embeds: Vec::new(),
            forwarded: None,
        }
    }
}

/// What the bot posted, as the control API reports it.
#[derive(Debug, Clone, Serialize)]
pub struct Post {
    pub id: u64,
    pub at_ms: i64,
    pub reply_to: Option<u64>,
    pub content: String,
    pub attachments: Vec<String>,
    pub edited: bool,
    pub deleted: bool,
}

/// A file on a new user message.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NewAttachment {
    pub filename: String,
    pub content_type: String,
    /// The bytes as UTF-8 text.
    #[serde(default)]
    pub text: Option<String>,
    /// The bytes, base64-encoded.
    #[serde(default)]
    pub base64: Option<String>,
}

impl NewAttachment {
    pub(crate) fn bytes(&self) -> Vec<u8> {
        match (&self.text, &self.base64) {
            (Some(t), _) => t.as_bytes().to_vec(),
            (None, Some(b)) => decode_base64(b).unwrap_or_default(),
            (None, None) => Vec::new(),
        }
    }
}

/// A message a user writes (`POST /control/messages`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NewMessage {
    #[serde(deserialize_with = "flexible_id::one")]
    pub channel_id: u64,
    /// The author's name; the user id follows from it.
    pub author: String,
    pub content: String,
    /// Mention him even if the content does not say `@<his name>`.
    #[serde(default)]
    pub mention: bool,
    #[serde(default, deserialize_with = "flexible_id::maybe")]
    pub reply_to: Option<u64>,
    #[serde(default)]
    pub attachments: Vec<NewAttachment>,
    /// A reply whose MESSAGE_CREATE has no `referenced_message` key at all: Discord did not
    /// fetch the replied-to message (a reader must fetch it). Without it a reply carries it, or
    /// `null` when that message was deleted.
    #[serde(default)]
    pub omit_referenced: bool,
    /// Stickers by name, as `sticker_items` (each with a stable id, format 1).
    #[serde(default)]
    pub stickers: Vec<String>,
    /// A poll, as Discord's `poll` object.
    #[serde(default)]
    pub poll: Option<NewPoll>,
    /// Rich embeds (`type: "rich"`).
    #[serde(default)]
    pub embeds: Vec<NewEmbed>,
    /// Forwards that message: its own content is empty, a snapshot of the original carries it.
    #[serde(default, deserialize_with = "flexible_id::maybe")]
    pub forward: Option<u64>,
}

/// A poll on a message: the question and its answers (ids from 1, in order).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewPoll {
    pub question: String,
    pub answers: Vec<String>,
}

/// A rich embed on a message.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewEmbed {
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub url: Option<String>,
}

/// What content mentions as Discord parses it: user ids of `<@id>` and `<@!id>`, and role ids
/// of `<@&id>`, each once, in the order they first appear.
pub(crate) fn parse_mentions(content: &str) -> (Vec<u64>, Vec<u64>) {
    let (mut users, mut roles) = (Vec::new(), Vec::new());
    let mut rest = content;
    while let Some(at) = rest.find("<@") {
        rest = &rest[at + 2..];
        let (list, digits) = match rest.as_bytes().first() {
            Some(b'&') => (&mut roles, &rest[1..]),
            Some(b'!') => (&mut users, &rest[1..]),
            _ => (&mut users, rest),
        };
        let Some(end) = digits.find('>') else { break };
        if let Ok(id) = digits[..end].parse::<u64>()
            && !list.contains(&id)
        {
            list.push(id);
        }
    }
    (users, roles)
}

/// Ids read as JSON numbers or strings: a browser holds a snowflake exactly only as a string
/// (a JSON number past 2^53 comes back from it as another number).
pub(crate) mod flexible_id {
    use serde::{Deserialize, Deserializer, de::Error};

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Id {
        Number(u64),
        Text(String),
    }

    fn read<E: Error>(id: Id) -> Result<u64, E> {
        match id {
            Id::Number(n) => Ok(n),
            Id::Text(t) => t.trim().parse().map_err(|_| E::custom(format!("not an id: {t:?}"))),
        }
    }

    /// An id.
    pub fn one<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        read(Id::deserialize(d)?)
    }

    /// An id or `null`.
    pub fn maybe<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        Option::<Id>::deserialize(d)?.map(read).transpose()
    }
}

/// Standard base64 (padding optional); `None` on any other character.
pub(crate) fn decode_base64(text: &str) -> Option<Vec<u8>> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let digits: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace() && *b != b'=').map(value).collect::<Option<_>>()?;
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
        let n = chunk.iter().enumerate().fold(0u32, |acc, (i, d)| acc | (u32::from(*d) << (18 - 6 * i)));
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..chunk.len().saturating_sub(1)]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::{decode_base64, parse_mentions};

    #[test]
    fn mentions_are_parsed_as_discord_writes_them() {
        let (users, roles) = parse_mentions("hi <@12> and <@!34>, <@&56> <@12> <@x> <@7");
        assert_eq!(users, vec![12, 34]);
        assert_eq!(roles, vec![56]);
    }

    #[test]
    fn base64_decodes_with_and_without_padding() {
        assert_eq!(decode_base64("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(decode_base64("aGVsbG8").unwrap(), b"hello");
        assert_eq!(decode_base64("aGk=").unwrap(), b"hi");
        assert!(decode_base64("a$b").is_none());
    }
}
