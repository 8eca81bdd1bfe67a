//! Threads, forum posts and messages as Discord shapes them, read with twilight-model's types
//! (gateway payloads) and twilight's HTTP client (REST): who sees a thread when, archiving,
//! deleting, forum tags, mentions with members, polls, stickers, embeds, forwards and replies.

use std::time::Duration;

use clankie_discord_loopback::permission::*;
use clankie_discord_loopback::{
    BOT_ROLE, ChannelKind, ChannelSpec, Loopback, LoopbackConfig, NewEmbed, NewMessage, NewPoll, PRIVATE_THREAD, RoleSpec, ThreadError,
};
use serde_json::Value;
use twilight_http::request::channel::reaction::RequestReactionType;
use twilight_model::channel::message::sticker::StickerFormatType;
use twilight_model::channel::message::{MessageFlags, MessageReferenceType};
use twilight_model::channel::{ChannelType, Message};
use twilight_model::gateway::payload::incoming::{
    GuildCreate, MessageCreate, ThreadCreate, ThreadDelete, ThreadListSync, ThreadMembersUpdate, ThreadUpdate,
};

use crate::*;

const GUILDS: u64 = 1 << 0;
const GUILD_MESSAGES: u64 = 1 << 9;
const MESSAGE_CONTENT: u64 = 1 << 15;
const QUIET: Duration = Duration::from_millis(400);
const FORUM: u64 = 400;
const NEWS: u64 = 401;
const MODS: u64 = 160;

/// The default loopback with a forum (tags `bug`, `idea`), an announcement channel and a role.
pub(crate) fn with_forum() -> LoopbackConfig {
    let mut config = LoopbackConfig::default();
    config.channels.push(ChannelSpec {
        id: FORUM,
        name: "ideas".into(),
        kind: ChannelKind::Forum,
        tags: vec!["bug".into(), "idea".into()],
        ..Default::default()
    });
    config.channels.push(ChannelSpec { id: NEWS, name: "news".into(), kind: ChannelKind::Announcement, ..Default::default() });
    config.roles.push(RoleSpec { id: MODS, name: "mods".into(), permissions: 0, guild: None });
    config
}

/// A gateway session with every intent the tests read, past READY and the GUILD_CREATEs.
async fn session(discord: &Loopback, intents: u64) -> Gateway {
    let mut gateway = Gateway::connect(discord).await;
    gateway.identify(discord, intents).await;
    gateway.dispatches(QUIET).await;
    gateway
}

async fn watching(discord: &Loopback) -> Gateway {
    session(discord, GUILDS | GUILD_MESSAGES | MESSAGE_CONTENT).await
}

fn kinds(seen: &[(String, Value)]) -> Vec<&str> {
    seen.iter().map(|(t, _)| t.as_str()).collect()
}

fn payload<T: serde::de::DeserializeOwned>(seen: &[(String, Value)], n: usize) -> T {
    serde_json::from_value(seen[n].1["d"].clone()).unwrap_or_else(|e| panic!("{}: {e}\n{}", seen[n].0, seen[n].1["d"]))
}

fn said(discord: &Loopback, channel: u64, content: &str) -> u64 {
    discord.user_message(NewMessage { channel_id: channel, author: "ada".into(), content: content.into(), ..Default::default() })
}

fn bot(discord: &Loopback) -> u64 {
    discord.config().bot_user_id
}

