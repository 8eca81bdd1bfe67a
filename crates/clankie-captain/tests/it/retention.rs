//! What must not be lost or kept as the data ages: receipts across a recreated stream, and the
//! outbox's relay under rows too old or unable to publish.

use std::time::Duration;

use clankie_proto::{Subject, v1};

use super::{Rig, until};

fn receipt(delivery: &str) -> v1::Receipt {
    v1::Receipt {
        kind: "test.marker".into(),
        delivery_id: delivery.into(),
        service: "test".into(),
        at_ms: clankie_bus::now_ms(),
        ..Default::default()
    }
}

async fn stored(rig: &Rig, delivery: &str) -> bool {
    !rig.store.receipts_for_delivery(delivery).await.unwrap().is_empty()
}

/// Sequences start at 1 again in a recreated stream: keyed by sequence alone, every new receipt
/// up to the old maximum was taken for one already stored and silently dropped.
#[tokio::test]
async fn retention_receipts_recorded_after_the_receipts_stream_is_deleted_and_recreated_are_all_stored() {
    let rig = Rig::new().await;
    let (_captain, _task) = rig.captain("captain-a").await;
    let before: Vec<String> = (0..20).map(|n| format!("before-{n}")).collect();
    for id in &before {
        rig.bus
            .publish(&Subject::Receipt { kind: clankie_proto::ReceiptKind::new("test.marker").unwrap() }, &receipt(id), None)
            .await
            .unwrap();
    }
    for id in &before {
        let id = id.clone();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while !stored(&rig, &id).await {
            assert!(tokio::time::Instant::now() < deadline, "{id} never stored");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    // Lost storage, a new cluster: the stream is made again, empty.
    rig.bus.jetstream().delete_stream("CLANKIE_RECEIPTS").await.unwrap();
    rig.bus.ensure_streams().await.unwrap();
    let after: Vec<String> = (0..20).map(|n| format!("after-{n}")).collect();
    for id in &after {
        rig.bus
            .publish(&Subject::Receipt { kind: clankie_proto::ReceiptKind::new("test.marker").unwrap() }, &receipt(id), None)
            .await
            .unwrap();
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let mut missing = Vec::new();
        for id in &after {
            if !stored(&rig, id).await {
                missing.push(id.clone());
            }
        }
        if missing.is_empty() {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "receipts after the stream was made again never stored: {missing:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An outbox row as a turn commits it, written straight into the table `age` ago.
async fn outbox_row(rig: &Rig, id: &str, subject: &str, payload: &[u8], age: Duration) {
    let lane = clankie_proto::LaneKey::Room { guild: super::GUILD, channel: super::CHANNEL }.to_string();
    sqlx::query("INSERT INTO lanes (lane) VALUES ($1) ON CONFLICT DO NOTHING").bind(&lane).execute(rig.store.pool()).await.unwrap();
    sqlx::query(
        "INSERT INTO outbox (id, lane, turn_id, subject, payload, created_at)
         VALUES ($1, $2, $3, $4, $5, now() - make_interval(secs => $6::double precision / 1000))",
    )
    .bind(id)
    .bind(&lane)
    .bind(format!("turn-{id}"))
    .bind(subject)
    .bind(payload)
    .bind(age.as_millis() as i64)
    .execute(rig.store.pool())
    .await
    .unwrap();
}

fn outbound(delivery: &str, text: &str) -> v1::OutboundMessage {
    v1::OutboundMessage {
        idempotency_key: format!("reply:{delivery}"),
        kind: v1::OutboundKind::Reply as i32,
        guild_id: Some(super::GUILD),
        channel_id: super::CHANNEL,
        text: text.into(),
        lane: clankie_proto::LaneKey::Room { guild: super::GUILD, channel: super::CHANNEL }.to_string(),
        delivery_id: delivery.into(),
        ..Default::default()
    }
}

/// After a long outage a committed reply answers a conversation that moved on: past
/// `CLANKIE_OUTBOX_MAX_AGE_MS` it is not posted, and the trail of its delivery says why.
#[tokio::test]
async fn retention_an_outbox_row_older_than_the_bound_is_not_published_and_the_trail_says_why() {
    use prost::Message as _;
    let rig = Rig::new().await;
    let subject = Subject::BodySend { channel: super::CHANNEL }.to_string();
    outbox_row(&rig, "reply:stale", &subject, &outbound("7001", "too late").encode_to_vec(), Duration::from_secs(3 * 3600)).await;
    outbox_row(&rig, "reply:fresh", &subject, &outbound("7002", "in time").encode_to_vec(), Duration::from_secs(30)).await;
    let max_age = [("CLANKIE_OUTBOX_MAX_AGE_MS", "3600000".to_owned())];
    let (_captain, _task) = rig.captain_with("captain-a", &max_age).await;

    until("the fresh row relayed", Duration::from_secs(15), || rig.replies().iter().any(|r| r.text == "in time")).await;
    until("the stale row's receipt", Duration::from_secs(15), || {
        rig.receipts.all().iter().any(|r| r.kind == "captain.outbox_gave_up" && r.delivery_id == "7001")
    })
    .await;
    // A pass later still: the stale row never goes out.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(rig.replies().iter().all(|r| r.text != "too late"), "a reply three hours late was posted");
    let (code, payload): (Option<String>, Option<Vec<u8>>) =
        sqlx::query_as("SELECT gave_up_code, payload FROM outbox WHERE id = 'reply:stale'").fetch_one(rig.store.pool()).await.unwrap();
    assert_eq!(code.as_deref(), Some("outbox_too_old"));
    assert!(payload.is_none(), "the words of a row given up are dropped");
    let trail = until_trail(&rig, "7001").await;
    assert!(trail.iter().any(|row| row.contains("captain.outbox_gave_up") && row.contains("outbox_too_old")), "{trail:?}");
}

async fn until_trail(rig: &Rig, delivery: &str) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(rows) = clankie_console::views::trail(&rig.store, delivery, None).await.unwrap()
            && rows.iter().any(|r| r.to_string().contains("outbox_gave_up"))
        {
            return rows.iter().map(|r| r.to_string()).collect();
        }
        assert!(tokio::time::Instant::now() < deadline, "the trail of {delivery} never showed the row given up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Rows that can never publish (here: on a subject outside the catalogue, as a release that
/// dropped a subject would leave them) step out of the way: a hundred and fifty of them ahead
/// of a new reply do not delay it past the relay's next pass, and each is given up with a code.
#[tokio::test]
async fn retention_150_unpublishable_outbox_rows_do_not_delay_a_new_reply() {
    use prost::Message as _;
    let rig = Rig::new().await;
    for n in 0..150 {
        outbox_row(&rig, &format!("stuck:{n}"), "clankie.v1.nowhere.stuck", b"x", Duration::from_secs(60)).await;
    }
    let (_captain, _task) = rig.captain("captain-a").await;
    // The relay has met the stuck rows (they fill a pass of 100) before the reply comes.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let tried: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox WHERE attempts > 0").fetch_one(rig.store.pool()).await.unwrap();
        if tried >= 100 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the relay never tried the stuck rows");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let subject = Subject::BodySend { channel: super::CHANNEL }.to_string();
    outbox_row(&rig, "reply:new", &subject, &outbound("7003", "still answered").encode_to_vec(), Duration::from_secs(1)).await;
    let committed = tokio::time::Instant::now();
    until("the new reply", Duration::from_secs(15), || rig.replies().iter().any(|r| r.text == "still answered")).await;
    let waited = committed.elapsed();
    let claimed: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox WHERE id LIKE 'stuck:%' AND attempts > 0")
        .fetch_one(rig.store.pool())
        .await
        .unwrap();
    println!("retention: a new reply behind 150 stuck rows ({claimed} tried) relayed {} ms after its commit", waited.as_millis());
    // The rig relays rows older than 500 ms every 250 ms: two passes and a margin.
    assert!(waited <= Duration::from_secs(2), "the new reply waited {waited:?} behind rows that cannot publish");
    let given_up: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox WHERE id LIKE 'stuck:%' AND gave_up_code = 'outbox_unpublishable'")
        .fetch_one(rig.store.pool())
        .await
        .unwrap();
    assert!(given_up >= 100, "only {given_up} stuck rows given up");
}

/// The captain runs the sweeper itself: a receipt past its retention goes within a sweep.
#[tokio::test]
async fn retention_a_captain_sweeps_receipts_past_their_retention() {
    let rig = Rig::new().await;
    for (id, age_days) in [("old-receipt", 3), ("new-receipt", 0)] {
        sqlx::query(
            "INSERT INTO receipts (dedup_key, kind, delivery_id, service, at) VALUES ($1, 'test.marker', $1, 'test', now() - make_interval(days => $2))",
        )
        .bind(id)
        .bind(age_days)
        .execute(rig.store.pool())
        .await
        .unwrap();
    }
    let sweep = [("CLANKIE_RETENTION_SWEEP_MS", "1000".to_owned()), ("CLANKIE_RECEIPTS_RETENTION_DAYS", "2".to_owned())];
    let (_captain, _task) = rig.captain_with("captain-a", &sweep).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while stored(&rig, "old-receipt").await {
        assert!(tokio::time::Instant::now() < deadline, "the receipt past its retention was never swept");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(stored(&rig, "new-receipt").await, "a receipt inside its retention was swept");
}
