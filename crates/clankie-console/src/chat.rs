//! Console chat: the owner talks with him in the `console:<owner>` lane, one more local
//! thread of the same self. Its system prompt comes from the one assembly
//! (`clankie_self::assemble` on the console surface), so it knows what the privacy policy
//! lets an owner-only thread know: guild life, never a DM's words. Its session is durable
//! like any lane's, kept under the lane's lease.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use clankie_agent::{RunReply, Session, UserMessage};
use clankie_proto::{LaneKey, ReceiptKind, v1};
use serde_json::{Value, json};

use crate::error::ConsoleError;
use crate::state::Console;

/// The longest line the owner may send at once.
const CHAT_MAX_CHARS: usize = 8_000;

/// What the owner typed.
#[derive(serde::Deserialize)]
pub struct ChatLine {
    text: String,
}

/// `POST /api/chat`: one turn of the console thread; answers `{lane, delivery_id, answer}`,
/// `{silent: true}` or `{failure}`.
pub async fn route(State(console): State<Console>, Json(line): Json<ChatLine>) -> Result<Json<Value>, ConsoleError> {
    let text = line.text.trim();
    if text.is_empty() || text.chars().count() > CHAT_MAX_CHARS {
        return Err(ConsoleError::BadRequest(format!("a console line is 1 to {CHAT_MAX_CHARS} characters")));
    }
    console.chat(text).await.map(Json)
}

/// Lines of the console thread `GET /api/chat` shows at most.
const THREAD_SHOWN: usize = 100;

/// `GET /api/chat`: the console thread so far, oldest first, as `{from: "owner"|"him", text}`,
/// so a reloaded page shows the conversation it continues.
pub async fn thread(State(console): State<Console>) -> Result<Json<Vec<Value>>, ConsoleError> {
    let owner = console.store().owner_settings().await?.owner_id.unwrap_or(0);
    let entries = console.store().entries(&format!("rooms/{}", LaneKey::Console { owner })).await?;
    let mut lines: Vec<Value> = entries
        .iter()
        .filter_map(|e| serde_json::from_value::<clankie_agent::EntryBody>(e.body.clone()).ok())
        .filter_map(|body| match body {
            clankie_agent::EntryBody::User { author, .. } if author != "owner" => None,
            clankie_agent::EntryBody::User { text, .. } => {
                let said = clankie_self::blocks::parse(&text).and_then(|blocks| blocks.into_iter().next()).map_or(text, |b| b.content);
                Some(json!({ "from": "owner", "text": said }))
            }
            clankie_agent::EntryBody::Assistant { text, tool_calls, .. } if tool_calls.is_empty() && !text.trim().is_empty() => {
                Some(json!({ "from": "him", "text": text }))
            }
            _ => None,
        })
        .collect();
    let skip = lines.len().saturating_sub(THREAD_SHOWN);
    Ok(Json(lines.split_off(skip)))
}

impl Console {
    /// One turn of the owner's console thread.
    pub async fn chat(&self, text: &str) -> Result<Value, ConsoleError> {
        static SENT: AtomicU64 = AtomicU64::new(0);
        let settings = self.store().owner_settings().await?;
        let owner = settings.owner_id.unwrap_or(0);
        let lane = LaneKey::Console { owner };
        let delivery_id = format!("console:{}:{}", clankie_bus::now_ms(), SENT.fetch_add(1, Ordering::Relaxed));
        let span = tracing::info_span!("console_chat", %lane, delivery_id = %delivery_id);
        let _enter = span.enter();
        // One turn at a time: a second line waits a bounded while for the first.
        let lease = self
            .store()
            .acquire_lease_waiting(&lane, self.replica(), self.lease_ttl(), 100, Duration::from_millis(100))
            .await?
            .ok_or(ConsoleError::Busy)?;
        let answer = self.turn(&lease, &lane, owner, &delivery_id, text).await;
        if let Err(e) = self.store().release_lease(&lease).await {
            tracing::warn!(error = %e, "console lease not released; it will expire");
        }
        let (reply, code, spent) = answer?;
        if let Ok(kind) = ReceiptKind::new("console.chat") {
            // What the turn spent, so the bill counts the console's lane too.
            let s = spent;
            let receipt = v1::Receipt::new(&kind, self.bus().service(), &delivery_id, clankie_bus::now_ms())
                .with_lane(&lane)
                .with_code(code)
                .with_tokens(s.input_tokens, s.output_tokens, s.cached_input_tokens, s.cache_write_input_tokens);
            if let Err(e) = self.bus().publish_receipt(&receipt).await {
                tracing::warn!(error = %e, "receipt not published");
            }
        }
        Ok(reply)
    }

    async fn turn(
        &self,
        lease: &clankie_store::Lease,
        lane: &LaneKey,
        owner: u64,
        delivery_id: &str,
        text: &str,
    ) -> Result<(Value, &'static str, clankie_agent::RunStats), ConsoleError> {
        let snapshot = self.selfhood().snapshot(lane).await?;
        let session = Session::open(self.store().clone(), lease.clone(), format!("rooms/{lane}")).await?;
        let said = clankie_self::blocks::Said { author_name: "owner", author_id: owner, text };
        let message = clankie_self::blocks::message(&said, &[("via", "the operator console")]);
        let system = clankie_self::assemble(&snapshot, lane, clankie_self::Surface::Console);
        let mut first = Vec::new();
        if let Some(context) = clankie_self::self_context_message(&snapshot, lane, &session) {
            first.push(context);
        }
        first.push(UserMessage::new("owner", delivery_id, message));
        let run = self.agent().start(session, system, first);
        let result = run.finish_keeping(self.store(), lease, self.lease_ttl()).await;
        let spent = result.as_ref().map(|r| r.stats.clone()).unwrap_or_default();
        let base = json!({ "lane": lane.to_string(), "delivery_id": delivery_id });
        let with = |mut v: Value, key: &str, value: Value| {
            v[key] = value;
            v
        };
        let (reply, code) = match result.map(|r| r.outcome) {
            Ok(Ok(RunReply::Words(answer))) => (with(base, "answer", json!(answer)), "answered"),
            Ok(Ok(RunReply::Silent)) => (with(base, "silent", json!(true)), "silent"),
            Ok(Ok(RunReply::Failed(code))) => (with(base, "failure", json!(code.code())), code.code()),
            _ => (with(base, "failure", json!("run_failed")), "run_failed"),
        };
        Ok((reply, code, spent))
    }
}