#[tokio::test]
async fn thread_from_a_message_shares_its_id_and_everything_in_it_works_as_in_a_channel() {
    let discord = loopback(LoopbackConfig::default()).await;
    let http = client(&discord);
    let mut gateway = watching(&discord).await;
    let root = said(&discord, GENERAL, "let's talk about trains");
    gateway.dispatches(QUIET).await;

    let thread = discord.start_thread(GENERAL, Some(root), "trains", false);
    assert_eq!(thread, root, "a thread started from a message has the message's id");
    let seen = gateway.dispatches(QUIET).await;
    assert_eq!(kinds(&seen), vec!["THREAD_CREATE"]);
    let created: ThreadCreate = payload(&seen, 0);
    assert_eq!(
        (created.kind, created.parent_id.map(|p| p.get()), created.newly_created),
        (ChannelType::PublicThread, Some(GENERAL), Some(true))
    );
    assert_eq!(created.owner_id.map(|o| o.get()), Some(Loopback::user_id("ada")));
    assert_eq!(created.name.as_deref(), Some("trains"));
    let metadata = created.thread_metadata.clone().unwrap();
    assert!(!metadata.archived && !metadata.locked && metadata.create_timestamp.is_some());
    assert!(created.member.is_none(), "he is not a member of a thread he did not join");

    // A public thread's messages reach him without joining, as they reach every app.
    let asked = said(&discord, thread, "choo choo");
    let seen = gateway.dispatches(QUIET).await;
    assert_eq!(kinds(&seen), vec!["MESSAGE_CREATE"]);
    let message: MessageCreate = payload(&seen, 0);
    assert_eq!((message.channel_id.get(), message.guild_id.map(|g| g.get())), (thread, Some(GUILD)));
    assert!(message.member.as_ref().is_some_and(|m| m.nick.is_none()), "a guild message carries its author's member");

    let channel = http.channel(id(thread)).await.unwrap().model().await.unwrap();
    assert_eq!(
        (channel.kind, channel.parent_id.map(|p| p.get()), channel.message_count),
        (ChannelType::PublicThread, Some(GENERAL), Some(1))
    );
    assert!(channel.thread_metadata.is_some());

    // Posting in it makes him a member, as Discord adds whoever posts.
    let posted = http.create_message(id(thread)).content("all aboard").reply(id(asked)).await.unwrap().model().await.unwrap();
    assert_eq!(posted.channel_id.get(), thread);
    let seen = gateway.dispatches(QUIET).await;
    assert_eq!(kinds(&seen), vec!["THREAD_MEMBERS_UPDATE", "THREAD_CREATE", "MESSAGE_CREATE"]);
    let members: ThreadMembersUpdate = payload(&seen, 0);
    assert_eq!(members.added_members.iter().map(|m| m.user_id.map(|u| u.get())).collect::<Vec<_>>(), vec![Some(bot(&discord))]);
    let joined: ThreadCreate = payload(&seen, 1);
    assert!(joined.member.is_some() && joined.newly_created.is_none());
    let own: MessageCreate = payload(&seen, 2);
    assert_eq!(own.member.as_ref().map(|m| m.roles.iter().map(|r| r.get()).collect::<Vec<_>>()), Some(vec![BOT_ROLE]));

    http.create_typing_trigger(id(thread)).await.unwrap();
    assert_eq!(discord.typing(thread).len(), 1);
    http.create_reaction(id(thread), id(asked), &RequestReactionType::Unicode { name: "👍" }).await.unwrap();
    http.update_message(id(thread), posted.id).content(Some("all aboard!")).await.unwrap();
    let listed = http.channel_messages(id(thread)).await.unwrap().models().await.unwrap();
    assert_eq!(listed.iter().map(|m| m.id.get()).collect::<Vec<_>>(), vec![posted.id.get(), asked]);
    assert_eq!(listed[0].content, "all aboard!");
    assert_eq!(listed[0].referenced_message.as_ref().map(|m| m.id.get()), Some(asked));
    http.delete_message(id(thread), posted.id).await.unwrap();
    assert_eq!(http.channel_messages(id(thread)).await.unwrap().models().await.unwrap().len(), 1);

    // The message the thread was started from names it.
    let starter = http.message(id(GENERAL), id(root)).await.unwrap().model().await.unwrap();
    assert_eq!(starter.thread.as_ref().map(|t| t.id.get()), Some(thread));
    assert!(starter.flags.is_some_and(|f| f.contains(MessageFlags::HAS_THREAD)));
    let members: Vec<u64> = discord.thread(thread).unwrap().members.iter().map(|(u, _)| *u).collect();
    assert_eq!(members, vec![Loopback::user_id("ada"), bot(&discord)]);
}

