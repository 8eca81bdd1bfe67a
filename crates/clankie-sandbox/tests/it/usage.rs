//! `usage_` through the whole stack: turns on Claude's wire (the stand-in reports its cache
//! reads and writes as Anthropic does), then the owner's `/clankie usage` and the console's Usage
//! view, each held to the dollars the turns' stored tokens come to at the configured prices.

use std::time::Duration;

use clankie_model_standin::{Reply, Script};
use clankie_store::{Persona, Store};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::interactions::{owned_by, run};
use super::{GENERAL, Rig};

/// Prices no default has, so the figures can only come from the settings.
const PRICES: [(&str, &str); 5] = [
    ("CLANKIE_PRICE_MODEL", "Test model, list prices of test day"),
    ("CLANKIE_PRICE_INPUT_USD_PER_MTOK", "2.5"),
    ("CLANKIE_PRICE_OUTPUT_USD_PER_MTOK", "12"),
    ("CLANKIE_PRICE_CACHE_READ_USD_PER_MTOK", "0.25"),
    ("CLANKIE_PRICE_CACHE_WRITE_USD_PER_MTOK", "5"),
];

/// The turns' tokens summed straight from the table: input, output, cached, cache writes.
async fn turns_sum(store: &Store) -> (i64, i64, i64, i64) {
    sqlx::query_as(
        "SELECT COALESCE(sum(input_tokens), 0)::bigint, COALESCE(sum(output_tokens), 0)::bigint,
                COALESCE(sum(cached_input_tokens), 0)::bigint, COALESCE(sum(cache_write_input_tokens), 0)::bigint
         FROM turns WHERE ended_at IS NOT NULL",
    )
    .fetch_one(store.pool())
    .await
    .expect("the turns are readable")
}

/// The same counts summed from the turns' `captain.turn` receipts, and how many there are.
async fn receipts_sum(store: &Store) -> (i64, (i64, i64, i64, i64)) {
    let (n, input, output, cached, written): (i64, i64, i64, i64, i64) = sqlx::query_as(
        "SELECT count(*), COALESCE(sum((counts->>'input_tokens')::bigint), 0)::bigint, COALESCE(sum((counts->>'output_tokens')::bigint), 0)::bigint,
                COALESCE(sum((counts->>'cached_input_tokens')::bigint), 0)::bigint,
                COALESCE(sum((counts->>'cache_write_input_tokens')::bigint), 0)::bigint
         FROM receipts WHERE kind = 'captain.turn'",
    )
    .fetch_one(store.pool())
    .await
    .expect("the receipts are readable");
    (n, (input, output, cached, written))
}

/// `GET path` of the console with its token; the answer's status and body.
async fn console_get(rig: &Rig, path: &str) -> (u16, String) {
    let (addr, token) = rig.sandbox.console.clone();
    let mut conn = tokio::net::TcpStream::connect(addr).await.expect("the console listens");
    let request = format!("GET {path} HTTP/1.1\r\nHost: console\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n");
    conn.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), conn.read_to_end(&mut answer)).await.expect("the console answers").unwrap();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let code = answer.split(' ').nth(1).and_then(|c| c.parse().ok()).expect("an HTTP status line");
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (code, body)
}

