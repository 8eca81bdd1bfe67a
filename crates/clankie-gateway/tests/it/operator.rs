//! `operator_`: what Discord refuses for good stops the gateway's asking, and says so. A token
//! Discord refuses and the Message Content intent asked for while the portal's switch is off
//! leave the gateway up and unready, naming the cause on `/readyz` and once in its log with
//! what to do, and it does not come back to Discord over the next 30 s.

use std::time::Duration;

use clankie_discord_loopback::LoopbackConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{Rig, gateway_process};

/// How long a refused gateway is watched for asking again.
const WATCH: Duration = Duration::from_secs(30);

async fn readyz(addr: &str) -> Option<String> {
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    stream.write_all(b"GET /readyz HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n\r\n").await.ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.ok()?;
    Some(answer)
}

/// Starts a gateway with `extra` settings and waits until its `/readyz` names `cause`;
/// returns the process, the address and its log's path.
async fn refused(rig: &Rig, replica: &str, extra: &[(&str, &str)], cause: &str) -> (tokio::process::Child, std::path::PathBuf) {
    let addr = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).unwrap().to_string();
    let mut settings = vec![("CLANKIE_HTTP_ADDR", addr.as_str())];
    settings.extend_from_slice(extra);
    let mut gateway = gateway_process(rig, replica, &settings);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(answer) = readyz(&addr).await
            && answer.starts_with("HTTP/1.1 503")
            && answer.contains(cause)
        {
            println!("operator: /readyz of {replica}: {}", answer.lines().last().unwrap_or_default());
            break;
        }
        assert!(gateway.try_wait().unwrap().is_none(), "the gateway exited instead of staying up unready");
        assert!(tokio::time::Instant::now() < deadline, "/readyz never named {cause}: {:?}", readyz(&addr).await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (gateway, rig.dir.path().join(format!("{replica}.log")))
}

#[tokio::test]
async fn operator_a_wrong_token_leaves_the_gateway_unready_naming_it_and_it_does_not_ask_again() {
    let rig = Rig::new().await;
    let (mut gateway, log) = refused(&rig, "gateway-wrong", &[("CLANKIE_DISCORD_TOKEN", "not-this-bots-token")], "discord_401").await;
    let asked = rig.discord.limit_counts().invalid_total;
    tokio::time::sleep(WATCH).await;
    assert!(gateway.try_wait().unwrap().is_none(), "the gateway exited");
    assert_eq!(rig.discord.limit_counts().invalid_total, asked, "it kept presenting the refused token");
    assert_eq!(rig.discord.identifies_refused(), 0, "it identified with a token REST had refused");
    let log = std::fs::read_to_string(log).unwrap();
    let said: Vec<&str> = log.lines().filter(|l| l.contains("Discord refused the token")).collect();
    assert_eq!(said.len(), 1, "{log}");
    assert!(said[0].contains("ERROR") && said[0].contains("Developer Portal"), "{}", said[0]);
    println!("operator: a wrong token: {asked} request(s) refused, none more in {} s", WATCH.as_secs());
}

#[tokio::test]
async fn operator_message_content_off_leaves_the_gateway_unready_with_4014_and_it_does_not_identify_again() {
    let rig = Rig::with(LoopbackConfig { message_content_intent: false, ..LoopbackConfig::default() }).await;
    let started = std::time::Instant::now();
    let (mut gateway, log) = refused(&rig, "gateway-intent", &[], "discord_close_4014").await;
    let to_unready = started.elapsed();
    assert_eq!(rig.discord.identifies_refused(), 1);
    tokio::time::sleep(WATCH).await;
    assert!(gateway.try_wait().unwrap().is_none(), "the gateway exited");
    assert_eq!(rig.discord.identifies_refused(), 1, "it identified again after 4014");
    assert_eq!(rig.discord.identifies(), 0);
    let log = std::fs::read_to_string(log).unwrap();
    let said: Vec<&str> = log.lines().filter(|l| l.contains("close 4014")).collect();
    assert_eq!(said.len(), 1, "{log}");
    assert!(said[0].contains("ERROR") && said[0].contains("Privileged Gateway Intents"), "{}", said[0]);
    println!(
        "operator: Message Content off: unready with 4014 {} ms after start, no identify more in {} s",
        to_unready.as_millis(),
        WATCH.as_secs()
    );
}

