//! The gateway after READY: a GUILD_CREATE per guild the bot is in for a session with the
//! GUILDS intent (none without it), read as twilight-model's `GuildCreate`; events of a channel
//! the bot cannot view never reach it; and the Message Content switch as the portal flips it.

use std::time::Duration;

use clankie_discord_loopback::interactions::RunCommand;
use clankie_discord_loopback::permission::*;
use clankie_discord_loopback::{BOT_ROLE, LoopbackConfig, NewMessage, OTHER_GUILD};
use twilight_model::channel::permission_overwrite::PermissionOverwriteType;
use twilight_model::gateway::payload::incoming::{GuildCreate, Ready};
use twilight_model::guild::Permissions;

use crate::*;

const GUILDS: u64 = 1 << 0;
const GUILD_MESSAGES: u64 = 1 << 9;
const MESSAGE_CONTENT: u64 = 1 << 15;
const QUIET: Duration = Duration::from_millis(400);

fn guild_of(create: &serde_json::Value) -> twilight_model::guild::Guild {
    match serde_json::from_value::<GuildCreate>(create["d"].clone()).unwrap() {
        GuildCreate::Available(g) => g,
        GuildCreate::Unavailable(g) => panic!("guild {} arrived unavailable", g.id),
    }
}

#[tokio::test]
async fn a_session_with_guilds_gets_a_guild_create_per_guild_after_ready_with_the_bots_member_and_the_overwrites() {
    let discord = loopback(with_absent_guild()).await;
    discord.set_bot_overwrite(GENERAL, 0, SEND_MESSAGES).unwrap();
    discord.set_bot_overwrite(LOBBIES, 0, VIEW_CHANNEL).unwrap();
    let mut gateway = Gateway::connect(&discord).await;
    gateway.identify(&discord, GUILDS | GUILD_MESSAGES).await;
    let seen = gateway.dispatches(QUIET).await;
    let kinds: Vec<&str> = seen.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(kinds, vec!["READY", "GUILD_CREATE", "GUILD_CREATE"]);

    let ready: Ready = serde_json::from_value(seen[0].1["d"].clone()).unwrap();
    let unavailable: Vec<u64> = ready.guilds.iter().map(|g| g.id.get()).collect();
    assert_eq!(unavailable, vec![GUILD, OTHER_GUILD], "READY lists only the guilds the bot is in");

    let main = guild_of(&seen[1].1);
    assert_eq!((main.id.get(), main.unavailable, main.large), (GUILD, Some(false), false));
    let bot = discord.config().bot_user_id;
    assert_eq!(main.members.len(), 1);
    assert_eq!(main.members[0].user.id.get(), bot);
    assert_eq!(main.members[0].roles.iter().map(|r| r.get()).collect::<Vec<_>>(), vec![BOT_ROLE]);
    assert!(main.roles.iter().any(|r| r.id.get() == BOT_ROLE && r.permissions.bits() == BOT_INVITE));
    let general = main.channels.iter().find(|c| c.id.get() == GENERAL).unwrap();
    let overwrites = general.permission_overwrites.clone().unwrap_or_default();
    assert_eq!(overwrites.len(), 1);
    assert_eq!((overwrites[0].id.get(), overwrites[0].kind), (bot, PermissionOverwriteType::Member));
    assert_eq!(overwrites[0].deny, Permissions::SEND_MESSAGES);
    // A channel the bot cannot view arrives obfuscated, as Discord sends it since 2026-11-16.
    let lobbies = main.channels.iter().find(|c| c.id.get() == LOBBIES).unwrap();
    assert_eq!(lobbies.name.as_deref(), Some("___hidden___"));
    let hidden = lobbies.permission_overwrites.clone().unwrap_or_default();
    assert_eq!((hidden[0].id.get(), hidden[0].deny), (GUILD, Permissions::VIEW_CHANNEL));
    assert_eq!(guild_of(&seen[2].1).id.get(), OTHER_GUILD);
}

