use std::time::Duration;

use clankie_proto::{LaneKey, v1};
use clankie_store::{NewEntry, Outcome, StoreError, TurnEnd, TurnMode, TurnStart};

const LANE: LaneKey = LaneKey::Room { guild: 1, channel: 2 };
const LONG: Duration = Duration::from_secs(60);

fn entry(id: &str) -> NewEntry {
    NewEntry { id: id.into(), parent_id: None, kind: "user".into(), body: serde_json::json!({"n": id}), in_context: true }
}

fn is_fenced<T: std::fmt::Debug>(result: Result<T, StoreError>) -> bool {
    matches!(result, Err(StoreError::Fenced { .. }))
}

#[tokio::test]
async fn a_live_lease_cannot_be_taken_by_another_replica() {
    let (store, _db) = super::store().await;
    let a = store.acquire_lease(&LANE, "captain-a", LONG).await.unwrap().expect("free lane");
    assert_eq!(a.epoch, 1);
    assert_eq!(store.acquire_lease(&LANE, "captain-b", LONG).await.unwrap(), None);
    let row = store.lane(&LANE).await.unwrap().unwrap();
    assert_eq!((row.epoch, row.lease_owner.as_deref()), (1, Some("captain-a")));
}

#[tokio::test]
async fn a_writer_holding_an_older_epoch_cannot_change_lane_state() {
    let (store, _db) = super::store().await;
    // A's lease is already expired when granted, so B may take the lane at once.
    let stale = store.acquire_lease(&LANE, "captain-a", Duration::ZERO).await.unwrap().unwrap();
    store.start_turn(&stale, &TurnStart { turn_id: "t-a".into(), mode: TurnMode::Durable, owner_delivery_id: "1".into() }).await.unwrap();
    let current = store.acquire_lease(&LANE, "captain-b", LONG).await.unwrap().expect("expired lease is taken over");
    assert_eq!(current.epoch, stale.epoch + 1);

    assert!(is_fenced(store.append_entry(&stale, "rooms/room:1:2", &entry("e1")).await));
    assert!(is_fenced(store.capture(&stale, 7, 8).await));
    assert!(is_fenced(store.refresh_exchange(&stale, "1").await));
    let outcome = Outcome { delivery_id: "1".into(), turn_id: Some("t-a".into()), kind: v1::OutcomeKind::Replied, failure_code: None };
    assert!(is_fenced(store.record_outcome(&stale, &outcome).await));
    let end = TurnEnd {
        turn_id: "t-a".into(),
        outcome: v1::OutcomeKind::Replied,
        failure_code: None,
        model_calls: 1,
        input_tokens: 10,
        output_tokens: 2,
        cached_input_tokens: 0,
        cache_write_input_tokens: 0,
        reasoning_tokens: 0,
        steer_count: 0,
        typing_lit: true,
    };
    assert!(is_fenced(store.finish_turn(&stale, &end).await));
    assert!(is_fenced(store.renew_lease(&stale, LONG).await));
    assert!(is_fenced(store.release_lease(&stale).await));

    // Nothing the stale writer tried landed.
    assert!(store.entries("rooms/room:1:2").await.unwrap().is_empty());
    assert_eq!(store.outcome("1").await.unwrap(), None);
    assert_eq!(store.exchange(&LANE).await.unwrap(), None);
    let row = store.lane(&LANE).await.unwrap().unwrap();
    assert_eq!((row.captured_actor_id, row.lease_owner.as_deref()), (None, Some("captain-b")));

    // The current holder writes freely.
    store.append_entry(&current, "rooms/room:1:2", &entry("e1")).await.unwrap();
    store.capture(&current, 7, 8).await.unwrap();
    assert_eq!(store.record_outcome(&current, &outcome).await.unwrap(), clankie_store::Recorded::New);
    store.renew_lease(&current, LONG).await.unwrap();
}

#[tokio::test]
async fn a_released_lane_is_taken_at_once_with_a_new_epoch() {
    let (store, _db) = super::store().await;
    let a = store.acquire_lease(&LANE, "captain-a", LONG).await.unwrap().unwrap();
    store.release_lease(&a).await.unwrap();
    let b = store.acquire_lease(&LANE, "captain-b", LONG).await.unwrap().expect("released lane is free");
    assert_eq!(b.epoch, a.epoch + 1);
}

