use std::time::Duration;

use clankie_bus::MsgId;
use clankie_proto::{Subject, v1};

use super::{GENERAL, GUILD, Rig, until};

fn reply(to: u64, key: &str, text: &str) -> v1::OutboundMessage {
    super::outbound_reply(GENERAL, Some(to), key, text)
}

#[tokio::test]
async fn a_duplicate_outbound_posts_once() {
    let rig = Rig::new().await;
    let (_gateway, _task) = rig.gateway().await;
    let asked = rig.say(GENERAL, "ada", "@Clankie hi");
    let out = reply(asked, "reply:1", "hello ada");
    // Two publishes JetStream does not dedup (as after a lost ack): Discord's enforced nonce must.
    rig.bus.publish(&Subject::BodySend { channel: GENERAL }, &out, Some(&MsgId::new("first"))).await.unwrap();
    rig.bus.publish(&Subject::BodySend { channel: GENERAL }, &out, Some(&MsgId::new("second"))).await.unwrap();
    let other = reply(asked, "reply:2", "a different reply");
    rig.bus.publish(&Subject::BodySend { channel: GENERAL }, &other, None).await.unwrap();
    until("the later post", Duration::from_secs(10), || rig.discord.posts(GENERAL).iter().any(|p| p.content == "a different reply")).await;
    let posts = rig.discord.posts(GENERAL);
    assert_eq!(posts.iter().filter(|p| p.content == "hello ada").count(), 1, "{posts:?}");
    assert_eq!(posts[0].reply_to, Some(asked), "threaded onto the message being answered");
}

#[tokio::test]
async fn long_replies_split_and_every_piece_goes_out() {
    let rig = Rig::new().await;
    let (_gateway, _task) = rig.gateway().await;
    let asked = rig.say(GENERAL, "ada", "@Clankie explain everything");
    let text = "The bracket has many rounds. ".repeat(150);
    rig.bus.publish(&Subject::BodySend { channel: GENERAL }, &reply(asked, "reply:long", &text), None).await.unwrap();
    until("the pieces", Duration::from_secs(10), || rig.discord.posts(GENERAL).len() >= 3).await;
    let posts = rig.discord.posts(GENERAL);
    assert!(posts.iter().all(|p| p.content.chars().count() <= 2000));
    assert_eq!(posts.iter().map(|p| p.content.split_whitespace().count()).sum::<usize>(), text.split_whitespace().count());
    assert_eq!(posts[0].reply_to, Some(asked));
}

#[tokio::test]
async fn long_reply_past_the_piece_bound_posts_the_bound_and_says_it_was_cut() {
    let rig = Rig::new().await;
    let (_gateway, _task) = rig.gateway_with(clankie_gateway::GatewayConfig { reply_max_pieces: 3, ..rig.gateway_config() }).await;
    let asked = rig.say(GENERAL, "ada", "@Clankie tell me everything");
    let text = "The bracket has many rounds. ".repeat(400);
    rig.bus.publish(&Subject::BodySend { channel: GENERAL }, &reply(asked, "reply:bounded", &text), None).await.unwrap();
    until("the pieces", Duration::from_secs(10), || rig.discord.posts(GENERAL).len() >= 3).await;
    // A later reply is the barrier: a fourth piece of the first would be in before it.
    rig.bus.publish(&Subject::BodySend { channel: GENERAL }, &reply(asked, "reply:after", "and that is all"), None).await.unwrap();
    until("the later reply", Duration::from_secs(10), || rig.discord.posts(GENERAL).iter().any(|p| p.content == "and that is all")).await;
    let posts = rig.discord.posts(GENERAL);
    let pieces = text.chars().count().div_ceil(2000);
    println!("long reply: {} characters, {pieces}+ pieces, posted {} of them", text.chars().count(), posts.len() - 1);
    assert_eq!(posts.len(), 4, "three pieces and the later reply");
    assert!(posts[2].content.ends_with("(I cut this short: it ran longer than I may post at once.)"), "{}", posts[2].content);
    assert!(posts.iter().all(|p| p.content.chars().count() <= 2000));
}

#[tokio::test]
async fn an_artifact_that_cannot_be_resolved_costs_the_picture_not_the_words() {
    let rig = Rig::new().await;
    let (_gateway, _task) = rig.gateway().await;
    let asked = rig.say(GENERAL, "ada", "@Clankie screenshot the bracket");
    let mut out = reply(asked, "reply:pic", "Here's the bracket.");
    out.artifacts = vec![v1::ArtifactRef { id: "sha256:00".into(), filename: "bracket.png".into(), content_type: "image/png".into() }];
    rig.bus.publish(&Subject::BodySend { channel: GENERAL }, &out, None).await.unwrap();
    until("the post", Duration::from_secs(10), || !rig.discord.posts(GENERAL).is_empty()).await;
    let post = &rig.discord.posts(GENERAL)[0];
    assert!(post.content.starts_with("Here's the bracket."));
    assert!(post.content.contains("couldn't attach bracket.png"), "{}", post.content);
    assert!(post.attachments.is_empty());
}

