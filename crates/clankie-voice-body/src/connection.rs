//! What the driver connects with (the bot's voice state and the voice server update), and why the
//! body can fail: the one place the songbird connection's details and its errors are read.

use std::num::NonZeroU64;

use songbird::ConnectionInfo;

/// The close code a connect failed on, if the voice socket was closed with one. songbird
/// keeps its socket error type private; its `Debug` names the code.
pub(crate) fn closed_with(e: &songbird::error::ConnectionError) -> Option<u16> {
    let text = format!("{e:?}");
    let (_, rest) = text.split_once("WsClosed(Some(")?;
    let digits: String = rest.chars().skip_while(|c| !c.is_ascii_digit()).take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Why the body could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("voice connection failed: {0}")]
    Connect(#[from] songbird::error::ConnectionError),
    /// Close 4017: the voice server wants DAVE (end-to-end encryption) at a version this build's
    /// songbird does not offer. Trying again cannot help until the build changes.
    #[error("the voice server closed with 4017: it requires DAVE end-to-end encryption at a version this build does not offer")]
    DaveRequired,
    #[error("a voice connection needs non-zero ids (guild {guild}, channel {channel}, user {user})")]
    ZeroId { guild: u64, channel: u64, user: u64 },
    #[error("the driver dropped the track before it ended")]
    TrackLost,
}

/// What a voice connection is made of: the bot's own voice state (session, channel) and the
/// latest voice server update (endpoint, token).
#[derive(Clone, PartialEq, Eq)]
pub struct Connection {
    pub guild_id: u64,
    pub channel_id: u64,
    pub user_id: u64,
    pub session_id: String,
    /// `host:port` of the voice server, without a scheme.
    pub endpoint: String,
    pub token: String,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token is a credential: never printed.
        f.debug_struct("Connection")
            .field("guild_id", &self.guild_id)
            .field("channel_id", &self.channel_id)
            .field("user_id", &self.user_id)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl Connection {
    pub(crate) fn info(&self) -> Result<ConnectionInfo, BodyError> {
        let zero = || BodyError::ZeroId { guild: self.guild_id, channel: self.channel_id, user: self.user_id };
        Ok(ConnectionInfo {
            channel_id: NonZeroU64::new(self.channel_id).ok_or_else(zero)?.into(),
            endpoint: self.endpoint.clone(),
            guild_id: NonZeroU64::new(self.guild_id).ok_or_else(zero)?.into(),
            session_id: self.session_id.clone(),
            token: self.token.clone(),
            user_id: NonZeroU64::new(self.user_id).ok_or_else(zero)?.into(),
        })
    }
}
