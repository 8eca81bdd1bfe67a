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
    pub channel_id: u64,
    /// The author's name; the user id follows from it.
    pub author: String,
    pub content: String,
    /// Mention him even if the content does not say `@<his name>`.
    #[serde(default)]
    pub mention: bool,
    #[serde(default)]
    pub reply_to: Option<u64>,
    #[serde(default)]
    pub attachments: Vec<NewAttachment>,
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
    use super::decode_base64;

    #[test]
    fn base64_decodes_with_and_without_padding() {
        assert_eq!(decode_base64("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(decode_base64("aGVsbG8").unwrap(), b"hello");
        assert_eq!(decode_base64("aGk=").unwrap(), b"hi");
        assert!(decode_base64("a$b").is_none());
    }
}
