//! The typing loop: keeps Discord's indicator (which expires after 10 s) lit
//! from the captain's start until its stop or the reply, whichever is first.
//!
//! Which channels are lit lives in a shared bucket, not in one process: a
//! start and its stop may reach different gateway replicas, and a replica that
//! dies leaves its lit channels for another to pick up. Each entry names the
//! replica whose loop keeps it lit and when that loop last triggered; a loop
//! ends when its entry goes (a stop, anywhere) and a replica adopts an entry
//! whose loop has gone quiet.

pub(crate) mod loops;

use clankie_bus::ConsumerSpec;
use clankie_proto::{Family, v1};

use crate::error::GatewayError;
use crate::state::Gateway;

impl Gateway {
    /// Starts and stops typing loops as the captain's typing actions say, and adopts the lit
    /// channels of replicas gone quiet; run while this replica holds the REST lease.
    pub(crate) async fn run_typing(&self) -> Result<(), GatewayError> {
        let mut spec = ConsumerSpec::durable("gateway-typing", Family::BodyTyping);
        // A typing action is only worth anything now: a restarted gateway does not replay old
        // ones (what was lit is in the bucket).
        spec.deliver.deliver_policy = clankie_bus::DeliverPolicy::New;
        let mut consumer = self.bus().consumer::<v1::TypingAction>(spec).await?;
        // Adopting quiet channels lists the bucket: on a task of its own, so it never delays a stop.
        let gateway = self.clone();
        let _adopt = clankie_http::Aborting(tokio::spawn(async move {
            let typing = gateway.typing();
            let mut tick = tokio::time::interval(typing.interval * 2);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                typing.adopt_quiet().await;
            }
        }));
        let typing = self.typing();
        loop {
            let d = consumer.next().await?;
            clankie_settings::fault::panic_once("gateway.typing");
            let span = tracing::info_span!("delivery", otel.name = "gateway.typing", delivery_id = %d.event.delivery_id);
            d.traced(&span);
            let handle = async {
                match v1::TypingOp::try_from(d.event.op) {
                    Ok(v1::TypingOp::Start) => typing.start(d.event.channel_id).await,
                    Ok(v1::TypingOp::Stop) => typing.stop(d.event.channel_id).await,
                    _ => tracing::warn!("typing action with no op"),
                }
            };
            tracing::Instrument::instrument(handle, span).await;
            let _ = d.ack().await;
        }
    }
}
