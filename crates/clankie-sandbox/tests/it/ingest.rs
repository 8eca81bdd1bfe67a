//! Ingest never waits on context, across the whole stack: people talking to each other cost
//! Discord's REST API nothing however slow it answers, and a mention behind them is admitted
//! at once; each figure is read from what the loopback Discord observed.

use std::time::Duration;

use clankie_discord_loopback::NewMessage;
use clankie_proto::{Family, v1};

use super::{GENERAL, Rig, until};

/// 200 messages between people, each replying to the one before (a chain the old ingest walked
/// up for every message), with Discord's REST answering after 300 ms: none of them costs a
/// REST call. Then one mention: the captain admits it within a second of its sending.
#[tokio::test]
async fn ingest_200_reply_to_reply_messages_between_people_at_300_ms_rest_latency_cost_no_rest_call_and_a_mention_after_them_is_admitted_within_a_second()
 {
    let rig = Rig::new().await;
    let receipts = clankie_testkit::record::<v1::Receipt>(&rig.bus().await, Family::Receipt).await;
    let discord = &rig.sandbox.discord;
    // Once the gateway is up and has told what it had to (its commands, the invite check).
    let warm = rig.say(GENERAL, "bob", "evening all");
    until("the first message's ingress", Duration::from_secs(20), || {
        receipts.all().iter().any(|r| r.kind == "gateway.ingress" && r.delivery_id == warm.to_string())
    })
    .await;
    discord.set_rest_latency(Duration::from_millis(300));
    tokio::time::sleep(Duration::from_millis(700)).await;
    discord.reset_rest_calls();
    let mut previous = warm;
    let mut chain = Vec::new();
    for i in 0..200 {
        previous = discord.user_message(NewMessage {
            channel_id: GENERAL,
            author: if i % 2 == 0 { "cy".into() } else { "bob".into() },
            content: format!("no, you are wrong about the map ({i})"),
            reply_to: Some(previous),
            ..Default::default()
        });
        chain.push(previous.to_string());
    }
    until("the 200 refused as not addressed", Duration::from_secs(60), || {
        receipts.all().iter().filter(|r| r.kind == "captain.not_admitted" && chain.contains(&r.delivery_id)).count() == chain.len()
    })
    .await;
    let calls = discord.rest_calls();
    let sent = tokio::time::Instant::now();
    let mention = discord.user_message(NewMessage {
        channel_id: GENERAL,
        author: "ada".into(),
        content: "@Clankie settle it: which map is better?".into(),
        mention: true,
        ..Default::default()
    });
    until("the mention admitted", Duration::from_secs(30), || {
        receipts.all().iter().any(|r| r.kind == "captain.admitted" && r.delivery_id == mention.to_string())
    })
    .await;
    let admitted = sent.elapsed();
    println!("ingest_reply_chains: REST calls for the 200: {calls:?}; the mention admitted {} ms after it was sent", admitted.as_millis());
    assert!(calls.is_empty(), "messages between people cost REST calls: {calls:?}");
    assert!(admitted < Duration::from_secs(1), "the mention took {} ms to be admitted", admitted.as_millis());
}
