use std::time::Duration;

use clankie_proto::{LaneKey, v1};
use clankie_store::{OutboxRow, Outcome, Settlement, StoreError, TurnEnd, TurnMode, TurnStart};

const LANE: LaneKey = LaneKey::Room { guild: 1, channel: 2 };

fn outcome(id: &str, kind: v1::OutcomeKind) -> Outcome {
    Outcome { delivery_id: id.into(), turn_id: Some("t".into()), kind, failure_code: None }
}

fn row(id: &str) -> OutboxRow {
    OutboxRow { id: id.into(), turn_id: "t".into(), subject: "clankie.body.send.2".into(), payload: b"words".to_vec() }
}

fn end() -> TurnEnd {
    TurnEnd {
        turn_id: "t".into(),
        outcome: v1::OutcomeKind::Replied,
        failure_code: None,
        model_calls: 1,
        input_tokens: 1,
        output_tokens: 1,
        cached_input_tokens: 0,
        cache_write_input_tokens: 0,
        reasoning_tokens: 0,
        steer_count: 0,
        typing_lit: false,
    }
}

#[tokio::test]
async fn a_settled_turn_commits_its_reply_outcomes_and_events_together_and_the_relay_marks_them_sent() {
    let (store, _db) = super::store().await;
    let lease = store.acquire_lease(&LANE, "a", Duration::from_secs(30)).await.unwrap().unwrap();
    store.start_turn(&lease, &TurnStart { turn_id: "t".into(), mode: TurnMode::Durable, owner_delivery_id: "1".into() }).await.unwrap();
    let outcomes = [outcome("1", v1::OutcomeKind::Replied), outcome("2", v1::OutcomeKind::Absorbed)];
    let events = [row("outcome:1"), row("outcome:2")];
    let reply = row("reply:t");
    let s =
        Settlement { end: &end(), outcomes: &outcomes, outcome_events: &events, exchange: Some("2"), post: Some(&reply), proposals: None };
    assert_eq!(store.settle_turn(&lease, &s).await.unwrap(), [true, true]);
    let unsent: Vec<String> = store.unsent(Duration::ZERO, 10).await.unwrap().into_iter().map(|r| r.id).collect();
    assert_eq!(unsent.len(), 3, "{unsent:?}");
    store.mark_sent("reply:t").await.unwrap();
    let payload: Option<Vec<u8>> =
        sqlx::query_scalar("SELECT payload FROM outbox WHERE id = 'reply:t'").fetch_one(store.pool()).await.unwrap();
    assert_eq!(payload, None, "a sent row keeps no words");
    assert_eq!(store.unsent(Duration::ZERO, 10).await.unwrap().len(), 2);
}

#[tokio::test]
async fn a_turn_answering_a_delivery_settled_elsewhere_commits_nothing() {
    let (store, _db) = super::store().await;
    let lease = store.acquire_lease(&LANE, "a", Duration::from_secs(30)).await.unwrap().unwrap();
    store.start_turn(&lease, &TurnStart { turn_id: "t".into(), mode: TurnMode::Durable, owner_delivery_id: "1".into() }).await.unwrap();
    store.record_unhandled(&LANE, "1", v1::FailureCode::CaptainLaneUnavailable).await.unwrap();
    let outcomes = [outcome("1", v1::OutcomeKind::Replied), outcome("2", v1::OutcomeKind::Absorbed)];
    let events = [row("outcome:1"), row("outcome:2")];
    let reply = row("reply:t");
    let s =
        Settlement { end: &end(), outcomes: &outcomes, outcome_events: &events, exchange: Some("2"), post: Some(&reply), proposals: None };
    assert!(matches!(store.settle_turn(&lease, &s).await, Err(StoreError::AlreadySettled(id)) if id == "1"));
    assert!(store.unsent(Duration::ZERO, 10).await.unwrap().is_empty(), "no second answer queued");
    assert!(store.outcome("2").await.unwrap().is_none(), "the rest comes back for a turn of its own");
    assert_eq!(store.outcome("1").await.unwrap().unwrap().kind, v1::OutcomeKind::Failed, "the first outcome stands");

    // A fenced turn commits nothing either.
    store.acquire_lease(&LANE, "b", Duration::ZERO).await.unwrap();
    sqlx::query("UPDATE lanes SET epoch = epoch + 1").execute(store.pool()).await.unwrap();
    let outcomes = [outcome("2", v1::OutcomeKind::Replied)];
    let s = Settlement { end: &end(), outcomes: &outcomes, outcome_events: &[], exchange: None, post: Some(&reply), proposals: None };
    assert!(matches!(store.settle_turn(&lease, &s).await, Err(StoreError::Fenced { .. })));
    assert!(store.unsent(Duration::ZERO, 10).await.unwrap().is_empty());
}