#[tokio::test]
async fn typing_is_retriggered_before_it_expires_until_stopped() {
    let rig = Rig::new().await;
    let (_gateway, _task) = rig.gateway().await;
    let action = |op: v1::TypingOp| v1::TypingAction {
        channel_id: GENERAL,
        lane: String::new(),
        delivery_id: "1".into(),
        op: op as i32,
        host: "captain-a".into(),
        stamped_at_ms: 0,
    };
    // The rig's typing interval; Discord's indicator itself lasts 10 s.
    const INTERVAL_MS: i64 = 200;
    rig.bus.publish(&Subject::BodyTyping { channel: GENERAL }, &action(v1::TypingOp::Start), None).await.unwrap();
    until("several triggers", Duration::from_secs(10), || rig.discord.typing(GENERAL).len() >= 5).await;
    let stopped_at = clankie_bus::now_ms();
    rig.bus.publish(&Subject::BodyTyping { channel: GENERAL }, &action(v1::TypingOp::Stop), None).await.unwrap();
    // Watch five intervals after the stop: a refresh loop that kept going would trigger four more times.
    let watched_until = stopped_at + 5 * INTERVAL_MS;
    while clankie_bus::now_ms() < watched_until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let triggers = rig.discord.typing(GENERAL);
    let late: Vec<i64> = triggers.iter().map(|t| t - stopped_at).filter(|after| *after > INTERVAL_MS).collect();
    assert!(late.is_empty(), "typing went on after the stop: triggers {late:?} ms after it");
    let gaps: Vec<i64> = triggers.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps.iter().all(|g| *g < 1_000), "gaps {gaps:?}");
}

/// Turn `t1`'s tool card step, answering `asked`.
fn card(asked: u64, op: v1::ToolCardOp, step: &str, tools: &[&str]) -> v1::OutboundMessage {
    v1::OutboundMessage {
        idempotency_key: format!("card:t1:{step}"),
        kind: v1::OutboundKind::ToolCard as i32,
        guild_id: Some(GUILD),
        channel_id: GENERAL,
        reply_to_message_id: Some(asked),
        tool_card_op: op as i32,
        tool_names: tools.iter().map(|t| t.to_string()).collect(),
        delivery_id: asked.to_string(),
        ..Default::default()
    }
}

#[tokio::test]
async fn the_tool_card_is_posted_edited_and_removed() {
    let _traces = clankie_http::init_tracing("warn", "test");
    let rig = Rig::new().await;
    let (_gateway, _task) = rig.gateway().await;
    let asked = rig.say(GENERAL, "ada", "@Clankie check the page");
    let card = |op, step: &str, tools: &[&str]| card(asked, op, step, tools);
    let subject = Subject::BodySend { channel: GENERAL };
    rig.bus.publish(&subject, &card(v1::ToolCardOp::Post, "post", &["read_page"]), None).await.unwrap();
    until("the card", Duration::from_secs(10), || !rig.discord.posts(GENERAL).is_empty()).await;
    assert_eq!(rig.discord.posts(GENERAL)[0].content, "🔧 working: read_page");
    rig.bus.publish(&subject, &card(v1::ToolCardOp::Edit, "edit:1", &["read_page", "send_text_update"]), None).await.unwrap();
    until("the edit", Duration::from_secs(10), || rig.discord.posts(GENERAL)[0].edited).await;
    assert_eq!(rig.discord.posts(GENERAL)[0].content, "🔧 working: read_page, send_text_update");
    rig.bus.publish(&subject, &card(v1::ToolCardOp::Remove, "remove", &[]), None).await.unwrap();
    until("the removal", Duration::from_secs(10), || rig.discord.posts(GENERAL)[0].deleted).await;
}

