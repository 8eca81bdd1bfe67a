//! `discord_limits_`: the loopback keeps Discord's limits, met by the real twilight clients.

use std::time::{Duration, Instant};

use clankie_discord_loopback::interactions::RunCommand;
use clankie_discord_loopback::{Limits, Loopback, LoopbackConfig, NewMessage};
use twilight_http::Client;
use twilight_http::request::channel::reaction::RequestReactionType;
use twilight_model::http::interaction::{InteractionResponse, InteractionResponseType};
use twilight_model::id::Id;

use super::GENERAL;

const OTHER: u64 = 201;

async fn loopback(limits: Limits) -> Loopback {
    Loopback::serve("127.0.0.1:0".parse().unwrap(), LoopbackConfig { limits, ..Default::default() }).await.unwrap()
}

/// A twilight client as the gateway builds it; `limiter: false` sends every request at once,
/// so the loopback's answers, 429s included, come back as they are.
fn client(discord: &Loopback, token: &str, limiter: bool) -> Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut builder = Client::builder().token(token.to_owned()).proxy(discord.addr().to_string(), true);
    if !limiter {
        builder = builder.ratelimiter(None);
    }
    builder.build()
}

fn rate_headers(headers: twilight_http::response::HeaderIter<'_>) -> Vec<String> {
    let mut names: Vec<String> = headers.map(|(name, _)| name.to_owned()).filter(|n| n.starts_with("x-ratelimit-")).collect();
    names.sort();
    names
}

/// One request as plain HTTP/1.1, so the answer is seen as the loopback sent it: twilight
/// retries every 429 itself (at once when its limiter is off) and stops after a 401.
async fn raw(discord: &Loopback, method: &str, path: &str, token: &str, body: &str) -> (u16, Vec<(String, String)>, serde_json::Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(discord.addr()).await.unwrap();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: discord\r\nauthorization: Bot {token}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).await.unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|s| s.parse().ok()).unwrap();
    let headers = lines.filter_map(|l| l.split_once(": ")).map(|(k, v)| (k.to_ascii_lowercase(), v.to_owned())).collect();
    (status, headers, serde_json::from_str(body).unwrap_or(serde_json::Value::String(body.to_owned())))
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

#[tokio::test]
async fn discord_limits_every_route_the_gateway_uses_announces_its_bucket() {
    let discord = loopback(Limits::default()).await;
    let http = client(&discord, &discord.config().token, true);
    let asked = discord.user_message(NewMessage { channel_id: GENERAL, author: "ada".into(), content: "hi".into(), ..Default::default() });
    let (channel, message) = (Id::new(GENERAL), Id::new(asked));
    let want: Vec<String> =
        ["bucket", "limit", "remaining", "reset", "reset-after", "scope"].iter().map(|h| format!("x-ratelimit-{h}")).collect();

    let mut seen = Vec::new();
    let posted = http.create_message(channel).content("hello").await.unwrap();
    seen.push(("create message", rate_headers(posted.headers())));
    let posted = posted.model().await.unwrap();
    let r = http.channel_messages(channel).limit(10).await.unwrap();
    seen.push(("channel messages", rate_headers(r.headers())));
    let r = http.update_message(channel, posted.id).content(Some("hello again")).await.unwrap();
    seen.push(("edit message", rate_headers(r.headers())));
    let emoji = RequestReactionType::Unicode { name: "✅" };
    let r = http.create_reaction(channel, message, &emoji).await.unwrap();
    seen.push(("reaction", rate_headers(r.headers())));
    let r = http.create_typing_trigger(channel).await.unwrap();
    seen.push(("typing", rate_headers(r.headers())));
    let r = http.current_user().await.unwrap();
    seen.push(("current user", rate_headers(r.headers())));
    let r = http.delete_message(channel, posted.id).await.unwrap();
    seen.push(("delete message", rate_headers(r.headers())));
    let r = http.gateway().authed().await.unwrap();
    seen.push(("gateway bot", rate_headers(r.headers())));
    let r = http.create_private_channel(Id::new(42)).await.unwrap();
    seen.push(("open DM", rate_headers(r.headers())));
    let app = Id::new(discord.config().bot_user_id);
    let r = http.interaction(app).set_global_commands(&[]).await.unwrap();
    seen.push(("overwrite commands", rate_headers(r.headers())));
    // The interaction endpoints, answered with the interaction's token.
    let asked = discord
        .run_command(RunCommand { channel_id: GENERAL, author: "ada".into(), subcommand: "status".into(), ..Default::default() })
        .unwrap();
    let deferred = InteractionResponse { kind: InteractionResponseType::DeferredChannelMessageWithSource, data: None };
    let global_before = discord.request_arrivals().len();
    let r = http.interaction(app).create_response(Id::new(asked.id), &asked.token, &deferred).await.unwrap();
    seen.push(("interaction callback", rate_headers(r.headers())));
    let r = http.interaction(app).update_response(&asked.token).content(Some("done")).await.unwrap();
    seen.push(("edit original", rate_headers(r.headers())));
    assert_eq!(discord.request_arrivals().len(), global_before, "the interaction endpoints counted toward the global budget");
    assert_eq!(seen.len(), 12, "every route the gateway uses");
    for (route, headers) in &seen {
        println!("discord limits: {route}: {headers:?}");
        assert_eq!(headers, &want, "{route} announces its bucket");
    }
    assert_eq!(discord.limit_counts().rate_limited_user, 0, "twilight kept inside the buckets");
}

