//! What the console follows on the bus: lane changes (from the captain's receipts), the tap,
//! and voice rooms (members and floor decisions). Pushed to the page as server-sent events.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use axum::extract::{Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use clankie_bus::ConsumerSpec;
use clankie_proto::{Family, v1};
use futures::{Stream, StreamExt};
use prost::Message as _;

use crate::error::ConsoleError;
use crate::state::Console;
// The voice view's state lives in `voice`, beside the console state that holds it; named here too,
// where it was first, for code that reaches it through `live`.
pub use crate::voice::{RoomDave, VoiceState};

/// Starts following the bus for `console`: receipts become lane updates; voice members and
/// floor decisions are read from their streams (the last of each first, then as they come).
///
/// The first subscriptions are made here, so a console that cannot reach the bus does not start.
/// Each follower then runs as a supervised part (`console.receipts`, `console.voice`): one that
/// panics or whose subscription ends is logged by name and follows again, so the page never goes
/// quietly stale. They hold the console weakly and end with it.
pub(crate) async fn follow(console: Console) -> Result<(), ConsoleError> {
    let receipts = subscribe_receipts(&console).await?;
    let voice = voice_consumers(&console).await?;
    let parts = console.parts();
    let weak = console.downgrade();
    let first = Arc::new(Mutex::new(Some(receipts)));
    let w = weak.clone();
    let following_receipts = tokio::spawn(clankie_http::supervise::keep_running("console.receipts", parts.clone(), move || {
        let (weak, first) = (w.clone(), first.lock().unwrap_or_else(|p| p.into_inner()).take());
        async move {
            let mut receipts = match first {
                Some(receipts) => receipts,
                None => {
                    let Some(console) = weak.upgrade() else { return std::future::pending().await };
                    match subscribe_receipts(&console).await {
                        Ok(receipts) => receipts,
                        Err(e) => return tracing::warn!(error = %e, "receipts not followed yet; trying again"),
                    }
                }
            };
            while let Some(msg) = receipts.next().await {
                clankie_settings::fault::panic_once("console.receipts");
                let Some(console) = weak.upgrade() else { return std::future::pending().await };
                lane_change(&console, &msg.payload).await;
            }
            tracing::warn!("receipts no longer followed; following again");
        }
    }));
    let first = Arc::new(Mutex::new(Some(voice)));
    let following_voice = tokio::spawn(clankie_http::supervise::keep_running("console.voice", parts, move || {
        let (weak, first) = (weak.clone(), first.lock().unwrap_or_else(|p| p.into_inner()).take());
        async move {
            let (mut members, mut decisions) = match first {
                Some(consumers) => consumers,
                None => {
                    let Some(console) = weak.upgrade() else { return std::future::pending().await };
                    match voice_consumers(&console).await {
                        Ok(consumers) => consumers,
                        Err(e) => return tracing::warn!(error = %e, "voice not followed yet; trying again"),
                    }
                }
            };
            loop {
                let Some(voice) = weak.upgrade().map(|console| console.voice().clone()) else { return std::future::pending().await };
                tokio::select! {
                    d = members.next() => match d {
                        Ok(d) => { voice.member(d.event.clone()); let _ = d.ack().await; }
                        Err(e) => return tracing::warn!(error = %e, "voice members no longer followed; following again"),
                    },
                    d = decisions.next() => match d {
                        Ok(d) => { voice.decision(d.event.clone()); let _ = d.ack().await; }
                        Err(e) => return tracing::warn!(error = %e, "floor decisions no longer followed; following again"),
                    },
                }
            }
        }
    }));
    console.keep_followers([clankie_http::Aborting(following_receipts), clankie_http::Aborting(following_voice)]);
    Ok(())
}

async fn subscribe_receipts(console: &Console) -> Result<clankie_bus::Subscriber, ConsoleError> {
    console
        .bus()
        .client()
        .subscribe(Family::Receipt.wildcard())
        .await
        .map_err(|e| ConsoleError::Bus(clankie_bus::BusError::Consumer { consumer: "console receipts".into(), detail: e.to_string() }))
}