#[tokio::test]
async fn a_session_without_guilds_gets_no_guild_create() {
    let discord = loopback(LoopbackConfig::default()).await;
    let mut gateway = Gateway::connect(&discord).await;
    gateway.identify(&discord, GUILD_MESSAGES).await;
    let seen = gateway.dispatches(QUIET).await;
    let kinds: Vec<&str> = seen.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(kinds, vec!["READY"]);
    // Nor a CHANNEL_UPDATE, which comes under GUILDS too.
    discord.set_bot_overwrite(GENERAL, 0, SEND_MESSAGES).unwrap();
    assert!(gateway.dispatches(QUIET).await.is_empty());
}

#[tokio::test]
async fn a_resume_replays_the_guild_creates_after_ready() {
    let discord = loopback(LoopbackConfig::default()).await;
    let mut gateway = Gateway::connect(&discord).await;
    gateway.identify(&discord, GUILDS).await;
    let seen = gateway.dispatches(QUIET).await;
    let session = seen[0].1["d"]["session_id"].as_str().unwrap().to_owned();
    drop(gateway);

    let mut again = Gateway::connect(&discord).await;
    let resume = serde_json::json!({ "token": discord.config().token, "session_id": session, "seq": 1 });
    again.send(&serde_json::json!({ "op": 6, "d": resume })).await;
    let replayed = again.dispatches(QUIET).await;
    let kinds: Vec<(&str, u64)> = replayed.iter().map(|(t, v)| (t.as_str(), v["s"].as_u64().unwrap())).collect();
    assert_eq!(kinds, vec![("GUILD_CREATE", 2), ("GUILD_CREATE", 3), ("RESUMED", 4)]);
}

#[tokio::test]
async fn an_overwrite_change_dispatches_channel_update_and_messages_of_a_hidden_channel_never_arrive() {
    let discord = loopback(LoopbackConfig::default()).await;
    let mut gateway = Gateway::connect(&discord).await;
    gateway.identify(&discord, GUILDS | GUILD_MESSAGES | MESSAGE_CONTENT).await;
    gateway.dispatches(QUIET).await;

    discord.set_bot_overwrite(LOBBIES, 0, VIEW_CHANNEL).unwrap();
    let say = |channel: u64, content: &str| NewMessage {
        channel_id: channel,
        author: "ada".into(),
        content: content.into(),
        ..Default::default()
    };
    discord.user_message(say(LOBBIES, "behind his back"));
    discord.user_message(say(GENERAL, "to his face"));
    let seen = gateway.dispatches(QUIET).await;
    let kinds: Vec<&str> = seen.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(kinds, vec!["CHANNEL_UPDATE", "MESSAGE_CREATE"]);
    let update: twilight_model::channel::Channel = serde_json::from_value(seen[0].1["d"].clone()).unwrap();
    assert_eq!((update.id.get(), update.name.as_deref()), (LOBBIES, Some("___hidden___")));
    assert_eq!(seen[1].1["d"]["content"], "to his face");
    // The message in the hidden channel was still written: only the bot does not see it.
    assert_eq!(discord.messages(LOBBIES).len(), 1);

    discord.set_bot_overwrite(LOBBIES, 0, 0).unwrap();
    let seen = gateway.dispatches(QUIET).await;
    let update: twilight_model::channel::Channel = serde_json::from_value(seen[0].1["d"].clone()).unwrap();
    assert_eq!(update.name.as_deref(), Some("lobbies"), "viewable again, the channel comes back whole");
}

#[tokio::test]
async fn message_content_switched_off_at_run_time_closes_an_identify_asking_for_it_with_4014() {
    let discord = loopback(LoopbackConfig::default()).await;
    discord.set_message_content_intent(false);
    let mut gateway = Gateway::connect(&discord).await;
    gateway.identify(&discord, GUILD_MESSAGES | MESSAGE_CONTENT).await;
    let frame = gateway.next(Duration::from_secs(5)).await;
    assert!(matches!(frame, Some(Frame::Closed(Some(4014)))), "{frame:?}");

    discord.set_message_content_intent(true);
    let mut gateway = Gateway::connect(&discord).await;
    gateway.identify(&discord, GUILD_MESSAGES | MESSAGE_CONTENT).await;
    let seen = gateway.dispatches(QUIET).await;
    assert_eq!(seen.first().map(|(t, _)| t.as_str()), Some("READY"));
}