#[tokio::test]
async fn thread_private_reaches_the_bot_only_once_a_mention_makes_him_a_member() {
    let discord = loopback(LoopbackConfig::default()).await;
    let http = client(&discord);
    let mut gateway = watching(&discord).await;

    let thread = discord.start_thread(GENERAL, None, "secret", true);
    assert_eq!(discord.thread(thread).map(|t| t.kind), Some(PRIVATE_THREAD));
    said(&discord, thread, "just us");
    assert!(gateway.dispatches(QUIET).await.is_empty(), "nothing of a private thread reaches him before he is a member");
    assert_eq!(refusal(http.channel(id(thread)).await), (403, 50001));
    assert_eq!(refusal(http.create_message(id(thread)).content("hello?").await), (403, 50001));
    assert_eq!(refusal(http.join_thread(id(thread)).await), (403, 50001));

    let bot = bot(&discord);
    discord.user_message(NewMessage {
        channel_id: thread,
        author: "ada".into(),
        content: format!("<@{bot}> come in"),
        ..Default::default()
    });
    let seen = gateway.dispatches(QUIET).await;
    assert_eq!(kinds(&seen), vec!["THREAD_MEMBERS_UPDATE", "THREAD_CREATE", "MESSAGE_CREATE"]);
    let members: ThreadMembersUpdate = payload(&seen, 0);
    assert_eq!(members.id.get(), thread);
    assert_eq!(members.added_members[0].user_id.map(|u| u.get()), Some(bot));
    assert!(members.added_members[0].member.is_some());
    let created: ThreadCreate = payload(&seen, 1);
    assert_eq!(created.kind, ChannelType::PrivateThread);
    assert_eq!(created.member.as_ref().and_then(|m| m.user_id).map(|u| u.get()), Some(bot));
    let message: MessageCreate = payload(&seen, 2);
    assert_eq!(message.mentions.iter().map(|m| m.id.get()).collect::<Vec<_>>(), vec![bot]);

    let channel = http.channel(id(thread)).await.unwrap().model().await.unwrap();
    assert!(channel.member.is_some(), "a thread he is in carries his thread member");
    http.create_message(id(thread)).content("here").await.unwrap();
}

#[tokio::test]
async fn thread_join_route_answers_204_and_tells_him_he_joined() {
    let discord = loopback(LoopbackConfig::default()).await;
    let http = client(&discord);
    let mut gateway = watching(&discord).await;
    let thread = discord.start_thread(GENERAL, None, "open", false);
    gateway.dispatches(QUIET).await;

    http.join_thread(id(thread)).await.unwrap();
    let seen = gateway.dispatches(QUIET).await;
    assert_eq!(kinds(&seen), vec!["THREAD_MEMBERS_UPDATE", "THREAD_CREATE"]);
    let _: ThreadMembersUpdate = payload(&seen, 0);
    http.join_thread(id(thread)).await.unwrap();
    assert!(gateway.dispatches(QUIET).await.is_empty(), "joining again changes nothing");
    assert_eq!(refusal(http.join_thread(id(GENERAL)).await), (400, 50024));
    assert_eq!(refusal(http.join_thread(id(4_000)).await), (404, 10003));
}

#[tokio::test]
async fn thread_archived_is_unarchived_by_a_users_message_first() {
    let discord = loopback(LoopbackConfig::default()).await;
    let http = client(&discord);
    let root = said(&discord, GENERAL, "old news");
    let thread = discord.start_thread(GENERAL, Some(root), "old", false);
    let posted = http.create_message(id(thread)).content("noted").await.unwrap().model().await.unwrap();
    let mut gateway = watching(&discord).await;

    assert!(discord.set_archived(thread, true));
    let seen = gateway.dispatches(QUIET).await;
    assert_eq!(kinds(&seen), vec!["THREAD_UPDATE"]);
    let update: ThreadUpdate = payload(&seen, 0);
    assert!(update.thread_metadata.as_ref().is_some_and(|m| m.archived));
    // What an archived thread does not take.
    assert_eq!(refusal(http.update_message(id(thread), posted.id).content(Some("edited")).await), (400, 50083));
    let tick = RequestReactionType::Unicode { name: "✅" };
    assert_eq!(refusal(http.create_reaction(id(thread), posted.id, &tick).await), (400, 50083));
    assert_eq!(refusal(http.join_thread(id(thread)).await), (400, 50083));

    said(&discord, thread, "waking it up");
    let seen = gateway.dispatches(QUIET).await;
    assert_eq!(kinds(&seen), vec!["THREAD_UPDATE", "MESSAGE_CREATE"]);
    let update: ThreadUpdate = payload(&seen, 0);
    assert!(update.thread_metadata.as_ref().is_some_and(|m| !m.archived));
    assert!(!discord.thread(thread).unwrap().archived);
    http.update_message(id(thread), posted.id).content(Some("edited")).await.unwrap();
}

#[tokio::test]
async fn thread_deleted_answers_10003_on_every_route() {
    let discord = loopback(LoopbackConfig::default()).await;
    let http = client(&discord);
    let thread = discord.start_thread(GENERAL, None, "doomed", false);
    said(&discord, thread, "last words");
    let mut gateway = watching(&discord).await;

    assert!(discord.delete_thread(thread));
    let seen = gateway.dispatches(QUIET).await;
    assert_eq!(kinds(&seen), vec!["THREAD_DELETE"]);
    let deleted: ThreadDelete = payload(&seen, 0);
    assert_eq!(
        (deleted.id.get(), deleted.guild_id.get(), deleted.parent_id.get(), deleted.kind),
        (thread, GUILD, GENERAL, ChannelType::PublicThread)
    );
    assert_eq!(refusal(http.channel(id(thread)).await), (404, 10003));
    assert_eq!(refusal(http.create_message(id(thread)).content("hello").await), (404, 10003));
    assert_eq!(refusal(http.channel_messages(id(thread)).await), (404, 10003));
    assert!(!discord.delete_thread(thread) && !discord.set_archived(thread, true));
}