#[tokio::test]
async fn handover_a_tool_cards_removal_that_comes_before_its_post_leaves_no_card() {
    let rig = Rig::new().await;
    let (_gateway, _task) = rig.gateway().await;
    let asked = rig.say(GENERAL, "ada", "@Clankie check the page");
    let card = |op, step: &str| card(asked, op, step, &["read_page"]);
    let subject = Subject::BodySend { channel: GENERAL };
    // A hand-over redelivered the post after the removal: the removal finds no card and remembers it.
    rig.bus.publish(&subject, &card(v1::ToolCardOp::Remove, "remove"), None).await.unwrap();
    rig.bus.publish(&subject, &card(v1::ToolCardOp::Post, "post"), None).await.unwrap();
    // A barrier: the channel's poster takes its messages in order, so this posts after both.
    let barrier = super::outbound_reply(GENERAL, None, "reply:barrier", "after the card");
    rig.bus.publish(&subject, &barrier, None).await.unwrap();
    until("the barrier", Duration::from_secs(10), || rig.discord.posts(GENERAL).iter().any(|p| p.content == "after the card")).await;
    let cards: Vec<_> = rig.discord.posts(GENERAL).into_iter().filter(|p| p.content.starts_with("🔧")).collect();
    assert!(cards.is_empty(), "a card posted after its removal: {cards:?}");
}

fn gateway_process(rig: &Rig, replica: &str) -> tokio::process::Child {
    super::gateway_process(rig, replica, &[])
}

