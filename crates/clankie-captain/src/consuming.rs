//! The replica's loop: what it consumes (ingress through the admitters, forwarded steers,
//! asks and commands, experiences, typing signals) until the bus fails or it is told to stop,
//! and how it drains.

use std::sync::atomic::Ordering;

use clankie_bus::ConsumerSpec;
use clankie_proto::{Family, v1};
use tracing::Instrument;

use crate::{Captain, CaptainConfig, CaptainError, intake};

impl Captain {
    /// Consumes ingress and forwarded steers until the bus fails.
    pub async fn run(&self) -> Result<(), CaptainError> {
        self.run_until(std::future::pending()).await
    }

    /// Like [`Captain::run`], but on `shutdown` stops taking deliveries, lets live runs
    /// finish for up to `grace` (they record outcomes and release their leases), and
    /// hands anything queued back to JetStream for the other replicas.
    pub async fn run_until_drained(
        &self,
        shutdown: impl std::future::Future<Output = ()>,
        grace: std::time::Duration,
    ) -> Result<(), CaptainError> {
        self.run_until(shutdown).await?;
        self.inner.draining.store(true, Ordering::SeqCst);
        tracing::info!(live = self.live_lanes(), "draining: no new deliveries; letting live runs finish");
        let deadline = tokio::time::Instant::now() + grace;
        while self.live_lanes() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        if self.live_lanes() > 0 {
            tracing::warn!(live = self.live_lanes(), "grace period over; unfinished runs will be taken over after their leases expire");
        }
        Ok(())
    }

    async fn run_until(&self, shutdown: impl std::future::Future<Output = ()>) -> Result<(), CaptainError> {
        tokio::pin!(shutdown);
        let ack_wait = self.inner.config.ack_wait;
        let mut ingress = self
            .inner
            .bus
            .consumer::<v1::Ingress>(
                ConsumerSpec::durable("captain", Family::IngressText)
                    .with_ack_wait(ack_wait)
                    .with_max_deliver(i64::from(self.inner.config.max_deliver))
                    .with_prefetch(self.inner.config.ingress_prefetch(), CaptainConfig::INGRESS_MAX_ACK_PENDING),
            )
            .await?;
        let admitters = intake::Admitters::start(self);
        let mut steers =
            self.inner.bus.consumer::<v1::Steer>(ConsumerSpec::durable("captain-steer", Family::LaneSteer).with_ack_wait(ack_wait)).await?;
        let mut asks = self.inner.bus.serve(Family::RpcAsk.wildcard(), "captain").await?;
        let mut commands = self.inner.bus.serve(Family::RpcCommand.wildcard(), "captain").await?;
        let _parts = self.start_parts().await?;
        // Likewise every thread's experiences land in the shared self.
        let mut experiences =
            self.inner.bus.consumer::<v1::Experience>(ConsumerSpec::durable("experiences-recorder", Family::SelfExperience)).await?;
        // Reminders nats-server fired: each taken by one replica and made a delivery of its lane.
        let mut due = self.inner.bus.due_reminders("captain-reminders").await?;
        let mut expiry = tokio::time::interval(std::time::Duration::from_secs(600));
        // Every replica sees every typing signal: any of them may hold a run for it.
        let typing = self.inner.bus.signals::<v1::TypingSignal>(Family::SignalTyping).await?;
        tokio::pin!(typing);
        tracing::info!(replica = %self.inner.config.replica, "captain consuming ingress");
        loop {
            tokio::select! {
                _ = &mut shutdown => {
                    self.inner.draining.store(true, Ordering::SeqCst);
                    admitters.hand_back().await;
                    return Ok(());
                }
                d = experiences.next() => {
                    let d = d?;
                    let stored = self.inner.store.insert_experience(&d.event, self.inner.config.experience_ttl).await;
                    self.recorded(d, stored, "experience").await;
                }
                Some(signal) = futures::StreamExt::next(&mut typing) => self.inner.typing_seen.note(&signal),
                _ = expiry.tick() => {
                    match self.inner.store.expire_experiences(self.inner.selfhood.clock().now_ms()).await {
                        Ok(0) => {}
                        Ok(n) => tracing::debug!(expired = n, "experiences expired"),
                        Err(e) => tracing::warn!(error = %e, "expired experiences not removed"),
                    }
                }
                Some(msg) = futures::StreamExt::next(&mut commands) => {
                    let captain = self.clone();
                    tokio::spawn(async move { captain.answer_command(msg).await });
                }
                Some(msg) = futures::StreamExt::next(&mut asks) => {
                    let captain = self.clone();
                    tokio::spawn(async move { captain.answer_ask(msg).await });
                }
                d = ingress.next() => admitters.admit(d?).await,
                d = due.next() => {
                    let d = d?;
                    let span = tracing::info_span!("reminder", otel.name = "captain.reminder_due", reminder = d.event.reminder_id);
                    self.take_due(d).instrument(span).await;
                }
                d = steers.next() => {
                    let d = d?;
                    let id = d.event.ingress.as_ref().map(|i| i.delivery_id.clone()).unwrap_or_default();
                    let span = tracing::info_span!("delivery", otel.name = "captain.steer", delivery_id = %id, forwarded = true);
                    d.traced(&span);
                    self.accept_steer(d).instrument(span).await;
                }
            }
        }
    }
}