/// The INTERACTION_CREATE `author`'s `/clankie remind` in `channel` dispatched, read as twilight reads it.
async fn command_seen(
    discord: &clankie_discord_loopback::Loopback,
    gateway: &mut Gateway,
    channel: u64,
    author: &str,
) -> twilight_model::application::interaction::Interaction {
    let options = [("what", serde_json::json!("tea")), ("when", serde_json::json!("in 10 minutes")), ("dm", serde_json::json!(true))];
    let options = options.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
    let command = RunCommand { channel_id: channel, author: author.into(), subcommand: "remind".into(), options };
    discord.run_command(command).unwrap();
    let seen = gateway.dispatches(QUIET).await;
    let (_, created) = seen.iter().find(|(t, _)| t == "INTERACTION_CREATE").expect("an INTERACTION_CREATE");
    serde_json::from_value(created["d"].clone()).expect("an interaction twilight reads")
}

#[tokio::test]
async fn interactions_carry_the_members_permissions_in_the_channel() {
    let discord = loopback(LoopbackConfig::default()).await;
    let mut gateway = Gateway::connect(&discord).await;
    gateway.identify(&discord, GUILDS | GUILD_MESSAGES).await;
    gateway.dispatches(QUIET).await;
    let (ada, bob) = (clankie_discord_loopback::Loopback::user_id("ada"), clankie_discord_loopback::Loopback::user_id("bob"));

    let now = discord.set_member_overwrite(GENERAL, ada, 0, SEND_MESSAGES).unwrap();
    assert_eq!(now & SEND_MESSAGES, 0);
    let seen = gateway.dispatches(QUIET).await;
    let kinds: Vec<&str> = seen.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(kinds, vec!["CHANNEL_UPDATE"], "the bot is shown the changed overwrites");
    let update: twilight_model::channel::Channel = serde_json::from_value(seen[0].1["d"].clone()).unwrap();
    let theirs = update.permission_overwrites.unwrap_or_default().into_iter().find(|o| o.id.get() == ada).expect("ada's overwrite");
    assert_eq!((theirs.kind, theirs.deny.bits()), (PermissionOverwriteType::Member, SEND_MESSAGES));
    assert_ne!(discord.bot_permissions(GENERAL).unwrap() & SEND_MESSAGES, 0, "the bot's own are untouched");

    let adas = command_seen(&discord, &mut gateway, GENERAL, "ada").await;
    let perms = adas.member.and_then(|m| m.permissions).expect("a member's permissions");
    assert!(!perms.contains(Permissions::SEND_MESSAGES), "{perms:?}");
    assert!(perms.contains(Permissions::VIEW_CHANNEL));
    assert_eq!(Some(perms.bits()), discord.member_permissions(GENERAL, ada));

    let bobs = command_seen(&discord, &mut gateway, GENERAL, "bob").await;
    let perms = bobs.member.and_then(|m| m.permissions).expect("a member's permissions");
    assert_eq!(perms.bits(), DEFAULT_EVERYONE, "without overwrites a member has @everyone's");
    assert_eq!(discord.member_permissions(LOBBIES, ada), Some(DEFAULT_EVERYONE), "the overwrite is GENERAL's alone");

    // A thread's are its parent's; a DM has no member, and so none.
    let thread = discord.start_thread(GENERAL, None, "plans", false);
    gateway.dispatches(QUIET).await;
    let in_thread = command_seen(&discord, &mut gateway, thread, "ada").await;
    assert_eq!(in_thread.member.and_then(|m| m.permissions).map(|p| p.bits()), discord.member_permissions(GENERAL, ada));
    let in_dm = command_seen(&discord, &mut gateway, DM, "bob").await;
    assert!(in_dm.member.is_none() && in_dm.user.is_some());
    assert_eq!(discord.member_permissions(DM, bob), None);

    discord.set_member_overwrite(GENERAL, ada, 0, 0).unwrap();
    assert_eq!(discord.member_permissions(GENERAL, ada), Some(DEFAULT_EVERYONE), "both 0 removes the overwrite");
}