#[tokio::test]
async fn usage_the_owners_usage_command_and_the_console_show_the_dollars_the_turns_sum_to() {
    let mut extra = vec![("CLANKIE_MODEL_PROVIDER", "anthropic")];
    extra.extend(PRICES);
    let rig = Rig::with(&extra).await;
    let store = owned_by(&rig, "ada").await;
    // A character sheet past Anthropic's 1,024-token minimum, so the prompt is cached: written
    // on the first turn, read on the next.
    let sheet = "Clankie is a friendly robot who remembers the room and keeps answers short. ".repeat(80);
    store.set_persona(&Persona { character_sheet: sheet, ..Default::default() }).await.unwrap();
    for turn in 0..3 {
        rig.standin.script(Script::any(Reply::text(format!("Answer {turn}: the lobby opens at eight."))));
        let said = rig.say(GENERAL, "bob", &format!("@Clankie question {turn}: is the lobby up?"));
        rig.wait_outcomes(GENERAL, &[said]).await;
    }
    // Every turn's receipt recorded: the receipts and the turns table say the same.
    let turns = turns_sum(&store).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while receipts_sum(&store).await.0 < 3 {
        assert!(tokio::time::Instant::now() < deadline, "the turns' receipts were never all stored");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(receipts_sum(&store).await.1, turns, "the receipts' counts are the turns' counts");
    let (input, output, cached, written) = turns;
    assert!(cached > 0 && written > 0 && output > 0, "the stand-in reported no cache reads or writes: {turns:?}");
    let dollars = ((input - cached - written) as f64 * 2.5 + cached as f64 * 0.25 + written as f64 * 5.0 + output as f64 * 12.0) / 1e6;
    let shown = format!("${dollars:.4}");
    println!("usage: {turns:?} tokens come to {shown} ({dollars})");
    assert_ne!(shown, "$0.0000", "too few tokens to tell a wrong price from a right one");

    // The owner's command, ephemeral, names the same dollars and the prices.
    let answer = run(&rig, GENERAL, "ada", "usage", &[]).await;
    println!("usage: /clankie usage answered:\n{}", answer.content);
    assert!(answer.ephemeral, "{answer:?}");
    assert!(answer.content.starts_with("Usage over the last 7 day(s)"), "{}", answer.content);
    assert!(answer.content.contains(&format!(" UTC: {shown}\n")), "not {shown}: {}", answer.content);
    assert!(answer.content.contains(&format!("Top lanes: room:100:{GENERAL} {shown}.")), "{}", answer.content);
    assert!(
        answer
            .content
            .contains("Prices: Test model, list prices of test day ($2.5/MTok input, $12 output, $0.25 cache reads, $5 cache writes).")
    );
    assert!(!answer.content.contains("lobby"), "the bill holds no words: {}", answer.content);
    let month = run(&rig, GENERAL, "ada", "usage", &[("days", serde_json::json!(30))]).await;
    assert!(month.content.starts_with("Usage over the last 30 day(s)") && month.content.contains(&shown), "{}", month.content);

    // The console's Usage view: the same figure, the same lane.
    let (code, body) = console_get(&rig, "/api/usage?days=7").await;
    assert_eq!(code, 200, "{body}");
    let bill: Value = serde_json::from_str(&body).expect("the bill as JSON");
    assert_eq!(bill["dollars_shown"], shown.as_str(), "{bill}");
    assert!((bill["dollars"].as_f64().unwrap() - dollars).abs() < 1e-9, "{bill}");
    assert_eq!(bill["lanes"][0]["what"], format!("room:100:{GENERAL}"), "{bill}");
    assert_eq!(bill["rooms"][0]["what"], format!("100:{GENERAL}"), "{bill}");
    assert_eq!(bill["days"][0]["dollars_shown"], shown.as_str(), "today's, newest first: {bill}");
    assert_eq!(bill["prices"]["cache_write"], 5.0);
    assert!((bill["cached_share"].as_f64().unwrap() - cached as f64 / input as f64).abs() < 1e-9, "{bill}");
    let (code, _) = console_get(&rig, "/api/usage?days=91").await;
    assert_eq!(code, 400, "a period past 90 days is refused");

    // Anyone else is refused, and nothing about the bill is said.
    let refused = run(&rig, GENERAL, "mallory", "usage", &[]).await;
    assert!(refused.ephemeral && refused.content.starts_with("Only my owner"), "{refused:?}");
    // Content-free evidence of each: the command's name and how it ended.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let codes: Vec<Vec<String>> =
            sqlx::query_scalar("SELECT codes FROM receipts WHERE kind = 'captain.command'").fetch_all(store.pool()).await.unwrap();
        let usage =
            |code: &str| codes.iter().filter(|c| c.first().map(String::as_str) == Some("usage") && c.iter().any(|x| x == code)).count();
        if (usage("done"), usage("not_owner")) == (2, 1) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the usage commands' receipts: {codes:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
