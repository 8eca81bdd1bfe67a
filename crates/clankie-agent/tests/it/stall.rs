use std::sync::Arc;
use std::time::{Duration, Instant};

use clankie_agent::{AgentEvent, RunReply, StallPolicy, SuspendableClock};
use clankie_model_standin::{Reply, Script};
use clankie_proto::v1::FailureCode;

use super::{Rig, drain, fast, user};

/// Scheduling slack on a loaded two-core machine; far below the silence it bounds.
const SLACK: Duration = Duration::from_millis(250);

#[tokio::test]
async fn a_stream_that_goes_silent_is_aborted_within_silence_plus_one_tick() {
    let rig = Rig::new().await;
    rig.standin.script(Script::any(Reply::Stall { text_before: "let me check".into() }));
    let config = fast();
    let run = rig.agent(config).start(rig.session().await, "sys".into(), vec![user("1", "bracket?")]);
    let (events, result) = drain(run).await;
    assert_eq!(result.outcome.unwrap(), RunReply::Failed(FailureCode::CaptainTurnStalled));
    let last_life = events.iter().rev().find(|(_, e)| *e != AgentEvent::RunEnd).map(|(t, _)| *t).unwrap();
    let ended = events.last().map(|(t, _)| *t).unwrap();
    let waited = ended - last_life;
    assert!(waited >= config.stall.silence - Duration::from_millis(5), "aborted early after {waited:?}");
    assert!(waited <= config.stall.silence + config.stall.tick + SLACK, "aborted late after {waited:?}");
}

#[tokio::test]
async fn a_stream_that_keeps_emitting_is_never_aborted() {
    let rig = Rig::new().await;
    let config = fast();
    // 40 pieces 100 ms apart: four seconds, ten silence windows, never 400 ms quiet.
    let text: String = (0..40).map(|i| format!("w{i:02} ")).collect();
    rig.standin.script(Script::any(Reply::Text {
        text: text.clone(),
        chunk_chars: 4,
        chunk_delay_ms: 100,
        first_delay_ms: 0,
        tail_delay_ms: 0,
    }));
    let started = Instant::now();
    let run = rig.agent(config).start(rig.session().await, "sys".into(), vec![user("1", "read the whole page")]);
    let (_, result) = drain(run).await;
    assert!(started.elapsed() > config.stall.silence * 8, "the run was not long enough to prove anything");
    assert_eq!(result.outcome.unwrap(), RunReply::Words(text.trim().to_owned()));
}

#[tokio::test]
async fn a_suspend_longer_than_the_silence_is_caught_on_the_first_tick_after_it() {
    let rig = Rig::new().await;
    let clock = SuspendableClock::new();
    let mut config = fast();
    // A long real silence, so only the suspend can trip the watchdog within this test's bounds.
    config.stall = StallPolicy { silence: Duration::from_secs(20), tick: Duration::from_millis(50) };
    rig.standin.script(Script::any(Reply::Stall { text_before: "working".into() }));
    let mut run = rig.agent(config).with_clock(Arc::new(clock.clone())).start(rig.session().await, "sys".into(), vec![user("1", "go")]);
    while let Some(e) = run.next_event().await {
        if matches!(e, AgentEvent::TextDelta { .. }) {
            break;
        }
    }
    let suspended_at = Instant::now();
    clock.suspend_for(Duration::from_secs(60));
    let (events, result) = drain(run).await;
    let caught = events.last().map(|(t, _)| *t).unwrap() - suspended_at;
    assert_eq!(result.outcome.unwrap(), RunReply::Failed(FailureCode::CaptainTurnStalled));
    assert!(caught <= config.stall.tick + SLACK, "caught {caught:?} after the suspend");
}

#[tokio::test]
async fn retries_are_signs_of_life() {
    let rig = Rig::new().await;
    let mut config = fast();
    config.retry.max_retries = 6;
    config.retry.base_delay = Duration::from_millis(150);
    config.retry.max_delay = Duration::from_millis(150);
    // Six failures 150 ms apart: 900 ms of retrying, longer than the 400 ms silence, yet every retry is an event.
    for _ in 0..6 {
        rig.standin.script(Script::any(Reply::Status { status: 503 }));
    }
    rig.standin.script(Script::any(Reply::text("back")));
    let run = rig.agent(config).start(rig.session().await, "sys".into(), vec![user("1", "hi")]);
    let (events, result) = drain(run).await;
    assert_eq!(result.outcome.unwrap(), RunReply::Words("back".into()));
    assert_eq!(events.iter().filter(|(_, e)| matches!(e, AgentEvent::RetryStart { code: "server_error", .. })).count(), 6);
}

