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

/// The console's receipts follower panics on the first receipt it reads: it is restarted by
/// name, and the lanes view (over its event stream) goes on showing lane changes afterwards.
#[tokio::test]
async fn supervise_a_console_follower_that_panics_follows_again_and_the_lanes_view_goes_on() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    // SAFETY: nextest runs each test in a process of its own; nothing else reads the environment yet.
    unsafe { std::env::set_var("CLANKIE_FAULT_PANIC", "console.receipts") };
    let rig = Rig::new().await;
    rig.standin.script(Script::any(Reply::Text {
        text: "here".into(),
        chunk_chars: 4,
        chunk_delay_ms: 0,
        first_delay_ms: 0,
        tail_delay_ms: 0,
    }));
    let parts = rig.sandbox.console_parts.clone();
    let (addr, token) = rig.sandbox.console.clone();
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request =
        format!("GET /api/lanes/events HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let events = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let sink = events.clone();
    let _reading = clankie_http::Aborting(tokio::spawn(async move {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stream.read(&mut buf).await {
            if n == 0 {
                return;
            }
            sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    }));
    until("the lanes event stream", Duration::from_secs(10), || events.lock().unwrap().starts_with("HTTP/1.1 200")).await;
    let lanes_shown = || events.lock().unwrap().matches("event: lane").count();

    let first = rig.say(GENERAL, "ada", "@Clankie are you there?");
    until("the follower's panic", Duration::from_secs(30), || parts.restarts("console.receipts") >= 1).await;
    rig.wait_outcomes(GENERAL, &[first]).await;
    until("the follower up again", Duration::from_secs(10), || parts.first_down().is_none()).await;
    let before = lanes_shown();
    let later = rig.say(GENERAL, "bob", "@Clankie still there?");
    rig.wait_outcomes(GENERAL, &[later]).await;
    until("a lane change shown after the restart", Duration::from_secs(20), || lanes_shown() > before).await;
    assert_eq!(parts.restarts("console.receipts"), 1, "one panic, one restart");
}