/// Waits `ms` of the loopback's clock and answers the typing triggers in the channel after `since`.
async fn triggers_after(rig: &Rig, since: i64, watch_ms: i64) -> Vec<i64> {
    let until_ms = clankie_bus::now_ms() + watch_ms;
    while clankie_bus::now_ms() < until_ms {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    rig.discord.typing(GENERAL).into_iter().filter(|t| *t > since).collect()
}

#[tokio::test]
async fn gateway_state_a_card_and_a_lit_channel_outlive_their_gateway_and_work_across_two_replicas() {
    let rig = Rig::new().await;
    let asked = rig.say(GENERAL, "ada", "@Clankie check the page");
    let card = |op, step: &str, tools: &[&str]| card(asked, op, step, tools);
    let typing =
        |op: v1::TypingOp| v1::TypingAction { channel_id: GENERAL, delivery_id: asked.to_string(), op: op as i32, ..Default::default() };
    let (send, lit) = (Subject::BodySend { channel: GENERAL }, Subject::BodyTyping { channel: GENERAL });

    // One gateway posts the card and lights the channel, then dies.
    let mut first = gateway_process(&rig, "gateway-a");
    assert!(rig.discord.wait_for_session(Duration::from_secs(20)).await);
    rig.bus.publish(&send, &card(v1::ToolCardOp::Post, "post", &["read_page"]), None).await.unwrap();
    rig.bus.publish(&lit, &typing(v1::TypingOp::Start), None).await.unwrap();
    until("the card", Duration::from_secs(10), || !rig.discord.posts(GENERAL).is_empty()).await;
    until("typing", Duration::from_secs(10), || rig.discord.typing(GENERAL).len() >= 2).await;
    first.start_kill().unwrap();
    first.wait().await.unwrap();
    let died = clankie_bus::now_ms();

    // Its successor keeps the channel lit (the captain never said stop) and finds the card.
    let sessions = rig.discord.identifies() + rig.discord.resumes();
    let second = gateway_process(&rig, "gateway-b");
    until("the successor's session", Duration::from_secs(20), || rig.discord.identifies() + rig.discord.resumes() > sessions).await;
    until("typing kept lit", Duration::from_secs(10), || rig.discord.typing(GENERAL).iter().filter(|t| **t > died).count() >= 3).await;
    rig.bus.publish(&send, &card(v1::ToolCardOp::Edit, "edit:1", &["read_page", "browse"]), None).await.unwrap();
    until("the edit", Duration::from_secs(10), || rig.discord.posts(GENERAL)[0].edited).await;
    rig.bus.publish(&send, &card(v1::ToolCardOp::Remove, "remove", &[]), None).await.unwrap();
    until("the removal", Duration::from_secs(10), || rig.discord.posts(GENERAL)[0].deleted).await;
    let stopped = clankie_bus::now_ms();
    rig.bus.publish(&lit, &typing(v1::TypingOp::Stop), None).await.unwrap();
    let late: Vec<i64> = triggers_after(&rig, stopped + 200, 1_000).await;
    assert!(late.is_empty(), "typing went on after the stop: {late:?}");

    // Two replicas at once share the actions: whichever takes a stop ends the other's loop.
    // The one shard stays with one of them; both announce themselves in the shard bucket.
    let third = gateway_process(&rig, "gateway-a");
    let kv = rig.bus.key_value(clankie_gateway::leases::SHARDS_BUCKET, Duration::from_secs(3600)).await.unwrap();
    let probe = clankie_gateway::leases::ShardLeases::new(kv, "probe", Duration::from_secs(2));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while probe.replicas_alive().await.unwrap() < 2 {
        assert!(tokio::time::Instant::now() < deadline, "the third replica never announced itself");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for round in 0..3 {
        let started = clankie_bus::now_ms();
        rig.bus.publish(&lit, &typing(v1::TypingOp::Start), None).await.unwrap();
        until("typing", Duration::from_secs(10), || rig.discord.typing(GENERAL).iter().filter(|t| **t > started).count() >= 2).await;
        let stopped = clankie_bus::now_ms();
        rig.bus.publish(&lit, &typing(v1::TypingOp::Stop), None).await.unwrap();
        // One interval for a loop mid-trigger to see its entry gone.
        let late = triggers_after(&rig, stopped + 400, 1_200).await;
        println!("gateway state round {round}: triggers after the stop {late:?}");
        assert!(late.is_empty(), "round {round}: typing went on after the stop: {late:?}");
    }

    // A stop taken by one replica ends the loop the other runs. The loop's replica is paused
    // until its pull requests (5 s) expire on the server, so only the other can take the stop.
    // Only the REST owner pulls typing actions, each replica one pull request at a time: the
    // pull requests are seen on their subject, and the server counts those waiting.
    let stream_name = clankie_bus::stream_for(clankie_proto::Family::BodyTyping).unwrap().name;
    let typing_stream = &rig.bus.jetstream().get_stream(stream_name).await.unwrap();
    let waiting = move || async move { typing_stream.consumer_info("gateway-typing").await.unwrap().num_waiting };
    let mut pulls = rig.bus.client().subscribe(format!("$JS.API.CONSUMER.MSG.NEXT.{stream_name}.gateway-typing")).await.unwrap();
    rig.bus.barrier().await.unwrap();
    fn pulled_since(pulls: &mut (impl futures::Stream + Unpin)) -> usize {
        std::iter::from_fn(|| futures::FutureExt::now_or_never(futures::StreamExt::next(pulls)).flatten()).count()
    }
    let started = clankie_bus::now_ms();
    rig.bus.publish(&lit, &typing(v1::TypingOp::Start), None).await.unwrap();
    until("typing", Duration::from_secs(10), || rig.discord.typing(GENERAL).iter().filter(|t| **t > started).count() >= 2).await;
    let bucket = rig.bus.key_value("clankie-typing", Duration::from_secs(3600)).await.unwrap();
    let entry = bucket.get(GENERAL.to_string()).await.unwrap().expect("the lit channel's entry");
    let host = serde_json::from_slice::<serde_json::Value>(&entry).unwrap()["host"].as_str().unwrap().to_owned();
    let looping = if host == "gateway-a" { third.id() } else { second.id() }.unwrap().to_string();
    assert!(std::process::Command::new("kill").args(["-STOP", &looping]).status().unwrap().success());
    let paused = tokio::time::Instant::now();
    // What the paused replica sent before it stopped is through by now.
    tokio::time::sleep(Duration::from_millis(200)).await;
    pulled_since(&mut pulls);
    // The other takes the REST lease and pulls (a pull request the frozen one cannot have sent),
    // while the paused one's pull stays waiting until it expires: once the other's is the one
    // pull left waiting (read thrice, so a renewal of the other's is not taken for it), the stop
    // can only go to the other.
    let (deadline, mut other_pulls, mut only_the_others) = (paused + Duration::from_secs(15), 0, 0);
    while only_the_others < 3 {
        other_pulls += pulled_since(&mut pulls);
        let n = waiting().await;
        only_the_others = if other_pulls > 0 && n <= 1 { only_the_others + 1 } else { 0 };
        assert!(
            tokio::time::Instant::now() < deadline,
            "the paused replica's pull never expired ({other_pulls} pull requests of the other, {n} waiting)"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!("gateway state across replicas: {host} paused; its pull request expired by {:?} after the pause", paused.elapsed());
    rig.bus.publish(&lit, &typing(v1::TypingOp::Stop), None).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while bucket.get(GENERAL.to_string()).await.unwrap().is_some() {
        assert!(tokio::time::Instant::now() < deadline, "the running replica never took the stop");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(std::process::Command::new("kill").args(["-CONT", &looping]).status().unwrap().success());
    // A trigger it was about to send when paused may still go; its loop checks the bucket before the next.
    let resumed = clankie_bus::now_ms();
    let late = triggers_after(&rig, resumed + 100, 1_200).await;
    println!("gateway state across replicas: {host}'s loop paused, the stop taken by the other, triggers after it resumed {late:?}");
    assert!(late.is_empty(), "{host}'s loop went on after a stop another replica took: {late:?}");
}