#[tokio::test]
async fn forum_post_first_message_has_the_threads_id_and_its_tags() {
    let discord = loopback(with_forum()).await;
    let http = client(&discord);
    let mut gateway = watching(&discord).await;
    let forum = discord.config().channels.iter().find(|c| c.id == FORUM).unwrap().clone();
    let bug = forum.tag_id("bug").unwrap();

    let first = NewMessage { content: "the 8:15 is late again".into(), mention: true, ..Default::default() };
    let (thread, message) = discord.create_forum_post(FORUM, "ada", "Trains are late", &["bug", "nope"], first);
    assert_eq!(thread, message, "a forum post's first message has the thread's id");
    let seen = gateway.dispatches(QUIET).await;
    assert_eq!(kinds(&seen), vec!["THREAD_CREATE", "MESSAGE_CREATE"]);
    let created: ThreadCreate = payload(&seen, 0);
    assert_eq!((created.kind, created.parent_id.map(|p| p.get())), (ChannelType::PublicThread, Some(FORUM)));
    assert_eq!(created.name.as_deref(), Some("Trains are late"));
    assert_eq!(created.applied_tags.as_ref().map(|t| t.iter().map(|t| t.get()).collect::<Vec<_>>()), Some(vec![bug]));
    let posted: MessageCreate = payload(&seen, 1);
    assert_eq!((posted.id.get(), posted.channel_id.get()), (thread, thread));
    assert_eq!(posted.mentions[0].id.get(), bot(&discord));

    let channel = http.channel(id(FORUM)).await.unwrap().model().await.unwrap();
    assert_eq!(channel.kind, ChannelType::GuildForum);
    let tags = channel.available_tags.unwrap();
    assert_eq!(
        tags.iter().map(|t| (t.name.as_str(), t.id.get(), t.moderated)).collect::<Vec<_>>(),
        vec![("bug", bug, false), ("idea", forum.tag_id("idea").unwrap(), false)]
    );
    let post = http.channel(id(thread)).await.unwrap().model().await.unwrap();
    assert_eq!(post.applied_tags.map(|t| t.len()), Some(1));
    let fetched = http.message(id(thread), id(message)).await.unwrap().model().await.unwrap();
    assert_eq!(fetched.content, "the 8:15 is late again");
    assert_eq!(refusal(http.create_message(id(FORUM)).content("not here").await), (400, 50008));

    // The bot posts in the forum too: its first message has the thread's id.
    let own = http.create_forum_thread(id(FORUM), "From the bot").message().content("hello").await.unwrap().model().await.unwrap();
    assert_eq!(own.channel.id, own.message.id.cast());
    assert_eq!(own.channel.owner_id.map(|o| o.get()), Some(bot(&discord)));
    assert_eq!(discord.create_forum_post(GENERAL, "ada", "no", &[], NewMessage::default()), (0, 0));
}

#[tokio::test]
async fn thread_under_an_announcement_channel_is_an_announcement_thread_and_bad_starts_are_refused() {
    let discord = loopback(with_forum()).await;
    let http = client(&discord);
    let root = said(&discord, NEWS, "big news");
    let thread = discord.start_thread(NEWS, Some(root), "news", false);
    assert_eq!(http.channel(id(NEWS)).await.unwrap().model().await.unwrap().kind, ChannelType::GuildAnnouncement);
    assert_eq!(http.channel(id(thread)).await.unwrap().model().await.unwrap().kind, ChannelType::AnnouncementThread);

    assert_eq!(discord.try_start_thread(NEWS, None, "hush", true), Err(ThreadError::NoPrivateThreads));
    assert_eq!(discord.try_start_thread(NEWS, Some(root), "again", false), Err(ThreadError::AlreadyStarted(root)));
    assert_eq!(discord.try_start_thread(GENERAL, Some(root), "elsewhere", false), Err(ThreadError::UnknownMessage(root)));
    assert_eq!(discord.try_start_thread(HANGOUT, None, "voice", false), Err(ThreadError::NoThreadsHere(HANGOUT)));
    assert_eq!(discord.try_start_thread(FORUM, None, "forum", false), Err(ThreadError::NoThreadsHere(FORUM)));
    assert_eq!(discord.try_start_thread(thread, None, "nested", false), Err(ThreadError::NoThreadsHere(thread)));
    assert_eq!(discord.start_thread(4_000, None, "nowhere", false), 0);
}