type VoiceConsumers = (clankie_bus::Consumer<v1::VoiceMember>, clankie_bus::Consumer<v1::FloorDecision>);

async fn voice_consumers(console: &Console) -> Result<VoiceConsumers, ConsoleError> {
    let replica = console.replica();
    let members = console
        .bus()
        .consumer::<v1::VoiceMember>(
            ConsumerSpec::durable(format!("console-members-{replica}"), Family::VoiceMember).last_per_subject().fresh(),
        )
        .await?;
    let decisions = console
        .bus()
        .consumer::<v1::FloorDecision>(
            ConsumerSpec::durable(format!("console-floor-{replica}"), Family::VoiceFloor).last_per_subject().fresh(),
        )
        .await?;
    Ok((members, decisions))
}

/// One receipt: a voice connection's DAVE state, or the lane view a captain receipt changed.
async fn lane_change(c: &Console, payload: &[u8]) {
    let Ok(receipt) = v1::Receipt::decode(payload) else { return };
    if receipt.kind == "voice.connection" && receipt.codes.iter().any(|c| c == "dave") {
        c.voice().connection(&receipt);
        return;
    }
    if receipt.lane.is_empty() || !receipt.kind.starts_with("captain.") || c.lanes().receiver_count() == 0 {
        return;
    }
    match c.store().lane_view(&receipt.lane).await {
        Ok(Some(mut view)) => {
            // The receipt can overtake its own stored copy: what it says of the run wins.
            if receipt.kind == "captain.run" {
                view.cold = receipt.flags.get("cold").copied();
                view.replica = receipt.ids.get("replica").cloned().or(view.replica);
            }
            let _ = c.lanes().send(view);
        }
        Ok(None) => {}
        Err(e) => tracing::warn!(lane = %receipt.lane, error = %e, "lane view unavailable"),
    }
}

/// `GET /api/lanes/events`: every lane change as a `lane` event carrying the lane's view.
pub async fn lane_events(State(console): State<Console>) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let changes = changes_of(console.lanes().subscribe());
    Sse::new(changes.map(|view| Ok(Event::default().event("lane").json_data(view).unwrap_or_default()))).keep_alive(KeepAlive::default())
}

fn changes_of<T: Clone + Send + 'static>(rx: tokio::sync::broadcast::Receiver<T>) -> impl Stream<Item = T> {
    futures::stream::unfold(rx, |mut rx| async move {
        loop {
            match rx.recv().await {
                Ok(item) => return Some((item, rx)),
                // A slow page skips what it missed; the next change of a lane brings it up to date.
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
            }
        }
    })
}

fn unsubscribed(what: &str, e: impl std::fmt::Display) -> ConsoleError {
    ConsoleError::Bus(clankie_bus::BusError::Consumer { consumer: what.into(), detail: e.to_string() })
}

/// The tap's query: a subject filter inside Clankie's subjects.
#[derive(serde::Deserialize)]
pub struct TapQuery {
    subject: Option<String>,
}

/// `GET /api/tap?subject=`: every event on matching subjects, decoded, as `event` messages.
pub async fn tap(
    State(console): State<Console>,
    Query(q): Query<TapQuery>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ConsoleError> {
    let subject = q.subject.unwrap_or_else(clankie_proto::Subject::everything);
    if !clankie_bus::tap::valid_filter(&subject) || !clankie_proto::Subject::filter_is_ours(&subject) {
        return Err(ConsoleError::BadRequest(format!("{subject:?} is not a filter on clankie subjects (e.g. clankie.ingress.>)")));
    }
    let sub = console.bus().client().subscribe(subject).await.map_err(|e| unsubscribed("console tap", e))?;
    let events = sub.map(|msg| {
        let line = clankie_bus::tap::render(msg.subject.as_str(), &msg.payload, std::time::SystemTime::now());
        Ok(Event::default().event("tap").data(line.to_string()))
    });
    Ok(Sse::new(events).keep_alive(KeepAlive::default()))
}
