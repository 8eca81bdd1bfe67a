use clankie_store::usage::{Since, Tokens};
use clankie_store::{Prices, Store};

const DAY_MS: i64 = 86_400_000;

fn prices() -> Prices {
    Prices { label: "list prices of a test".into(), input: 3.0, output: 15.0, cache_read: 0.30, cache_write: 3.75 }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

/// A minute past the UTC midnight `days_ago` days before today's.
fn day(days_ago: i64) -> i64 {
    (now_ms().div_euclid(DAY_MS) - days_ago) * DAY_MS + 60_000
}

async fn turn(store: &Store, id: &str, lane: &str, at_ms: i64, t: Tokens) {
    sqlx::query("INSERT INTO lanes (lane) VALUES ($1) ON CONFLICT DO NOTHING").bind(lane).execute(store.pool()).await.unwrap();
    sqlx::query(
        "INSERT INTO turns (turn_id, lane, epoch, mode, owner_delivery_id, started_at, ended_at, outcome,
                            input_tokens, output_tokens, cached_input_tokens, cache_write_input_tokens)
         VALUES ($1, $2, 1, 'durable', $1, to_timestamp($3::double precision / 1000), to_timestamp($3::double precision / 1000),
                 'replied', $4, $5, $6, $7)",
    )
    .bind(id)
    .bind(lane)
    .bind(at_ms)
    .bind(t.input)
    .bind(t.output)
    .bind(t.cached)
    .bind(t.cache_write)
    .execute(store.pool())
    .await
    .unwrap();
}

async fn receipt(store: &Store, kind: &str, lane: &str, at_ms: i64, counts: serde_json::Value) {
    sqlx::query(
        "INSERT INTO receipts (kind, delivery_id, service, lane, at, counts)
         VALUES ($1, 'd', 'voice-floor', $2, to_timestamp($3::double precision / 1000), $4)",
    )
    .bind(kind)
    .bind(lane)
    .bind(at_ms)
    .bind(counts)
    .execute(store.pool())
    .await
    .unwrap();
}

fn tokens(input: i64, output: i64, cached: i64, cache_write: i64) -> Tokens {
    Tokens { input, output, cached, cache_write }
}

