use std::time::Duration;

use bytes::Bytes;
use clankie_bus::{Bus, ConsumerSpec, MsgId, REJECTED};
use clankie_proto::{Event, Family, LaneKey, Subject, v1};
use clankie_testkit::{TestDir, TestNats};

async fn bus(nats: &TestNats, dir: &TestDir) -> Bus {
    bus_at(nats.url(), dir, "test").await
}

/// A bus named `name` on the server at `url` (a path to it, say), its streams made.
async fn bus_at(url: String, dir: &TestDir, name: &str) -> Bus {
    let settings = clankie_settings::Settings::from_lookup(|k| match k {
        "CLANKIE_NATS_URL" => Some(url.clone()),
        "CLANKIE_STATE_DIR" => Some(dir.path().display().to_string()),
        _ => None,
    })
    .unwrap();
    let bus = Bus::connect(&settings, name).await.unwrap();
    bus.ensure_streams().await.unwrap();
    bus
}

async fn next<E: Event>(consumer: &mut clankie_bus::Consumer<E>) -> clankie_bus::Delivery<E> {
    tokio::time::timeout(Duration::from_secs(10), consumer.next()).await.expect("an event within 10 s").unwrap()
}

async fn round_trip<E: Event + PartialEq + std::fmt::Debug>(bus: &Bus, subject: Subject, event: E) {
    let family = subject.family();
    let mut consumer = bus.consumer::<E>(ConsumerSpec::durable(format!("rt_{family:?}"), family)).await.unwrap();
    bus.publish(&subject, &event, None).await.unwrap();
    let got = next(&mut consumer).await;
    assert_eq!(got.event, event, "{family:?}");
    assert_eq!(got.subject, subject);
    got.ack().await.unwrap();
}

fn ingress(id: u64) -> v1::Ingress {
    v1::Ingress {
        delivery_id: id.to_string(),
        guild_id: Some(10),
        channel_id: 20,
        author_id: 30,
        author_name: "ada".into(),
        content: "is the lobby up?".into(),
        mentions_him: true,
        reply_to_message_id: Some(5),
        attachments: vec![v1::Attachment {
            id: 1,
            filename: "a.png".into(),
            content_type: "image/png".into(),
            size_bytes: 42,
            url: "http://127.0.0.1/a.png".into(),
        }],
        received_at_ms: 1_700_000_000_000,
        ..Default::default()
    }
}

#[tokio::test]
async fn every_event_type_round_trips_through_the_typed_api() {
    let (nats, dir) = (TestNats::start().unwrap(), TestDir::new());
    let bus = bus(&nats, &dir).await;
    let lane = LaneKey::Room { guild: 10, channel: 20 };
    let room_input = v1::RoomInput {
        delivery_id: "7".into(),
        guild_id: 10,
        channel_id: 21,
        author_id: 30,
        author_name: "ada".into(),
        source: v1::RoomInputSource::Text as i32,
        text: "say something in vc clankie".into(),
        mentions_him: false,
        received_at_ms: 1,
        ..Default::default()
    };
    round_trip(&bus, Subject::ingress_text(Some(10), 20), ingress(1)).await;
    round_trip(&bus, Subject::ingress_text(None, 20), v1::Ingress { guild_id: None, ..ingress(2) }).await;
    round_trip(&bus, Subject::IngressRoom { guild: 10, channel: 21 }, room_input.clone()).await;
    round_trip(
        &bus,
        Subject::LaneSteer { lane },
        v1::Steer { lane: lane.to_string(), epoch: 3, ingress: Some(ingress(3)), forwarded_by: "captain-1".into() },
    )
    .await;
    round_trip(
        &bus,
        Subject::LaneOutcome { lane },
        v1::DeliveryOutcome {
            delivery_id: "3".into(),
            lane: lane.to_string(),
            kind: v1::OutcomeKind::Failed as i32,
            failure_code: v1::FailureCode::CaptainTurnStalled as i32,
            turn_id: "t1".into(),
            recorded_at_ms: 2,
        },
    )
    .await;
    round_trip(
        &bus,
        Subject::BodyTyping { channel: 20 },
        v1::TypingAction {
            channel_id: 20,
            lane: lane.to_string(),
            delivery_id: "3".into(),
            op: v1::TypingOp::Start as i32,
            host: "captain-1".into(),
            stamped_at_ms: 3,
        },
    )
    .await;
    round_trip(
        &bus,
        Subject::BodySend { channel: 20 },
        v1::OutboundMessage {
            idempotency_key: "reply:3".into(),
            kind: v1::OutboundKind::Reply as i32,
            guild_id: Some(10),
            channel_id: 20,
            reply_to_message_id: Some(3),
            text: "yes, lobby 4".into(),
            artifacts: vec![v1::ArtifactRef { id: "sha256:ab".into(), filename: "b.png".into(), content_type: "image/png".into() }],
            lane: lane.to_string(),
            delivery_id: "3".into(),
            tool_card_op: v1::ToolCardOp::Unspecified as i32,
            tool_names: vec![],
            direct_user_id: 0,
            buttons: vec![],
        },
    )
    .await;
    round_trip(
        &bus,
        Subject::VoiceSession { guild: 10 },
        v1::VoiceSession { guild_id: 10, channel_id: Some(21), session_id: "s".into(), updated_at_ms: 4, live_until_ms: 9 },
    )
    .await;
    round_trip(&bus, Subject::VoiceInput { guild: 10, channel: 21 }, room_input).await;
    round_trip(
        &bus,
        Subject::VoiceTranscript { guild: 10, channel: 21 },
        v1::Transcript {
            delivery_id: "u1".into(),
            guild_id: 10,
            channel_id: 21,
            speaker_id: 30,
            text: "hello".into(),
            started_at_ms: 5,
            ended_at_ms: 6,
        },
    )
    .await;
    round_trip(
        &bus,
        Subject::VoiceFloor { guild: 10, channel: 21 },
        v1::FloorDecision {
            delivery_id: "7".into(),
            guild_id: 10,
            channel_id: 21,
            author_id: 30,
            source: v1::RoomInputSource::Text as i32,
            verdict: v1::FloorVerdict::Wake as i32,
            reason: "named".into(),
            decided_at_ms: 7,
        },
    )
    .await;
    let receipt = v1::Receipt::new(&clankie_proto::ReceiptKind::new("discord.voice.text_input").unwrap(), "gateway", "7", 8)
        .with_id("guild", 10)
        .with_count("chars", 27)
        .with_flag("addressed", true);
    round_trip(&bus, Subject::receipt("discord.voice.text_input").unwrap(), receipt).await;
}

