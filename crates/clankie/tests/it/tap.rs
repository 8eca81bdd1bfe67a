use std::process::Stdio;
use std::time::Duration;

use bytes_free::publish_garbage;
use clankie_bus::{Bus, MsgId};
use clankie_proto::{LaneKey, Subject, v1};
use clankie_testkit::{TestDir, TestNats};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

mod bytes_free {
    pub async fn publish_garbage(bus: &clankie_bus::Bus, subject: &clankie_proto::Subject) {
        bus.publish_bytes(subject.to_string(), vec![0xff, 0xff, 0x01].into(), None).await.unwrap();
    }
}

#[tokio::test]
async fn tap_prints_decoded_json_for_published_events() {
    let (nats, dir) = (TestNats::start().unwrap(), TestDir::new());
    let settings = clankie_settings::Settings::for_endpoints(&nats.url(), "postgres://unused@127.0.0.1:1/x", dir.path()).unwrap();
    let bus = Bus::connect(&settings, "test").await.unwrap();
    bus.ensure_streams().await.unwrap();

    let mut tap = Command::new(env!("CARGO_BIN_EXE_clankie"))
        .args(["tap", "clankie.>", "--count", "3"])
        .env("CLANKIE_NATS_URL", nats.url())
        .env("CLANKIE_STATE_DIR", dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(tap.stderr.take().unwrap()).lines();
    let ready = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(line) = stderr.next_line().await.unwrap() {
            if line.starts_with("tapping") {
                return true;
            }
        }
        false
    });
    assert!(ready.await.unwrap(), "tap exited before subscribing");
    // Keep draining its log so a full pipe can never stall it.
    tokio::spawn(async move { while let Ok(Some(_)) = stderr.next_line().await {} });

    let lane = LaneKey::Room { guild: 10, channel: 20 };
    let ingress = v1::Ingress { delivery_id: "111".into(), guild_id: Some(10), channel_id: 20, content: "hi".into(), ..Default::default() };
    bus.publish(&Subject::ingress_text(Some(10), 20), &ingress, Some(&MsgId::discord_message(111))).await.unwrap();
    let outcome = v1::DeliveryOutcome {
        delivery_id: "111".into(),
        lane: lane.to_string(),
        kind: v1::OutcomeKind::Absorbed as i32,
        ..Default::default()
    };
    bus.publish(&Subject::LaneOutcome { lane }, &outcome, None).await.unwrap();
    publish_garbage(&bus, &Subject::BodySend { channel: 20 }).await;

    let mut stdout = BufReader::new(tap.stdout.take().unwrap()).lines();
    let mut lines = Vec::new();
    while lines.len() < 3 {
        let line = tokio::time::timeout(Duration::from_secs(20), stdout.next_line()).await;
        let Ok(Ok(Some(line))) = line else { panic!("tap printed {} of 3 lines: {lines:?}", lines.len()) };
        lines.push(serde_json::from_str::<serde_json::Value>(&line).unwrap());
    }
    let status = tokio::time::timeout(Duration::from_secs(20), tap.wait()).await.expect("tap exits after --count lines").unwrap();
    assert!(status.success());
    assert_eq!(lines.len(), 3, "{lines:?}");

    assert_eq!(lines[0]["subject"], "clankie.ingress.text.10.20");
    assert_eq!(lines[0]["type"], "clankie.v1.Ingress");
    assert_eq!(lines[0]["event"]["deliveryId"], "111");
    assert!(lines[0]["time"].as_str().unwrap().ends_with('Z'));
    assert_eq!(lines[1]["event"]["kind"], "OUTCOME_KIND_ABSORBED");
    assert_eq!(lines[1]["subject"], format!("clankie.lane.{lane}.outcome"));
    assert_eq!(lines[2]["type"], "clankie.v1.OutboundMessage");
    assert!(lines[2]["error"].is_string(), "garbage shows as an error line: {}", lines[2]);
}

#[tokio::test]
async fn tap_refuses_a_filter_that_is_not_a_subject() {
    let out = Command::new(env!("CARGO_BIN_EXE_clankie")).args(["tap", "clankie. >"]).output().await.unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a NATS subject filter"));
}
