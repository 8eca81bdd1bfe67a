//! The typing loop: keeps Discord's indicator (which expires after 10 s) lit
//! from the captain's start until its stop or the reply, whichever is first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clankie_bus::ConsumerSpec;
use clankie_proto::{Family, v1};
use twilight_model::id::Id;

use crate::{Gateway, GatewayError};

/// One loop per channel.
pub(crate) struct TypingLoops {
    http: Arc<twilight_http::Client>,
    interval: Duration,
    max: Duration,
    loops: Arc<Mutex<HashMap<u64, tokio::task::JoinHandle<()>>>>,
}

impl TypingLoops {
    pub fn new(http: Arc<twilight_http::Client>, interval: Duration, max: Duration) -> TypingLoops {
        TypingLoops { http, interval, max, loops: Arc::new(Mutex::new(HashMap::new())) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, tokio::task::JoinHandle<()>>> {
        self.loops.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Lights the channel and keeps it lit; a second start while lit changes nothing.
    pub fn start(&self, channel: u64) {
        let Some(channel_id) = Id::new_checked(channel) else { return };
        let mut loops = self.lock();
        if loops.get(&channel).is_some_and(|h| !h.is_finished()) {
            return;
        }
        let (http, interval, max) = (self.http.clone(), self.interval, self.max);
        let handle = tokio::spawn(async move {
            let started = tokio::time::Instant::now();
            let mut wait = interval;
            while started.elapsed() < max {
                match http.create_typing_trigger(channel_id).await {
                    Ok(_) => wait = interval,
                    Err(e) => {
                        let limited = matches!(e.kind(), twilight_http::error::ErrorType::Response { status, .. } if status.get() == 429);
                        // Back off on a rate limit instead of hammering; the indicator may lapse briefly.
                        wait = if limited { (wait * 2).min(Duration::from_secs(30)) } else { interval };
                        tracing::warn!(channel, rate_limited = limited, "typing trigger failed");
                    }
                }
                tokio::time::sleep(wait).await;
            }
        });
        loops.insert(channel, handle);
    }

    /// Clears the channel: no further triggers (Discord lets the last one lapse).
    pub fn stop(&self, channel: u64) {
        if let Some(h) = self.lock().remove(&channel) {
            h.abort();
        }
    }
}

impl Gateway {
    pub(crate) async fn run_typing(&self) -> Result<(), GatewayError> {
        let mut spec = ConsumerSpec::durable("gateway-typing", Family::BodyTyping);
        // A typing action is only worth anything now: a restarted gateway does not replay old ones.
        spec.deliver.deliver_policy = async_nats_deliver_new();
        let mut consumer = self.inner.bus.consumer::<v1::TypingAction>(spec).await?;
        loop {
            let d = consumer.next().await?;
            let span = tracing::info_span!("delivery", delivery_id = %d.event.delivery_id);
            let _e = span.enter();
            match v1::TypingOp::try_from(d.event.op) {
                Ok(v1::TypingOp::Start) => self.inner.typing.start(d.event.channel_id),
                Ok(v1::TypingOp::Stop) => self.inner.typing.stop(d.event.channel_id),
                _ => tracing::warn!("typing action with no op"),
            }
            drop(_e);
            let _ = d.ack().await;
        }
    }
}

fn async_nats_deliver_new() -> clankie_bus::DeliverPolicy {
    clankie_bus::DeliverPolicy::New
}
