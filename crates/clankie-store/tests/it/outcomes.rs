use std::time::Duration;

use clankie_proto::{LaneKey, ReceiptKind, v1};
use clankie_store::{Outcome, Recorded, StoreError};

const LANE: LaneKey = LaneKey::Dm { channel: 9 };

#[tokio::test]
async fn a_delivery_has_exactly_one_outcome() {
    let (store, _db) = super::store().await;
    let lease = store.acquire_lease(&LANE, "c", Duration::from_secs(60)).await.unwrap().unwrap();
    let absorbed = Outcome { delivery_id: "5".into(), turn_id: Some("t".into()), kind: v1::OutcomeKind::Absorbed, failure_code: None };
    assert_eq!(store.record_outcome(&lease, &absorbed).await.unwrap(), Recorded::New);
    let replied = Outcome { kind: v1::OutcomeKind::Replied, ..absorbed.clone() };
    assert_eq!(store.record_outcome(&lease, &replied).await.unwrap(), Recorded::Existing(absorbed.clone()));
    assert_eq!(store.outcome("5").await.unwrap(), Some(absorbed));
}

#[tokio::test]
async fn failure_codes_belong_to_failed_outcomes_only() {
    let (store, _db) = super::store().await;
    let lease = store.acquire_lease(&LANE, "c", Duration::from_secs(60)).await.unwrap().unwrap();
    let bad = [
        (v1::OutcomeKind::Failed, None),
        (v1::OutcomeKind::Silent, Some(v1::FailureCode::CaptainModelFailed)),
        (v1::OutcomeKind::Unspecified, None),
    ];
    for (kind, failure_code) in bad {
        let o = Outcome { delivery_id: "6".into(), turn_id: None, kind, failure_code };
        assert!(matches!(store.record_outcome(&lease, &o).await, Err(StoreError::InvalidOutcome(_))), "{kind:?}");
    }
    let stalled = Outcome {
        delivery_id: "6".into(),
        turn_id: None,
        kind: v1::OutcomeKind::Failed,
        failure_code: Some(v1::FailureCode::CaptainTurnStalled),
    };
    store.record_outcome(&lease, &stalled).await.unwrap();
    assert_eq!(store.outcome("6").await.unwrap(), Some(stalled));
}

#[tokio::test]
async fn an_exchange_is_live_only_inside_its_window() {
    let (store, _db) = super::store().await;
    let lease = store.acquire_lease(&LANE, "c", Duration::from_secs(60)).await.unwrap().unwrap();
    assert!(!store.exchange_live(&LANE, Duration::from_secs(600)).await.unwrap(), "no exchange yet");
    store.refresh_exchange(&lease, "7").await.unwrap();
    assert!(store.exchange_live(&LANE, Duration::from_secs(600)).await.unwrap());
    assert!(!store.exchange_live(&LANE, Duration::ZERO).await.unwrap());
    assert_eq!(store.exchange(&LANE).await.unwrap().unwrap().last_delivery_id, "7");
    // Around the exchange's real age, as the database measures it: a window shorter than the
    // age has closed, one longer is still open.
    let age = || async {
        sqlx::query_scalar::<_, i64>("SELECT (extract(epoch from now() - last_settled_at) * 1000)::bigint FROM exchanges WHERE lane = $1")
            .bind(LANE.to_string())
            .fetch_one(store.pool())
            .await
            .unwrap()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while age().await < 400 {
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for (window_ms, live) in [(1, false), (200, false), (300, false), (5_000, true), (60_000, true), (300_000, true)] {
        assert_eq!(store.exchange_live(&LANE, Duration::from_millis(window_ms)).await.unwrap(), live, "a {window_ms} ms window");
    }
    // Refreshed, the same short window is open again.
    store.refresh_exchange(&lease, "8").await.unwrap();
    assert!(store.exchange_live(&LANE, Duration::from_millis(300)).await.unwrap());
}

#[tokio::test]
async fn receipts_are_stored_once_per_key_and_read_back_by_delivery() {
    let (store, _db) = super::store().await;
    let kind = ReceiptKind::new("captain.turn").unwrap();
    let receipt = v1::Receipt::new(&kind, "captain", "77", 1_700_000_000_123)
        .with_lane(&LANE)
        .with_id("turn", "t1")
        .with_count("input_tokens", 1200)
        .with_flag("typing_lit", true)
        .with_code("captain_turn_stalled");
    assert!(store.insert_receipt(&receipt, Some(1_796_000_000_000_000_001)).await.unwrap());
    assert!(!store.insert_receipt(&receipt, Some(1_796_000_000_000_000_001)).await.unwrap());
    let other = v1::Receipt::new(&kind, "captain", "78", 1_700_000_000_200);
    assert!(store.insert_receipt(&other, None).await.unwrap());
    let got = store.receipts_for_delivery("77").await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].receipt, receipt);
}

