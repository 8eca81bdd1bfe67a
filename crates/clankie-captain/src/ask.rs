//! `ask_clankie`: the voice room hands the captain a request that needs
//! action, and the captain answers it in the voice lane's own session.

use clankie_agent::{RunReply, Session, UserMessage};
use clankie_proto::{LaneKey, v1};
use prost::Message as _;

use crate::Captain;

impl Captain {
    pub(crate) async fn answer_ask(&self, msg: async_nats::Message) {
        let reply = match v1::AskRequest::decode(msg.payload.clone()) {
            Ok(req) => {
                let span = tracing::info_span!("delivery", otel.name = "captain.ask", otel.kind = "server", delivery_id = %req.delivery_id, handoff = true);
                clankie_bus::Bus::serving(&msg, &span);
                tracing::Instrument::instrument(self.ask(req), span).await
            }
            Err(_) => v1::AskReply { failure_code: "request_undecodable".into(), ..Default::default() },
        };
        if let Err(e) = self.inner.bus.respond(&msg, &reply).await {
            tracing::warn!(error = %e, "handoff reply not sent");
        }
    }

    async fn ask(&self, req: v1::AskRequest) -> v1::AskReply {
        let inner = &self.inner;
        let config = &inner.config;
        let lane = LaneKey::Voice { guild: req.guild_id, channel: req.channel_id };
        let failed = |code: &str| v1::AskReply { failure_code: code.to_owned(), ..Default::default() };
        // The voice lane runs one request at a time; wait a bounded while for a run in progress.
        let lease = match inner.store.acquire_lease_waiting(&lane, &config.replica, config.lease_ttl, 200, config.retry_delay()).await {
            Ok(Some(lease)) => lease,
            Ok(None) => return failed("lane_busy"),
            Err(_) => return failed("store_unavailable"),
        };
        let session = match Session::open(inner.store.clone(), lease.clone(), format!("rooms/{lane}")).await {
            Ok(s) => s,
            Err(_) => {
                let _ = inner.store.release_lease(&lease).await;
                return failed("session_unavailable");
            }
        };
        let said = clankie_self::blocks::Said { author_name: &req.author_name, author_id: req.author_id, text: &req.request };
        let text = clankie_self::blocks::message(&said, &[("via", "the voice room")]);
        let snapshot = match inner.selfhood.snapshot(&lane).await {
            Ok(s) => s,
            Err(_) => {
                let _ = inner.store.release_lease(&lease).await;
                return failed("self_unavailable");
            }
        };
        let mut first = Vec::new();
        if let Some(context) = clankie_self::self_context_message(&snapshot, &lane, &session) {
            first.push(context);
        }
        first.push(UserMessage::new(req.author_name.clone(), req.delivery_id.clone(), text));
        // The text lane's tools, under the same egress guard: what the voice persona is told its text self can do.
        let room = crate::tools::Room::new(lane, format!("{lane}~ask~{}", req.delivery_id), 0);
        room.asked_by(req.author_id, &req.author_name);
        let tools = self.tools_for(&lease, &room, false);
        let system = clankie_self::assemble(&snapshot, &lane, clankie_self::Surface::Text { privileged: false });
        let run = inner.agent.start_with_tools(session, system, first, tools);
        let result = run.finish_keeping(&inner.store, &lease, config.lease_ttl).await;
        let spent = result.as_ref().map(|r| r.stats.clone()).unwrap_or_default();
        self.record_proposals(&lease, &room, &req.delivery_id, req.author_id).await;
        let _ = inner.store.release_lease(&lease).await;
        // Pictures it shared or took cannot be spoken: they go to the voice channel's chat.
        let pictures = room.artifacts();
        if !pictures.is_empty() {
            let key = format!("ask:{}", req.delivery_id);
            let out = v1::OutboundMessage {
                idempotency_key: key.clone(),
                kind: v1::OutboundKind::TextUpdate as i32,
                guild_id: Some(req.guild_id),
                channel_id: req.channel_id,
                text: room.with_notes("From the voice room:"),
                artifacts: pictures,
                lane: lane.to_string(),
                delivery_id: req.delivery_id.clone(),
                ..Default::default()
            };
            let subject = clankie_proto::Subject::BodySend { channel: req.channel_id };
            if let Err(e) = inner.bus.publish(&subject, &out, Some(&clankie_bus::MsgId::new(key))).await {
                tracing::warn!(%lane, error = %e, "the handoff's pictures were not published");
            }
        }
        let (reply, code) = match result.map(|r| r.outcome) {
            Ok(Ok(RunReply::Words(answer))) => (v1::AskReply { answer, ..Default::default() }, "answered"),
            Ok(Ok(RunReply::Silent)) => (v1::AskReply { silent: true, ..Default::default() }, "silent"),
            Ok(Ok(RunReply::Failed(code))) => (failed(code.code()), code.code()),
            _ => (failed("run_failed"), "run_failed"),
        };
        // What the run spent, so the bill counts the voice room's handoffs too.
        let s = spent;
        self.receipt("captain.handoff", &req.delivery_id, &lane, |r| {
            r.with_code(code).with_tokens(s.input_tokens, s.output_tokens, s.cached_input_tokens, s.cache_write_input_tokens)
        })
        .await;
        if reply.failure_code.is_empty() {
            let lived = clankie_self::experience::asked_to_act(
                &lane,
                clankie_self::experience::Participant { id: req.author_id, name: &req.author_name },
                &req.delivery_id,
                clankie_bus::now_ms(),
            );
            if let Err(e) = clankie_self::experience::publish(&inner.bus, &lived).await {
                tracing::warn!(%lane, error = %e, "experience not published");
            }
        }
        reply
    }

    /// A handoff's proposals, recorded under its lease (it settles no turn) with the owner's DM
    /// for each new one, then published.
    async fn record_proposals(&self, lease: &clankie_store::Lease, room: &crate::tools::Room, delivery_id: &str, asker: u64) {
        let facts = room.proposals();
        if facts.is_empty() {
            return;
        }
        let drawn_from = room.drawn_from(&[asker]);
        let asking = self.owner_ask(&facts, room).await;
        let proposed_in = room.lane.to_string();
        let proposals = clankie_store::Proposals {
            facts: &facts,
            drawn_from: &drawn_from,
            proposed_in: &proposed_in,
            proposed_for: delivery_id,
            ask: asking.as_ref().map(|a| a as &dyn clankie_store::AskOwner),
        };
        if let Err(e) = self.inner.store.propose_memories(lease, &proposals).await {
            tracing::warn!(lane = %room.lane, error = %e, "a handoff's proposals were not recorded");
            return;
        }
        for row in asking.map(crate::commands::OwnerAsk::asked).unwrap_or_default() {
            if let Err(e) = self.inner.outbox.relay(&row).await {
                tracing::warn!(outbox = %row.id, error = %e, "the owner's DM committed but not published yet; the outbox relay will publish it");
            }
        }
    }
}