/// An OpenAI-compatible endpoint on loopback that takes a request body at `bytes_per_s`,
/// through a small receive buffer, then answers `text` at once: a slow uplink.
async fn slow_reader(bytes_per_s: usize, text: &'static str) -> String {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(64 * 1024).unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(8).unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let mut reader = BufReader::with_capacity(8 * 1024, stream);
        let mut length = 0;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).await.unwrap();
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse::<usize>().unwrap();
            }
            if line == "\r\n" {
                break;
            }
        }
        let slice = bytes_per_s / 20;
        let mut part = vec![0u8; slice];
        let mut read = 0;
        while read < length {
            let want = slice.min(length - read);
            reader.read_exact(&mut part[..want]).await.unwrap();
            read += want;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let chunk = serde_json::json!({ "choices": [{ "index": 0, "delta": { "content": text } }] });
        let body = format!("data: {chunk}\n\ndata: [DONE]\n\n");
        let head = format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n", body.len());
        let mut stream = reader.into_inner();
        stream.write_all(head.as_bytes()).await.unwrap();
        stream.write_all(body.as_bytes()).await.unwrap();
        stream.flush().await.unwrap();
    });
    url
}

#[tokio::test]
async fn a_big_request_whose_upload_outlasts_the_silence_is_alive_while_it_moves() {
    let rig = Rig::new().await;
    // The kernel keeps about 4 MB of the body past the last part the connection takes, drained
    // with no event (4 s at this rate), and a debug build encodes the body before its first
    // part moves, blocking the runtime (under a second here, five on a loaded machine): the
    // silence must outlast both, and the upload the silence twice over.
    let mut config = fast();
    config.stall.silence = Duration::from_millis(6_000);
    // 12 MB at 1 MB a second: twelve seconds of upload.
    let url = slow_reader(1_000_000, "A very large map.").await;
    let model = clankie_agent::Model::OpenAi(
        clankie_agent::OpenAiClient::new(clankie_agent::OpenAiConfig {
            base_url: url,
            model: "slow".into(),
            api_key: None,
            response_timeout: clankie_agent::DEFAULT_RESPONSE_TIMEOUT,
        })
        .unwrap(),
    );
    // The bulk is in the system prompt, which the run does not store in its session.
    let system = format!("Read this map: {}", "A".repeat(12_000_000));
    let started = Instant::now();
    let run = clankie_agent::Agent::new(model, config).start(rig.session().await, system, vec![user("1", "what is this?")]);
    let (events, result) = drain(run).await;
    let took = started.elapsed();
    let sent: Vec<Instant> = events.iter().filter(|(_, e)| matches!(e, AgentEvent::RequestSent { .. })).map(|(t, _)| *t).collect();
    let at = |t: &Instant| t.duration_since(started).as_millis();
    let timeline: Vec<String> =
        events.iter().filter(|(_, e)| !matches!(e, AgentEvent::RequestSent { .. })).map(|(t, e)| format!("{e:?}@{}", at(t))).collect();
    println!(
        "upload: {} parts reported over {took:?}, the first at {:?} ms, the last at {:?} ms; other events {timeline:?}",
        sent.len(),
        sent.first().map(at),
        sent.last().map(at)
    );
    assert_eq!(result.outcome.unwrap(), RunReply::Words("A very large map.".into()), "after {took:?}");
    // The parts were reported as the upload moved, not all at once: from the first to the
    // last, more than one silence passed.
    let moving = match (sent.first(), sent.last()) {
        (Some(first), Some(last)) => last.duration_since(*first),
        _ => Duration::ZERO,
    };
    assert!(moving > config.stall.silence, "the parts were reported within {moving:?}, not as the upload moved");
    // 12 MB in parts of 256 kB: each reported as the connection took it.
    assert!(sent.len() >= 45, "the upload was reported as it moved: {} parts", sent.len());
}
