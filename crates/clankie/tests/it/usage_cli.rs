//! `clankie usage` as an operator runs it: the bill from the stored turns, priced at the
//! configured prices, in the words `/clankie usage` answers with, or whole as JSON.

use clankie_testkit::TestDb;

async fn clankie(args: &[&str], vars: &[(&str, String)]) -> (bool, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_clankie"))
        .args(args)
        .envs(vars.iter().map(|(k, v)| (*k, v.clone())))
        .output()
        .await
        .unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[tokio::test]
async fn usage_the_cli_prints_the_bill_of_the_stored_turns_at_the_configured_prices() {
    let db = TestDb::create().await;
    let store = clankie_store::Store::connect(db.url()).await.unwrap();
    store.migrate().await.unwrap();
    for (lane, turn, [input, output, cached, written]) in [
        ("room:1:10", "t1", [10_000i64, 1_000, 6_000, 2_000]),
        ("voice:1:10", "t2", [3_000, 300, 1_000, 500]),
        ("dm:5", "t3", [2_000, 200, 0, 0]),
    ] {
        sqlx::query("INSERT INTO lanes (lane) VALUES ($1) ON CONFLICT DO NOTHING").bind(lane).execute(store.pool()).await.unwrap();
        sqlx::query(
            "INSERT INTO turns (turn_id, lane, epoch, mode, owner_delivery_id, ended_at, outcome,
                                input_tokens, output_tokens, cached_input_tokens, cache_write_input_tokens)
             VALUES ($1, $2, 1, 'durable', $1, now(), 'replied', $3, $4, $5, $6)",
        )
        .bind(turn)
        .bind(lane)
        .bind(input)
        .bind(output)
        .bind(cached)
        .bind(written)
        .execute(store.pool())
        .await
        .unwrap();
    }
    let vars = vec![
        ("CLANKIE_DATABASE_URL", db.url().to_owned()),
        ("CLANKIE_PRICE_MODEL", "Test prices".to_owned()),
        ("CLANKIE_PRICE_OUTPUT_USD_PER_MTOK", "10".to_owned()),
    ];
    // By hand, at $3 / $10 / $0.30 / $3.75 per million: room 2,000 × 3 + 6,000 × 0.30 + 2,000 × 3.75
    // + 1,000 × 10 = 25,300 µ$; voice 1,500 × 3 + 1,000 × 0.30 + 500 × 3.75 + 300 × 10 = 9,675 µ$;
    // the DM 2,000 × 3 + 200 × 10 = 8,000 µ$. In all $0.042975, shown $0.0430.
    let (ok, out, err) = clankie(&["usage", "--days", "7"], &vars).await;
    assert!(ok, "{err}");
    assert!(out.starts_with("Usage over the last 7 day(s), ") && out.contains(" UTC: $0.0430\n"), "{out}");
    assert!(out.contains("\nTop lanes: room:1:10 $0.0253, voice:1:10 $0.0097, dm:5 $0.0080.\n"), "{out}");
    assert!(out.contains("\nTop rooms: 1:10 $0.0350, dm:5 $0.0080.\n"), "{out}");
    assert!(out.contains("Prices: Test prices ($3/MTok input, $10 output, $0.3 cache reads, $3.75 cache writes)."), "{out}");
    let (ok, json, err) = clankie(&["usage", "--json"], &vars).await;
    assert!(ok, "{err}");
    let bill: serde_json::Value = serde_json::from_str(json.trim()).expect("one JSON object");
    assert_eq!((bill["dollars_shown"].as_str(), bill["days"].as_array().map(Vec::len)), (Some("$0.0430"), Some(7)), "{bill}");
    let (ok, _, err) = clankie(&["usage", "--days", "91"], &vars).await;
    assert!(!ok && err.contains("--days is from 1 to 90"), "{err}");
}