#[tokio::test]
async fn ingest_concurrency_receipts_are_stored_in_one_batch_once_per_key_and_read_back_whole() {
    let (store, _db) = super::store().await;
    let kind = ReceiptKind::new("captain.turn").unwrap();
    let first = v1::Receipt::new(&kind, "captain", "77", 1_700_000_000_123)
        .with_lane(&LANE)
        .with_id("turn", "t1")
        .with_count("input_tokens", 1200)
        .with_flag("typing_lit", true)
        .with_code("durable")
        .with_code("replied");
    let second = v1::Receipt::new(&kind, "gateway", "77", 1_700_000_000_456);
    let (one, two) = (1_796_000_000_000_000_001, 1_796_000_000_000_000_002);
    let batch = vec![(&first, one), (&second, two), (&first, one)];
    assert_eq!(store.insert_receipts(&batch).await.unwrap(), 2, "one row per key");
    assert_eq!(store.insert_receipts(&batch).await.unwrap(), 0, "a batch that comes back writes nothing twice");
    assert_eq!(store.insert_receipts(&[]).await.unwrap(), 0);
    let got: Vec<v1::Receipt> = store.receipts_for_delivery("77").await.unwrap().into_iter().map(|r| r.receipt).collect();
    assert_eq!(got, [first, second]);
}

#[tokio::test]
async fn a_turn_that_never_ended_keeps_its_room_in_conversation() {
    let (store, _db) = super::store().await;
    let lease = store.acquire_lease(&LANE, "c", Duration::from_secs(60)).await.unwrap().unwrap();
    assert!(!store.unsettled_turn(&LANE, Duration::from_secs(60)).await.unwrap());
    store
        .start_turn(
            &lease,
            &clankie_store::TurnStart { turn_id: "t".into(), mode: clankie_store::TurnMode::Durable, owner_delivery_id: "1".into() },
        )
        .await
        .unwrap();
    assert!(store.unsettled_turn(&LANE, Duration::from_secs(60)).await.unwrap());
    assert!(!store.unsettled_turn(&LANE, Duration::ZERO).await.unwrap(), "outside the window it no longer counts");
}

#[tokio::test]
async fn ingest_concurrency_facts_for_a_batch_come_back_in_its_order_from_one_statement() {
    let (store, _db) = super::store().await;
    let quiet = LaneKey::Room { guild: 1, channel: 99 };
    let window = Duration::from_secs(60);
    let _lease = store.acquire_lease(&LANE, "c", window).await.unwrap().unwrap();
    assert!(store.admit_within_flood("admitted", &LANE, "mention", 7, 0, 1, 1_700_000_000_000).await.unwrap());
    let facts = store.ingress_facts(&[("fresh", &quiet), ("admitted", &LANE), ("fresh", &LANE)], window).await.unwrap();
    let seen: Vec<(bool, bool, bool)> = facts.iter().map(|f| (f.settled, f.admitted, f.in_conversation)).collect();
    assert_eq!(seen, [(false, false, false), (false, true, true), (false, false, true)], "a run holds LANE's lease");
    assert_eq!(facts[0].owner, store.owner_settings().await.unwrap());
    assert!(store.ingress_facts(&[], window).await.unwrap().is_empty());
}

/// The flood guard counts by when a message was written: 25 messages written 3 s apart and
/// admitted in one burst (a captain catching up on a backlog) are no flood, while 21 written
/// within 10 s are, however late they are admitted.
#[tokio::test]
async fn flood_guard_a_backlog_admitted_in_one_burst_is_counted_by_when_it_was_written() {
    let (store, _db) = super::store().await;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let start = now - 120_000;
    let mut admitted = 0;
    for i in 0..25i64 {
        admitted += usize::from(
            store.admit_within_flood(&format!("steady-{i}"), &LANE, "mention", 77, 20, i as u64, start + i * 3_000).await.unwrap(),
        );
    }
    let mut flooded = 0;
    for i in 0..21i64 {
        flooded += usize::from(
            store.admit_within_flood(&format!("flood-{i}"), &LANE, "mention", 78, 20, 100 + i as u64, start + i * 500).await.unwrap(),
        );
    }
    println!("flood guard: a 75 s backlog admitted {admitted} of 25; 21 written within 10 s admitted {flooded}");
    assert_eq!(admitted, 25, "a backlog written at 20 a minute was taken for a flood");
    assert_eq!(flooded, 20, "the 21st message of a 10 s burst was admitted");
}

#[tokio::test]
async fn a_stored_receipt_keeps_what_it_says_and_leaves_its_zeros_out() {
    let (store, _db) = super::store().await;
    let kind = ReceiptKind::new("gateway.ingress").unwrap();
    let said = v1::Receipt::new(&kind, "gateway", "79", 1_700_000_000_123).with_id("channel", "10").with_count("chars", 24).with_flag("thread", true);
    let with_zeros = said.clone().with_id("thread", "").with_count("quoted", 0).with_flag("duplicate", false);
    assert!(store.insert_receipt(&with_zeros, Some(1_796_000_000_000_000_079)).await.unwrap());
    let (zeros, twin) = (with_zeros.clone(), said.clone().with_lane(&LANE));
    assert_eq!(store.insert_receipts(&[(&zeros.with_lane(&LANE), 1_796_000_000_000_000_080)]).await.unwrap(), 1);
    let got: Vec<v1::Receipt> = store.receipts_for_delivery("79").await.unwrap().into_iter().map(|r| r.receipt).collect();
    assert_eq!(got, [said, twin], "a zero count, a false flag and an empty id are not stored, one receipt at a time or in a batch");
    let (counts, flags): (serde_json::Value, serde_json::Value) =
        sqlx::query_as("SELECT counts, flags FROM receipts WHERE id = 1796000000000000079").fetch_one(store.pool()).await.unwrap();
    assert_eq!((counts, flags), (serde_json::json!({"chars": 24}), serde_json::json!({"thread": true})), "the row holds no zero");
}
