//! The ring's sweeper: the voice floor keeps the ring, so it deletes the ring's old lines too.

use std::time::Duration;

use clankie_store::Store;

/// The ring is the voice floor's: it sweeps it every `every`, by age and by lines per room
/// (the first sweep a minute after start at the latest). Runs until dropped.
pub async fn sweep_ring(store: Store, ring: clankie_store::RingRetention, every: Duration) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every.min(Duration::from_secs(60)), every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match store.sweep_voice_ring(&ring).await {
            Ok(0) => {}
            Ok(lines) => tracing::info!(lines, "swept the voice ring"),
            Err(e) => tracing::warn!(error = %e, "the voice ring sweep failed; it runs again next time"),
        }
    }
}