#[tokio::test]
async fn usage_sums_turns_and_the_receipts_of_other_runs_per_lane_room_and_utc_day_and_prices_them() {
    let (store, _db) = super::store().await;
    let (text, yesterday_text) = (tokens(10_000, 1_000, 6_000, 2_000), tokens(5_000, 500, 0, 5_000));
    let (thread, voice) = (tokens(2_000, 200, 0, 0), tokens(3_000, 300, 1_000, 500));
    turn(&store, "t1", "room:1:10", day(0), text).await;
    turn(&store, "t2", "room:1:10", day(1), yesterday_text).await;
    turn(&store, "t3", "room:1:11", day(0), thread).await;
    // Ten days ago: outside the last seven, inside the last thirty.
    turn(&store, "t4", "dm:5", day(10), tokens(1_000_000, 0, 0, 0)).await;
    let counts = serde_json::json!({ "input_tokens": 3_000, "output_tokens": 300, "cached_input_tokens": 1_000, "cache_write_input_tokens": 500, "chars": 40 });
    receipt(&store, "voice.response", "voice:1:10", day(0), counts).await;
    // A voice room's handoff to the captain, and a line of console chat: runs that are no turn.
    let (handoff, console) = (tokens(1_000, 100, 0, 0), tokens(4_000, 400, 2_000, 0));
    receipt(&store, "captain.handoff", "voice:1:10", day(0), serde_json::json!({ "input_tokens": 1_000, "output_tokens": 100 })).await;
    let counts = serde_json::json!({ "input_tokens": 4_000, "output_tokens": 400, "cached_input_tokens": 2_000 });
    receipt(&store, "console.chat", "console:7", day(1), counts).await;
    // A response from before the floor counted tokens: in its lane, at nothing.
    receipt(&store, "voice.response", "voice:1:10", day(0), serde_json::json!({ "chars": 12 })).await;
    // The turn's own receipt repeats its counts: never counted twice.
    receipt(&store, "captain.turn", "room:1:10", day(0), serde_json::json!({ "input_tokens": 10_000, "output_tokens": 1_000 })).await;

    let usage = store.usage(Since::Days(7)).await.unwrap();
    let sum = |parts: &[Tokens]| {
        let mut all = Tokens::default();
        for t in parts {
            all += *t;
        }
        all
    };
    let total = sum(&[text, yesterday_text, thread, voice, handoff, console]);
    assert_eq!(usage.total, total);
    let lanes: Vec<(&str, Tokens)> = usage.lanes.iter().map(|s| (s.what.as_str(), s.tokens)).collect();
    let (text_lane, voice_lane) = (sum(&[text, yesterday_text]), sum(&[voice, handoff]));
    assert_eq!(lanes, [("console:7", console), ("room:1:10", text_lane), ("room:1:11", thread), ("voice:1:10", voice_lane)]);
    let rooms: Vec<(&str, Tokens)> = usage.rooms.iter().map(|s| (s.what.as_str(), s.tokens)).collect();
    let channel = sum(&[text_lane, voice_lane]);
    assert_eq!(rooms, [("1:10", channel), ("1:11", thread), ("console:7", console)], "a channel's text and voice lanes are one room");
    assert_eq!(usage.days.len(), 7, "every day of the period, the empty ones too: {:?}", usage.days);
    let today = sum(&[text, thread, voice, handoff]);
    assert_eq!(usage.days[6].tokens, today);
    assert_eq!(usage.days[5].tokens, sum(&[yesterday_text, console]));
    assert!(usage.days[..5].iter().all(|d| d.tokens == Tokens::default()), "{:?}", usage.days);
    assert_eq!(usage.since_ms, day(6) - 60_000);

    // Priced: by hand, at $3 / $15 / $0.30 / $3.75 per million.
    let bill = usage.bill(&prices());
    let by_hand = |t: Tokens| {
        ((t.input - t.cached - t.cache_write) as f64 * 3.0 + t.cached as f64 * 0.30 + t.cache_write as f64 * 3.75 + t.output as f64 * 15.0)
            / 1e6
    };
    // text: 2,000 × 3 + 6,000 × 0.30 + 2,000 × 3.75 + 1,000 × 15 = 30,300 µ$; yesterday: 5,000 × 3.75 + 500 × 15 = 26,250;
    // the thread: 2,000 × 3 + 200 × 15 = 9,000; voice: 1,500 × 3 + 1,000 × 0.30 + 500 × 3.75 + 300 × 15 = 11,175;
    // the handoff: 1,000 × 3 + 100 × 15 = 4,500; the console: 2,000 × 3 + 2,000 × 0.30 + 400 × 15 = 12,600.
    assert!((bill.dollars - 0.093_825).abs() < 1e-12, "{}", bill.dollars);
    assert!((bill.dollars - by_hand(total)).abs() < 1e-12);
    assert_eq!(bill.dollars_shown, "$0.0938");
    assert!((bill.cached_share - 9_000.0 / 25_000.0).abs() < 1e-12, "{}", bill.cached_share);
    assert!((bill.cache_write_share_of_spend - (7_500.0 * 3.75 / 1e6) / 0.093_825).abs() < 1e-12);
    let order: Vec<&str> = bill.lanes.iter().map(|l| l.what.as_str()).collect();
    assert_eq!(order, ["room:1:10", "voice:1:10", "console:7", "room:1:11"], "most dollars first");
    assert_eq!(bill.rooms[0].dollars_shown, "$0.0722");
    assert_eq!(bill.days[0].what, usage.days[6].what, "newest day first");
    assert!((bill.days[0].dollars - 0.054_975).abs() < 1e-12);

    // Thirty days hold the DM's turn; a moment's start holds only what came after it.
    let month = store.usage(Since::Days(30)).await.unwrap();
    assert!(month.lanes.iter().any(|l| l.what == "dm:5") && month.days.len() == 30);
    let since_yesterday_noon = store.usage(Since::Ms(day(1) + 12 * 3_600_000)).await.unwrap();
    assert_eq!(since_yesterday_noon.total, today);
}

#[tokio::test]
async fn usage_of_an_empty_store_is_zero_days_and_no_dollars() {
    let (store, _db) = super::store().await;
    let bill = store.usage(Since::Days(3)).await.unwrap().bill(&prices());
    assert_eq!((bill.dollars_shown.as_str(), bill.cached_share, bill.lanes.len(), bill.days.len()), ("$0.0000", 0.0, 0, 3));
}
