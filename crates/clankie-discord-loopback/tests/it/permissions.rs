//! REST refused as Discord refuses it, through twilight's HTTP client: missing permissions
//! (50013), missing access (50001), closed DMs (50007); and a refusal changes nothing.

use clankie_discord_loopback::permission::*;
use clankie_discord_loopback::{LoopbackConfig, NewMessage, OverwriteSpec};
use twilight_http::request::channel::reaction::RequestReactionType;
use twilight_model::http::attachment::Attachment;

use crate::*;

fn deny_bot(config: &mut LoopbackConfig, channel: u64, deny: u64) {
    let bot = config.bot_user_id;
    let spec = config.channels.iter_mut().find(|c| c.id == channel).unwrap();
    spec.overwrites.push(OverwriteSpec { id: bot, member: true, allow: 0, deny });
}

fn said(discord: &clankie_discord_loopback::Loopback, channel: u64, content: &str) -> u64 {
    discord.user_message(NewMessage { channel_id: channel, author: "ada".into(), content: content.into(), ..Default::default() })
}

#[tokio::test]
async fn send_messages_denied_by_a_member_overwrite_is_refused_50013_and_stores_nothing_while_the_next_channel_accepts() {
    let mut config = LoopbackConfig::default();
    deny_bot(&mut config, GENERAL, SEND_MESSAGES);
    let discord = loopback(config).await;
    let http = client(&discord);

    assert_eq!(refusal(http.create_message(id(GENERAL)).content("hello").await), (403, 50013));
    assert!(discord.posts(GENERAL).is_empty(), "a refused post is not stored");
    assert!(discord.messages(GENERAL).is_empty());
    // Typing needs Send Messages too.
    assert_eq!(refusal(http.create_typing_trigger(id(GENERAL)).await), (403, 50013));
    assert!(discord.typing(GENERAL).is_empty());

    let posted = http.create_message(id(LOBBIES)).content("hello").await.unwrap().model().await.unwrap();
    assert_eq!(posted.content, "hello");
    assert_eq!(discord.posts(LOBBIES).len(), 1);
    // The channel can still be read: only sending is denied.
    said(&discord, GENERAL, "anyone there?");
    let listed = http.channel_messages(id(GENERAL)).await.unwrap().models().await.unwrap();
    assert_eq!(listed.len(), 1);
}

#[tokio::test]
async fn a_channel_of_a_guild_the_bot_was_not_invited_to_is_refused_50001() {
    let discord = loopback(with_absent_guild()).await;
    let http = client(&discord);
    assert_eq!(discord.bot_permissions(ABSENT_CHANNEL), None);
    assert_eq!(refusal(http.create_message(id(ABSENT_CHANNEL)).content("hello").await), (403, 50001));
    assert_eq!(refusal(http.channel_messages(id(ABSENT_CHANNEL)).await), (403, 50001));
    assert_eq!(refusal(http.create_typing_trigger(id(ABSENT_CHANNEL)).await), (403, 50001));
    assert!(discord.posts(ABSENT_CHANNEL).is_empty());
    // An unknown channel is still unknown, not forbidden.
    assert_eq!(refusal(http.create_message(id(4_000)).content("hello").await), (404, 10003));
}

#[tokio::test]
async fn a_channel_the_bot_cannot_view_is_refused_50001_and_without_history_reads_empty() {
    let discord = loopback(LoopbackConfig::default()).await;
    let http = client(&discord);
    said(&discord, GENERAL, "hello there");

    discord.set_bot_overwrite(GENERAL, 0, VIEW_CHANNEL).unwrap();
    assert_eq!(discord.bot_permissions(GENERAL), Some(0), "no View Channel zeroes the rest");
    assert_eq!(refusal(http.channel_messages(id(GENERAL)).await), (403, 50001));
    assert_eq!(refusal(http.create_message(id(GENERAL)).content("hi").await), (403, 50001));

    discord.set_bot_overwrite(GENERAL, 0, READ_MESSAGE_HISTORY).unwrap();
    let listed = http.channel_messages(id(GENERAL)).await.unwrap().models().await.unwrap();
    assert!(listed.is_empty(), "without Read Message History Discord answers no messages: {listed:?}");

    discord.set_bot_overwrite(GENERAL, 0, 0).unwrap();
    let listed = http.channel_messages(id(GENERAL)).await.unwrap().models().await.unwrap();
    assert_eq!(listed.len(), 1);
}

