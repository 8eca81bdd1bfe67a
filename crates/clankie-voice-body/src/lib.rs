//! The voice room's audio body: songbird's [`Driver`](songbird::Driver) run standalone, outside the shard's process.
//!
//! The gateway holds the Discord shard; it forwards the bot's voice state and every voice server
//! update over NATS, and the voice-floor service assembles a [`Connection`] from them. The body
//! connects the driver with it, decodes what each person says to mono 16 kHz PCM, cuts it into
//! [`Segment`]s attributed by the SSRC→user map that speaking updates build, and plays PCM into the
//! room. It knows nothing of floors or words: what it hears leaves it only as [`BodyEvent`]s.
//!
//! The driver speaks `wss://` only. A voice server with a private certificate (the loopback
//! Discord's) is trusted through `SSL_CERT_FILE`, which songbird's connector re-reads on each
//! connect; real Discord needs no setting.

pub mod dave;
pub mod drops;

mod config;
mod connection;
mod decode;
mod driver;
mod hearing;
mod listener;
mod speaking;
mod turns;

pub use songbird;

pub use config::BodyConfig;
pub use connection::{BodyError, Connection};
pub use decode::HEARD_RATE;
pub use driver::{Body, PLAYOUT_DELAY, PLAYOUT_PACKETS};
pub use listener::BodyEvent;
pub use turns::{Segment, TurnDetector, TurnEnd};
