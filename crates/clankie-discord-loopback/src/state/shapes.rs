//! Discord's JSON shapes, as twilight-model reads them: users, messages, READY, voice states
//! and error bodies, rendered from the loopback's data.

use std::time::{Duration, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::state::config::{ChannelSpec, OverwriteSpec, RoleSpec, Site, shard_of};
use crate::state::messages::StoredMessage;
use crate::state::permission;
use crate::state::threads::{PRIVATE_THREAD, Thread};

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

/// What a reply carries of the message it answers, as Discord sends it.
#[derive(Clone, Copy)]
pub(crate) enum Referenced<'a> {
    /// No `referenced_message` key: Discord did not fetch it (the reader must).
    Unfetched,
    /// `referenced_message: null`: the replied-to message was deleted.
    Gone,
    /// The replied-to message.
    Found(&'a StoredMessage),
}

/// A partial guild member as a message carries it for its author and each user it mentions.
pub(crate) fn partial_member_json(nick: Option<&str>, roles: &[u64], joined_ms: i64) -> Value {
    json!({
        "nick": nick, "avatar": null, "banner": null,
        "roles": roles.iter().map(u64::to_string).collect::<Vec<_>>(),
        "joined_at": timestamp(joined_ms), "premium_since": null, "deaf": false, "mute": false, "flags": 0,
        "pending": false, "communication_disabled_until": null,
    })
}

/// A sticker's id: stable per name, as a snowflake-sized number.
pub(crate) fn sticker_id(name: &str) -> u64 {
    1_000_000_000_000 + name.bytes().fold(7u64, |h, b| h.wrapping_mul(131).wrapping_add(u64::from(b))) % 1_000_000_000_000
}

fn attachments_json(state: &Site, m: &StoredMessage) -> Vec<Value> {
    m.attachments
        .iter()
        .map(|a| {
            let url = format!("http://{}/attachments/{}/{}", state.addr, a.id, a.filename);
            json!({ "id": a.id.to_string(), "filename": a.filename, "content_type": a.content_type, "size": a.size, "url": url, "proxy_url": url })
        })
        .collect()
}

fn embeds_json(m: &StoredMessage) -> Vec<Value> {
    m.embeds
        .iter()
        .map(|e| {
            let mut v = json!({ "type": "rich" });
            for (key, value) in [("title", &e.title), ("description", &e.description), ("url", &e.url)] {
                if let Some(value) = value {
                    v[key] = json!(value);
                }
            }
            v
        })
        .collect()
}

fn stickers_json(m: &StoredMessage) -> Vec<Value> {
    m.stickers.iter().map(|s| json!({ "id": sticker_id(s).to_string(), "name": s, "format_type": 1 })).collect()
}

/// The users a message mentions, the bot first when it does; each with their partial member
/// where `member` gives one (gateway events in a guild).
fn mentions_json(state: &Site, m: &StoredMessage, member: Option<&dyn Fn(u64) -> Option<Value>>) -> Vec<Value> {
    let c = &state.config;
    let bot = m.mentions_bot.then_some((c.bot_user_id, c.bot_name.as_str(), true));
    bot.into_iter()
        .chain(m.mentions.iter().map(|u| (u.id, u.name.as_str(), false)))
        .map(|(id, name, bot)| {
            let mut v = user_json(id, name, bot);
            if let Some(member) = member.and_then(|f| f(id)) {
                v["member"] = member;
            }
            v
        })
        .collect()
}

fn edited_json(m: &StoredMessage) -> Value {
    if m.edited { Value::String(timestamp(if m.edited_at_ms > 0 { m.edited_at_ms } else { m.at_ms })) } else { Value::Null }
}

/// A forwarded message as its snapshot carries it: what it said, not who said it.
fn snapshot_json(state: &Site, m: &StoredMessage) -> Value {
    let mut v = json!({
        "type": if m.reply_to.is_some() { 19 } else { 0 },
        "content": m.content,
        "embeds": embeds_json(m),
        "attachments": attachments_json(state, m),
        "timestamp": timestamp(m.at_ms),
        "edited_timestamp": edited_json(m),
        "flags": 0,
        "mentions": mentions_json(state, m, None),
        "mention_roles": m.mention_roles.iter().map(u64::to_string).collect::<Vec<_>>(),
        "components": [],
    });
    if !m.stickers.is_empty() {
        v["sticker_items"] = json!(stickers_json(m));
    }
    v
}

/// Discord's flag on a message that forwards another (`HAS_SNAPSHOT`).
pub const HAS_SNAPSHOT: u64 = 1 << 14;

/// A message as Discord shapes it. `member` gives a user's partial member in the message's
/// guild: the gateway's MESSAGE_CREATE and MESSAGE_UPDATE carry one for the author and each
/// mentioned user, and the guild's id; REST answers neither (pass `None`).
pub(crate) fn message_json(
    state: &Site,
    m: &StoredMessage,
    referenced: Referenced<'_>,
    member: Option<&dyn Fn(u64) -> Option<Value>>,
) -> Value {
    let mut flags = if m.ephemeral { EPHEMERAL } else { 0 };
    if m.forwarded.is_some() {
        flags |= HAS_SNAPSHOT;
    }
    let mut v = json!({
        "id": m.id.to_string(),
        "channel_id": m.channel_id.to_string(),
        "author": user_json(m.author_id, &m.author_name, m.bot),
        "content": m.content,
        "timestamp": timestamp(m.at_ms),
        "edited_timestamp": edited_json(m),
        "tts": false,
        "mention_everyone": false,
        "mentions": mentions_json(state, m, member),
        "mention_roles": m.mention_roles.iter().map(u64::to_string).collect::<Vec<_>>(),
        "attachments": attachments_json(state, m),
        "embeds": embeds_json(m),
        "components": m.components,
        "pinned": false,
        "flags": flags,
        "type": if m.reply_to.is_some() { 19 } else { 0 },
    });
    // `guild_id` and `member` are the gateway event's extra fields: REST's message object has neither.
    if let (Some(guild), Some(member)) = (m.guild_id, member) {
        v["guild_id"] = json!(guild.to_string());
        if let Some(member) = member(m.author_id) {
            v["member"] = member;
        }
    }
    if !m.stickers.is_empty() {
        v["sticker_items"] = json!(stickers_json(m));
    }
    if let Some(poll) = &m.poll {
        v["poll"] = json!({
            "question": { "text": poll.question },
            "answers": poll.answers.iter().enumerate().map(|(i, a)| json!({ "answer_id": i + 1, "poll_media": { "text": a } })).collect::<Vec<_>>(),
            "expiry": timestamp(m.at_ms + POLL_DURATION_MS),
            "allow_multiselect": false,
            "layout_type": 1,
            "results": { "is_finalized": false, "answer_counts": [] },
        });
    }
    if let Some(r) = m.reply_to {
        let mut reference = json!({ "type": 0, "message_id": r.to_string(), "channel_id": m.channel_id.to_string() });
        if let Some(guild) = m.guild_id {
            reference["guild_id"] = json!(guild.to_string());
        }
        v["message_reference"] = reference;
        match referenced {
            Referenced::Unfetched => {}
            Referenced::Gone => v["referenced_message"] = Value::Null,
            Referenced::Found(referenced) => v["referenced_message"] = message_json(state, referenced, Referenced::Unfetched, None),
        }
    }
    if let Some(original) = &m.forwarded {
        let mut reference = json!({ "type": 1, "message_id": original.id.to_string(), "channel_id": original.channel_id.to_string() });
        if let Some(guild) = original.guild_id {
            reference["guild_id"] = json!(guild.to_string());
        }
        v["message_reference"] = reference;
        v["message_snapshots"] = json!([{ "message": snapshot_json(state, original) }]);
    }
    v
}

/// How long a poll runs: Discord's default, a day.
const POLL_DURATION_MS: i64 = 24 * 60 * 60 * 1000;

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

/// A guild channel (text 0, voice 2, announcement 5, forum 15) with its overwrites; a forum
/// with its `available_tags`.
pub(crate) fn channel_json(spec: &ChannelSpec, guild: u64, position: usize, overwrites: &[OverwriteSpec]) -> Value {
    let mut v = json!({
        "id": spec.id.to_string(), "type": spec.discord_type(), "guild_id": guild.to_string(), "name": spec.name,
        "position": position, "permission_overwrites": overwrites.iter().map(overwrite_json).collect::<Vec<_>>(),
        "parent_id": null, "nsfw": false, "flags": 0, "last_message_id": null, "rate_limit_per_user": 0,
    });
    if spec.voice {
        v["bitrate"] = json!(64_000);
        v["user_limit"] = json!(0);
        v["rtc_region"] = Value::Null;
        return v;
    }
    v["topic"] = Value::Null;
    v["default_auto_archive_duration"] = json!(THREAD_ARCHIVE_MINUTES);
    if spec.is_forum() {
        let tags: Vec<Value> = spec
            .tags
            .iter()
            .filter_map(|name| {
                let id = spec.tag_id(name)?;
                Some(json!({ "id": id.to_string(), "name": name, "moderated": false, "emoji_id": null, "emoji_name": null }))
            })
            .collect();
        v["available_tags"] = json!(tags);
        v["default_reaction_emoji"] = Value::Null;
        v["default_sort_order"] = Value::Null;
        v["default_forum_layout"] = json!(0);
        v["default_thread_rate_limit_per_user"] = json!(0);
    }
    v
}

/// How long a thread stays in the channel list after its last activity, in minutes (a day).
pub(crate) const THREAD_ARCHIVE_MINUTES: u32 = 1440;

/// The bot's (or anyone's) thread member object.
pub(crate) fn thread_member_json(thread: u64, user: u64, joined_ms: i64) -> Value {
    json!({ "id": thread.to_string(), "user_id": user.to_string(), "join_timestamp": timestamp(joined_ms), "flags": 0 })
}

/// A thread as Discord shapes it: a channel with its parent, owner and `thread_metadata`, its
/// counts (member_count stops at 50, as Discord's does), a forum post's `applied_tags`, and the
/// bot's thread member when he is one.
pub(crate) fn thread_json(t: &Thread, bot: u64) -> Value {
    let mut metadata = json!({
        "archived": t.archived, "auto_archive_duration": THREAD_ARCHIVE_MINUTES, "archive_timestamp": timestamp(t.archive_ms),
        "locked": t.locked, "create_timestamp": timestamp(t.created_ms),
    });
    if t.kind == PRIVATE_THREAD {
        metadata["invitable"] = json!(true);
    }
    let mut v = json!({
        "id": t.id.to_string(), "type": t.kind, "guild_id": t.guild.to_string(), "parent_id": t.parent.to_string(),
        "owner_id": t.owner.to_string(), "name": t.name, "last_message_id": t.last_message_id.map(|m| m.to_string()),
        "rate_limit_per_user": 0, "flags": 0, "member_count": t.members.len().min(50), "message_count": t.message_count,
        "total_message_sent": t.message_count, "thread_metadata": metadata,
    });
    if let Some(tags) = &t.applied_tags {
        v["applied_tags"] = json!(tags.iter().map(u64::to_string).collect::<Vec<_>>());
    }
    if let Some(joined) = t.joined(bot) {
        v["member"] = thread_member_json(t.id, bot, joined);
    }
    v
}

/// A channel the bot cannot view, as the gateway sends it since channel obfuscation (2026-11-16):
/// id, type, position and parent kept, the name hidden, the obfuscated flag set, and one
/// overwrite denying @everyone VIEW_CHANNEL in place of the real ones.
pub(crate) fn hidden_channel_json(spec: &ChannelSpec, guild: u64, position: usize) -> Value {
    let everyone = OverwriteSpec { id: guild, member: false, allow: 0, deny: permission::VIEW_CHANNEL };
    json!({
        "id": spec.id.to_string(), "type": spec.discord_type(), "guild_id": guild.to_string(),
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
        let attachments = vec![crate::state::AttachmentMeta { id: 9, filename: "a.png".into(), content_type: "image/png".into(), size: 3 }];
        StoredMessage {
            author_id: 7,
            author_name: "ada".into(),
            mentions_bot: true,
            ..StoredMessage::new(5, 200, Some(100), "hi @clankie".into(), reply_to, attachments, 1_700_000_000_000)
        }
    }

    #[tokio::test]
    async fn twilight_reads_our_messages() {
        let s = state().await;
        let parent = stored(None);
        let json = message_json(&s, &stored(Some(4)), Referenced::Found(&parent), None);
        let m: twilight_model::channel::Message = serde_json::from_value(json).unwrap();
        assert_eq!(m.mentions[0].id.get(), 4242);
        assert_eq!(m.attachments[0].content_type.as_deref(), Some("image/png"));
        assert_eq!(m.referenced_message.unwrap().author.id.get(), 7);
        assert_eq!(m.guild_id, None, "REST's message object carries no guild_id: only a gateway event adds it");
    }

    #[tokio::test]
    async fn twilight_reads_our_ready() {
        let s = state().await;
        let r: twilight_model::gateway::payload::incoming::Ready = serde_json::from_value(ready_json(&s, "sess", 0)).unwrap();
        assert_eq!(r.resume_gateway_url, "ws://127.0.0.1:1/gateway");
        assert_eq!(r.user.id.get(), 4242);
    }
}
