//! The room's publishes, off its loop: its ordered publisher and its receipts, so a slow bus
//! delays evidence, never the room or its lease.

use clankie_bus::{Bus, now_ms};
use clankie_proto::{LaneKey, ReceiptKind, v1};
use tokio::sync::mpsc;

use super::Key;

/// The room's publishes, off its loop: one task sends them in the order they were made, so
/// the actor never waits on the bus (a leader election holds a publish for seconds) and what
/// it decided still reaches the bus in order. Bounded: past [`PUBLISHES_QUEUED`] waiting, a
/// publish is dropped, counted and logged rather than growing memory while the bus is away.
#[derive(Clone)]
pub(super) struct Publisher {
    jobs: mpsc::Sender<futures::future::BoxFuture<'static, ()>>,
}

/// Publishes a room may have waiting for the bus before it drops new ones.
const PUBLISHES_QUEUED: usize = 1024;

impl Publisher {
    /// The publisher, and its task: the room keeps the task's handle so what it queued is
    /// still sent after the room is gone.
    pub(super) fn start() -> (Publisher, tokio::task::JoinHandle<()>) {
        let (jobs, mut rx) = mpsc::channel::<futures::future::BoxFuture<'static, ()>>(PUBLISHES_QUEUED);
        let task = tokio::spawn(async move {
            while let Some(job) = rx.recv().await {
                held_publish().await;
                job.await;
            }
        });
        (Publisher { jobs }, task)
    }

    /// Queues `job` behind the room's earlier publishes; `what` names it when it is dropped.
    pub(super) fn send(&self, what: &'static str, job: impl std::future::Future<Output = ()> + Send + 'static) {
        if self.jobs.try_send(Box::pin(job)).is_err() {
            metrics::counter!("clankie_voice_publishes_dropped_total", "what" => what).increment(1);
            tracing::warn!(what, "the room's publishes are backed up; one was dropped");
        }
    }
}

/// The named wait a test sets (`CLANKIE_FAULT_HOLD=voice.publish=<ms>`) to make every voice-floor
/// publish as slow as one during a held stream leader.
pub(super) async fn held_publish() {
    if let Some(held) = clankie_settings::fault::hold("voice.publish") {
        tokio::time::sleep(held).await;
    }
}

/// Publishes a content-free receipt of a voice room (its lane, guild, channel and the replica's
/// pid) on a task of its own: a slow bus delays evidence, never the room or its lease.
pub(crate) fn room_receipt(bus: &Bus, delivery_id: &str, kind: &'static str, key: Key, build: impl FnOnce(v1::Receipt) -> v1::Receipt) {
    let Ok(kind) = ReceiptKind::new(kind) else { return };
    let lane = LaneKey::Voice { guild: key.0, channel: key.1 };
    let receipt = build(
        v1::Receipt::new(&kind, bus.service(), delivery_id, now_ms())
            .with_lane(&lane)
            .with_id("guild", key.0)
            .with_id("channel", key.1)
            .with_id("replica_pid", u64::from(std::process::id())),
    );
    let bus = bus.clone();
    tokio::spawn(async move {
        held_publish().await;
        if let Err(e) = bus.publish_receipt(&receipt).await {
            tracing::warn!(error = %e, "receipt not published");
        }
    });
}