#[tokio::test]
async fn a_voice_channels_chat_without_connect_is_refused_50001() {
    let discord = loopback(LoopbackConfig::default()).await;
    let http = client(&discord);
    http.create_message(id(HANGOUT)).content("in the voice chat").await.unwrap();
    discord.set_bot_overwrite(HANGOUT, 0, CONNECT).unwrap();
    let perms = discord.bot_permissions(HANGOUT).unwrap();
    assert_eq!(perms & (CONNECT | SPEAK | USE_VAD), 0, "a voice channel without Connect loses its voice permissions");
    assert_ne!(perms & VIEW_CHANNEL, 0);
    assert_eq!(refusal(http.create_message(id(HANGOUT)).content("again").await), (403, 50001));
    assert_eq!(discord.posts(HANGOUT).len(), 1);
}

#[tokio::test]
async fn a_dm_to_a_user_who_closed_their_dms_is_refused_50007() {
    let (closed, open) = (77_001, 77_002);
    let discord = loopback(LoopbackConfig { closed_dms: vec![closed], ..LoopbackConfig::default() }).await;
    let http = client(&discord);

    let channel = http.create_private_channel(id(closed)).await.unwrap().model().await.unwrap();
    assert_eq!(channel.id.get(), DM);
    assert_eq!(refusal(http.create_message(channel.id).content("hello").await), (403, 50007));
    assert!(discord.posts(DM).is_empty());

    let channel = http.create_private_channel(id(open)).await.unwrap().model().await.unwrap();
    http.create_message(channel.id).content("hello").await.unwrap();
    assert_eq!(discord.posts(DM).len(), 1);
}

#[tokio::test]
async fn files_without_attach_files_are_refused_50013_and_replies_without_history_160002() {
    let discord = loopback(LoopbackConfig::default()).await;
    let http = client(&discord);
    let asked = said(&discord, GENERAL, "show me");

    discord.set_bot_overwrite(GENERAL, 0, ATTACH_FILES).unwrap();
    let files = [Attachment::from_bytes("a.txt".into(), b"hello".to_vec(), 1)];
    assert_eq!(refusal(http.create_message(id(GENERAL)).content("here").attachments(&files).await), (403, 50013));
    assert!(discord.posts(GENERAL).is_empty());
    http.create_message(id(GENERAL)).content("words only").await.unwrap();

    discord.set_bot_overwrite(GENERAL, 0, READ_MESSAGE_HISTORY).unwrap();
    assert_eq!(refusal(http.create_message(id(GENERAL)).content("a reply").reply(id(asked)).await), (403, 160002));
    assert_eq!(discord.posts(GENERAL).len(), 1, "only the words-only post was stored");
}

#[tokio::test]
async fn a_reaction_needs_add_reactions_and_read_message_history() {
    let discord = loopback(LoopbackConfig::default()).await;
    let http = client(&discord);
    let message = said(&discord, GENERAL, "react to me");
    let tick = RequestReactionType::Unicode { name: "✅" };

    discord.set_bot_overwrite(GENERAL, 0, ADD_REACTIONS).unwrap();
    assert_eq!(refusal(http.create_reaction(id(GENERAL), id(message), &tick).await), (403, 50013));
    discord.set_bot_overwrite(GENERAL, 0, READ_MESSAGE_HISTORY).unwrap();
    assert_eq!(refusal(http.create_reaction(id(GENERAL), id(message), &tick).await), (403, 50013));
    let stored = discord.messages(GENERAL);
    assert!(stored[0].reactions.is_empty(), "a refused reaction is not added");

    discord.set_bot_overwrite(GENERAL, 0, 0).unwrap();
    http.create_reaction(id(GENERAL), id(message), &tick).await.unwrap();
    assert_eq!(discord.messages(GENERAL)[0].reactions, vec!["✅".to_owned()]);
}

#[tokio::test]
async fn the_defaults_let_the_bot_do_what_it_needs_in_every_default_channel() {
    let discord = loopback(LoopbackConfig::default()).await;
    for channel in [GENERAL, LOBBIES, HANGOUT, TOWN_SQUARE] {
        let perms = discord.bot_permissions(channel).unwrap();
        assert_eq!(perms & BOT_INVITE, BOT_INVITE, "channel {channel}: {perms:#x}");
    }
    assert!(discord.bot_permissions(DM).is_some_and(|p| p & SEND_MESSAGES != 0));
    assert_eq!(discord.bot_permissions(4_000), None);
    assert_eq!(discord.bot_guild_permissions(GUILD), Some(DEFAULT_EVERYONE | BOT_INVITE));
}
