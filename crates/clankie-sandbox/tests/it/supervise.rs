//! No half-alive process: a part of the gateway that panics is started again on its own, and
//! the shards' ingest never stops with it.

use std::time::Duration;

use clankie_model_standin::{Reply, Script};

use super::{GENERAL, Rig, until};

#[tokio::test]
async fn supervise_a_panic_in_the_gateways_typing_and_body_restarts_each_part_and_every_message_is_answered() {
    // The first typing action and the first outbound message each panic their part, once.
    // SAFETY: nextest runs each test in a process of its own; nothing else reads the environment yet.
    unsafe { std::env::set_var("CLANKIE_FAULT_PANIC", "gateway.typing,gateway.body") };
    let rig = Rig::new().await;
    let parts = rig.sandbox.gateway.parts();
    let first = rig.say(GENERAL, "ada", "@Clankie are you there?");
    until("the typing part's panic", Duration::from_secs(30), || parts.restarts("gateway.typing") >= 1).await;
    // Written while the parts are down or restarting: the shards still admit it.
    let meanwhile = rig.say(GENERAL, "bob", "@Clankie and me?");
    until("the body's panic", Duration::from_secs(30), || parts.restarts("gateway.body") >= 1).await;
    until("both answered", Duration::from_secs(60), || {
        [first, meanwhile].iter().all(|id| rig.outcome(GENERAL, *id).is_some_and(|o| o == "replied" || o == "absorbed"))
    })
    .await;
    // The reply the panic dropped is redelivered after the body's ack wait (10 s) and posted.
    let replied = [first, meanwhile].iter().filter(|id| rig.outcome(GENERAL, **id).as_deref() == Some("replied")).count();
    until("the replies posted", Duration::from_secs(60), || rig.sandbox.discord.posts(GENERAL).len() >= replied).await;
    assert_eq!(parts.restarts("gateway.typing"), 1);
    assert_eq!(parts.restarts("gateway.body"), 1);
    assert_eq!(parts.restarts("gateway.shards"), 0, "ingest never went down");
    assert_eq!(parts.restarts("gateway.rest"), 0, "the REST tenure was kept: only the panicked parts restarted");
    assert_eq!(parts.first_down(), None, "every part is up again");
    // Typing still works after its restart: a later turn lights the room again.
    let typed_before = rig.sandbox.discord.typing(GENERAL).len();
    rig.standin.script(Script::when(
        "one more?",
        Reply::Text { text: "still here".into(), chunk_chars: 2, chunk_delay_ms: 60, first_delay_ms: 0, tail_delay_ms: 0 },
    ));
    let later = rig.say(GENERAL, "cy", "@Clankie one more?");
    rig.wait_outcomes(GENERAL, &[later]).await;
    until("the later reply", Duration::from_secs(30), || {
        rig.sandbox.discord.posts(GENERAL).iter().any(|p| p.content.contains("still here"))
    })
    .await;
    assert!(rig.sandbox.discord.typing(GENERAL).len() > typed_before, "the restarted typing part never lit the room");
}
