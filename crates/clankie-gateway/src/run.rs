//! How a replica runs: each part (shards, REST work, voice, audience) supervised on its own,
//! and on shutdown stopped in order, so the shards and the REST tenure hand over first.

use std::time::Duration;

use crate::error::GatewayError;
use crate::rest::client::LIMITER_PANICKED;
use crate::state::Gateway;

impl Gateway {
    /// Runs until `shutdown`, then closes each shard for resume and hands its claim back with
    /// the session, so another replica (or this one restarted) resumes it; consumers stop
    /// with the process.
    pub async fn run_until(&self, shutdown: impl std::future::Future<Output = ()>) -> Result<(), GatewayError> {
        let run = self.run();
        tokio::pin!(run);
        tokio::select! {
            r = &mut run => return r,
            _ = shutdown => {}
        }
        let _ = self.stopping().send(true);
        // Let the shards close and be handed back; that ends the run.
        let _ = tokio::time::timeout(Duration::from_secs(10), run).await;
        Ok(())
    }

    /// Runs ingest and body until one of them fails. Each is supervised: a panic restarts
    /// that part alone, so a fault in posting never stops the shards' ingest.
    pub async fn run(&self) -> Result<(), GatewayError> {
        let parts = self.supervised();
        let rest = clankie_http::supervise("gateway.rest", parts, |p| self.after_rest_panic(p), || self.run_rest());
        let ingest = async {
            tokio::select! {
                r = clankie_http::supervise("gateway.shards", parts, |p| self.after_rest_panic(p), || self.run_shards()) => r,
                r = clankie_http::supervise("gateway.voice_sessions", parts, |_| {}, || self.run_voice_sessions()) => r,
                r = clankie_http::supervise("gateway.voice_commands", parts, |_| {}, || self.run_voice_commands()) => r,
                r = clankie_http::supervise("gateway.audience", parts, |_| {}, || self.run_audience()) => r,
            }
        };
        tokio::pin!(rest, ingest);
        // Stopping, each half finishes its hand-over (the shards their sessions, the REST
        // tenure its held messages and the lease) before the other is dropped.
        let stopping = || *self.stopping().borrow();
        tokio::select! {
            r = &mut rest => {
                if stopping() {
                    let _ = tokio::time::timeout(Duration::from_secs(10), &mut ingest).await;
                }
                r
            }
            r = &mut ingest => {
                if stopping() {
                    let _ = tokio::time::timeout(Duration::from_secs(5), &mut rest).await;
                }
                r
            }
        }
    }

    /// A REST part panicked: if twilight's limiter task died, every later request would panic
    /// too, so the client is replaced before the part starts again.
    pub(crate) fn after_rest_panic(&self, payload: &(dyn std::any::Any + Send)) {
        let text = payload.downcast_ref::<String>().map(String::as_str).or_else(|| payload.downcast_ref::<&str>().copied());
        if text.is_some_and(|t| t.contains(LIMITER_PANICKED)) {
            self.rest_client().rebuild();
        }
    }
}
