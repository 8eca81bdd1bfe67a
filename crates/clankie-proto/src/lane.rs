use std::fmt;
use std::str::FromStr;

/// The durable identity of one room's conversation.
///
/// Written as `room:<guild>:<channel>`, `dm:<channel>`, `voice:<guild>:<channel>` or `console:<owner>`;
/// the text form never contains `.` so it can stand as one subject token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LaneKey {
    /// A guild text channel.
    Room { guild: u64, channel: u64 },
    /// A direct-message channel.
    Dm { channel: u64 },
    /// A live voice room.
    Voice { guild: u64, channel: u64 },
    /// The owner's thread in the operator console (`owner` is their Discord user id, 0 when none is set).
    Console { owner: u64 },
}

/// A lane key that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid lane key {input:?}: expected room:<guild>:<channel>, dm:<channel>, voice:<guild>:<channel> or console:<owner>")]
pub struct LaneKeyError {
    input: String,
}

impl LaneKey {
    /// The Discord channel this lane speaks in; 0 for the console, which speaks in none.
    pub fn channel(&self) -> u64 {
        match *self {
            LaneKey::Room { channel, .. } | LaneKey::Dm { channel } | LaneKey::Voice { channel, .. } => channel,
            LaneKey::Console { .. } => 0,
        }
    }

    /// The guild, or `None` for a DM.
    pub fn guild(&self) -> Option<u64> {
        match *self {
            LaneKey::Room { guild, .. } | LaneKey::Voice { guild, .. } => Some(guild),
            LaneKey::Dm { .. } | LaneKey::Console { .. } => None,
        }
    }
}

impl fmt::Display for LaneKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LaneKey::Room { guild, channel } => write!(f, "room:{guild}:{channel}"),
            LaneKey::Dm { channel } => write!(f, "dm:{channel}"),
            LaneKey::Voice { guild, channel } => write!(f, "voice:{guild}:{channel}"),
            LaneKey::Console { owner } => write!(f, "console:{owner}"),
        }
    }
}

impl FromStr for LaneKey {
    type Err = LaneKeyError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || LaneKeyError { input: s.chars().take(80).collect() };
        let parts: Vec<&str> = s.split(':').collect();
        let id = |p: &str| p.parse::<u64>().ok().filter(|_| !p.starts_with('+'));
        match parts.as_slice() {
            ["room", g, c] => Ok(LaneKey::Room { guild: id(g).ok_or_else(err)?, channel: id(c).ok_or_else(err)? }),
            ["voice", g, c] => Ok(LaneKey::Voice { guild: id(g).ok_or_else(err)?, channel: id(c).ok_or_else(err)? }),
            ["dm", c] => Ok(LaneKey::Dm { channel: id(c).ok_or_else(err)? }),
            ["console", o] => Ok(LaneKey::Console { owner: id(o).ok_or_else(err)? }),
            _ => Err(err()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lane_keys_round_trip() {
        for key in [
            LaneKey::Room { guild: 1, channel: 2 },
            LaneKey::Dm { channel: 3 },
            LaneKey::Voice { guild: 4, channel: 5 },
            LaneKey::Console { owner: 6 },
        ] {
            assert_eq!(key.to_string().parse::<LaneKey>(), Ok(key));
        }
    }

    #[test]
    fn malformed_lane_keys_are_rejected() {
        for bad in ["", "room:1", "room:1:2:3", "dm:x", "dm:+1", "call:1:2", "room:1.2:3", "dm:-1"] {
            assert!(bad.parse::<LaneKey>().is_err(), "{bad} parsed");
        }
    }
}
