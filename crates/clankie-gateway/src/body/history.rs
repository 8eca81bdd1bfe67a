//! History for cold lanes: a lane that starts without its room's recent messages asks for
//! them over the bus, answered from Discord by the replica that holds the REST lease.

use clankie_proto::{Family, v1};
use futures::StreamExt;
use prost::Message as _;
use twilight_model::id::Id;

use crate::error::GatewayError;
use crate::normalise;
use crate::state::Gateway;

impl Gateway {
    /// Answers history requests, each traced as a stage of the turn that asked.
    pub(crate) async fn run_history(&self) -> Result<(), GatewayError> {
        let mut requests = self.bus().serve(Family::RpcHistory.wildcard(), "body").await?;
        while let Some(msg) = requests.next().await {
            // A stage of the turn that asked, when it was traced.
            let span = tracing::info_span!("gateway.history", otel.kind = "server");
            clankie_bus::Bus::serving(&msg, &span);
            let reply = match v1::HistoryRequest::decode(msg.payload.clone()) {
                Ok(req) => tracing::Instrument::instrument(self.history(&req), span).await,
                Err(_) => v1::HistoryReply { messages: vec![], error: "request_undecodable".into() },
            };
            if let Err(e) = self.bus().respond(&msg, &reply).await {
                tracing::warn!(error = %e, "history reply not sent");
            }
        }
        Ok(())
    }

    async fn history(&self, req: &v1::HistoryRequest) -> v1::HistoryReply {
        let Some(channel) = Id::new_checked(req.channel_id) else {
            return v1::HistoryReply { messages: vec![], error: "bad_channel".into() };
        };
        let limit = req.limit.clamp(1, 100) as u16;
        let _slot = self.budget().pace().await;
        let fetched = match Id::new_checked(req.before_message_id) {
            Some(before) => self.http().channel_messages(channel).before(before).limit(limit).await,
            None => self.http().channel_messages(channel).limit(limit).await,
        };
        let messages = match fetched {
            Ok(response) => match response.models().await {
                Ok(m) => m,
                Err(_) => return v1::HistoryReply { messages: vec![], error: "undecodable".into() },
            },
            Err(_) => return v1::HistoryReply { messages: vec![], error: "fetch_failed".into() },
        };
        let bot = self.bot_id();
        let mut out: Vec<v1::HistoryMessage> = messages
            .iter()
            .map(|m| v1::HistoryMessage {
                message_id: m.id.get(),
                author_id: m.author.id.get(),
                author_name: normalise::display_name(&m.author, m.member.as_ref().and_then(|p| p.nick.as_deref())),
                author_is_bot: m.author.bot,
                is_him: m.author.id.get() == bot,
                content: normalise::as_people_see_it(&m.content, &m.mentions, &normalise::Names::default()),
                at_ms: m.timestamp.as_micros() / 1000,
            })
            .collect();
        // Discord lists newest first; a prompt reads oldest first.
        out.reverse();
        v1::HistoryReply { messages: out, error: String::new() }
    }
}