#[tokio::test]
async fn the_same_msg_id_inside_the_window_is_delivered_once() {
    let (nats, dir) = (TestNats::start().unwrap(), TestDir::new());
    let bus = bus(&nats, &dir).await;
    let subject = Subject::ingress_text(Some(10), 20);
    let id = MsgId::discord_message(1);
    let first = bus.publish(&subject, &ingress(1), Some(&id)).await.unwrap();
    let second = bus.publish(&subject, &ingress(1), Some(&id)).await.unwrap();
    assert!(!first.duplicate);
    assert!(second.duplicate, "JetStream stored the redelivery");
    assert_eq!(first.sequence, second.sequence);
    // A different message after the duplicate proves the consumer would have seen a second copy.
    bus.publish(&subject, &ingress(2), Some(&MsgId::discord_message(2))).await.unwrap();

    let mut consumer = bus.consumer::<v1::Ingress>(ConsumerSpec::durable("captain", Family::IngressText)).await.unwrap();
    let a = next(&mut consumer).await;
    a.ack().await.unwrap();
    let b = next(&mut consumer).await;
    b.ack().await.unwrap();
    assert_eq!((a.event.delivery_id.as_str(), b.event.delivery_id.as_str()), ("1", "2"));
    assert_eq!(a.msg_id.as_deref(), Some("discord:message:1"));
    let mut stream = bus.jetstream().get_stream("CLANKIE_INGRESS").await.unwrap();
    assert_eq!(stream.info().await.unwrap().state.messages, 2);
}

#[tokio::test]
async fn malformed_payloads_are_refused_with_a_receipt_and_consumption_goes_on() {
    let (nats, dir) = (TestNats::start().unwrap(), TestDir::new());
    let bus = bus(&nats, &dir).await;
    let mut receipts = bus.consumer::<v1::Receipt>(ConsumerSpec::durable("trail", Family::Receipt)).await.unwrap();
    let mut consumer = bus
        .consumer::<v1::Ingress>(ConsumerSpec::durable("captain", Family::IngressText).with_ack_wait(Duration::from_secs(1)))
        .await
        .unwrap();

    let garbage = bus.publish_bytes("clankie.ingress.text.10.20".into(), Bytes::from_static(b"\xff\xff\xff\x01"), None).await.unwrap();
    let stranger = bus.publish_bytes("clankie.ingress.room.x.1".into(), Bytes::from_static(b""), None).await.unwrap();
    bus.publish(&Subject::ingress_text(Some(10), 20), &ingress(9), None).await.unwrap();

    let good = next(&mut consumer).await;
    assert_eq!(good.event.delivery_id, "9");
    good.ack().await.unwrap();

    let refused = next(&mut receipts).await;
    assert_eq!(refused.event.kind, REJECTED);
    assert_eq!(refused.event.codes, vec!["payload_decode_failed".to_owned()]);
    assert_eq!(refused.event.ids["stream_sequence"], garbage.sequence.to_string());
    assert_eq!(refused.event.ids["stream"], "CLANKIE_INGRESS");
    assert_eq!(refused.event.counts["payload_bytes"], 4);

    // The room-ingress subject with a bad id is outside this consumer's filter; a consumer of that family refuses it.
    let mut room = bus
        .consumer::<v1::RoomInput>(ConsumerSpec::durable("floor", Family::IngressRoom).with_filter("clankie.ingress.room.>"))
        .await
        .unwrap();
    bus.publish(&Subject::IngressRoom { guild: 1, channel: 2 }, &v1::RoomInput { delivery_id: "r1".into(), ..Default::default() }, None)
        .await
        .unwrap();
    assert_eq!(next(&mut room).await.event.delivery_id, "r1");
    let refused = next(&mut receipts).await;
    assert_eq!(refused.event.codes, vec!["subject_unknown".to_owned()]);
    assert_eq!(refused.event.ids["stream_sequence"], stranger.sequence.to_string());

    // Terminated, not left for redelivery: nothing is pending or awaiting an ack.
    let mut info = bus
        .jetstream()
        .get_stream("CLANKIE_INGRESS")
        .await
        .unwrap()
        .get_consumer::<async_nats::jetstream::consumer::pull::Config>("captain")
        .await
        .unwrap();
    let info = info.info().await.unwrap();
    assert_eq!((info.num_pending, info.num_ack_pending), (0, 0));
}