#[tokio::test]
async fn thread_guild_create_lists_the_active_threads_he_sees_with_his_member() {
    let discord = loopback(LoopbackConfig::default()).await;
    let bot = bot(&discord);
    let public = discord.start_thread(GENERAL, None, "public", false);
    let _hidden = discord.start_thread(GENERAL, None, "hidden", true);
    let joined = discord.start_thread(GENERAL, None, "joined", true);
    discord.user_message(NewMessage { channel_id: joined, author: "ada".into(), content: format!("<@{bot}>"), ..Default::default() });
    let archived = discord.start_thread(GENERAL, None, "old", false);
    discord.set_archived(archived, true);

    let mut gateway = Gateway::connect(&discord).await;
    gateway.identify(&discord, GUILDS).await;
    let seen = gateway.dispatches(QUIET).await;
    let GuildCreate::Available(guild) = payload(&seen, 1) else { panic!("the guild arrived unavailable") };
    let threads: Vec<(u64, bool)> = guild.threads.iter().map(|t| (t.id.get(), t.member.is_some())).collect();
    assert_eq!(threads, vec![(public, false), (joined, true)], "the active threads he sees, his member where he is one");
}

#[tokio::test]
async fn thread_posting_needs_send_messages_in_threads_and_a_regained_channel_syncs_its_threads() {
    let discord = loopback(LoopbackConfig::default()).await;
    let http = client(&discord);
    let thread = discord.start_thread(GENERAL, None, "t", false);

    discord.set_bot_overwrite(GENERAL, 0, SEND_MESSAGES).unwrap();
    assert_eq!(refusal(http.create_message(id(GENERAL)).content("parent").await), (403, 50013));
    http.create_message(id(thread)).content("Send Messages has no effect in a thread").await.unwrap();

    discord.set_bot_overwrite(GENERAL, 0, SEND_MESSAGES_IN_THREADS).unwrap();
    assert_eq!(refusal(http.create_message(id(thread)).content("thread").await), (403, 50013));
    assert_eq!(refusal(http.create_typing_trigger(id(thread)).await), (403, 50013));
    http.create_message(id(GENERAL)).content("parent").await.unwrap();

    discord.set_bot_overwrite(GENERAL, 0, VIEW_CHANNEL).unwrap();
    assert_eq!(refusal(http.channel(id(thread)).await), (403, 50001), "a thread takes its parent's overwrites");
    let mut gateway = watching(&discord).await;
    said(&discord, thread, "behind his back");
    assert!(gateway.dispatches(QUIET).await.is_empty());

    discord.set_bot_overwrite(GENERAL, 0, 0).unwrap();
    let seen = gateway.dispatches(QUIET).await;
    assert_eq!(kinds(&seen), vec!["CHANNEL_UPDATE", "THREAD_LIST_SYNC"]);
    let sync: ThreadListSync = payload(&seen, 1);
    assert_eq!(sync.channel_ids.iter().map(|c| c.get()).collect::<Vec<_>>(), vec![GENERAL]);
    assert_eq!(sync.threads.iter().map(|t| t.id.get()).collect::<Vec<_>>(), vec![thread]);
}

