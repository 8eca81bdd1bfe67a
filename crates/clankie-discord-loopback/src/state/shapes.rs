//! Discord's JSON shapes, as twilight-model reads them: users, messages, READY, voice states
//! and error bodies, rendered from the loopback's data.

use std::time::{Duration, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::state::config::{ChannelSpec, OverwriteSpec, RoleSpec, Site, shard_of};
use crate::state::messages::StoredMessage;
use crate::state::permission;

/// The flag that shows an answer to the invoker alone.
pub const EPHEMERAL: u64 = 1 << 6;

/// Discord's form, `2026-11-30T00:53:19.123000+00:00`.
pub(crate) fn timestamp(ms: i64) -> String {
    let utc = clankie_proto::time::rfc3339(UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64));
    format!("{}000+00:00", utc.trim_end_matches('Z'))
}

pub(crate) fn user_json(id: u64, name: &str, bot: bool) -> Value {
    json!({ "id": id.to_string(), "username": name, "discriminator": "0", "avatar": null, "bot": bot, "global_name": name, "public_flags": 0 })
}

pub(crate) fn message_json(state: &Site, m: &StoredMessage, referenced: Option<&StoredMessage>) -> Value {
    let c = &state.config;
    let mentions: Vec<Value> = if m.mentions_bot { vec![user_json(c.bot_user_id, &c.bot_name, true)] } else { vec![] };
    let attachments: Vec<Value> = m
        .attachments
        .iter()
        .map(|a| {
            let url = format!("http://{}/attachments/{}/{}", state.addr, a.id, a.filename);
            json!({ "id": a.id.to_string(), "filename": a.filename, "content_type": a.content_type, "size": a.size, "url": url, "proxy_url": url })
        })
        .collect();
    let mut v = json!({
        "id": m.id.to_string(),
        "channel_id": m.channel_id.to_string(),
        "author": user_json(m.author_id, &m.author_name, m.bot),
        "content": m.content,
        "timestamp": timestamp(m.at_ms),
        "edited_timestamp": if m.edited { Value::String(timestamp(if m.edited_at_ms > 0 { m.edited_at_ms } else { m.at_ms })) } else { Value::Null },
        "tts": false,
        "mention_everyone": false,
        "mentions": mentions,
        "mention_roles": [],
        "attachments": attachments,
        "embeds": [],
        "components": m.components,
        "pinned": false,
        "type": if m.reply_to.is_some() { 19 } else { 0 },
    });
    if let Some(guild) = m.guild_id {
        v["guild_id"] = json!(guild.to_string());
    }
    if m.ephemeral {
        v["flags"] = json!(EPHEMERAL);
    }
    if let Some(r) = m.reply_to {
        v["message_reference"] = json!({ "message_id": r.to_string(), "channel_id": m.channel_id.to_string() });
        if let Some(referenced) = referenced {
            v["referenced_message"] = message_json(state, referenced, None);
        }
    }
    v
}

/// READY: the bot, its session, and the guilds of `shard` it is in, each unavailable until its
/// GUILD_CREATE follows.
pub(crate) fn ready_json(state: &Site, session_id: &str, shard: u32) -> Value {
    let c = &state.config;
    json!({
        "v": 10,
        "user": {
            "id": c.bot_user_id.to_string(), "username": c.bot_name, "discriminator": "0", "avatar": null,
            "bot": true, "mfa_enabled": false, "accent_color": null, "banner": null, "verified": true, "flags": 0,
        },
        "guilds": c
            .guilds()
            .iter()
            .filter(|g| shard_of(Some(**g), c.shards) == shard && !c.absent_guilds.contains(g))
            .map(|g| json!({ "id": g.to_string(), "unavailable": true }))
            .collect::<Vec<_>>(),
        "session_id": session_id,
        "resume_gateway_url": format!("ws://{}/gateway", state.addr),
        "shard": [shard, c.shards],
        "application": { "id": c.bot_user_id.to_string(), "flags": 0 },
    })
}

/// The flag Discord sets on a channel it obfuscates for a bot that cannot view it.
pub const CHANNEL_OBFUSCATED: u64 = 1 << 17;

/// A permission overwrite: type 0 for a role, 1 for a member; bits as strings (API v8+).
pub(crate) fn overwrite_json(o: &OverwriteSpec) -> Value {
    json!({ "id": o.id.to_string(), "type": u8::from(o.member), "allow": o.allow.to_string(), "deny": o.deny.to_string() })
}

/// A guild channel (type 0 text, 2 voice) with its overwrites.
pub(crate) fn channel_json(spec: &ChannelSpec, guild: u64, position: usize, overwrites: &[OverwriteSpec]) -> Value {
    let mut v = json!({
        "id": spec.id.to_string(), "type": if spec.voice { 2 } else { 0 }, "guild_id": guild.to_string(), "name": spec.name,
        "position": position, "permission_overwrites": overwrites.iter().map(overwrite_json).collect::<Vec<_>>(),
        "parent_id": null, "nsfw": false, "flags": 0, "last_message_id": null, "rate_limit_per_user": 0,
    });
    if spec.voice {
        v["bitrate"] = json!(64_000);
        v["user_limit"] = json!(0);
        v["rtc_region"] = Value::Null;
    } else {
        v["topic"] = Value::Null;
    }
    v
}

