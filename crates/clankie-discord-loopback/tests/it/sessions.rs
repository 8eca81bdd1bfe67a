//! What a gateway connection does over time: every heartbeat logged and acked promptly even
//! behind a long dispatch backlog, and a connection that falls further behind than its session
//! keeps is cut (never skipped ahead), so its client resumes and is told the session is gone.

use std::time::Duration;

use clankie_discord_loopback::LoopbackConfig;
use serde_json::json;

use crate::*;

const GUILD_MESSAGE_TYPING: u64 = 1 << 11;
const QUIET: Duration = Duration::from_millis(400);
/// Frames one connection may send from its session's log before it reads again.
const FRAMES_PER_TURN: usize = 64;

/// A connection identified for typing events only, past READY; returns it and its session id.
async fn typing_session(discord: &clankie_discord_loopback::Loopback) -> (Gateway, String) {
    let mut gateway = Gateway::connect(discord).await;
    gateway.identify(discord, GUILD_MESSAGE_TYPING).await;
    let seen = gateway.dispatches(QUIET).await;
    assert_eq!(seen.iter().map(|(t, _)| t.as_str()).collect::<Vec<_>>(), vec!["READY"]);
    let session = seen[0].1["d"]["session_id"].as_str().unwrap().to_owned();
    (gateway, session)
}

#[tokio::test]
async fn heartbeats_are_logged_per_connection_and_acked_ahead_of_a_dispatch_backlog() {
    let discord = loopback(LoopbackConfig::default()).await;
    let (mut gateway, _) = typing_session(&discord).await;
    gateway.send(&json!({ "op": 1, "d": 1 })).await;
    let ack = gateway.next(Duration::from_secs(5)).await;
    assert!(matches!(&ack, Some(Frame::Json(v)) if v["op"] == 11), "{ack:?}");

    // A thousand events appended while the connection's task cannot run (the test's runtime has
    // one thread), then a heartbeat: its ACK must not wait for the whole backlog.
    for _ in 0..1000 {
        discord.user_typing(GENERAL, "ada");
    }
    gateway.send(&json!({ "op": 1, "d": 2 })).await;
    let (mut sequences, mut before_ack) = (Vec::new(), None);
    while sequences.len() < 1000 || before_ack.is_none() {
        match gateway.next(Duration::from_secs(5)).await {
            Some(Frame::Json(v)) if v["op"] == 11 => before_ack = Some(sequences.len()),
            Some(Frame::Json(v)) if v["op"] == 0 => sequences.push(v["s"].as_u64().unwrap()),
            other => panic!("after {} dispatches: {other:?}", sequences.len()),
        }
    }
    assert!(before_ack.is_some_and(|n| n <= FRAMES_PER_TURN), "the ACK came after {before_ack:?} dispatches");
    assert_eq!(sequences, (2..=1001).collect::<Vec<u64>>(), "every frame, in order, none skipped");
    assert_eq!(discord.connections_cut_behind(), 0);
    let (dispatched, sent) = discord.gateway_frames();
    assert_eq!((dispatched, sent), (1001, 1001), "READY and the thousand, each sent once");

    let mut other = Gateway::connect(&discord).await;
    other.send(&json!({ "op": 1, "d": null })).await;
    assert!(matches!(other.next(Duration::from_secs(5)).await, Some(Frame::Json(v)) if v["op"] == 11));
    let beats = discord.heartbeats();
    assert_eq!(beats.len(), 3, "{beats:?}");
    assert_eq!(beats[0].connection, beats[1].connection);
    assert_ne!(beats[1].connection, beats[2].connection, "each connection is numbered apart");
    assert!(beats.iter().all(|b| b.acked && b.interval_ms == discord.config().heartbeat_interval_ms && b.since_last_ms >= 0));
    assert!(beats[0].since_last_ms >= QUIET.as_millis() as i64, "the first counts from Hello: {beats:?}");
    assert_eq!(beats[1].since_last_ms, beats[1].at_ms - beats[0].at_ms);
}

/// A burst past the resume buffer waits in the live connection's own queue, as Discord writes
/// each event to a connection as it happens: every frame arrives, in order, none skipped.
#[tokio::test]
async fn a_burst_past_the_resume_buffer_reaches_a_live_connection_whole() {
    let discord = loopback(LoopbackConfig::default()).await;
    let (mut gateway, _session) = typing_session(&discord).await;
    for _ in 0..1100 {
        discord.user_typing(GENERAL, "ada");
    }
    let mut seqs = Vec::new();
    while seqs.len() < 1100 {
        match gateway.next(Duration::from_secs(5)).await {
            Some(Frame::Json(v)) if v["t"] == "TYPING_START" => seqs.push(v["s"].as_u64().unwrap_or(0)),
            Some(Frame::Json(_)) => {}
            other => panic!("the connection ended after {} frames: {other:?}", seqs.len()),
        }
    }
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "a frame was skipped");
    assert_eq!(discord.connections_cut_behind(), 0);
}

/// A connection that falls past its live backlog (`live_backlog_frames`) is cut, never
/// skipped ahead, and its resume is refused: the frames are gone.
#[tokio::test]
async fn a_connection_that_falls_past_the_resume_buffer_is_cut_and_its_resume_is_refused() {
    let discord = loopback(LoopbackConfig { live_backlog_frames: 1_050, ..LoopbackConfig::default() }).await;
    let (mut gateway, session) = typing_session(&discord).await;
    // More than the connection's backlog, appended before it can send any.
    for _ in 0..1100 {
        discord.user_typing(GENERAL, "ada");
    }
    let frame = gateway.next(Duration::from_secs(5)).await;
    assert!(matches!(frame, Some(Frame::Closed(None))), "cut without a close frame and without a skip: {frame:?}");
    assert_eq!(discord.connections_cut_behind(), 1);

    let mut again = Gateway::connect(&discord).await;
    let resume = json!({ "token": discord.config().token, "session_id": session, "seq": 1 });
    again.send(&json!({ "op": 6, "d": resume })).await;
    let answer = again.next(Duration::from_secs(5)).await;
    assert!(matches!(&answer, Some(Frame::Json(v)) if v["op"] == 9), "the frames are gone: Invalid Session, {answer:?}");
    assert_eq!(discord.resumes(), 0);
}