/// A server whose @everyone lacks Send Messages in Threads, with the bot invited before the
/// invite asked for it: Discord refuses his post in a thread and in a forum post (403, 50013)
/// while his post in the parent goes through; his own allow, or the invite's role of today,
/// lets both through.
#[tokio::test]
async fn operator_a_server_whose_everyone_lacks_send_messages_in_threads_refuses_his_thread_and_forum_posts_with_50013() {
    let lacking = || {
        let mut config = with_forum();
        for role in &mut config.roles {
            match role.id {
                GUILD => role.permissions &= !SEND_MESSAGES_IN_THREADS,
                BOT_ROLE => role.permissions = BOT_INVITE_WITHOUT_THREADS,
                _ => {}
            }
        }
        config
    };
    let discord = loopback(lacking()).await;
    let http = client(&discord);
    let thread = discord.start_thread(GENERAL, None, "t", false);
    let (post, _) =
        discord.create_forum_post(FORUM, "ada", "a bug", &["bug"], NewMessage { content: "it breaks".into(), ..Default::default() });
    assert_eq!(refusal(http.create_message(id(thread)).content("in the thread").await), (403, 50013));
    assert_eq!(refusal(http.create_message(id(post)).content("in the post").await), (403, 50013));
    http.create_message(id(GENERAL)).content("in the parent").await.unwrap();
    assert!(discord.posts(thread).is_empty() && discord.posts(post).is_empty());

    discord.set_bot_overwrite(GENERAL, SEND_MESSAGES_IN_THREADS, 0).unwrap();
    http.create_message(id(thread)).content("allowed for him in the parent").await.unwrap();

    let mut invited_today = lacking();
    invited_today.roles.iter_mut().filter(|r| r.id == BOT_ROLE).for_each(|r| r.permissions = BOT_INVITE);
    let discord = loopback(invited_today).await;
    let http = client(&discord);
    let thread = discord.start_thread(GENERAL, None, "t", false);
    let (post, _) =
        discord.create_forum_post(FORUM, "ada", "a bug", &["bug"], NewMessage { content: "it breaks".into(), ..Default::default() });
    http.create_message(id(thread)).content("in the thread").await.unwrap();
    http.create_message(id(post)).content("in the post").await.unwrap();
}

#[tokio::test]
async fn mentions_carry_the_users_their_members_and_the_roles() {
    let discord = loopback(with_forum()).await;
    let http = client(&discord);
    let (bot, bob) = (bot(&discord), Loopback::user_id("bob"));
    discord.set_nick("bob", Some("Bobby"));
    discord.set_member_roles("bob", &[MODS]);
    let mut gateway = watching(&discord).await;

    let content = format!("hey <@{bob}> and <@!{bot}>, ask <@&{MODS}>; <@99999> is nobody");
    let asked = discord.user_message(NewMessage { channel_id: GENERAL, author: "ada".into(), content, ..Default::default() });
    let seen = gateway.dispatches(QUIET).await;
    let message: MessageCreate = payload(&seen, 0);
    assert_eq!(message.mentions.iter().map(|m| m.id.get()).collect::<Vec<_>>(), vec![bot, bob]);
    let bobs = message.mentions[1].member.as_ref().unwrap();
    assert_eq!((bobs.nick.as_deref(), bobs.roles.iter().map(|r| r.get()).collect::<Vec<_>>()), (Some("Bobby"), vec![MODS]));
    assert_eq!(message.mentions[0].member.as_ref().map(|m| m.roles.len()), Some(1), "his own member with his role");
    assert_eq!(message.mention_roles.iter().map(|r| r.get()).collect::<Vec<_>>(), vec![MODS]);
    let author = message.member.as_ref().unwrap();
    assert!(author.nick.is_none() && author.joined_at.is_some());
    assert_eq!(seen[0].1["d"]["member"]["nick"], Value::Null, "no nickname is null, not absent");

    // Bob's own message carries his nickname; REST answers mentions without members.
    discord.user_message(NewMessage { channel_id: GENERAL, author: "bob".into(), content: "hi".into(), ..Default::default() });
    let seen = gateway.dispatches(QUIET).await;
    let own: MessageCreate = payload(&seen, 0);
    assert_eq!(own.member.as_ref().and_then(|m| m.nick.as_deref()), Some("Bobby"));
    let fetched = http.message(id(GENERAL), id(asked)).await.unwrap().model().await.unwrap();
    assert_eq!(fetched.mentions.len(), 2);
    assert!(fetched.mentions.iter().all(|m| m.member.is_none()) && fetched.member.is_none());
    let member = http.guild_member(id(GUILD), id(bob)).await.unwrap().model().await.unwrap();
    assert_eq!(member.nick.as_deref(), Some("Bobby"));
}

