//! `clankie voice join|leave`: the owner's word on the bus, and a clear refusal for a room he
//! may not keep.

use std::time::Duration;

use clankie_bus::Bus;
use clankie_proto::{Family, v1};
use clankie_testkit::{TestDir, TestNats, record, until};
use tokio::process::Command;

async fn clankie(nats: &TestNats, dir: &TestDir, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_clankie"))
        .args(args)
        .env("CLANKIE_NATS_URL", nats.url())
        .env("CLANKIE_STATE_DIR", dir.path())
        .env("CLANKIE_VOICE_ROOMS", "100:300")
        .output()
        .await
        .unwrap()
}

#[tokio::test]
async fn voice_join_and_leave_from_the_cli_publish_the_owners_commands() {
    let (nats, dir) = (TestNats::start().unwrap(), TestDir::new());
    let settings = clankie_settings::Settings::for_endpoints(&nats.url(), "postgres://unused@127.0.0.1:1/x", dir.path()).unwrap();
    let bus = Bus::connect(&settings, "test").await.unwrap();
    bus.ensure_streams().await.unwrap();
    let commands = record::<v1::VoiceCommand>(&bus, Family::VoiceCommand).await;

    let out = clankie(&nats, &dir, &["voice", "join", "100", "300"]).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = clankie(&nats, &dir, &["voice", "leave", "100"]).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    until("both commands", Duration::from_secs(10), || commands.all().len() == 2).await;
    let all = commands.all();
    assert_eq!((all[0].guild_id, all[0].channel_id, all[0].reason.as_str()), (100, Some(300), "owner"));
    assert_eq!((all[1].guild_id, all[1].channel_id, all[1].reason.as_str()), (100, None, "owner"));

    // A channel outside CLANKIE_VOICE_ROOMS is refused with a reason, and nothing is published.
    let out = clankie(&nats, &dir, &["voice", "join", "100", "301"]).await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("CLANKIE_VOICE_ROOMS"));
    let out = clankie(&nats, &dir, &["voice", "join", "100", "not-a-channel"]).await;
    assert!(!out.status.success());
    let barrier = clankie(&nats, &dir, &["voice", "leave", "100"]).await;
    assert!(barrier.status.success());
    until("the barrier", Duration::from_secs(10), || commands.all().len() == 3).await;
    assert!(commands.all().iter().all(|c| c.channel_id != Some(301)), "a refused join was published");
}
