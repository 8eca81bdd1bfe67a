//! `chaos_`: a service killed at an exact place, with everything else real and in its own
//! process (`clankie gateway`, `clankie captain`), against the loopback Discord.

use std::process::Stdio;
use std::time::Duration;

use clankie_discord_loopback::{Loopback, LoopbackConfig, NewMessage};
use clankie_model_standin::{Reply, Script, StandIn};
use clankie_testkit::{TestDb, TestDir, TestNats, until};
use tokio::process::{Child, Command};

const GENERAL: u64 = 200;

fn service(which: &str, nats: &TestNats, db: &TestDb, dir: &TestDir, discord: &Loopback, standin: &StandIn, fault: Option<&str>) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_clankie"));
    cmd.arg(which)
        .env("CLANKIE_NATS_URL", nats.url())
        .env("CLANKIE_DATABASE_URL", db.url())
        .env("CLANKIE_STATE_DIR", dir.path())
        .env("CLANKIE_REPLICA_ID", which)
        .env("CLANKIE_DISCORD_TOKEN", &discord.config().token)
        .env("CLANKIE_DISCORD_API", discord.addr().to_string())
        .env("CLANKIE_DISCORD_GATEWAY_URL", discord.gateway_url())
        .env("CLANKIE_MODEL_BASE_URL", standin.base_url())
        .env("CLANKIE_OUTCOME_REACTIONS", "true")
        .env("CLANKIE_TYPING_HOLD_MS", "0")
        .env("CLANKIE_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join(format!("{which}.log"))).unwrap())
        .kill_on_drop(true);
    if let Some(point) = fault {
        cmd.env("CLANKIE_FAULT", point);
    }
    cmd.spawn().unwrap()
}

#[tokio::test]
async fn chaos_gateway_killed_after_receiving_before_publishing_resumes_and_replies_once() {
    let (nats, db, dir) = (TestNats::start().unwrap(), TestDb::create().await, TestDir::new());
    let discord = Loopback::serve("127.0.0.1:0".parse().unwrap(), LoopbackConfig { heartbeat_interval_ms: 5_000, ..Default::default() })
        .await
        .unwrap();
    let standin = StandIn::start().await.unwrap();
    standin.script(Script::any(Reply::text("Hello, only once.")));
    standin.script(Script::any(Reply::text("And hello again.")));
    let settings = clankie_settings::Settings::for_endpoints(&nats.url(), db.url(), dir.path()).unwrap();
    let store = clankie_store::Store::connect(db.url()).await.unwrap();
    store.migrate().await.unwrap();
    clankie_bus::Bus::connect(&settings, "test").await.unwrap().ensure_streams().await.unwrap();
    let _captain = service("captain", &nats, &db, &dir, &discord, &standin, None);

    // The first gateway dies between receiving a message and storing it in JetStream.
    let mut doomed = service("gateway", &nats, &db, &dir, &discord, &standin, Some("gateway.before_publish"));
    assert!(discord.wait_for_session(Duration::from_secs(20)).await, "the first gateway never attached");
    let id = discord.user_message(NewMessage {
        channel_id: GENERAL,
        author: "ada".into(),
        content: "@Clankie hi".into(),
        mention: true,
        ..Default::default()
    });
    let status = tokio::time::timeout(Duration::from_secs(20), doomed.wait()).await.expect("the fault fired").unwrap();
    assert_eq!(status.code(), Some(clankie_settings::fault::EXIT_CODE), "it died at the fault point");
    assert!(discord.posts(GENERAL).is_empty());

    // Its successor resumes the saved session; Discord replays the message; it is answered once.
    let resumes = discord.resumes();
    let _gateway = service("gateway", &nats, &db, &dir, &discord, &standin, None);
    until("the resume", Duration::from_secs(20), || discord.resumes() > resumes).await;
    until("the reply", Duration::from_secs(30), || !discord.posts(GENERAL).is_empty()).await;
    // A later message is the barrier: once it is answered, a second answer to the first would be in.
    let later = discord.user_message(NewMessage {
        channel_id: GENERAL,
        author: "bob".into(),
        content: "@Clankie me too".into(),
        mention: true,
        ..Default::default()
    });
    until("the later reply", Duration::from_secs(30), || discord.posts(GENERAL).iter().any(|p| p.reply_to == Some(later))).await;
    let to_first = discord.posts(GENERAL).iter().filter(|p| p.reply_to == Some(id)).count();
    println!(
        "chaos gateway before publish: rounds 1, deliveries 2, replies to the first {to_first}, resumes {}",
        discord.resumes() - resumes
    );
    assert_eq!(to_first, 1, "the replayed message was answered exactly once");
    assert_eq!(discord.identifies(), 1, "the successor resumed rather than identifying afresh");
}