/// A channel the bot cannot view, as the gateway sends it since channel obfuscation (2026-11-16):
/// id, type, position and parent kept, the name hidden, the obfuscated flag set, and one
/// overwrite denying @everyone VIEW_CHANNEL in place of the real ones.
pub(crate) fn hidden_channel_json(spec: &ChannelSpec, guild: u64, position: usize) -> Value {
    let everyone = OverwriteSpec { id: guild, member: false, allow: 0, deny: permission::VIEW_CHANNEL };
    json!({
        "id": spec.id.to_string(), "type": if spec.voice { 2 } else { 0 }, "guild_id": guild.to_string(),
        "name": "___hidden___", "position": position, "parent_id": null, "flags": CHANNEL_OBFUSCATED,
        "permission_overwrites": [overwrite_json(&everyone)],
    })
}

/// A role; the bot's own managed role carries `tags.bot_id`, as Discord tags an integration's role.
pub(crate) fn role_json(role: &RoleSpec, position: usize, managed_for: Option<u64>) -> Value {
    let mut v = json!({
        "id": role.id.to_string(), "name": role.name, "permissions": role.permissions.to_string(), "position": position,
        "color": 0, "colors": { "primary_color": 0, "secondary_color": null, "tertiary_color": null },
        "hoist": false, "icon": null, "unicode_emoji": null, "managed": managed_for.is_some(), "mentionable": false, "flags": 0,
    });
    if let Some(bot) = managed_for {
        v["tags"] = json!({ "bot_id": bot.to_string() });
    }
    v
}

/// A guild member: the user, their roles (@everyone never listed) and when they joined.
pub(crate) fn member_json(user: Value, roles: &[u64], joined_ms: i64) -> Value {
    json!({
        "user": user, "nick": null, "avatar": null, "banner": null,
        "roles": roles.iter().map(u64::to_string).collect::<Vec<_>>(),
        "joined_at": timestamp(joined_ms), "premium_since": null, "deaf": false, "mute": false, "flags": 0,
        "pending": false, "communication_disabled_until": null,
    })
}

/// A guild as `GET /guilds/{id}` answers it: every field twilight's `Guild` requires.
pub(crate) fn guild_json(id: u64, name: &str, owner: u64, roles: Vec<Value>) -> Value {
    json!({
        "id": id.to_string(), "name": name, "icon": null, "icon_hash": null, "splash": null, "discovery_splash": null,
        "owner_id": owner.to_string(), "afk_channel_id": null, "afk_timeout": 300, "widget_enabled": false,
        "widget_channel_id": null, "verification_level": 0, "default_message_notifications": 0, "explicit_content_filter": 0,
        "roles": roles, "emojis": [], "stickers": [], "features": [], "mfa_level": 0, "application_id": null,
        "system_channel_id": null, "system_channel_flags": 0, "rules_channel_id": null, "max_presences": null,
        "max_members": 500_000, "vanity_url_code": null, "description": null, "banner": null, "premium_tier": 0,
        "premium_subscription_count": 0, "preferred_locale": "en-US", "public_updates_channel_id": null,
        "max_video_channel_users": 25, "max_stage_video_channel_users": 50, "nsfw_level": 0,
        "premium_progress_bar_enabled": false, "safety_alerts_channel_id": null,
    })
}

pub(crate) fn error_json(code: u64, message: &str) -> Value {
    json!({ "code": code, "message": message })
}

/// A member's VOICE_STATE_UPDATE, as the gateway dispatches it.
pub(crate) fn voice_state_json(guild: u64, channel: Option<u64>, user: u64, name: &str, session_id: &str) -> serde_json::Value {
    serde_json::json!({
        "member": {
            "user": user_json(user, name, false),
            "nick": null, "roles": [], "joined_at": null, "deaf": false, "mute": false, "flags": 0,
            "communication_disabled_until": null,
        },
        "guild_id": guild.to_string(),
        "channel_id": channel.map(|c| c.to_string()),
        "user_id": user.to_string(),
        "session_id": session_id,
        "deaf": false, "mute": false, "self_deaf": false, "self_mute": false,
        "self_stream": false, "self_video": false, "suppress": false,
        "request_to_speak_timestamp": null,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::config::LoopbackConfig;

    async fn state() -> Site {
        Site { config: LoopbackConfig::default(), addr: "127.0.0.1:1".parse().unwrap() }
    }

    fn stored(reply_to: Option<u64>) -> StoredMessage {
        StoredMessage {
            id: 5,
            channel_id: 200,
            guild_id: Some(100),
            author_id: 7,
            author_name: "ada".into(),
            bot: false,
            content: "hi @clankie".into(),
            mentions_bot: true,
            reply_to,
            attachments: vec![crate::state::AttachmentMeta { id: 9, filename: "a.png".into(), content_type: "image/png".into(), size: 3 }],
            at_ms: 1_700_000_000_000,
            edited: false,
            edited_at_ms: 0,
            deleted: false,
            reactions: vec![],
            spoken: false,
            components: vec![],
            ephemeral: false,
        }
    }

    #[tokio::test]
    async fn twilight_reads_our_messages() {
        let s = state().await;
        let parent = stored(None);
        let json = message_json(&s, &stored(Some(4)), Some(&parent));
        let m: twilight_model::channel::Message = serde_json::from_value(json).unwrap();
        assert_eq!(m.mentions[0].id.get(), 4242);
        assert_eq!(m.attachments[0].content_type.as_deref(), Some("image/png"));
        assert_eq!(m.referenced_message.unwrap().author.id.get(), 7);
        assert_eq!(m.guild_id.map(|g| g.get()), Some(100));
    }

    #[tokio::test]
    async fn twilight_reads_our_ready() {
        let s = state().await;
        let r: twilight_model::gateway::payload::incoming::Ready = serde_json::from_value(ready_json(&s, "sess", 0)).unwrap();
        assert_eq!(r.resume_gateway_url, "ws://127.0.0.1:1/gateway");
        assert_eq!(r.user.id.get(), 4242);
    }
}
