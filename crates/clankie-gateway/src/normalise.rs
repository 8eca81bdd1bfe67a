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

/// Longest content passed on: Discord's own limit for the longest messages (Nitro).
pub const MAX_CONTENT_CHARS: usize = 4_000;
/// Longest display name passed on; Discord's are at most 32.
pub const MAX_NAME_CHARS: usize = 64;
/// Most attachments passed on; Discord allows 10 per message.
pub const MAX_ATTACHMENTS: usize = 10;
/// Longest attachment file name passed on.
const MAX_FILENAME_CHARS: usize = 255;

fn bounded(text: &str, max: usize) -> String {
    text.chars().take(max).collect()
}

/// A name people chose (a channel's, a role's, a thread's, a tag's), bounded.
pub fn display_bounded(name: &str) -> String {
    bounded(name, MAX_NAME_CHARS * 2)
}

/// Arrival stamps in milliseconds that never repeat nor go back within a gateway: an event
/// handled after another is stamped later even in the same millisecond. A lane reads "typing
/// after his last message" from these stamps, and a tie would read as "typing before it".
#[derive(Debug, Default)]
pub struct Arrivals(std::sync::atomic::AtomicI64);

impl Arrivals {
    /// The stamp of an event handled now: the wall clock, or one past the last stamp if that
    /// is not behind it.
    pub fn stamp(&self) -> i64 {
        let now = clankie_bus::now_ms();
        let previous = self.0.fetch_max(now, std::sync::atomic::Ordering::SeqCst);
        if previous < now {
            return now;
        }
        // Taken already: one past the newest stamp, which another thread may be raising too.
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1
    }
}

/// Longest quoted text passed on (a replied-to or linked message, an embed, a forward).
pub const MAX_QUOTE_CHARS: usize = 1_000;
/// Most stickers, embeds and forwards passed on per message.
const MAX_PARTS: usize = 3;
/// Most message links followed per message.
pub const MAX_LINKS: usize = 3;

/// The names behind `<#id>` and `<@&id>` in a message's words, as the gateway found them; a
/// user mention's name comes with the message itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Names {
    pub channels: std::collections::HashMap<u64, String>,
    pub roles: std::collections::HashMap<u64, String>,
}

/// What people see as someone's name in a guild: the member's nickname, else the global
/// name, else the username.
pub fn display_name(user: &twilight_model::user::User, nick: Option<&str>) -> String {
    let name = nick.filter(|n| !n.trim().is_empty()).or(user.global_name.as_deref().filter(|n| !n.trim().is_empty())).unwrap_or(&user.name);
    bounded(name, MAX_NAME_CHARS)
}

/// The longest markup token read: `<a:` + a 32-character name + `:` + a 20-digit id + `>`, with room.
const MARKUP_MAX: usize = 80;

/// One `<…>` token of Discord's message markup.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Markup<'a> {
    User(u64),
    Channel(u64),
    Role(u64),
    Emoji(&'a str),
}

fn markup(token: &str) -> Option<Markup<'_>> {
    let id = |t: &str| t.parse::<u64>().ok();
    if let Some(rest) = token.strip_prefix("@&") {
        return id(rest).map(Markup::Role);
    }
    if let Some(rest) = token.strip_prefix('@') {
        return id(rest.strip_prefix('!').unwrap_or(rest)).map(Markup::User);
    }
    if let Some(rest) = token.strip_prefix('#') {
        return id(rest).map(Markup::Channel);
    }
    let emoji = token.strip_prefix("a:").or_else(|| token.strip_prefix(':'))?;
    let (name, id_part) = emoji.rsplit_once(':')?;
    (!name.is_empty() && id(id_part).is_some()).then_some(Markup::Emoji(name))
}

