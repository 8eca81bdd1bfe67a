//! The control API's switches, so the sandbox can show each refusal at run time.

use clankie_discord_loopback::LoopbackConfig;
use clankie_discord_loopback::permission::*;
use twilight_model::oauth::ApplicationFlags;

use crate::*;

#[tokio::test]
async fn the_control_permissions_route_changes_what_a_post_gets() {
    let discord = loopback(LoopbackConfig::default()).await;
    let http = client(&discord);
    http.create_message(id(GENERAL)).content("before").await.unwrap();

    let body = format!(r#"{{"channel": {GENERAL}, "allow": 0, "deny": {SEND_MESSAGES}}}"#);
    let (status, answer) = raw(&discord, "POST", "/control/permissions", false, &body).await;
    assert_eq!(status, 200);
    let perms = answer["permissions"].as_u64().unwrap();
    assert_eq!(perms & SEND_MESSAGES, 0, "{answer}");
    assert_ne!(perms & VIEW_CHANNEL, 0);
    let (_, read) = raw(&discord, "GET", &format!("/control/permissions?channel={GENERAL}"), false, "").await;
    assert_eq!(read["permissions"].as_u64(), Some(perms));
    assert_eq!(refusal(http.create_message(id(GENERAL)).content("during").await), (403, 50013));

    let body = format!(r#"{{"channel": {GENERAL}, "allow": 0, "deny": 0}}"#);
    let (_, answer) = raw(&discord, "POST", "/control/permissions", false, &body).await;
    assert_ne!(answer["permissions"].as_u64().unwrap() & SEND_MESSAGES, 0, "the overwrite is gone");
    http.create_message(id(GENERAL)).content("after").await.unwrap();
    let posts: Vec<String> = discord.posts(GENERAL).into_iter().map(|p| p.content).collect();
    assert_eq!(posts, vec!["before", "after"]);

    let (status, _) = raw(&discord, "POST", "/control/permissions", false, r#"{"channel": 4000, "deny": 1024}"#).await;
    assert_eq!(status, 404);
    let (status, _) = raw(&discord, "POST", "/control/permissions", false, &format!(r#"{{"channel": {DM}, "deny": 1024}}"#)).await;
    assert_eq!(status, 400, "a DM has no overwrites");
}

#[tokio::test]
async fn the_control_message_content_route_flips_the_applications_flag() {
    let discord = loopback(LoopbackConfig::default()).await;
    let http = client(&discord);
    let flags = |app: twilight_model::oauth::Application| app.flags.unwrap_or(ApplicationFlags::empty());
    let before = flags(http.current_user_application().await.unwrap().model().await.unwrap());
    assert!(before.contains(ApplicationFlags::GATEWAY_MESSAGE_CONTENT_LIMITED));

    let (status, answer) = raw(&discord, "POST", "/control/message_content", false, r#"{"on": false}"#).await;
    assert_eq!((status, answer["on"].as_bool()), (200, Some(false)));
    assert!(!discord.message_content_intent());
    let after = flags(http.current_user_application().await.unwrap().model().await.unwrap());
    assert!(!after.contains(ApplicationFlags::GATEWAY_MESSAGE_CONTENT_LIMITED));
}

#[tokio::test]
async fn the_control_permissions_route_sets_a_users_overwrite_and_leaves_the_bots() {
    let discord = loopback(LoopbackConfig::default()).await;
    let ada = clankie_discord_loopback::Loopback::user_id("ada");
    let body = format!(r#"{{"channel": {GENERAL}, "deny": {SEND_MESSAGES}, "user": "ada"}}"#);
    let (status, answer) = raw(&discord, "POST", "/control/permissions", false, &body).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["permissions"].as_u64(), Some(DEFAULT_EVERYONE & !SEND_MESSAGES & !SENDING), "{answer}");
    assert_eq!(discord.member_permissions(GENERAL, ada), answer["permissions"].as_u64());
    let (_, read) = raw(&discord, "GET", &format!("/control/permissions?channel={GENERAL}&user=ada"), false, "").await;
    assert_eq!(read["permissions"], answer["permissions"]);
    assert_ne!(discord.bot_permissions(GENERAL).unwrap() & SEND_MESSAGES, 0, "the bot's are its own");
    let (_, read) = raw(&discord, "GET", &format!("/control/permissions?channel={DM}&user=ada"), false, "").await;
    assert!(read["permissions"].is_null(), "a DM has no member permissions: {read}");
    let body = format!(r#"{{"channel": {DM}, "deny": 1024, "user": "ada"}}"#);
    assert_eq!(raw(&discord, "POST", "/control/permissions", false, &body).await.0, 400);
}
