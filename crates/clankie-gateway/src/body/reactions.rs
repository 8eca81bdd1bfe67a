//! Outcome reactions (the sandbox's view): each message's outcome shown on it as a reaction,
//! never before its reply is out, and behind replies in the REST budget.

use std::time::Duration;

use clankie_bus::ConsumerSpec;
use clankie_proto::{Family, LaneKey, v1};
use twilight_http::request::channel::reaction::RequestReactionType;
use twilight_model::id::Id;

use crate::body::refusal::{PostError, classify};
use crate::error::GatewayError;
use crate::state::Gateway;

/// How long an outcome a gateway took stays its own before JetStream hands it to another (or
/// to the same one restarted). A reaction is one idempotent PUT, so a second try is harmless,
/// while a long wait leaves the room without the outcome after a gateway dies holding it.
const OUTCOME_ACK_WAIT: Duration = Duration::from_secs(5);
/// Outcomes pulled at once: few, so that those waiting behind a slow reaction are still
/// inside their ack wait when their turn comes.
const OUTCOME_PREFETCH: usize = 8;

/// How long a "replied" outcome waits, at a time, for its reply's first piece to be posted,
/// and how many times: about three seconds in all, well inside the outcome's ack wait.
const REPLY_WAIT: Duration = Duration::from_millis(250);
const REPLY_WAITS: i64 = 12;

impl Gateway {
    /// Shows each outcome as a reaction when outcome reactions are on; otherwise waits forever,
    /// so the REST tenure's select treats it as a part that never ends.
    pub(crate) async fn run_outcome_reactions(&self) -> Result<(), GatewayError> {
        if !self.config().outcome_reactions {
            return std::future::pending().await;
        }
        let spec = ConsumerSpec::durable("gateway-outcomes", Family::LaneOutcome)
            .with_ack_wait(OUTCOME_ACK_WAIT)
            .with_prefetch(OUTCOME_PREFETCH, 0);
        let mut consumer = self.bus().consumer::<v1::DeliveryOutcome>(spec).await?;
        loop {
            let d = consumer.next().await?;
            let span = tracing::info_span!("delivery", otel.name = "gateway.outcome_reaction", delivery_id = %d.event.delivery_id);
            d.traced(&span);
            tracing::Instrument::instrument(self.react(d), span).await;
        }
    }

    /// Shows one outcome on its message as a reaction, once its reply is out.
    async fn react(&self, d: clankie_bus::Delivery<v1::DeliveryOutcome>) {
        let outcome = &d.event;
        let (Ok(lane), Ok(message)) = (outcome.lane.parse::<LaneKey>(), outcome.delivery_id.parse::<u64>()) else {
            let _ = d.term().await;
            return;
        };
        let (Some(channel), Some(message)) = (Id::new_checked(lane.channel()), Id::new_checked(message)) else {
            let _ = d.term().await;
            return;
        };
        let kind = v1::OutcomeKind::try_from(outcome.kind).unwrap_or(v1::OutcomeKind::Unspecified);
        // A withdrawn message is gone from Discord: there is nothing to react on.
        if kind == v1::OutcomeKind::Withdrawn {
            let _ = d.ack().await;
            return;
        }
        // "Replied" is shown once the reply is: a reaction never races ahead of its reply.
        // Waited for by redelivery, so the outcomes behind it go on meanwhile; bounded, so a
        // reply that never posts cannot hold its outcome back for long.
        if kind == v1::OutcomeKind::Replied
            && matches!(lane, LaneKey::Room { .. } | LaneKey::Dm { .. })
            && !outcome.turn_id.is_empty()
            && d.delivered < REPLY_WAITS
            && !self.reply_is_out(&format!("reply:{}", outcome.turn_id)).await
        {
            let _ = d.nak_after(REPLY_WAIT).await;
            return;
        }
        let emoji = RequestReactionType::Unicode { name: kind.reaction() };
        // Replies first: the outcome waits while the budget is crowded, well inside its ack wait.
        let slot = self.budget().give_way(OUTCOME_ACK_WAIT / 3).await;
        if !self.speaks_rest() {
            let _ = d.nak_after(Duration::from_millis(500)).await;
            return;
        }
        clankie_settings::fault::point("gateway.before_reaction");
        if let Some(held) = clankie_settings::fault::hold("gateway.before_reaction") {
            tokio::time::sleep(held).await;
        }
        if self.fence().is_err() {
            let _ = d.nak_after(Duration::from_millis(500)).await;
            return;
        }
        let reacted = self.http().create_reaction(channel, message, &emoji).await;
        drop(slot);
        match reacted {
            Ok(_) => {
                clankie_settings::fault::point("gateway.after_reaction");
                let _ = d.ack().await;
            }
            Err(e) => match classify(&e) {
                PostError::Retry => {
                    let _ = d.nak_after(Duration::from_secs(1)).await;
                }
                PostError::Refused(_) => {
                    let _ = d.term().await;
                }
                PostError::Denied(denied) => {
                    let codes = denied.codes(&["needs_read_message_history", "needs_add_reactions"]);
                    tracing::error!(
                        channel = channel.get(),
                        ?codes,
                        "Discord refused an outcome's reaction for a permission the bot lacks in the channel"
                    );
                    self.receipt("gateway.reaction_refused", &outcome.delivery_id, |r| {
                        codes.iter().fold(r.with_id("channel", channel.get()).with_count("status", 403), |r, code| r.with_code(code))
                    })
                    .await;
                    let _ = d.term().await;
                }
            },
        }
    }
}