/// What one shard session receives, in order, after someone types, says something plain and
/// then mentions him: its events up to the second message.
async fn seen_with(discord: &clankie_discord_loopback::Loopback, intents: twilight_gateway::Intents) -> Vec<twilight_gateway::Event> {
    use twilight_gateway::{ConfigBuilder, Event, EventTypeFlags, Shard, ShardId, StreamExt};
    let config = ConfigBuilder::new(discord.config().token.clone(), intents).proxy_url(discord.gateway_url()).build();
    let mut shard = Shard::with_config(ShardId::ONE, config);
    let (mut seen, mut messages) = (Vec::new(), 0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while messages < 2 {
        let next = tokio::time::timeout_at(deadline, shard.next_event(EventTypeFlags::all())).await.expect("the events within 20 s");
        match next {
            Some(Ok(Event::Ready(_))) => {
                discord.user_typing(super::GENERAL, "ada");
                let say = |content: &str, mention: bool| clankie_discord_loopback::NewMessage {
                    channel_id: super::GENERAL,
                    author: "ada".into(),
                    content: content.into(),
                    mention,
                    ..Default::default()
                };
                discord.user_message(say("plain words", false));
                discord.user_message(say("words for him", true));
            }
            Some(Ok(event)) => {
                messages += usize::from(matches!(event, Event::MessageCreate(_)));
                seen.push(event);
            }
            Some(Err(e)) => panic!("{e}"),
            None => panic!("the shard ended"),
        }
    }
    seen
}

#[tokio::test]
async fn operator_the_loopback_dispatches_nothing_for_an_intent_not_asked_for() {
    use twilight_gateway::{Event, Intents};
    let discord = clankie_discord_loopback::Loopback::serve("127.0.0.1:0".parse().unwrap(), LoopbackConfig::default()).await.unwrap();
    let typing = |seen: &[Event]| seen.iter().filter(|e| matches!(e, Event::TypingStart(_))).count();
    let contents = |seen: &[Event]| -> Vec<String> {
        seen.iter().filter_map(|e| if let Event::MessageCreate(m) = e { Some(m.content.clone()) } else { None }).collect()
    };
    // Asked for, as the gateway asks: the typing and both messages' words.
    let all = seen_with(&discord, Intents::GUILD_MESSAGES | Intents::GUILD_MESSAGE_TYPING | Intents::MESSAGE_CONTENT).await;
    assert_eq!((typing(&all), contents(&all)), (1, vec!["plain words".to_owned(), "words for him".into()]));
    // Not asked for: no TYPING_START, and without Message Content only the message that
    // mentions him keeps its words.
    let few = seen_with(&discord, Intents::GUILD_MESSAGES).await;
    assert_eq!((typing(&few), contents(&few)), (0, vec![String::new(), "words for him".into()]));
    println!("operator: with the typing and content intents {} event(s); with messages only {}", all.len(), few.len());
}

/// What a first start against Discord logs: the invite URL while he is in no server or not in
/// one he is admitted to, nothing once he is everywhere he should be.
#[tokio::test]
async fn operator_the_first_start_wants_an_invite_while_he_is_missing_from_an_admitted_server() {
    let config = LoopbackConfig { absent_guilds: vec![clankie_discord_loopback::OTHER_GUILD], ..LoopbackConfig::default() };
    let discord = clankie_discord_loopback::Loopback::serve("127.0.0.1:0".parse().unwrap(), config).await.unwrap();
    let (token, api) = (discord.config().token.clone(), discord.addr().to_string());
    let url = clankie_gateway::invite::invite_url(discord.config().bot_user_id);
    let wanted = |admitted: Vec<u64>| {
        let (token, api) = (token.clone(), api.clone());
        async move { clankie_gateway::invite::wanted_invite(&token, Some(&api), &admitted).await }
    };
    assert_eq!(wanted(vec![100, clankie_discord_loopback::OTHER_GUILD]).await, Some(url.clone()));
    assert_eq!(wanted(vec![100]).await, None);
    assert_eq!(wanted(vec![]).await, None, "he is in a server, and none is named");
    let nowhere = LoopbackConfig { absent_guilds: vec![100, clankie_discord_loopback::OTHER_GUILD], ..LoopbackConfig::default() };
    let lonely = clankie_discord_loopback::Loopback::serve("127.0.0.1:0".parse().unwrap(), nowhere).await.unwrap();
    let found = clankie_gateway::invite::wanted_invite(&token, Some(&lonely.addr().to_string()), &[]).await;
    assert_eq!(found, Some(url.clone()), "he is in no server at all");

    // The start-up warning itself: a gateway whose settings name a server he is missing from
    // says so once in its log, with the URL to open.
    let rig = Rig::with(LoopbackConfig { absent_guilds: vec![clankie_discord_loopback::OTHER_GUILD], ..LoopbackConfig::default() }).await;
    let url = clankie_gateway::invite::invite_url(rig.discord.config().bot_user_id);
    let guilds = format!("100,{}", clankie_discord_loopback::OTHER_GUILD);
    let _gateway = gateway_process(&rig, "gateway-invite", &[("CLANKIE_DISCORD_GUILDS", guilds.as_str())]);
    let log = || std::fs::read_to_string(rig.dir.path().join("gateway-invite.log")).unwrap_or_default();
    super::until("the start-up invite warning", Duration::from_secs(20), || {
        log().contains("he is not in every server he is meant for yet")
    })
    .await;
    let warned: Vec<String> = log().lines().filter(|l| l.contains("he is not in every server")).map(str::to_owned).collect();
    assert_eq!(warned.len(), 1, "said once: {warned:?}");
    assert!(warned[0].contains(&url), "the warning names the invite URL {url}: {}", warned[0]);
}