#[tokio::test]
async fn rich_poll_sticker_and_embed_parse_as_twilight_reads_them_and_message_content_gates_them() {
    let discord = loopback(LoopbackConfig::default()).await;
    let http = client(&discord);
    let mut gateway = watching(&discord).await;
    let mut blind = session(&discord, GUILDS | GUILD_MESSAGES).await;

    let poll = NewPoll { question: "Lunch?".into(), answers: vec!["soup".into(), "salad".into()] };
    let embed = NewEmbed { title: Some("Menu".into()), description: Some("today's".into()), url: Some("https://example.com/menu".into()) };
    let asked = discord.user_message(NewMessage {
        channel_id: GENERAL,
        author: "ada".into(),
        content: "vote".into(),
        stickers: vec!["wave".into()],
        poll: Some(poll),
        embeds: vec![embed],
        ..Default::default()
    });
    let check = |m: &Message| {
        let poll = m.poll.as_ref().unwrap();
        assert_eq!(poll.question.text.as_deref(), Some("Lunch?"));
        let answers: Vec<(u8, Option<&str>)> = poll.answers.iter().map(|a| (a.answer_id, a.poll_media.text.as_deref())).collect();
        assert_eq!(answers, vec![(1, Some("soup")), (2, Some("salad"))]);
        assert!(poll.expiry.is_some() && !poll.allow_multiselect);
        assert_eq!((m.sticker_items[0].name.as_str(), m.sticker_items[0].format_type), ("wave", StickerFormatType::Png));
        assert_eq!((m.embeds[0].kind.as_str(), m.embeds[0].title.as_deref()), ("rich", Some("Menu")));
        assert_eq!(m.embeds[0].url.as_deref(), Some("https://example.com/menu"));
    };
    let seen = gateway.dispatches(QUIET).await;
    let message: MessageCreate = payload(&seen, 0);
    check(&message.0);
    check(&http.message(id(GENERAL), id(asked)).await.unwrap().model().await.unwrap());

    let seen = blind.dispatches(QUIET).await;
    let message: MessageCreate = payload(&seen, 0);
    assert!(message.content.is_empty() && message.poll.is_none() && message.embeds.is_empty(), "Message Content gates them");
    assert_eq!(message.sticker_items.len(), 1);
}

#[tokio::test]
async fn rich_forward_carries_a_snapshot_of_the_original() {
    let discord = loopback(LoopbackConfig::default()).await;
    let http = client(&discord);
    let mut gateway = watching(&discord).await;
    let original = discord.user_message(NewMessage {
        channel_id: GENERAL,
        author: "ada".into(),
        content: "look at this".into(),
        stickers: vec!["wave".into()],
        ..Default::default()
    });
    let forward = discord.user_message(NewMessage {
        channel_id: LOBBIES,
        author: "bob".into(),
        content: "not sent".into(),
        forward: Some(original),
        ..Default::default()
    });
    let seen = gateway.dispatches(QUIET).await;
    let check = |m: &Message| {
        assert!(m.content.is_empty(), "a forward says nothing of its own");
        let reference = m.reference.as_ref().unwrap();
        assert_eq!(reference.kind, MessageReferenceType::Forward);
        assert_eq!((reference.message_id.map(|i| i.get()), reference.channel_id.map(|c| c.get())), (Some(original), Some(GENERAL)));
        assert_eq!(reference.guild_id.map(|g| g.get()), Some(GUILD));
        let snapshot = &m.message_snapshots[0].message;
        assert_eq!(snapshot.content, "look at this");
        assert_eq!(snapshot.sticker_items.len(), 1);
        assert!(m.referenced_message.is_none());
    };
    let message: MessageCreate = payload(&seen, 1);
    assert_eq!(message.id.get(), forward);
    check(&message.0);
    check(&http.message(id(LOBBIES), id(forward)).await.unwrap().model().await.unwrap());
}

#[tokio::test]
async fn rich_reply_carries_its_referenced_message_null_once_deleted_or_none_when_unfetched() {
    let discord = loopback(LoopbackConfig::default()).await;
    let http = client(&discord);
    let mut gateway = watching(&discord).await;
    let root = said(&discord, GENERAL, "root");
    let reply = |omit: bool| NewMessage {
        channel_id: GENERAL,
        author: "bob".into(),
        content: "a reply".into(),
        reply_to: Some(root),
        omit_referenced: omit,
        ..Default::default()
    };
    discord.user_message(reply(false));
    let unfetched = discord.user_message(reply(true));
    let seen = gateway.dispatches(QUIET).await;
    let fetched = &seen[1].1["d"];
    assert_eq!((fetched["type"].as_u64(), fetched["referenced_message"]["id"].as_str()), (Some(19), Some(root.to_string().as_str())));
    assert_eq!(fetched["message_reference"]["message_id"].as_str(), Some(root.to_string().as_str()));
    assert!(seen[2].1["d"].get("referenced_message").is_none(), "unfetched: no key at all");
    let _: MessageCreate = payload(&seen, 2);
    // Fetched over REST, a reply carries what it answers.
    let got = http.message(id(GENERAL), id(unfetched)).await.unwrap().model().await.unwrap();
    assert_eq!(got.referenced_message.map(|m| m.id.get()), Some(root));

    discord.user_delete(root);
    gateway.dispatches(QUIET).await;
    discord.user_message(reply(false));
    let seen = gateway.dispatches(QUIET).await;
    assert_eq!(seen[0].1["d"].get("referenced_message"), Some(&Value::Null), "deleted: null");
    assert_eq!(refusal(http.message(id(GENERAL), id(root)).await), (404, 10008));
}