/// Replaces each markup token of `content` as `replace` says, leaving everything else as written.
fn rewrite_markup(content: &str, mut replace: impl FnMut(&Markup<'_>) -> String) -> String {
    let mut out = String::with_capacity(content.len());
    let mut rest = content;
    while let Some(open) = rest.find('<') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        // A token is short: looking further for its end would make hostile text quadratic.
        let window = &after.as_bytes()[..after.len().min(MARKUP_MAX)];
        match window.iter().position(|b| *b == b'>').and_then(|close| markup(&after[..close]).map(|m| (close, m))) {
            Some((close, m)) => {
                out.push_str(&replace(&m));
                rest = &after[close + 1..];
            }
            None => {
                out.push('<');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The channels and roles a message's words mention, for the gateway to find their names.
pub fn mentioned_places(content: &str) -> (Vec<u64>, Vec<u64>) {
    let (mut channels, mut roles) = (Vec::new(), Vec::new());
    rewrite_markup(content, |m| {
        match m {
            Markup::Channel(id) if !channels.contains(id) => channels.push(*id),
            Markup::Role(id) if !roles.contains(id) => roles.push(*id),
            _ => {}
        }
        String::new()
    });
    (channels, roles)
}

/// A message's words as people see them: `<@id>` as `@name` (their nickname where the message
/// carries it), `<#id>` as `#channel`, `<@&id>` as `@role`, a custom emoji as `:name:`.
pub fn as_people_see_it(content: &str, mentions: &[twilight_model::channel::message::Mention], names: &Names) -> String {
    rewrite_markup(content, |m| match m {
        Markup::User(id) => match mentions.iter().find(|u| u.id.get() == *id) {
            Some(u) => {
                let nick = u.member.as_ref().and_then(|m| m.nick.as_deref()).filter(|n| !n.trim().is_empty());
                format!("@{}", bounded(nick.unwrap_or(&u.name), MAX_NAME_CHARS))
            }
            None => "@someone".to_owned(),
        },
        Markup::Channel(id) => format!("#{}", names.channels.get(id).map_or_else(|| "unknown-channel".to_owned(), |n| display_bounded(n))),
        Markup::Role(id) => format!("@{}", names.roles.get(id).map_or_else(|| "unknown-role".to_owned(), |n| display_bounded(n))),
        Markup::Emoji(name) => format!(":{name}:"),
    })
}

/// A message links to another Discord message: `https://discord.com/channels/<guild>/<channel>/<message>`.
pub fn message_links(content: &str) -> Vec<(u64, u64, u64)> {
    let mut out = Vec::new();
    for host in [
        "https://discord.com/channels/",
        "https://ptb.discord.com/channels/",
        "https://canary.discord.com/channels/",
        "https://discordapp.com/channels/",
    ] {
        let mut rest = content;
        while let Some(at) = rest.find(host) {
            rest = &rest[at + host.len()..];
            let path: String = rest.chars().take_while(|c| c.is_ascii_digit() || *c == '/').collect();
            // The first three segments, each an id: a path with an empty or overlong one names no message.
            let ids: Vec<Option<u64>> = path.split('/').take(3).map(|p| p.parse().ok()).collect();
            if let [Some(guild), Some(channel), Some(message)] = ids[..]
                && !out.contains(&(guild, channel, message))
                && out.len() < MAX_LINKS
            {
                out.push((guild, channel, message));
            }
        }
    }
    out
}

/// Another message as a quoted item: its author as people see them, its words bounded.
pub fn quoted(message: &Message, kind: v1::QuotedKind, bot_id: u64) -> v1::Quoted {
    let nick = message.member.as_ref().and_then(|m| m.nick.as_deref());
    let mut text = bounded(&as_people_see_it(&message.content, &message.mentions, &Names::default()), MAX_QUOTE_CHARS);
    text.push_str(&attached(&message.attachments));
    v1::Quoted {
        kind: kind as i32,
        message_id: message.id.get(),
        channel_id: message.channel_id.get(),
        author_id: message.author.id.get(),
        author_name: display_name(&message.author, nick),
        is_him: message.author.id.get() == bot_id,
        text,
        at_ms: message.timestamp.as_micros() / 1_000,
        label: String::new(),
    }
}

/// What a quoted or forwarded message's attachments add to its words: their names, bounded;
/// nothing when it has none.
fn attached(attachments: &[twilight_model::channel::Attachment]) -> String {
    if attachments.is_empty() {
        return String::new();
    }
    let names: Vec<&str> = attachments.iter().take(MAX_ATTACHMENTS).map(|a| a.filename.as_str()).collect();
    format!(" [attached: {}]", bounded(&names.join(", "), MAX_FILENAME_CHARS))
}

/// The parts of a message beyond its words, each a quoted item of its own author: a poll, its
/// stickers, its embeds and a forwarded message's snapshot.
pub fn parts(message: &Message, author_name: &str) -> Vec<v1::Quoted> {
    let part = |kind: v1::QuotedKind, label: &str, text: String| v1::Quoted {
        kind: kind as i32,
        message_id: message.id.get(),
        channel_id: message.channel_id.get(),
        author_id: message.author.id.get(),
        author_name: author_name.to_owned(),
        label: bounded(label, MAX_NAME_CHARS * 4),
        text: bounded(&text, MAX_QUOTE_CHARS),
        ..Default::default()
    };
    let mut out = Vec::new();
    if let Some(poll) = &message.poll {
        let answers: Vec<&str> = poll.answers.iter().take(10).filter_map(|a| a.poll_media.text.as_deref()).collect();
        let question = poll.question.text.as_deref().unwrap_or_default();
        out.push(part(v1::QuotedKind::Poll, question, format!("options: {}", answers.join(" | "))));
    }
    for sticker in message.sticker_items.iter().take(MAX_PARTS) {
        out.push(part(v1::QuotedKind::Sticker, &sticker.name, String::new()));
    }
    for embed in message.embeds.iter().take(MAX_PARTS) {
        let text = [embed.description.as_deref(), embed.url.as_deref()].into_iter().flatten().collect::<Vec<_>>().join(" ");
        if embed.title.is_none() && text.is_empty() {
            continue;
        }
        out.push(part(v1::QuotedKind::Embed, embed.title.as_deref().unwrap_or_default(), text));
    }
    for snapshot in message.message_snapshots.iter().take(MAX_PARTS) {
        let m = &snapshot.message;
        let mut text = as_people_see_it(&m.content, &m.mentions, &Names::default());
        for embed in m.embeds.iter().take(MAX_PARTS) {
            for piece in [embed.title.as_deref(), embed.description.as_deref()].into_iter().flatten() {
                text.push_str(&format!(" [{piece}]"));
            }
        }
        text.push_str(&attached(&m.attachments));
        out.push(v1::Quoted { at_ms: m.timestamp.as_micros() / 1_000, ..part(v1::QuotedKind::Forwarded, "", text) });
    }
    out
}

/// Normalises a Discord message into an Ingress, bounding what a hostile or broken
/// payload could make every later stage carry. `names` are the channel and role names its
/// words mention, as far as the gateway found them.
pub fn ingress(message: &Message, bot_id: u64, received_at_ms: i64) -> v1::Ingress {
    ingress_named(message, bot_id, received_at_ms, &Names::default())
}

/// [`ingress`], with the names of the channels and roles its words mention.
pub fn ingress_named(message: &Message, bot_id: u64, received_at_ms: i64, names: &Names) -> v1::Ingress {
    let nick = message.member.as_ref().and_then(|m| m.nick.as_deref());
    let author_name = display_name(&message.author, nick);
    let mut quoted = Vec::new();
    // A forward's reference names the forwarded message, which is no reply.
    let forward = message.reference.as_ref().is_some_and(|r| r.kind == twilight_model::channel::message::MessageReferenceType::Forward);
    if !forward
        && message.kind == twilight_model::channel::message::MessageType::Reply
        && let Some(replied) = &message.referenced_message
    {
        quoted.push(quoted_message_of(replied, bot_id));
    }
    quoted.extend(parts(message, &author_name));
    v1::Ingress {
        delivery_id: message.id.get().to_string(),
        guild_id: message.guild_id.map(|g| g.get()),
        channel_id: message.channel_id.get(),
        author_id: message.author.id.get(),
        author_name,
        author_is_bot: message.author.bot,
        content: bounded(&as_people_see_it(&message.content, &message.mentions, names), MAX_CONTENT_CHARS),
        mentions_him: message.mentions.iter().any(|m| m.id.get() == bot_id),
        reply_to_message_id: if forward { None } else { message.reference.as_ref().and_then(|r| r.message_id).map(|m| m.get()) },
        reply_to_him: !forward && message.referenced_message.as_ref().is_some_and(|r| r.author.id.get() == bot_id),
        attachments: message
            .attachments
            .iter()
            .take(MAX_ATTACHMENTS)
            .map(|a| v1::Attachment {
                id: a.id.get(),
                filename: bounded(&a.filename, MAX_FILENAME_CHARS),
                content_type: a.content_type.clone().unwrap_or_default(),
                size_bytes: a.size,
                url: a.url.clone(),
            })
            .collect(),
        received_at_ms,
        change: v1::MessageChange::None as i32,
        changed_message_id: 0,
        quoted,
        thread: None,
        context_pending: false,
        // Only a captain makes a reminder's delivery: nothing from Discord is one.
        reminder: None,
    }
}

fn quoted_message_of(message: &Message, bot_id: u64) -> v1::Quoted {
    quoted(message, v1::QuotedKind::RepliedTo, bot_id)
}

/// An edit (MESSAGE_UPDATE) as a change event carrying the message's new content; `None` for
/// an update that is no edit (Discord sends one when it unfurls a link's embed).
pub fn edit(message: &Message, bot_id: u64, received_at_ms: i64) -> Option<v1::Ingress> {
    let edited_ms = message.edited_timestamp?.as_micros() / 1_000;
    let id = message.id.get();
    Some(v1::Ingress {
        delivery_id: format!("edit:{id}:{edited_ms}"),
        change: v1::MessageChange::Edit as i32,
        changed_message_id: id,
        ..ingress(message, bot_id, received_at_ms)
    })
}

/// A deletion (MESSAGE_DELETE) as a change event: ids only, as Discord sends it.
pub fn deletion(deleted: &twilight_model::gateway::payload::incoming::MessageDelete, received_at_ms: i64) -> v1::Ingress {
    let id = deleted.id.get();
    v1::Ingress {
        delivery_id: format!("delete:{id}"),
        guild_id: deleted.guild_id.map(|g| g.get()),
        channel_id: deleted.channel_id.get(),
        change: v1::MessageChange::Delete as i32,
        changed_message_id: id,
        received_at_ms,
        ..Default::default()
    }
}

/// A thread archived, as a change to its lane: ids only.
pub fn thread_archived(thread: &twilight_model::channel::Channel, received_at_ms: i64) -> v1::Ingress {
    let at = thread.thread_metadata.as_ref().map_or(0, |m| m.archive_timestamp.as_micros() / 1_000);
    let id = thread.id.get();
    v1::Ingress {
        delivery_id: format!("thread-archive:{id}:{at}"),
        guild_id: thread.guild_id.map(|g| g.get()),
        channel_id: id,
        change: v1::MessageChange::ThreadArchived as i32,
        received_at_ms,
        ..Default::default()
    }
}

/// A thread deleted, as a change to its lane: ids only.
pub fn thread_deleted(deleted: &twilight_model::gateway::payload::incoming::ThreadDelete, received_at_ms: i64) -> v1::Ingress {
    let id = deleted.id.get();
    v1::Ingress {
        delivery_id: format!("thread-delete:{id}"),
        guild_id: Some(deleted.guild_id.get()),
        channel_id: id,
        change: v1::MessageChange::ThreadDeleted as i32,
        received_at_ms,
        ..Default::default()
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
                ..Default::default()
            };
            Route::Room(Subject::IngressRoom { guild, channel: ingress.channel_id }, input)
        }
        _ => Route::Text(Subject::ingress_text(ingress.guild_id, ingress.channel_id), ingress),
    }
}

/// A change to a typed line in a live voice room's chat, as the room hears it: only ids for a
/// deletion, the new words for an edit.
pub fn room_change(change: &v1::Ingress) -> Option<(Subject, v1::RoomInput)> {
    let guild = change.guild_id?;
    let input = v1::RoomInput {
        delivery_id: change.delivery_id.clone(),
        guild_id: guild,
        channel_id: change.channel_id,
        author_id: change.author_id,
        author_name: change.author_name.clone(),
        source: v1::RoomInputSource::Text as i32,
        text: change.content.clone(),
        received_at_ms: change.received_at_ms,
        change: change.change,
        changed_message_id: change.changed_message_id,
        ..Default::default()
    };
    Some((Subject::IngressRoom { guild, channel: change.channel_id }, input))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn discord_message(edited: Option<&str>) -> Message {
        let json = serde_json::json!({
            "id": "1300000000000000000", "channel_id": "200", "guild_id": "100",
            "author": { "id": "7", "username": "ada", "discriminator": "0", "avatar": null, "global_name": "Ada" },
            "content": "now it says 9pm", "timestamp": "2026-12-01T18:00:00.000000+00:00",
            "edited_timestamp": edited, "tts": false, "mention_everyone": false, "mentions": [], "mention_roles": [],
            "attachments": [], "embeds": [], "pinned": false, "type": 0,
        });
        serde_json::from_value(json).expect("a message")
    }

    #[test]
    fn message_edit_is_a_change_with_an_id_per_edit_and_an_unfurl_is_none() {
        let edited = edit(&discord_message(Some("2026-12-01T18:05:00.000000+00:00")), 1, 5).expect("an edit");
        assert_eq!(edited.change(), v1::MessageChange::Edit);
        assert_eq!(edited.changed_message_id, 1_300_000_000_000_000_000);
        assert_eq!(edited.delivery_id, format!("edit:1300000000000000000:{}", 1_796_148_300_000i64));
        assert_eq!(edited.content, "now it says 9pm");
        assert!(edit(&discord_message(None), 1, 5).is_none(), "an update that is no edit (an embed unfurled) is no change");
    }

    #[test]
    fn mentions_reach_the_lane_as_names_and_the_nickname_is_the_name_shown() {
        let json = serde_json::json!({
            "id": "1300000000000000001", "channel_id": "200", "guild_id": "100",
            "author": { "id": "7", "username": "ada_l", "discriminator": "0", "avatar": null, "global_name": "Ada" },
            "member": { "nick": "Countess", "roles": [], "joined_at": "2026-01-01T00:00:00.000000+00:00", "deaf": false, "mute": false, "flags": 0 },
            "content": "<@8> see <#300> and ping <@&55> <:blobwave:123> <a:dance:456> <@!9> <@99> <#777> <b>",
            "timestamp": "2026-12-01T18:00:00.000000+00:00", "edited_timestamp": null, "tts": false, "mention_everyone": false,
            "mentions": [
                { "id": "8", "username": "bob", "discriminator": "0", "avatar": null, "global_name": "Bob", "public_flags": 0,
                  "member": { "nick": "Bobby", "roles": [], "joined_at": "2026-01-01T00:00:00.000000+00:00", "deaf": false, "mute": false, "flags": 0 } },
                { "id": "9", "username": "cy", "discriminator": "0", "avatar": null, "global_name": null, "public_flags": 0 }
            ],
            "mention_roles": ["55"], "attachments": [], "embeds": [], "pinned": false, "type": 0,
        });
        let message: Message = serde_json::from_value(json).expect("a message");
        let mut names = Names::default();
        names.channels.insert(300, "lobbies".into());
        names.roles.insert(55, "raiders".into());
        let ingress = ingress_named(&message, 1, 5, &names);
        assert_eq!(ingress.author_name, "Countess", "the guild nickname is the name people see");
        assert_eq!(ingress.content, "@Bobby see #lobbies and ping @raiders :blobwave: :dance: @cy @someone #unknown-channel <b>");
        assert_eq!(mentioned_places(&message.content), (vec![300, 777], vec![55]));
    }

    #[test]
    fn rich_message_links_are_found_once_each_and_bounded() {
        let text = "see https://discord.com/channels/100/200/300 and https://ptb.discord.com/channels/100/201/301/ \
                    again https://discord.com/channels/100/200/300 https://discord.com/channels/@me/5/6 \
                    https://discord.com/channels/100/2/3 https://discord.com/channels/100/4/5";
        assert_eq!(message_links(text), vec![(100, 200, 300), (100, 2, 3), (100, 4, 5)]);
    }

    #[test]
    fn message_delete_is_a_change_with_ids_only() {
        let deleted: twilight_model::gateway::payload::incoming::MessageDelete =
            serde_json::from_value(serde_json::json!({ "id": "42", "channel_id": "200", "guild_id": "100" })).unwrap();
        let change = deletion(&deleted, 9);
        assert_eq!((change.change(), change.changed_message_id, change.delivery_id.as_str()), (v1::MessageChange::Delete, 42, "delete:42"));
        assert_eq!((change.guild_id, change.channel_id, change.content.as_str()), (Some(100), 200, ""));
    }

    #[test]
    fn typing_hold_arrival_stamps_of_events_in_one_millisecond_still_order_them() {
        let arrivals = Arrivals::default();
        let stamps: Vec<i64> = (0..1_000).map(|_| arrivals.stamp()).collect();
        assert!(stamps.windows(2).all(|w| w[0] < w[1]), "a later event was stamped no later");
        assert!(stamps[999] <= clankie_bus::now_ms() + 999, "a stamp runs ahead of the clock by at most one per event");
    }

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

    mod fuzz {
        use super::*;
        use proptest::prelude::*;
        use serde_json::{Value, json};

        fn cases() -> u32 {
            std::env::var("CLANKIE_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000)
        }

        fn text() -> impl Strategy<Value = String> {
            prop_oneof![
                ".{0,40}",
                Just("x".repeat(5_000)),
                Just("../../etc/passwd".to_owned()),
                Just("\u{202e}gnp.exe".to_owned()),
                Just(String::new()),
            ]
        }

        /// Mostly a valid id: a message needs several, and one bad id refuses the whole message
        /// before the property is reached.
        fn snowflake() -> impl Strategy<Value = Value> {
            prop_oneof![
                196 => (1u64..u64::MAX).prop_map(|n| json!(n.to_string())),
                1 => Just(json!("0")),
                1 => Just(json!("not-a-number")),
                1 => Just(json!(-1)),
                1 => Just(Value::Null),
            ]
        }

        /// A MESSAGE_CREATE body: mostly the shape Discord sends, with hostile values and the odd field
        /// missing or of the wrong type.
        fn payload() -> impl Strategy<Value = Value> {
            let attachment = (snowflake(), text(), prop_oneof![Just(json!("image/png")), Just(json!(null)), text().prop_map(Value::from)], any::<u64>())
                .prop_map(|(id, filename, ct, size)| json!({ "id": id, "filename": filename, "content_type": ct, "size": size, "url": "http://x/y", "proxy_url": "http://x/y" }));
            (
                snowflake(),
                snowflake(),
                proptest::option::of(snowflake()),
                (snowflake(), text(), proptest::option::of(text()), any::<bool>()),
                text(),
                proptest::collection::vec(attachment, 0..14),
                any::<bool>(),
                proptest::option::weighted(0.2, 0usize..12),
            )
                .prop_map(|(id, channel, guild, (author_id, name, global, bot), content, attachments, mention, drop)| {
                    let mut v = json!({
                        "id": id, "channel_id": channel,
                        "author": { "id": author_id, "username": name, "discriminator": "0", "avatar": null, "bot": bot, "global_name": global },
                        "content": content, "timestamp": "2026-11-30T07:00:00.000000+00:00", "edited_timestamp": null,
                        "tts": false, "mention_everyone": false,
                        "mentions": if mention { json!([{ "id": "42", "username": "Clankie", "discriminator": "0", "avatar": null, "bot": true, "public_flags": 0 }]) } else { json!([]) },
                        "mention_roles": [], "attachments": attachments, "embeds": [], "pinned": false, "type": 0,
                    });
                    if let Some(g) = guild {
                        v["guild_id"] = g;
                    }
                    if let Some(i) = drop
                        && let Some(map) = v.as_object_mut()
                    {
                        let key = map.keys().nth(i % map.len()).cloned();
                        if let Some(key) = key {
                            map.remove(&key);
                        }
                    }
                    v
                })
        }

        /// Words built of the pieces markup and message links are made of, in any order: half
        /// tokens, ids too long for a u64, a link's path cut anywhere, characters of several bytes.
        fn markup_text() -> impl Strategy<Value = String> {
            let piece = prop_oneof![
                Just("<@"),
                Just("<@!"),
                Just("<@&"),
                Just("<#"),
                Just("<:"),
                Just("<a:"),
                Just(":"),
                Just(">"),
                Just("<"),
                Just("123"),
                Just("18446744073709551615"),
                Just("99999999999999999999"),
                Just("/"),
                Just("https://discord.com/channels/"),
                Just("https://canary.discord.com/channels/"),
                Just("é"),
                Just("💥"),
                Just(" "),
                Just("x"),
            ];
            proptest::collection::vec(piece, 0..160).prop_map(|pieces| pieces.concat())
        }

        #[test]
        fn fuzz_mentions_and_message_links_in_hostile_words_are_bounded_and_never_panic() {
            let config = ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() };
            let mut runner = proptest::test_runner::TestRunner::new(config);
            // Hostile names for the places the words mention: overlong, markup of their own, empty.
            let name = prop_oneof![Just(String::new()), Just("<#1>".to_owned()), "[a-z💥<>#@&:]{0,40}", "[a-zé]{200,1000}",];
            let strategy = (markup_text(), proptest::collection::vec(name, 1..6));
            let outcome = runner.run(&strategy, |(content, pool)| {
                let unresolved = as_people_see_it(&content, &[], &Names::default());
                // A token of four characters at the least becomes a name of sixteen at the most.
                prop_assert!(unresolved.chars().count() <= 4 * content.chars().count() + 1, "{content:?} became {unresolved:?}");
                // Every mentioned place resolved, to a name from the hostile pool.
                let (channels, roles) = mentioned_places(&content);
                let mut names = Names::default();
                for (i, id) in channels.iter().enumerate() {
                    names.channels.insert(*id, pool[i % pool.len()].clone());
                }
                for (i, id) in roles.iter().enumerate() {
                    names.roles.insert(*id, pool[(i + 1) % pool.len()].clone());
                }
                let shown = as_people_see_it(&content, &[], &names);
                // A token of four characters at the least becomes `#` or `@` and a bounded name.
                let most = MAX_NAME_CHARS * 2 + 1;
                prop_assert!(shown.chars().count() <= most.div_ceil(4) * content.chars().count() + 1, "{content:?} became {shown:?}");
                for long in pool.iter().filter(|n| n.chars().count() > MAX_NAME_CHARS * 2) {
                    prop_assert!(!shown.contains(long.as_str()), "a name of {} characters was shown whole", long.chars().count());
                }
                let links = message_links(&content);
                prop_assert!(links.len() <= MAX_LINKS);
                for (guild, channel, message) in links {
                    let path = format!("{guild}/{channel}/{message}");
                    prop_assert!(content.contains(&path), "a link to {} that the words do not hold", path);
                }
                let (channels, roles) = mentioned_places(&content);
                let written: Vec<String> =
                    channels.iter().map(|id| format!("<#{id}>")).chain(roles.iter().map(|id| format!("<@&{id}>"))).collect();
                for token in written {
                    prop_assert!(content.contains(&token), "{} is not in the words", token);
                }
                Ok(())
            });
            if let Err(e) = outcome {
                panic!("{e}");
            }
        }

        #[test]
        fn fuzz_discord_payload_normalisation_is_bounded_and_never_panics() {
            let reached = std::sync::atomic::AtomicU32::new(0);
            let config = ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() };
            let mut runner = proptest::test_runner::TestRunner::new(config);
            let strategy = (payload(), proptest::collection::vec(any::<u8>(), 0..64));
            let outcome = runner.run(&strategy, |(body, raw)| {
                // Arbitrary bytes are refused by the parser, never a panic.
                let _ = serde_json::from_slice::<Message>(&raw);
                let Ok(message) = serde_json::from_value::<Message>(body) else { return Ok(()) };
                reached.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let ingress = ingress(&message, 42, 0);
                prop_assert_eq!(&ingress.delivery_id, &message.id.get().to_string());
                prop_assert!(ingress.content.chars().count() <= MAX_CONTENT_CHARS);
                prop_assert!(ingress.author_name.chars().count() <= MAX_NAME_CHARS);
                prop_assert!(ingress.attachments.len() <= MAX_ATTACHMENTS);
                prop_assert_eq!(ingress.attachments.len(), message.attachments.len().min(MAX_ATTACHMENTS));
                prop_assert!(ingress.content.len() == message.content.len() || message.content.chars().count() > MAX_CONTENT_CHARS);
                let live = ingress.channel_id;
                match route(ingress.clone(), Some(live)) {
                    Route::Room(_, input) => {
                        prop_assert!(ingress.guild_id.is_some() && !carries_image(&ingress));
                        prop_assert_eq!(input.text, ingress.content);
                    }
                    Route::Text(..) => prop_assert!(ingress.guild_id.is_none() || carries_image(&ingress)),
                }
                Ok(())
            });
            if let Err(e) = outcome {
                panic!("{e}");
            }
            let reached = reached.into_inner();
            println!("fuzz_discord_payload_normalisation: {reached} of {} cases reached the property", cases());
            assert!(reached * 2 >= cases(), "only {reached} of {} cases were messages the property could check", cases());
        }
    }
}