#[tokio::test]
async fn a_consumer_of_the_wrong_type_is_refused_at_open() {
    let (nats, dir) = (TestNats::start().unwrap(), TestDir::new());
    let bus = bus(&nats, &dir).await;
    assert!(bus.consumer::<v1::Ingress>(ConsumerSpec::durable("x", Family::BodySend)).await.is_err());
    let wrong = bus.publish(&Subject::BodySend { channel: 1 }, &ingress(1), None).await;
    assert!(wrong.is_err(), "an Ingress was published on a send subject");
}

/// Rounds of subscribe-then-publish-from-elsewhere in the barrier test.
fn barrier_rounds() -> usize {
    std::env::var("CLANKIE_BARRIER_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(300)
}

/// A TCP path to `upstream` (`host:port`) whose client-to-server bytes arrive `delay` late, in
/// order, and server-to-client bytes at once: a connection whose subscription reaches the server
/// after what another connection publishes right then.
async fn slow_path(upstream: String, delay: Duration) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else { return };
            let ((mut from_client, mut to_client), (mut from_server, mut to_server)) = (client.into_split(), server.into_split());
            tokio::spawn(async move { tokio::io::copy(&mut from_server, &mut to_client).await });
            let (late, mut due) = tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
            tokio::spawn(async move {
                while let Some((at, bytes)) = due.recv().await {
                    tokio::time::sleep_until(at).await;
                    if to_server.write_all(&bytes).await.is_err() {
                        return;
                    }
                }
            });
            tokio::spawn(async move {
                let mut buf = vec![0u8; 16 * 1024];
                while let Ok(n @ 1..) = from_client.read(&mut buf).await {
                    let _ = late.send((tokio::time::Instant::now() + delay, buf[..n].to_vec()));
                }
            });
        }
    });
    format!("nats://{addr}")
}

#[tokio::test]
async fn barrier_a_new_subscription_hears_what_another_connection_publishes_right_after() {
    use futures::StreamExt;
    let (nats, dir) = (TestNats::start().unwrap(), TestDir::new());
    let (listener, talker) = (bus(&nats, &dir).await, bus(&nats, &dir).await);
    for round in 0..barrier_rounds() {
        let subject = format!("clankie.signal.typing.{round}");
        let mut sub = listener.client().subscribe(subject.clone()).await.unwrap();
        listener.barrier().await.unwrap();
        talker.client().publish(subject, Bytes::from_static(b"x")).await.unwrap();
        talker.client().flush().await.unwrap();
        let heard = tokio::time::timeout(Duration::from_secs(2), sub.next()).await;
        assert!(matches!(heard, Ok(Some(_))), "round {round}: a publish right after the barrier was missed");
    }
    // The same through a listener whose bytes reach the server 100 ms late, where a new
    // subscription without the barrier is certain to come after the publish: with the barrier
    // every publish is heard, without it they are missed, so the barrier is what holds.
    let upstream = nats.url().trim_start_matches("nats://").to_owned();
    let slow_url = slow_path(upstream, Duration::from_millis(100)).await;
    let slow = bus_at(slow_url, &dir, "slow").await;
    let (mut heard_with, mut missed_without) = (0, 0);
    for round in 0..10 {
        for barrier in [true, false] {
            let subject = format!("clankie.signal.typing.slow.{barrier}.{round}");
            let mut sub = slow.client().subscribe(subject.clone()).await.unwrap();
            if barrier {
                slow.barrier().await.unwrap();
            }
            talker.client().publish(subject, Bytes::from_static(b"x")).await.unwrap();
            talker.client().flush().await.unwrap();
            let heard = matches!(tokio::time::timeout(Duration::from_millis(400), sub.next()).await, Ok(Some(_)));
            match (barrier, heard) {
                (true, true) => heard_with += 1,
                (false, false) => missed_without += 1,
                _ => {}
            }
        }
    }
    println!(
        "barrier: {} rounds heard with the barrier; on a path 100 ms slow, {heard_with} of 10 heard with it and {missed_without} of 10 missed without it",
        barrier_rounds()
    );
    assert_eq!(heard_with, 10, "on the slow path a publish right after the barrier was missed");
    assert!(missed_without > 0, "without the barrier no publish was missed: the rounds above prove nothing");
}
