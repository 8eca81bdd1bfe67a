//! The guild routes `clankie doctor` reads, answered as Discord answers them and read with
//! twilight's client into twilight-model's types.

use clankie_discord_loopback::permission::*;
use clankie_discord_loopback::{BOT_ROLE, GUILD_OWNER, LoopbackConfig, OTHER_GUILD, OverwriteSpec};
use twilight_model::channel::ChannelType;
use twilight_model::channel::permission_overwrite::PermissionOverwriteType;
use twilight_model::guild::Permissions;

use crate::*;

#[tokio::test]
async fn the_guild_routes_deserialize_as_twilight_models_and_leave_out_the_absent_guild() {
    let mut config = with_absent_guild();
    let general = config.channels.iter_mut().find(|c| c.id == GENERAL).unwrap();
    general.overwrites.push(OverwriteSpec { id: GUILD, member: false, allow: 0, deny: MENTION_EVERYONE });
    let discord = loopback(config).await;
    let http = client(&discord);

    let guilds = http.current_user_guilds().await.unwrap().models().await.unwrap();
    let ids: Vec<u64> = guilds.iter().map(|g| g.id.get()).collect();
    assert_eq!(ids, vec![GUILD, OTHER_GUILD], "the guild the bot was not invited to is not listed");
    assert_eq!(guilds[0].permissions, Permissions::from_bits_truncate(DEFAULT_EVERYONE | BOT_INVITE));
    assert!(!guilds[0].owner);

    let guild = http.guild(id(GUILD)).await.unwrap().model().await.unwrap();
    assert_eq!((guild.name.as_str(), guild.owner_id.get()), ("Loopback", GUILD_OWNER));
    let everyone = guild.roles.iter().find(|r| r.id.get() == GUILD).unwrap();
    assert_eq!(everyone.permissions, Permissions::from_bits_truncate(DEFAULT_EVERYONE));
    let bot_role = guild.roles.iter().find(|r| r.id.get() == BOT_ROLE).unwrap();
    assert_eq!((bot_role.permissions.bits(), bot_role.managed), (274_881_154_112, true));
    assert_eq!(bot_role.tags.as_ref().and_then(|t| t.bot_id).map(|b| b.get()), Some(discord.config().bot_user_id));

    let channels = http.guild_channels(id(GUILD)).await.unwrap().models().await.unwrap();
    let kinds: Vec<(u64, ChannelType)> = channels.iter().map(|c| (c.id.get(), c.kind)).collect();
    assert_eq!(kinds, vec![(GENERAL, ChannelType::GuildText), (LOBBIES, ChannelType::GuildText), (HANGOUT, ChannelType::GuildVoice)]);
    let overwrites = channels[0].permission_overwrites.clone().unwrap_or_default();
    assert_eq!(overwrites.len(), 1);
    assert_eq!((overwrites[0].id.get(), overwrites[0].kind), (GUILD, PermissionOverwriteType::Role));
    assert_eq!(overwrites[0].deny, Permissions::MENTION_EVERYONE);

    let roles = http.roles(id(GUILD)).await.unwrap().models().await.unwrap();
    assert_eq!(roles.iter().map(|r| r.id.get()).collect::<Vec<_>>(), vec![GUILD, BOT_ROLE]);

    let bot = discord.config().bot_user_id;
    let member = http.guild_member(id(GUILD), id(bot)).await.unwrap().model().await.unwrap();
    assert_eq!(member.user.id.get(), bot);
    assert_eq!(member.roles.iter().map(|r| r.get()).collect::<Vec<_>>(), vec![BOT_ROLE]);
    assert!(member.joined_at.is_some());
    assert_eq!(refusal(http.guild_member(id(GUILD), id(GUILD_OWNER)).await), (404, 10007));

    assert_eq!(refusal(http.guild(id(ABSENT_GUILD)).await), (403, 50001));
    assert_eq!(refusal(http.guild_channels(id(ABSENT_GUILD)).await), (403, 50001));
    assert_eq!(refusal(http.roles(id(ABSENT_GUILD)).await), (403, 50001));
    assert_eq!(refusal(http.guild_member(id(ABSENT_GUILD), id(bot)).await), (403, 50001));
    assert_eq!(refusal(http.guild(id(4_000)).await), (404, 10004));
}

#[tokio::test]
async fn the_guild_routes_want_the_bots_token() {
    let discord = loopback(LoopbackConfig::default()).await;
    for path in ["/api/v10/users/@me/guilds", "/api/v10/guilds/100", "/api/v10/guilds/100/channels", "/api/v10/guilds/100/roles"] {
        let (status, body) = raw(&discord, "GET", path, false, "").await;
        assert_eq!((status, body["code"].as_u64()), (401, Some(0)), "{path}");
    }
}

#[tokio::test]
async fn a_channel_the_bot_cannot_view_is_left_out_of_the_guilds_channels() {
    let discord = loopback(LoopbackConfig::default()).await;
    discord.set_bot_overwrite(LOBBIES, 0, VIEW_CHANNEL).unwrap();
    let channels = client(&discord).guild_channels(id(GUILD)).await.unwrap().models().await.unwrap();
    let ids: Vec<u64> = channels.iter().map(|c| c.id.get()).collect();
    assert_eq!(ids, vec![GENERAL, HANGOUT]);
}

#[tokio::test]
async fn registered_commands_are_listed_as_twilight_commands() {
    let discord = loopback(LoopbackConfig::default()).await;
    let http = client(&discord);
    let app = discord.config().bot_user_id;
    let command =
        r#"[{"name":"clankie","description":"Talk to him","type":1,"options":[{"type":1,"name":"status","description":"How he is"}]}]"#;
    let (status, _) = raw(&discord, "PUT", &format!("/api/v10/applications/{app}/commands"), true, command).await;
    assert_eq!(status, 200);
    let (status, _) = raw(&discord, "PUT", &format!("/api/v10/applications/{app}/guilds/{GUILD}/commands"), true, command).await;
    assert_eq!(status, 200);

    let global = http.interaction(id(app)).global_commands().await.unwrap().models().await.unwrap();
    assert_eq!(global.len(), 1);
    assert_eq!((global[0].name.as_str(), global[0].application_id.map(|a| a.get())), ("clankie", Some(app)));
    assert_eq!(global[0].options[0].name, "status");
    assert!(global[0].id.is_some() && global[0].default_member_permissions.is_none());

    let in_guild = http.interaction(id(app)).guild_commands(id(GUILD)).await.unwrap().models().await.unwrap();
    assert_eq!(in_guild[0].guild_id.map(|g| g.get()), Some(GUILD));
    let elsewhere = http.interaction(id(app)).guild_commands(id(OTHER_GUILD)).await.unwrap().models().await.unwrap();
    assert!(elsewhere.is_empty());
}

#[tokio::test]
async fn commands_of_a_guild_the_bot_is_not_in_are_refused_50001() {
    let discord = loopback(with_absent_guild()).await;
    let app = discord.config().bot_user_id;
    let path = format!("/api/v10/applications/{app}/guilds/{ABSENT_GUILD}/commands");
    let (status, body) = raw(&discord, "PUT", &path, true, r#"[{"name":"clankie","description":"x"}]"#).await;
    assert_eq!((status, body["code"].as_u64()), (403, Some(50001)));
    assert_eq!(refusal(client(&discord).interaction(id(app)).guild_commands(id(ABSENT_GUILD)).await), (403, 50001));
}