#[tokio::test]
async fn a_write_racing_a_takeover_either_lands_before_it_or_is_refused() {
    let (store, _db) = super::store().await;
    let a = store.acquire_lease(&LANE, "captain-a", Duration::ZERO).await.unwrap().unwrap();
    // A keeps writing until it has been refused a few times; the takeover comes while it writes.
    let writes = {
        let (store, a) = (store.clone(), a.clone());
        tokio::spawn(async move {
            let mut results = Vec::new();
            for i in 0..100_000 {
                results.push(store.append_entry(&a, "rooms/room:1:2", &entry(&format!("a{i}"))).await.map(|_| ()));
                if results.iter().filter(|r| r.is_err()).count() >= 5 {
                    break;
                }
            }
            results
        })
    };
    // The race is made to happen: some of A's writes have landed, and A is still writing.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while store.entries("rooms/room:1:2").await.unwrap().len() < 5 {
        assert!(tokio::time::Instant::now() < deadline, "A's writes never landed");
        tokio::task::yield_now().await;
    }
    assert!(!writes.is_finished());
    let b = store.acquire_lease(&LANE, "captain-b", LONG).await.unwrap().unwrap();
    let results = writes.await.unwrap();
    let landed = store.entries("rooms/room:1:2").await.unwrap();
    let first_fenced = results.iter().position(|r| r.is_err()).expect("A was never refused after the takeover");
    assert!(first_fenced >= 5, "the takeover came before A's first writes: {first_fenced}");
    // Every entry that landed was written under A's epoch, and once one write was fenced no later one landed.
    assert!(landed.iter().all(|e| e.epoch == a.epoch));
    assert!(results[first_fenced..].iter().all(|r| matches!(r, Err(StoreError::Fenced { .. }))), "{:?}", &results[first_fenced..]);
    assert_eq!(results.len(), first_fenced + 5);
    assert_eq!(landed.len(), first_fenced);
    assert_eq!(b.epoch, a.epoch + 1);
}

#[tokio::test]
async fn voice_room_lease_has_one_owner_and_a_takeover_fences_the_old_one() {
    let (store, _db) = super::store().await;
    let a = store.acquire_room(100, 300, "floor-a", Duration::from_millis(1)).await.unwrap().expect("a free room");
    assert_eq!(a.epoch, 1);
    tokio::time::sleep(Duration::from_millis(5)).await;
    let b = store.acquire_room(100, 300, "floor-b", LONG).await.unwrap().expect("an expired lease is taken");
    assert_eq!(b.epoch, 2);
    assert_eq!(store.acquire_room(100, 300, "floor-a", LONG).await.unwrap(), None, "a live lease is not taken");
    assert!(is_fenced(store.renew_room(&a, LONG).await), "the old owner's renewal is refused");
    store.release_room(&a).await.unwrap();
    assert_eq!(store.room_owner(100, 300).await.unwrap(), Some(("floor-b".to_owned(), 2)), "a fenced release changes nothing");
    store.renew_room(&b, LONG).await.unwrap();
    store.release_room(&b).await.unwrap();
    assert_eq!(store.room_owner(100, 300).await.unwrap(), None);
    assert!(store.acquire_room(100, 300, "floor-a", LONG).await.unwrap().is_some_and(|l| l.epoch == 3));
}

#[tokio::test]
async fn renewing_the_lease_while_the_run_captures_its_speaker_never_deadlocks() {
    // The lease keeper renews on a task of its own while the run records its newest speaker:
    // both update the lane row, and neither may lose to a deadlock.
    let (store, _db) = super::store().await;
    let lease = store.acquire_lease(&LANE, "captain-a", LONG).await.unwrap().expect("free lane");
    let (s1, l1) = (store.clone(), lease.clone());
    let keeper = tokio::spawn(async move {
        for _ in 0..300 {
            s1.renew_lease(&l1, LONG).await?;
        }
        Ok::<_, StoreError>(())
    });
    let (s2, l2) = (store.clone(), lease.clone());
    let run = tokio::spawn(async move {
        for i in 0..300 {
            s2.capture(&l2, 7, i).await?;
        }
        Ok::<_, StoreError>(())
    });
    keeper.await.unwrap().expect("every renewal went through");
    run.await.unwrap().expect("every capture went through");
    store.release_lease(&lease).await.unwrap();
}
