use std::time::Duration;

use clankie_discord_loopback::NewMessage;
use clankie_model_standin::{Reply, Script, StandIn};
use clankie_testkit::{TestDb, TestDir, TestNats};

#[tokio::test]
async fn trail_prints_every_receipt_of_a_delivery_in_time_order_without_its_words() {
    let (nats, db, dir) = (TestNats::start().unwrap(), TestDb::create().await, TestDir::new());
    let standin = StandIn::start().await.unwrap();
    let vars: Vec<(&str, String)> = vec![
        ("CLANKIE_NATS_URL", nats.url()),
        ("CLANKIE_DATABASE_URL", db.url().to_owned()),
        ("CLANKIE_STATE_DIR", dir.path().display().to_string()),
        ("CLANKIE_MODEL_BASE_URL", standin.base_url()),
        ("CLANKIE_CONSOLE_ADDR", "127.0.0.1:0".into()),
    ];
    let settings = clankie_settings::Settings::from_lookup(|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())).unwrap();
    let sandbox = clankie_sandbox::Sandbox::start(&settings, "127.0.0.1:0".parse().unwrap()).await.unwrap();
    assert!(sandbox.discord.wait_for_session(Duration::from_secs(20)).await);
    standin.script(Script::any(Reply::text("the lobby opens at octarine")));
    let id = sandbox.discord.user_message(NewMessage {
        channel_id: 200,
        author: "ada".into(),
        content: "@Clankie when does the huckleberry lobby open".into(),
        ..Default::default()
    });

    // Wait until the trail holds the whole story: ingress through the posted reply.
    let wanted = ["gateway.ingress", "captain.admitted", "captain.turn", "captain.outcome", "gateway.posted"];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let lines = loop {
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_clankie"))
            .args(["trail", &id.to_string()])
            .envs(vars.iter().map(|(k, v)| (*k, v.clone())))
            .output()
            .await
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let lines: Vec<serde_json::Value> = text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
        let kinds: Vec<&str> = lines.iter().filter_map(|l| l["kind"].as_str()).collect();
        if wanted.iter().all(|w| kinds.contains(w)) && lines.iter().any(|l| l["outcome"] == "replied") {
            assert!(!text.contains("huckleberry") && !text.contains("octarine"), "the trail carried words: {text}");
            break lines;
        }
        assert!(tokio::time::Instant::now() < deadline, "trail incomplete: {kinds:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let times: Vec<&str> = lines.iter().filter_map(|l| l["time"].as_str()).collect();
    let mut sorted = times.clone();
    sorted.sort();
    assert_eq!(times, sorted, "time order");
    let services: std::collections::BTreeSet<&str> = lines.iter().filter_map(|l| l["service"].as_str()).collect();
    assert!(services.contains("gateway") && services.contains("captain"), "{services:?}");

    let missing = tokio::process::Command::new(env!("CARGO_BIN_EXE_clankie"))
        .args(["trail", "42"])
        .envs(vars.iter().map(|(k, v)| (*k, v.clone())))
        .output()
        .await
        .unwrap();
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("nothing recorded"));
}
