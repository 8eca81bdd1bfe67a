//! Ingest that never waits: a burst stored whole, heartbeats answered while the buffer is full,
//! and the places cache bounded and kept true by events, each checked from what the loopback
//! Discord observed (its heartbeat log, its REST calls by kind).

use std::time::Duration;

use clankie_discord_loopback::{LoopbackConfig, NewMessage};
use clankie_proto::{Family, Subject, v1};

use super::{GENERAL, GUILD, Rig, record, until};

/// How many messages the burst holds; `CLANKIE_INGEST_BURST` sets another.
fn burst_size() -> u64 {
    std::env::var("CLANKIE_INGEST_BURST").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000)
}

/// The wedge the gateway bench found: 20,000 messages dispatched at once stalled the shard's
/// reader behind a full 1,024-slot queue, Discord's resume buffer moved past it, and the rest
/// was lost. Now the reader never waits: every message is stored once, and one sent after the
/// burst is stored within a second of being sent.
#[tokio::test]
async fn ingest_a_burst_of_20000_messages_through_one_gateway_is_stored_whole_and_the_next_is_stored_within_a_second() {
    let rig = Rig::new().await;
    let (_gateway, _task) = rig.gateway().await;
    let count = burst_size();
    let started = tokio::time::Instant::now();
    for i in 0..count {
        rig.say(GENERAL, if i % 2 == 0 { "ada" } else { "bob" }, &format!("chatter {i}"));
    }
    let dispatched = started.elapsed();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
    let (mut stored, mut shown) = (0, tokio::time::Instant::now());
    while stored < count {
        assert!(tokio::time::Instant::now() < deadline, "only {stored} of {count} stored after 600 s: the gateway wedged");
        tokio::time::sleep(Duration::from_millis(200)).await;
        stored = rig.stream_count("CLANKIE_INGRESS").await;
        if shown.elapsed() > Duration::from_secs(5) {
            println!("ingest_burst: {stored} of {count} stored after {} ms", started.elapsed().as_millis());
            shown = tokio::time::Instant::now();
        }
    }
    let whole = started.elapsed();
    let next_sent = tokio::time::Instant::now();
    rig.say(GENERAL, "cy", "anyone still here?");
    while rig.stream_count("CLANKIE_INGRESS").await < count + 1 {
        assert!(next_sent.elapsed() < Duration::from_secs(30), "the message after the burst was never stored");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let next = next_sent.elapsed();
    let (frames_dispatched, frames_sent) = rig.discord.gateway_frames();
    println!(
        "ingest_burst: {count} dispatched in {} ms, stored whole in {} ms ({:.0} a second); the next stored in {} ms; connections cut behind {}; frames {frames_sent} of {frames_dispatched} sent",
        dispatched.as_millis(),
        whole.as_millis(),
        count as f64 / whole.as_secs_f64(),
        next.as_millis(),
        rig.discord.connections_cut_behind()
    );
    assert_eq!(rig.stream_count("CLANKIE_INGRESS").await, count + 1, "a message was stored twice");
    assert_eq!(rig.discord.connections_cut_behind(), 0, "the reader fell behind Discord's resume buffer");
    assert!(next < Duration::from_secs(1), "the message after the burst took {} ms to be stored", next.as_millis());
}

/// NATS paused (SIGSTOP) while a burst arrives: the ingest buffer fills and overflows, and the
/// shard goes on reading: the loopback's heartbeat log shows every heartbeat acknowledged, none
/// later than its interval allows. With NATS back, the backlog is stored, the shard resumes
/// from the last stored message and Discord replays what was let go: every message once.
#[tokio::test]
async fn ingest_the_heartbeats_are_acknowledged_on_time_while_the_ingest_buffer_is_full_and_nothing_is_lost() {
    const INTERVAL_MS: u64 = 500;
    const BUFFER: usize = 200;
    const MESSAGES: u64 = 800;
    let rig = Rig::with(LoopbackConfig { heartbeat_interval_ms: INTERVAL_MS, ..LoopbackConfig::default() }).await;
    let (_gateway, _task) = rig.gateway_with(clankie_gateway::GatewayConfig { ingest_buffer: BUFFER, ..rig.gateway_config() }).await;
    rig.say(GENERAL, "ada", "before the pause");
    while rig.stream_count("CLANKIE_INGRESS").await < 1 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pid = rig.nats.pid().expect("the test's nats-server runs").to_string();
    assert!(std::process::Command::new("kill").args(["-STOP", &pid]).status().unwrap().success());
    let paused_at = clankie_bus::now_ms();
    for i in 0..MESSAGES {
        rig.say(GENERAL, "bob", &format!("while nats sleeps {i}"));
    }
    // Five heartbeat intervals with the buffer full and JetStream answering nothing.
    tokio::time::sleep(Duration::from_millis(INTERVAL_MS * 6)).await;
    let resumed_at = clankie_bus::now_ms();
    assert!(std::process::Command::new("kill").args(["-CONT", &pid]).status().unwrap().success());
    let heartbeats = rig.discord.heartbeats();
    let during: Vec<_> = heartbeats.iter().filter(|h| h.at_ms >= paused_at && h.at_ms <= resumed_at).collect();
    let latest = during.iter().map(|h| h.since_last_ms).max().unwrap_or(0);
    println!(
        "ingest_heartbeats: {} heartbeats while nats was paused for {} ms, all acked: {}, longest gap {latest} ms (interval {INTERVAL_MS} ms)",
        during.len(),
        resumed_at - paused_at,
        during.iter().all(|h| h.acked)
    );
    assert!(
        during.len() as i64 >= (resumed_at - paused_at) / INTERVAL_MS as i64 - 1,
        "heartbeats stopped while the buffer was full: {during:?}"
    );
    assert!(during.iter().all(|h| h.acked), "a heartbeat went unacknowledged: {during:?}");
    assert!(latest <= (INTERVAL_MS as i64) * 3 / 2, "a heartbeat came {latest} ms after the one before (interval {INTERVAL_MS} ms)");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    while rig.stream_count("CLANKIE_INGRESS").await < MESSAGES + 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of {} stored after the pause",
            rig.stream_count("CLANKIE_INGRESS").await,
            MESSAGES + 1
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(rig.stream_count("CLANKIE_INGRESS").await, MESSAGES + 1, "a message was stored twice");
    assert!(rig.discord.resumes() >= 1, "the overflow never resumed the shard, so nothing was replayed");
}

/// A role nobody has (`<@&999>`) mentioned in 100 messages to him: the guild's roles are
/// fetched once, and the id is then known to be unknown.
#[tokio::test]
async fn ingest_an_unknown_role_mentioned_100_times_makes_one_roles_fetch() {
    let rig = Rig::new().await;
    let (_gateway, _task) = rig.gateway().await;
    rig.discord.reset_rest_calls();
    for i in 0..100 {
        rig.discord.user_message(NewMessage {
            channel_id: GENERAL,
            author: "ada".into(),
            content: format!("<@&999> and you, round {i}"),
            mention: true,
            ..Default::default()
        });
    }
    while rig.stream_count("CLANKIE_INGRESS").await < 100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let calls = rig.discord.rest_calls();
    println!("ingest_unknown_role: REST calls {calls:?}");
    assert_eq!(calls.get("GET /guilds/{guild}/roles").copied().unwrap_or(0), 1, "{calls:?}");
    assert_eq!(calls.get("GET /guilds/{guild}").copied().unwrap_or(0), 0, "{calls:?}");
}

/// A thread renamed (THREAD_UPDATE): its next message carries the new name, with no fetch.
/// A starter edited: the next message there carries the new words (the walk-in a lane reads).
#[tokio::test]
async fn ingest_a_renamed_thread_and_an_edited_starter_reach_the_next_message_without_a_fetch() {
    let rig = Rig::new().await;
    let ingress = record::<v1::Ingress>(&rig.bus, Family::IngressText).await;
    let (_gateway, _task) = rig.gateway().await;
    let starter = rig.say(GENERAL, "ada", "raid plan v1: meet at the bridge");
    let thread = rig.discord.start_thread(GENERAL, Some(starter), "raid night", false);
    let in_thread = |text: &str| {
        rig.discord.user_message(NewMessage {
            channel_id: thread,
            author: "bob".into(),
            content: text.into(),
            mention: true,
            ..Default::default()
        })
    };
    let carried = |id: u64| {
        let ingress = &ingress;
        async move {
            until("the thread's message", Duration::from_secs(10), || ingress.all().iter().any(|i| i.delivery_id == id.to_string())).await;
            ingress.all().into_iter().find(|i| i.delivery_id == id.to_string()).and_then(|i| i.thread).expect("thread context")
        }
    };
    let first = in_thread("where do we meet?");
    let walked_in = carried(first).await;
    assert_eq!(walked_in.name, "raid night");
    // The starter is not kept yet: the lane asks for it, as it does before the turn.
    let request = v1::ContextRequest { guild_id: Some(GUILD), channel_id: thread, message_id: first, reply_chain_depth: 3 };
    let reply: v1::ContextReply =
        rig.bus.request(&Subject::RpcContext { channel: thread }, &request, Duration::from_secs(10)).await.unwrap();
    let fetched = reply.thread.and_then(|t| t.starter).map(|s| s.text).unwrap_or_default();
    assert!(fetched.contains("raid plan v1"), "the starter was not gathered: {fetched:?}");

    rig.discord.reset_rest_calls();
    assert!(rig.discord.rename_thread(thread, "raid night (moved)"));
    assert!(rig.discord.user_edit(starter, "raid plan v2: meet at the docks".into()));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = in_thread("and now?");
    let now = carried(second).await;
    let calls = rig.discord.rest_calls();
    println!("ingest_thread_truth: name {:?}, starter {:?}, REST calls {calls:?}", now.name, now.starter.as_ref().map(|s| &s.text));
    assert_eq!(now.name, "raid night (moved)", "the rename did not reach the next message");
    assert!(now.starter.as_ref().is_some_and(|s| s.text.contains("raid plan v2")), "the edited starter's words: {:?}", now.starter);
    assert!(!calls.keys().any(|k| k.starts_with("GET /channels")), "the next message fetched what the events told: {calls:?}");
}