/// The four routes the loopback once let through unlimited (open DM, overwrite commands, the
/// interaction callback and the edit of its original) each refuse past their bucket with a 429.
#[tokio::test]
async fn discord_limits_the_dm_command_and_interaction_routes_refuse_past_their_bucket() {
    let discord = loopback(Limits::default()).await;
    let token = discord.config().token.clone();
    let app = discord.config().bot_user_id;
    let asked = discord
        .run_command(RunCommand { channel_id: GENERAL, author: "ada".into(), subcommand: "status".into(), ..Default::default() })
        .unwrap();
    let routes: [(&str, String, &str); 4] = [
        ("POST", "/api/v10/users/@me/channels".into(), r#"{"recipient_id":"42"}"#),
        ("PUT", format!("/api/v10/applications/{app}/commands"), "[]"),
        ("POST", format!("/api/v10/interactions/{}/{}/callback", asked.id, asked.token), r#"{"type":5}"#),
        ("PATCH", format!("/api/v10/webhooks/{app}/{}/messages/@original", asked.token), r#"{"content":"done"}"#),
    ];
    for (method, path, body) in &routes {
        let mut answers = Vec::new();
        loop {
            let (status, headers, _) = raw(&discord, method, path, &token, body).await;
            answers.push(status);
            if status == 429 {
                assert_eq!(header(&headers, "x-ratelimit-scope"), Some("user"), "{method} {path}");
                break;
            }
            let limit: usize = header(&headers, "x-ratelimit-limit").and_then(|l| l.parse().ok()).expect("a bucket announced");
            assert!(answers.len() <= limit, "{method} {path} took {} requests past its limit of {limit}", answers.len());
        }
        println!("discord limits: {method} {path}: {answers:?}");
    }
    let counts = discord.limit_counts();
    assert_eq!((counts.rate_limited_user, counts.rate_limited_global), (4, 0), "{counts:?}");
}

#[tokio::test]
async fn discord_limits_message_create_is_5_per_5_s_per_channel_and_a_429_says_so() {
    let discord = loopback(Limits::default()).await;
    let token = discord.config().token.clone();
    let create = |channel: u64, n: u32| {
        let (discord, token) = (&discord, &token);
        async move {
            raw(discord, "POST", &format!("/api/v10/channels/{channel}/messages"), token, &format!(r#"{{"content":"piece {n}"}}"#)).await
        }
    };
    for n in 0..5 {
        let (status, headers, _) = create(GENERAL, n).await;
        assert_eq!(status, 200);
        assert_eq!(header(&headers, "x-ratelimit-remaining"), Some((4 - n).to_string().as_str()));
    }
    let (status, headers, body) = create(GENERAL, 5).await;
    println!("discord limits: the sixth create in 5 s: {status} {body} {headers:?}");
    assert_eq!(status, 429);
    assert_eq!((header(&headers, "x-ratelimit-scope"), header(&headers, "x-ratelimit-remaining")), (Some("user"), Some("0")));
    assert!(header(&headers, "retry-after").is_some() && header(&headers, "x-ratelimit-global").is_none());
    assert_eq!(body["global"], false);
    assert!(body["message"].as_str().is_some_and(|m| m.contains("rate limited")), "{body}");
    let retry_after = body["retry_after"].as_f64().unwrap();
    assert!(retry_after > 0.0 && retry_after <= 5.0, "{retry_after}");
    // Another channel is another bucket.
    assert_eq!(create(OTHER, 0).await.0, 200);
    let counts = discord.limit_counts();
    assert_eq!((counts.rate_limited_user, counts.rate_limited_global, counts.invalid_total), (1, 0, 1), "{counts:?}");
    assert_eq!(discord.posts(GENERAL).len(), 5);

    // The limiter twilight runs in the gateway reads the headers and waits instead.
    let waits = loopback(Limits::default()).await;
    let http = client(&waits, &waits.config().token, true);
    let started = Instant::now();
    for n in 0..6 {
        http.create_message(Id::new(GENERAL)).content(&format!("piece {n}")).await.unwrap();
    }
    let took = started.elapsed();
    println!("discord limits: six creates through twilight's limiter took {took:?}, 429s {}", waits.limit_counts().rate_limited_user);
    assert!(took >= Duration::from_secs(4), "the sixth waited for the bucket: {took:?}");
    assert_eq!(waits.limit_counts().rate_limited_user, 0);
    assert_eq!(waits.posts(GENERAL).len(), 6);
}

#[tokio::test]
async fn discord_limits_the_global_budget_is_per_bot_token_across_routes() {
    let discord = loopback(Limits { global_per_second: 8, ..Limits::default() }).await;
    let token = discord.config().token.clone();
    // Four channels' reads, two each: eight requests fill the second's budget.
    for channel in [GENERAL, OTHER, 210, 900] {
        for _ in 0..2 {
            assert_eq!(raw(&discord, "GET", &format!("/api/v10/channels/{channel}/messages?limit=1"), &token, "").await.0, 200);
        }
    }
    let (status, headers, body) = raw(&discord, "GET", "/api/v10/users/@me", &token, "").await;
    println!("discord limits: past the global budget: {status} {body} {headers:?}");
    assert_eq!((status, body["global"].as_bool()), (429, Some(true)));
    assert_eq!((header(&headers, "x-ratelimit-scope"), header(&headers, "x-ratelimit-global")), (Some("global"), Some("true")));
    assert_eq!(discord.limit_counts().rate_limited_global, 1);
}

#[tokio::test]
async fn discord_limits_invalid_requests_past_the_threshold_bring_the_temporary_ban() {
    let discord = loopback(Limits { invalid_per_10_min: 20, ..Limits::default() }).await;
    for _ in 0..20 {
        assert_eq!(raw(&discord, "GET", "/api/v10/users/@me", "not-the-token", "").await.0, 401);
    }
    let token = discord.config().token.clone();
    let (status, _, body) =
        raw(&discord, "POST", &format!("/api/v10/channels/{GENERAL}/messages"), &token, r#"{"content":"hello?"}"#).await;
    let counts = discord.limit_counts();
    println!("discord limits: after 20 invalid requests: {status} {body}, {counts:?}");
    assert_eq!((status, body.as_str()), (403, Some("error code: 1015")), "banned, whatever the token");
    assert_eq!((counts.invalid_recent, counts.invalid_total, counts.banned_refusals), (20, 20, 1));
    assert!(discord.posts(GENERAL).is_empty());
}

#[tokio::test]
async fn discord_limits_a_gateway_connection_past_120_commands_in_60_s_is_closed_with_4008() {
    use twilight_gateway::{ConfigBuilder, EventTypeFlags, Intents, Shard, ShardId, StreamExt};
    let discord = loopback(Limits::default()).await;
    // twilight's own command limiter off, so the loopback's is what is met.
    let config = ConfigBuilder::new(discord.config().token.clone(), Intents::GUILD_MESSAGES)
        .proxy_url(discord.gateway_url())
        .ratelimit_messages(false)
        .build();
    let mut shard = Shard::with_config(ShardId::ONE, config);
    let mut close = None;
    let mut sent = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while close.is_none() {
        let next = tokio::time::timeout_at(deadline, shard.next_event(EventTypeFlags::all())).await.expect("the gateway answered");
        match next {
            Some(Ok(twilight_gateway::Event::Ready(_))) => {
                // Identify was one command; 120 presence updates go past the limit.
                for n in 0..120 {
                    let presence =
                        serde_json::json!({ "op": 3, "d": { "since": null, "activities": [], "status": "online", "afk": n % 2 == 0 } });
                    shard.send(presence.to_string());
                    sent += 1;
                }
            }
            Some(Ok(twilight_gateway::Event::GatewayClose(frame))) => close = Some(frame.map(|f| f.code)),
            Some(_) => {}
            None => panic!("the shard ended without a close"),
        }
    }
    println!("discord limits: closed with {close:?} after {sent} commands and an identify");
    assert_eq!(close, Some(Some(4008)));
    assert_eq!(discord.limit_counts().gateway_rate_limit_closes, 1);
}
