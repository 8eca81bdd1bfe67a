use clankie_model_standin::{Reply, Script};

use super::Rig;

#[tokio::test]
async fn turns_outcomes_and_tokens_are_scraped_from_metrics() {
    let rig = Rig::new().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let readiness = clankie_http::Readiness { bus: rig.bus.clone(), store: Some(rig.store.clone()) };
    tokio::spawn(clankie_http::serve_on(listener, readiness));
    let (_captain, _task) = rig.captain("captain-a").await;
    rig.standin.script(Script::any(Reply::text("hello")));
    let id = rig.say("ada", "@Clankie hi", true).await;
    rig.wait_outcomes(&[id]).await;
    clankie_agent::provider::install_tls_provider();
    let body = reqwest::get(format!("http://{addr}/metrics")).await.unwrap().text().await.unwrap();
    for metric in ["clankie_captain_turns_total", "clankie_captain_outcomes_total", "clankie_captain_input_tokens_total"] {
        assert!(body.contains(metric), "{metric} missing from:\n{body}");
    }
    assert!(body.contains("kind=\"replied\""));
    let health = reqwest::get(format!("http://{addr}/healthz")).await.unwrap();
    assert!(health.status().is_success());
}
