//! The body's own speech: PCM played into the room through the driver, and the signal that a track
//! is over, which a caller waits on before it speaks again.

use std::sync::{Arc, Mutex};

use songbird::Driver;
use songbird::events::{Event, EventContext, EventHandler, TrackEvent};
use songbird::input::{Input, RawAdapter};
use tokio::sync::oneshot;

use crate::connection::BodyError;

struct TrackDone(Mutex<Option<oneshot::Sender<()>>>);

#[async_trait::async_trait]
impl EventHandler for TrackDone {
    async fn act(&self, _ctx: &EventContext<'_>) -> Option<Event> {
        if let Some(tx) = self.0.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = tx.send(());
        }
        Some(Event::Cancel)
    }
}

struct Shared(Arc<TrackDone>);

#[async_trait::async_trait]
impl EventHandler for Shared {
    async fn act(&self, ctx: &EventContext<'_>) -> Option<Event> {
        self.0.act(ctx).await
    }
}

/// Plays mono PCM at `rate` into the room through `driver`; resolves when it has been played out.
pub(crate) fn play(driver: &mut Driver, pcm: &[i16], rate: u32) -> impl Future<Output = Result<(), BodyError>> + use<> {
    let bytes = clankie_pcm::f32le(pcm);
    let input: Input = RawAdapter::new(std::io::Cursor::new(bytes), rate, 1).into();
    let track = driver.play_input(input);
    let (tx, rx) = oneshot::channel();
    let done = TrackDone(Mutex::new(Some(tx)));
    let done = Arc::new(done);
    let added = track
        .add_event(Event::Track(TrackEvent::End), Shared(done.clone()))
        .and_then(|()| track.add_event(Event::Track(TrackEvent::Error), Shared(done)));
    async move {
        added.map_err(|_| BodyError::TrackLost)?;
        rx.await.map_err(|_| BodyError::TrackLost)
    }
}
