//! MESSAGE_CREATE to Ingress, and where each message goes.

use clankie_proto::{Subject, v1};
use twilight_model::channel::Message;

/// Where a message is published.
#[derive(Debug, Clone, PartialEq)]
pub enum Route {
    /// A text-lane turn.
    Text(Subject, v1::Ingress),
    /// Typed into the chat of the guild's live voice channel: the voice room owns it.
    Room(Subject, v1::RoomInput),
}

/// Normalises a Discord message into an Ingress.
pub fn ingress(message: &Message, bot_id: u64, received_at_ms: i64) -> v1::Ingress {
    v1::Ingress {
        delivery_id: message.id.get().to_string(),
        guild_id: message.guild_id.map(|g| g.get()),
        channel_id: message.channel_id.get(),
        author_id: message.author.id.get(),
        author_name: message.author.global_name.clone().unwrap_or_else(|| message.author.name.clone()),
        author_is_bot: message.author.bot,
        content: message.content.clone(),
        mentions_him: message.mentions.iter().any(|m| m.id.get() == bot_id),
        reply_to_message_id: message.reference.as_ref().and_then(|r| r.message_id).map(|m| m.get()),
        reply_to_him: message.referenced_message.as_ref().is_some_and(|r| r.author.id.get() == bot_id),
        attachments: message
            .attachments
            .iter()
            .map(|a| v1::Attachment {
                id: a.id.get(),
                filename: a.filename.clone(),
                content_type: a.content_type.clone().unwrap_or_default(),
                size_bytes: a.size,
                url: a.url.clone(),
            })
            .collect(),
        received_at_ms,
    }
}

/// Whether a message carries a picture, which only the text lane can perceive.
pub fn carries_image(ingress: &v1::Ingress) -> bool {
    ingress.attachments.iter().any(|a| a.content_type.starts_with("image/"))
}

/// Routes an ingress: to the voice room when it is typed into the live voice
/// channel's chat and carries no image, otherwise to the text lane.
pub fn route(ingress: v1::Ingress, live_voice_channel: Option<u64>) -> Route {
    match (ingress.guild_id, live_voice_channel) {
        (Some(guild), Some(live)) if live == ingress.channel_id && !carries_image(&ingress) => {
            let input = v1::RoomInput {
                delivery_id: ingress.delivery_id.clone(),
                guild_id: guild,
                channel_id: ingress.channel_id,
                author_id: ingress.author_id,
                author_name: ingress.author_name.clone(),
                source: v1::RoomInputSource::Text as i32,
                text: ingress.content.clone(),
                mentions_him: ingress.mentions_him,
                received_at_ms: ingress.received_at_ms,
            };
            Route::Room(Subject::IngressRoom { guild, channel: ingress.channel_id }, input)
        }
        _ => Route::Text(Subject::ingress_text(ingress.guild_id, ingress.channel_id), ingress),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(guild: Option<u64>, channel: u64, image: bool) -> v1::Ingress {
        v1::Ingress {
            delivery_id: "1".into(),
            guild_id: guild,
            channel_id: channel,
            attachments: if image {
                vec![v1::Attachment { content_type: "image/png".into(), ..Default::default() }]
            } else {
                vec![v1::Attachment { content_type: "text/plain".into(), ..Default::default() }]
            },
            ..Default::default()
        }
    }

    #[test]
    fn text_in_the_live_voice_chat_goes_to_the_room() {
        assert!(matches!(route(msg(Some(1), 3, false), Some(3)), Route::Room(..)));
        assert!(matches!(route(msg(Some(1), 3, true), Some(3)), Route::Text(..)), "an image stays a text-lane turn");
        assert!(matches!(route(msg(Some(1), 3, false), None), Route::Text(..)), "no live session: the text lane owns it");
        assert!(matches!(route(msg(Some(1), 2, false), Some(3)), Route::Text(..)));
        assert!(matches!(route(msg(None, 3, false), Some(3)), Route::Text(..)), "a DM is never a voice room");
    }
}
