//! Posting: each outbound message delivered (a reply or text update in pieces, a tool card, a
//! direct message) and settled by what Discord answered, with a receipt either way.

use std::time::Duration;

use clankie_proto::v1;
use serde_json::json;
use twilight_model::id::Id;

use crate::body::held::Held;
use crate::body::pieces::{MAX_MESSAGE, bound_pieces, nonce, split};
use crate::body::progress::Posted;
use crate::body::refusal::{Denied, PostError, classify, post_needs};
use crate::commands::components;
use crate::state::Gateway;

/// A file name for Discord: media's cleaned name, else the one the captain gave.
fn clean_name(stored: &str, given: &str) -> String {
    let name = if stored.is_empty() { given } else { stored };
    name.rsplit(['/', '\\']).next().filter(|n| !n.is_empty()).unwrap_or("file").to_owned()
}

impl Gateway {
    /// Posts one held message as its kind asks and settles it: acked, naked to try again, or
    /// termed with a receipt saying why Discord refused it.
    pub(crate) async fn deliver(&self, mut held: Held) {
        let out = &held.delivery().event;
        let result = match v1::OutboundKind::try_from(out.kind) {
            Ok(v1::OutboundKind::ToolCard) => self.tool_card(out).await,
            Ok(v1::OutboundKind::Reply | v1::OutboundKind::TextUpdate) => self.post(out).await,
            Ok(v1::OutboundKind::Direct) => self.direct(out).await,
            _ => Err(PostError::Refused(0)),
        };
        let (delivery_id, channel, key, needs) = (out.delivery_id.clone(), out.channel_id, out.idempotency_key.clone(), post_needs(out));
        // The tenure ended under it (the poster had not been dropped yet): it goes back with the
        // rest of the tenure's, in stream order, not a second later behind newer ones.
        if matches!(result, Err(PostError::Retry)) && !self.speaks_rest() {
            return;
        }
        // Settled from here on: a drop now must not hand it back as well.
        let Some(d) = held.settle() else { return };
        match result {
            Ok(()) => {
                let _ = d.ack().await;
            }
            Err(PostError::Retry) => {
                let _ = d.nak_after(Duration::from_secs(1)).await;
            }
            Err(PostError::Refused(status)) => {
                tracing::warn!(status, "Discord refused an outbound message; dropped");
                self.remember_refused(&key).await;
                self.receipt("gateway.post_refused", &delivery_id, |r| {
                    r.with_id("channel", channel).with_count("status", i64::from(status)).with_code("refused")
                })
                .await;
                let _ = d.term().await;
            }
            Err(PostError::Denied(denied)) => {
                let needs = if denied == Denied::MissingPermissions { self.needs_in(channel, needs).await } else { needs };
                let codes = denied.codes(&needs);
                tracing::error!(
                    channel,
                    ?codes,
                    "Discord refused a post for a permission the bot lacks in the channel; dropped (give the bot's role the permission there, or run `clankie doctor`)"
                );
                self.remember_refused(&key).await;
                self.receipt("gateway.post_refused", &delivery_id, |r| {
                    codes.iter().fold(r.with_id("channel", channel).with_count("status", 403), |r, code| r.with_code(code))
                })
                .await;
                let _ = d.term().await;
            }
        }
    }

