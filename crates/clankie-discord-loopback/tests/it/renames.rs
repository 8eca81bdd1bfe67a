//! What moderators change after the start: a thread renamed, a forum post's tags changed, a
//! channel renamed. Each reaches the bot as the whole object (THREAD_UPDATE, CHANNEL_UPDATE, read
//! as twilight-model reads them), and REST and a later GUILD_CREATE show it as it stands.

use std::time::Duration;

use clankie_discord_loopback::{Loopback, LoopbackConfig, NewMessage};
use serde_json::Value;
use twilight_model::channel::Channel;
use twilight_model::gateway::payload::incoming::{GuildCreate, ThreadUpdate};

use crate::*;

const GUILDS: u64 = 1 << 0;
const QUIET: Duration = Duration::from_millis(400);
const FORUM: u64 = 400;

/// A session with the GUILDS intent, past READY and the GUILD_CREATEs it got.
async fn watching(discord: &Loopback) -> (Gateway, Vec<(String, Value)>) {
    let mut gateway = Gateway::connect(discord).await;
    gateway.identify(discord, GUILDS).await;
    let seen = gateway.dispatches(QUIET).await;
    (gateway, seen)
}

/// The only dispatch that arrives next, which must be of kind `t`.
async fn only<T: serde::de::DeserializeOwned>(gateway: &mut Gateway, t: &str) -> T {
    let seen = gateway.dispatches(QUIET).await;
    assert_eq!(seen.iter().map(|(t, _)| t.as_str()).collect::<Vec<_>>(), vec![t]);
    serde_json::from_value(seen[0].1["d"].clone()).unwrap()
}

#[tokio::test]
async fn rename_thread_and_post_tags_dispatch_thread_update_with_the_whole_thread() {
    let discord = loopback(crate::threads::with_forum()).await;
    let http = client(&discord);
    let thread = discord.start_thread(GENERAL, None, "plans", false);
    let first = NewMessage { content: "trains".into(), ..Default::default() };
    let (post, _) = discord.create_forum_post(FORUM, "ada", "Late trains", &["bug"], first);
    let (mut gateway, _) = watching(&discord).await;

    assert!(discord.rename_thread(thread, "better plans"));
    let update: ThreadUpdate = only(&mut gateway, "THREAD_UPDATE").await;
    assert_eq!((update.id.get(), update.name.as_deref()), (thread, Some("better plans")));
    assert_eq!(update.parent_id.map(|p| p.get()), Some(GENERAL));
    assert!(update.thread_metadata.as_ref().is_some_and(|m| !m.archived));
    assert_eq!(http.channel(id(thread)).await.unwrap().model().await.unwrap().name.as_deref(), Some("better plans"));
    assert!(discord.rename_thread(thread, "better plans"), "the same name again is no change");
    assert!(gateway.dispatches(QUIET).await.is_empty());
    assert!(!discord.rename_thread(4_000, "nowhere") && !discord.rename_thread(thread, ""));

    let forum = discord.config().channels.iter().find(|c| c.id == FORUM).unwrap().clone();
    let (bug, idea) = (forum.tag_id("bug").unwrap(), forum.tag_id("idea").unwrap());
    assert!(discord.set_post_tags(post, &["idea", "bug"]));
    let update: ThreadUpdate = only(&mut gateway, "THREAD_UPDATE").await;
    let applied = |t: &Channel| t.applied_tags.as_ref().map(|t| t.iter().map(|t| t.get()).collect::<Vec<_>>());
    assert_eq!((update.id.get(), update.name.as_deref()), (post, Some("Late trains")));
    assert_eq!(applied(&update.0), Some(vec![idea, bug]));
    assert_eq!(applied(&http.channel(id(post)).await.unwrap().model().await.unwrap()), Some(vec![idea, bug]));
    assert!(!discord.set_post_tags(post, &["idea", "nope"]), "a tag the forum lacks");
    assert!(!discord.set_post_tags(thread, &[]), "not a forum post");
    assert!(gateway.dispatches(QUIET).await.is_empty());
    assert_eq!(discord.thread(post).unwrap().applied_tags, Some(vec![idea, bug]));
}

