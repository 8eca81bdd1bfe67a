//! REST as a client meets it beyond the answers: as slow as the loopback is told to make it
//! (each answer held until its latency after arrival, the limits counting at arrival), and every
//! call counted by its route kind.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clankie_discord_loopback::LoopbackConfig;

use crate::*;

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

#[tokio::test]
async fn rest_latency_holds_each_answer_and_the_limits_count_at_arrival() {
    let discord = loopback(LoopbackConfig { rest_latency_ms: 300, ..LoopbackConfig::default() }).await;
    let http = client(&discord);
    let started = Instant::now();
    http.create_message(id(GENERAL)).content("slowly").await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(300), "answered after {:?}", started.elapsed());
    let answered = now_ms();
    let arrived = *discord.request_arrivals().last().unwrap();
    assert!(answered - arrived >= 299, "counted at arrival, {} ms before the answer", answered - arrived);

    discord.set_rest_latency(Duration::ZERO);
    let started = Instant::now();
    http.channel(id(GENERAL)).await.unwrap();
    assert!(started.elapsed() < Duration::from_millis(250), "answered at once again: {:?}", started.elapsed());
    discord.set_rest_latency(Duration::from_millis(200));
    let started = Instant::now();
    http.channel(id(GENERAL)).await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(200), "slow again: {:?}", started.elapsed());
    // The control API is not Discord's REST: never held.
    let started = Instant::now();
    raw(&discord, "GET", "/control/rooms", false, "").await;
    assert!(started.elapsed() < Duration::from_millis(200));
}

#[tokio::test]
async fn rest_calls_are_counted_by_route_kind_and_reset() {
    let discord = loopback(LoopbackConfig::default()).await;
    let http = client(&discord);
    let first = http.create_message(id(GENERAL)).content("one").await.unwrap().model().await.unwrap();
    http.create_message(id(LOBBIES)).content("two").await.unwrap();
    http.message(id(GENERAL), first.id).await.unwrap();
    http.channel(id(GENERAL)).await.unwrap();
    http.roles(id(GUILD)).await.unwrap();
    raw(&discord, "GET", "/control/rooms", false, "").await;
    let kinds: Vec<(String, u64)> = discord.rest_calls().into_iter().collect();
    let expected = [
        ("GET /channels/{channel}", 1),
        ("GET /channels/{channel}/messages/{message}", 1),
        ("GET /guilds/{guild}/roles", 1),
        ("POST /channels/{channel}/messages", 2),
    ];
    assert_eq!(kinds, expected.map(|(k, n)| (k.to_owned(), n)).to_vec());
    assert_eq!(discord.rest_calls_total(), 5);

    discord.reset_rest_calls();
    assert!(discord.rest_calls().is_empty());
    assert_eq!(discord.rest_calls_total(), 0);
    // A refused call is a call too.
    assert_eq!(refusal(http.channel(id(4_000)).await), (404, 10003));
    assert_eq!(discord.rest_calls().get("GET /channels/{channel}"), Some(&1));
    assert_eq!(discord.rest_calls_total(), 1);
}
