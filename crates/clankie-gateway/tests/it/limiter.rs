//! twilight's REST limiter when a bucket resets while a request of it is in flight: twilight
//! 0.17.1 asserted that never happens, and in a debug build the assertion panicked its actor
//! task, after which every request of the process panicked. The loopback gives each answer a
//! way back (`answer_latency_ms`) and a short message-create window, so the reset an answer
//! announces often comes due while the next post is on its way, and counts each time it did.

use std::time::Duration;

use clankie_discord_loopback::LoopbackConfig;
use clankie_proto::Subject;

use super::{GENERAL, Rig, outbound_reply, until};

/// Rounds of the scenario: 50 in CI, more with `CLANKIE_LIMITER_ROUNDS`.
fn rounds() -> usize {
    std::env::var("CLANKIE_LIMITER_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(50)
}

const REPLIES_PER_ROUND: usize = 4;

#[tokio::test]
async fn limiter_buckets_that_reset_while_a_reply_is_in_flight_panic_nothing_and_every_reply_posts() {
    let mut config = LoopbackConfig { heartbeat_interval_ms: 5_000, ..LoopbackConfig::default() };
    config.limits.message_create_window_ms = 250;
    config.limits.answer_latency_ms = 60;
    let rig = Rig::with(config).await;
    let (gateway, _task) = rig.gateway().await;
    let rounds = rounds();
    let started = tokio::time::Instant::now();
    for round in 0..rounds {
        for i in 0..REPLIES_PER_ROUND {
            let text = format!("round {round:03} reply {i}");
            let reply = outbound_reply(GENERAL, None, &format!("reply:limiter:{round}:{i}"), &text);
            rig.bus.publish(&Subject::BodySend { channel: GENERAL }, &reply, None).await.unwrap();
        }
        let want = (round + 1) * REPLIES_PER_ROUND;
        until(&format!("round {round}'s replies"), Duration::from_secs(30), || rig.discord.posts(GENERAL).len() >= want).await;
    }
    let posts: Vec<String> = rig.discord.posts(GENERAL).iter().map(|p| p.content.clone()).collect();
    let mut expected: Vec<String> =
        (0..rounds).flat_map(|r| (0..REPLIES_PER_ROUND).map(move |i| format!("round {r:03} reply {i}"))).collect();
    let mut seen = posts.clone();
    seen.sort();
    expected.sort();
    assert_eq!(seen, expected, "every reply posted, each once");
    let limits = rig.discord.limit_counts();
    println!(
        "limiter: {rounds} rounds, {} replies in {:.1} s; resets that came due in flight: {}; 429s: {} user, {} global; \
         REST clients rebuilt: {}; body restarts: {}",
        posts.len(),
        started.elapsed().as_secs_f64(),
        limits.resets_in_flight,
        limits.rate_limited_user,
        limits.rate_limited_global,
        gateway.rest_clients_rebuilt(),
        gateway.parts().restarts("gateway.body"),
    );
    assert!(limits.resets_in_flight >= 10, "the scenario arose too rarely to prove anything: {}", limits.resets_in_flight);
    assert_eq!(gateway.rest_clients_rebuilt(), 0, "the limiter never panicked, so its client was never rebuilt");
    assert_eq!(gateway.parts().restarts("gateway.body"), 0, "the body never panicked");
}