#[tokio::test]
async fn thread_the_bot_starts_through_rest_has_him_as_owner_and_member() {
    let discord = loopback(LoopbackConfig::default()).await;
    let http = client(&discord);
    let root = said(&discord, GENERAL, "worth a thread");
    let mut gateway = watching(&discord).await;

    let thread = http.create_thread_from_message(id(GENERAL), id(root), "from rest").await.unwrap().model().await.unwrap();
    assert_eq!((thread.id.get(), thread.kind), (root, ChannelType::PublicThread));
    assert_eq!(thread.owner_id.map(|o| o.get()), Some(bot(&discord)));
    assert!(thread.member.is_some());
    let seen = gateway.dispatches(QUIET).await;
    assert_eq!(kinds(&seen), vec!["THREAD_CREATE", "THREAD_MEMBERS_UPDATE"]);
    assert_eq!(refusal(http.create_thread_from_message(id(GENERAL), id(root), "again").await), (400, 160004));

    let private = http.create_thread(id(GENERAL), "quiet", ChannelType::PrivateThread).await.unwrap().model().await.unwrap();
    assert_eq!(private.kind, ChannelType::PrivateThread);
    http.create_message(private.id).content("in my own private thread").await.unwrap();
}

#[tokio::test]
async fn thread_control_routes_start_archive_post_and_delete() {
    let discord = loopback(with_forum()).await;
    let body = format!(r#"{{"parent": {GENERAL}, "name": "from the page"}}"#);
    let (status, answer) = raw(&discord, "POST", "/control/threads", false, &body).await;
    assert_eq!(status, 200, "{answer}");
    let thread = answer["id"].as_u64().unwrap();
    let (status, _) = raw(&discord, "POST", &format!("/control/threads/{thread}/archive"), false, r#"{"archived": true}"#).await;
    assert_eq!(status, 200);
    assert!(discord.thread(thread).unwrap().archived);
    let (_, rooms) = raw(&discord, "GET", "/control/rooms", false, "").await;
    assert_eq!(rooms["threads"][0]["id"].as_u64(), Some(thread));
    assert_eq!(rooms["threads"][0]["parent"].as_u64(), Some(GENERAL));

    let post = format!(r#"{{"forum": {FORUM}, "author": "ada", "title": "Idea", "tags": ["idea"], "content": "more trains"}}"#);
    let (status, answer) = raw(&discord, "POST", "/control/forum-posts", false, &post).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["thread"], answer["message"]);
    let body = format!(r#"{{"channel_id": {FORUM}, "author": "ada", "content": "plain"}}"#);
    assert_eq!(raw(&discord, "POST", "/control/messages", false, &body).await.0, 400, "a forum takes posts");
    let body = format!(
        r#"{{"channel_id": {GENERAL}, "author": "ada", "content": "", "poll": {{"question": "q", "answers": ["a"]}}, "stickers": ["wave"]}}"#
    );
    let (status, answer) = raw(&discord, "POST", "/control/messages", false, &body).await;
    assert_eq!(status, 200);
    let stored = discord.messages(GENERAL).into_iter().find(|m| Some(m.id) == answer["id"].as_u64()).unwrap();
    assert_eq!((stored.poll.map(|p| p.answers), stored.stickers), (Some(vec!["a".to_owned()]), vec!["wave".to_owned()]));

    let (status, _) = raw(&discord, "POST", "/control/members", false, r#"{"author": "bob", "nick": "Bobby", "roles": [160]}"#).await;
    assert_eq!(status, 200);
    let member = client(&discord).guild_member(id(GUILD), id(Loopback::user_id("bob"))).await.unwrap().model().await.unwrap();
    assert_eq!((member.nick.as_deref(), member.roles.len()), (Some("Bobby"), 1));

    assert_eq!(raw(&discord, "DELETE", &format!("/control/threads/{thread}"), false, "").await.0, 204);
    assert_eq!(raw(&discord, "DELETE", &format!("/control/threads/{thread}"), false, "").await.0, 404);
    let body = format!(r#"{{"parent": {HANGOUT}, "name": "voice"}}"#);
    assert_eq!(raw(&discord, "POST", "/control/threads", false, &body).await.0, 400);
}