    /// `needs` as they are in `channel`: in a thread or forum post Send Messages in Threads
    /// instead of Send Messages, which has no effect there.
    async fn needs_in(&self, channel: u64, needs: Vec<&'static str>) -> Vec<&'static str> {
        if !needs.contains(&"needs_send_messages") || !self.channel_facts(channel).await.is_some_and(|f| f.is_thread()) {
            return needs;
        }
        needs.into_iter().map(|n| if n == "needs_send_messages" { "needs_send_messages_in_threads" } else { n }).collect()
    }

    async fn post(&self, out: &v1::OutboundMessage) -> Result<(), PostError> {
        let channel = Id::new_checked(out.channel_id).ok_or(PostError::Refused(0))?;
        let mut text = out.text.clone();
        let mut missing = 0;
        let mut files = Vec::new();
        for artifact in &out.artifacts {
            match self.resolve_artifact(&artifact.id).await {
                Some(reply) => files.push(twilight_model::http::attachment::Attachment::from_bytes(
                    clean_name(&reply.filename, &artifact.filename),
                    reply.data,
                    files.len() as u64,
                )),
                None => {
                    // An artifact that cannot be resolved costs the picture, never the words.
                    missing += 1;
                    text.push_str(&format!("\n(I couldn't attach {}: it wasn't available when I posted.)", artifact.filename));
                }
            }
        }
        let (pieces, cut) = bound_pieces(split(&text, MAX_MESSAGE), self.config().reply_max_pieces);
        // Where an earlier holder of this reply got to: it resumes at the next piece. The first
        // piece's Discord id comes along: `clankie audit` counts a reply posted twice by it.
        let done = self.posted_so_far(&out.idempotency_key).await?;
        let (progress, key) = (self.posted().await?, clankie_bus::kv_key(&out.idempotency_key));
        let resumed = done.pieces.min(pieces.len());
        let mut first_message = done.first_message;
        for (i, piece) in pieces.iter().enumerate().skip(resumed) {
            if !self.speaks_rest() {
                return Err(PostError::Retry);
            }
            let mut body = json!({
                "content": piece,
                "nonce": nonce(&out.idempotency_key, i),
                "enforce_nonce": true,
                "allowed_mentions": { "parse": [], "replied_user": true },
            });
            if i == 0
                && let Some(reply_to) = out.reply_to_message_id
            {
                body["message_reference"] = json!({ "message_id": reply_to.to_string(), "fail_if_not_exists": false });
            }
            let last = i + 1 == pieces.len();
            if last && !files.is_empty() {
                body["attachments"] = files.iter().map(|f| json!({ "id": f.id, "filename": f.filename })).collect();
            }
            let bytes = serde_json::to_vec(&body).map_err(|_| PostError::Refused(0))?;
            let mut create = self.budget().create_turn(channel.get()).await;
            let slot = self.budget().pace().await;
            let http = self.http();
            let request = http.create_message(channel).payload_json(&bytes);
            let request = if last && !files.is_empty() { request.attachments(&files) } else { request };
            clankie_settings::fault::point("gateway.before_post");
            if let Some(held) = clankie_settings::fault::hold("gateway.before_post") {
                tokio::time::sleep(held).await;
            }
            self.fence()?;
            create.sending();
            let posted = request.await;
            drop(slot);
            drop(create);
            let posted = posted.map_err(|e| classify(&e))?;
            clankie_settings::fault::point("gateway.after_accept");
            if i == 0 {
                first_message = posted.model().await.map(|m| m.id.get()).unwrap_or(0);
            }
            let now = Posted { pieces: i + 1, first_message, refused: false };
            if let Ok(value) = serde_json::to_vec(&now)
                && let Err(e) = progress.put(key.as_str(), value.into()).await
            {
                // The nonce still answers a repeat of this piece for a few minutes.
                tracing::warn!(error = %e, "a posted piece was not remembered");
            }
            if let Some(held) = clankie_settings::fault::hold("gateway.after_piece") {
                tokio::time::sleep(held).await;
            }
        }
        if out.kind == v1::OutboundKind::Reply as i32 {
            self.typing().stop(out.channel_id).await;
        }
        self.receipt("gateway.posted", &out.delivery_id, |r| {
            r.with_id("channel", out.channel_id)
                .with_id("message", first_message)
                .with_id("key", out.idempotency_key.as_str())
                .with_code(if out.kind == v1::OutboundKind::Reply as i32 { "reply" } else { "text_update" })
                .with_count("pieces", pieces.len() as i64)
                .with_count("pieces_cut", cut as i64)
                .with_count("pieces_resumed", resumed as i64)
                .with_count("chars", text.chars().count() as i64)
                .with_count("artifacts_missing", missing)
                .with_count("artifacts_attached", files.len() as i64)
        })
        .await;
        Ok(())
    }

    /// An artifact's bytes through media, or `None` when it cannot be had in time.
    async fn resolve_artifact(&self, id: &str) -> Option<v1::MediaResolveReply> {
        let request = v1::MediaResolveRequest { artifact_id: id.to_owned(), want_bytes: true };
        match self
            .bus()
            .request::<_, v1::MediaResolveReply>(&clankie_proto::Subject::RpcMediaResolve, &request, Duration::from_secs(10))
            .await
        {
            Ok(mut reply) if reply.error.is_empty() => match self.bus().bytes_of(std::mem::take(&mut reply.data), &reply.blob).await {
                Ok(data) => Some(v1::MediaResolveReply { data, ..reply }),
                Err(e) => {
                    tracing::warn!(error = %e, "a big artifact's blob could not be taken");
                    None
                }
            },
            Ok(reply) => {
                tracing::warn!(code = %reply.error, "artifact unresolved");
                None
            }
            Err(_) => {
                tracing::warn!("media unreachable; posting without the artifact");
                None
            }
        }
    }

    /// A direct message to one person, with its buttons: the DM channel is opened first (Discord
    /// answers with the same channel every time), and the enforced nonce posts it once.
    async fn direct(&self, out: &v1::OutboundMessage) -> Result<(), PostError> {
        let user = Id::new_checked(out.direct_user_id).ok_or(PostError::Refused(0))?;
        if !self.speaks_rest() {
            return Err(PostError::Retry);
        }
        let slot = self.budget().pace().await;
        self.fence()?;
        let opened = self.http().create_private_channel(user).await.map_err(|e| classify(&e))?;
        drop(slot);
        let channel = opened.model().await.map_err(|_| PostError::Retry)?.id;
        let body = json!({
            "content": out.text,
            "components": components(&out.buttons),
            "nonce": nonce(&out.idempotency_key, 0),
            "enforce_nonce": true,
        });
        let bytes = serde_json::to_vec(&body).map_err(|_| PostError::Refused(0))?;
        let slot = self.budget().pace().await;
        self.fence()?;
        self.http().create_message(channel).payload_json(&bytes).await.map_err(|e| classify(&e))?;
        drop(slot);
        self.receipt("gateway.direct", &out.delivery_id, |r| {
            r.with_id("user", out.direct_user_id).with_id("channel", channel.get()).with_count("buttons", out.buttons.len() as i64)
        })
        .await;
        Ok(())
    }
}