#[tokio::test]
async fn rename_channel_dispatches_channel_update_and_rest_and_guild_create_show_the_new_name() {
    let discord = loopback(LoopbackConfig::default()).await;
    let http = client(&discord);
    let (mut gateway, _) = watching(&discord).await;
    assert!(discord.rename_channel(GENERAL, "lounge"));
    let update: Channel = only(&mut gateway, "CHANNEL_UPDATE").await;
    assert_eq!((update.id.get(), update.name.as_deref()), (GENERAL, Some("lounge")));
    assert_eq!(update.guild_id.map(|g| g.get()), Some(GUILD));
    assert!(update.permission_overwrites.is_some(), "the whole channel, as GET /channels/{{id}} answers it");
    assert_eq!(http.channel(id(GENERAL)).await.unwrap().model().await.unwrap().name.as_deref(), Some("lounge"));
    let listed = http.guild_channels(id(GUILD)).await.unwrap().model().await.unwrap();
    assert!(listed.iter().any(|c| c.id.get() == GENERAL && c.name.as_deref() == Some("lounge")));

    let (_, seen) = watching(&discord).await;
    let GuildCreate::Available(guild) = serde_json::from_value(seen[1].1["d"].clone()).unwrap() else { panic!("unavailable") };
    assert!(guild.channels.iter().any(|c| c.id.get() == GENERAL && c.name.as_deref() == Some("lounge")));
    assert_eq!(guild.owner_id.get(), discord.config().owner_id);
    assert!(!guild.roles.is_empty());

    let thread = discord.start_thread(GENERAL, None, "plans", false);
    assert!(!discord.rename_channel(DM, "dm") && !discord.rename_channel(thread, "no") && !discord.rename_channel(4_000, "no"));
    assert!(!discord.rename_channel(LOBBIES, ""));
}

#[tokio::test]
async fn rename_control_routes_rename_threads_and_channels_and_tag_posts() {
    let discord = loopback(crate::threads::with_forum()).await;
    let thread = discord.start_thread(GENERAL, None, "plans", false);
    let (post, _) = discord.create_forum_post(FORUM, "ada", "Late trains", &[], NewMessage { content: "x".into(), ..Default::default() });

    let (status, answer) = raw(&discord, "POST", &format!("/control/threads/{thread}/name"), false, r#"{"name": "renamed"}"#).await;
    assert_eq!((status, answer["name"].as_str()), (200, Some("renamed")));
    assert_eq!(discord.thread(thread).unwrap().name, "renamed");
    assert_eq!(raw(&discord, "POST", "/control/threads/4000/name", false, r#"{"name": "x"}"#).await.0, 404);
    assert_eq!(raw(&discord, "POST", &format!("/control/threads/{thread}/name"), false, r#"{"name": " "}"#).await.0, 400);

    let (status, _) = raw(&discord, "POST", &format!("/control/threads/{post}/tags"), false, r#"{"tags": ["idea"]}"#).await;
    assert_eq!(status, 200);
    assert_eq!(discord.thread(post).unwrap().applied_tags.map(|t| t.len()), Some(1));
    assert_eq!(raw(&discord, "POST", &format!("/control/threads/{post}/tags"), false, r#"{"tags": ["nope"]}"#).await.0, 400);
    assert_eq!(raw(&discord, "POST", &format!("/control/threads/{thread}/tags"), false, r#"{"tags": []}"#).await.0, 400);

    let (status, _) = raw(&discord, "POST", &format!("/control/channels/{LOBBIES}/name"), false, r#"{"name": "hall"}"#).await;
    assert_eq!(status, 200);
    let (_, rooms) = raw(&discord, "GET", "/control/rooms", false, "").await;
    let names: Vec<&str> = rooms["channels"].as_array().unwrap().iter().filter_map(|c| c["name"].as_str()).collect();
    assert!(names.contains(&"hall") && !names.contains(&"lobbies"), "{names:?}");
    assert_eq!(raw(&discord, "POST", &format!("/control/channels/{thread}/name"), false, r#"{"name": "x"}"#).await.0, 404);
}
