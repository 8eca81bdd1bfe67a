use std::collections::BTreeMap;

use clankie_model_standin::{Reply, Script};

use super::{Rig, until};

/// A Prometheus text scrape as `name{labels}` → value.
fn parse(scrape: &str) -> BTreeMap<String, f64> {
    scrape
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// The counts this test caused: the recorder is process-wide, so only the change between two
/// scrapes belongs to it.
#[tokio::test]
async fn turns_outcomes_and_tokens_are_scraped_from_metrics() {
    let rig = Rig::new().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let readiness = clankie_http::Readiness { bus: rig.bus.clone(), store: Some(rig.store.clone()), parts: Default::default() };
    tokio::spawn(clankie_http::serve_on(listener, readiness));
    clankie_agent::provider::install_tls_provider();
    let scrape = || async { parse(&reqwest::get(format!("http://{addr}/metrics")).await.unwrap().text().await.unwrap()) };
    let before = scrape().await;
    let (_captain, _task) = rig.captain("captain-a").await;
    let mut turns = Vec::new();
    for text in ["@Clankie hi", "@Clankie and again"] {
        rig.standin.script(Script::any(Reply::text("hello")));
        let id = rig.say("ada", text, true).await;
        rig.wait_outcomes(&[id]).await;
        let turn_of = || rig.receipts.all().into_iter().find(|r| r.kind == "captain.turn" && r.delivery_id == id.to_string());
        until("the turn receipt", std::time::Duration::from_secs(5), || turn_of().is_some()).await;
        turns.push(turn_of().unwrap());
    }
    let after = scrape().await;
    let delta = |series: &str| after.get(series).copied().unwrap_or(0.0) - before.get(series).copied().unwrap_or(0.0);
    let total = |count: &str| turns.iter().map(|t| t.counts[count]).sum::<i64>() as f64;

    assert_eq!(delta("clankie_captain_turns_total{mode=\"durable\"}"), 2.0, "{after:?}");
    assert_eq!(delta("clankie_captain_outcomes_total{kind=\"replied\"}"), 2.0, "{after:?}");
    assert_eq!(delta("clankie_captain_outcomes_total{kind=\"failed\"}"), 0.0);
    assert!(total("input_tokens") > 0.0);
    assert_eq!(delta("clankie_captain_input_tokens_total"), total("input_tokens"), "the tokens the turns' receipts counted");
    assert_eq!(delta("clankie_captain_output_tokens_total"), total("output_tokens"));
    // The second request repeats the first: the stand-in's prompt cache reports that prefix as cached.
    let cached = turns[1].counts["cached_input_tokens"];
    assert_eq!(cached as u64, rig.standin.requests()[1].cached_estimate, "the receipt carries the provider's cached count");
    assert!(cached > 0 && cached < turns[1].counts["input_tokens"], "{:?}", turns[1]);
    assert_eq!(delta("clankie_captain_cached_input_tokens_total"), total("cached_input_tokens"));
    let health = reqwest::get(format!("http://{addr}/healthz")).await.unwrap();
    assert!(health.status().is_success());
}
