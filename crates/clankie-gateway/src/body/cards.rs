//! The tool card: one message per turn saying which tools are at work, posted, edited and
//! removed through a shared bucket, so whichever replica gets the next step finds the card.

use std::time::Duration;

use clankie_proto::v1;
use serde_json::json;
use twilight_model::id::Id;
use twilight_model::id::marker::MessageMarker;

use crate::body::pieces::nonce;
use crate::body::refusal::{PostError, classify};
use crate::state::Gateway;

/// The bucket that maps each turn's tool card to its Discord message.
const CARDS_BUCKET: &str = "clankie-cards";

/// A tool card's entry once it is removed: a tombstone for as long as the bucket keeps entries
/// (an hour), so a post redelivered after its removal never shows a card again.
const CARD_REMOVED: &[u8] = b"removed";

fn card_text(tools: &[String]) -> String {
    format!("🔧 working: {}", if tools.is_empty() { "tools".to_owned() } else { tools.join(", ") })
}

impl Gateway {
    /// Posts, edits or removes a turn's tool card. The card's Discord message id lives in a
    /// shared bucket, so whichever gateway replica (or a restarted one) gets the edit or the
    /// removal finds the card another posted.
    pub(crate) async fn tool_card(&self, out: &v1::OutboundMessage) -> Result<(), PostError> {
        let channel = Id::new_checked(out.channel_id).ok_or(PostError::Refused(0))?;
        let turn = out.idempotency_key.rsplit_once(':').map_or(out.idempotency_key.as_str(), |(turn, _)| turn);
        let turn = turn.strip_suffix(":edit").unwrap_or(turn);
        let key = clankie_bus::kv_key(turn);
        let cards = self.cards().await?;
        let existing = match cards.get(key.as_str()).await {
            Ok(Some(v)) if v.as_ref() == CARD_REMOVED => {
                // Removed already (its removal came first): a late post or edit has nothing to do.
                return Ok(());
            }
            Ok(v) => v.and_then(|v| std::str::from_utf8(&v).ok()?.parse::<u64>().ok()).and_then(Id::<MessageMarker>::new_checked),
            Err(e) => {
                tracing::warn!(error = %e, "the tool card bucket is unreadable; trying again");
                return Err(PostError::Retry);
            }
        };
        if !self.speaks_rest() {
            return Err(PostError::Retry);
        }
        let mut create = match (v1::ToolCardOp::try_from(out.tool_card_op), existing) {
            (Ok(v1::ToolCardOp::Post), None) => Some(self.budget().create_turn(channel.get()).await),
            _ => None,
        };
        let slot = self.budget().pace().await;
        self.fence()?;
        if let Some(create) = &mut create {
            create.sending();
        }
        match (v1::ToolCardOp::try_from(out.tool_card_op), existing) {
            (Ok(v1::ToolCardOp::Post), None) => {
                let body = json!({ "content": card_text(&out.tool_names), "nonce": nonce(&out.idempotency_key, 0), "enforce_nonce": true });
                let bytes = serde_json::to_vec(&body).map_err(|_| PostError::Refused(0))?;
                let posted = self.http().create_message(channel).payload_json(&bytes).await;
                drop(slot);
                drop(create);
                let posted = posted.map_err(|e| classify(&e))?;
                let message = posted.model().await.map_err(|_| PostError::Retry)?;
                if let Err(e) = cards.put(key.as_str(), message.id.get().to_string().into()).await {
                    // Posted but not remembered: the nonce makes the retry return this same message.
                    tracing::warn!(error = %e, "a tool card was posted but not remembered; trying again");
                    return Err(PostError::Retry);
                }
            }
            (Ok(v1::ToolCardOp::Post | v1::ToolCardOp::Edit), Some(id)) => {
                let text = card_text(&out.tool_names);
                let edited = self.http().update_message(channel, id).content(Some(&text)).await;
                drop(slot);
                edited.map_err(|e| classify(&e))?;
            }
            (Ok(v1::ToolCardOp::Remove), Some(id)) => {
                let deleted = self.http().delete_message(channel, id).await;
                drop(slot);
                match deleted {
                    Ok(_) => {}
                    // Already gone (a removal delivered twice): nothing left to do.
                    Err(e) if matches!(classify(&e), PostError::Refused(404)) => {}
                    Err(e) => return Err(classify(&e)),
                }
                if cards.put(key.as_str(), CARD_REMOVED.into()).await.is_err() {
                    return Err(PostError::Retry);
                }
            }
            // A removal before its post (a hand-over put the post behind it): remembered, so
            // the post, when it comes, is dropped instead of leaving a card nobody removes.
            (Ok(v1::ToolCardOp::Remove), None) => {
                if cards.put(key.as_str(), CARD_REMOVED.into()).await.is_err() {
                    return Err(PostError::Retry);
                }
            }
            // An edit of a card nobody posted: nothing to do.
            _ => {}
        }
        Ok(())
    }

    async fn cards(&self) -> Result<clankie_bus::KeyValue, PostError> {
        let opened = self.cards_bucket().get_or_try_init(|| self.bus().key_value(CARDS_BUCKET, Duration::from_secs(3600))).await;
        opened.cloned().map_err(|e| {
            tracing::warn!(error = %e, "the tool card bucket is unavailable");
            PostError::Retry
        })
    }
}
