//! The body: songbird's driver run standalone, connected with a [`Connection`], its events fed to
//! the listener, and each connection's DAVE state forwarded.

use std::sync::{Arc, Mutex};

use songbird::driver::DecodeMode;
use songbird::events::CoreEvent;
use songbird::{Config, Driver};
use tokio::sync::mpsc;

use crate::config::BodyConfig;
use crate::connection::{BodyError, Connection, closed_with};
use crate::listener::{BodyEvent, Ears, Listener};
use crate::turns::TurnDetector;
use crate::{dave, speaking};

/// The audio body of one voice room.
pub struct Body {
    driver: Driver,
    ears: Arc<Mutex<Ears>>,
    config: BodyConfig,
    current: Option<Connection>,
    events: mpsc::UnboundedSender<BodyEvent>,
    /// Forwards the connection's DAVE state as [`BodyEvent::Dave`]; one per connection.
    dave_watch: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Body {
    fn drop(&mut self) {
        if let Some(watch) = self.dave_watch.take() {
            watch.abort();
        }
    }
}

/// Packets of jitter buffer: three (60 ms) rather than songbird's five, since barge-in is judged
/// on what has come out of it, and loopback and LAN jitter fit.
pub const PLAYOUT_PACKETS: u8 = 3;

/// How long a packet waits in the jitter buffer before the body hears it: what the room hears
/// lags what was said by this much.
pub const PLAYOUT_DELAY: std::time::Duration = std::time::Duration::from_millis(20 * PLAYOUT_PACKETS as u64);

impl Body {
    /// A body not yet connected, and the stream of what happens to it; turns end on silence.
    pub fn new(config: BodyConfig) -> (Body, mpsc::UnboundedReceiver<BodyEvent>) {
        Body::with_turns(config, None)
    }

    /// A body whose turns end when `turns` hears them finished after a short pause, or on the
    /// silence bound.
    pub fn with_turns(config: BodyConfig, turns: Option<Arc<dyn TurnDetector>>) -> (Body, mpsc::UnboundedReceiver<BodyEvent>) {
        let driver_config = Config::default()
            // The body decodes itself (`opus_frame`): songbird 0.6.1 garbles DAVE frames it decodes.
            .decode_mode(DecodeMode::Decrypt)
            .playout_buffer_length(std::num::NonZeroU8::new(PLAYOUT_PACKETS).unwrap_or(std::num::NonZeroU8::MIN))
            .driver_timeout(Some(config.connect_timeout))
            .crypto_mode(config.crypto_mode);
        let mut driver = Driver::new(driver_config);
        let ears = Arc::new(Mutex::new(Ears::default()));
        let (tx, rx) = mpsc::unbounded_channel();
        let pauses = Arc::new(std::sync::atomic::AtomicU32::new(0));
        for event in [
            CoreEvent::VoiceTick,
            CoreEvent::SpeakingStateUpdate,
            CoreEvent::ClientDisconnect,
            CoreEvent::DriverConnect,
            CoreEvent::DriverReconnect,
            CoreEvent::DriverDisconnect,
        ] {
            driver.add_global_event(
                event.into(),
                Listener { ears: ears.clone(), events: tx.clone(), config, turns: turns.clone(), pauses: pauses.clone() },
            );
        }
        (Body { driver, ears, config, current: None, events: tx, dave_watch: None }, rx)
    }

    /// Connects with `connection`. The same connection again is a no-op; a changed one (a new
    /// session, endpoint or token) reconnects, and a newer connect discards an older one still
    /// under way. The future does not borrow the body, so a caller can wait for it elsewhere;
    /// after a failure, call [`Body::forget`] if this connection is still the current one.
    pub fn connect(&mut self, connection: &Connection) -> impl Future<Output = Result<(), BodyError>> + use<> {
        let attempt = if self.current.as_ref() == Some(connection) {
            None
        } else {
            match connection.info() {
                Ok(info) => {
                    self.current = Some(connection.clone());
                    self.ears.lock().unwrap_or_else(|p| p.into_inner()).speaking.clear();
                    self.watch_dave(connection.channel_id);
                    Some(Ok(self.driver.connect(info)))
                }
                Err(e) => Some(Err(e)),
            }
        };
        async move {
            match attempt {
                None => Ok(()),
                Some(Ok(connect)) => {
                    connect.await.map_err(|e| if closed_with(&e) == Some(4017) { BodyError::DaveRequired } else { e.into() })
                }
                Some(Err(e)) => Err(e),
            }
        }
    }

    /// Starts forwarding the channel's DAVE state, from nothing, for a new connection.
    fn watch_dave(&mut self, channel: u64) {
        if let Some(old) = self.dave_watch.take() {
            old.abort();
        }
        dave::reset(channel);
        let mut states = dave::watch(channel);
        let events = self.events.clone();
        self.dave_watch = Some(tokio::spawn(async move {
            while states.changed().await.is_ok() {
                let state = states.borrow_and_update().clone();
                if events.send(BodyEvent::Dave(state)).is_err() {
                    break;
                }
            }
        }));
    }

    /// The DAVE state of its call now (protocol version 0 when it is not connected).
    pub fn dave(&self) -> dave::DaveState {
        self.current.as_ref().map(|c| dave::state(c.channel_id)).unwrap_or_default()
    }

    /// The connection it was last asked to use, if it still holds it.
    pub fn connection(&self) -> Option<&Connection> {
        self.current.as_ref()
    }

    /// Forgets the connection after the driver dropped it, so the next `connect` is not a no-op.
    pub fn forget(&mut self) {
        self.current = None;
    }

    /// Leaves the voice channel.
    pub fn leave(&mut self) {
        self.current = None;
        self.driver.leave();
    }

    /// How the body cuts speech.
    pub fn config(&self) -> BodyConfig {
        self.config
    }

    /// Plays mono PCM at `rate` into the room; resolves when it has been played out.
    pub fn play(&mut self, pcm: &[i16], rate: u32) -> impl Future<Output = Result<(), BodyError>> + use<> {
        speaking::play(&mut self.driver, pcm, rate)
    }

    /// Whom each SSRC is speaking for, as speaking updates and client disconnects left it.
    pub fn speakers(&self) -> Vec<(u32, u64)> {
        let mut speakers: Vec<(u32, u64)> =
            self.ears.lock().unwrap_or_else(|p| p.into_inner()).users.iter().map(|(s, u)| (*s, *u)).collect();
        speakers.sort_unstable();
        speakers
    }

    /// Stops whatever is playing.
    pub fn stop(&mut self) {
        self.driver.stop();
    }
}
