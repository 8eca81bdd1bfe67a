//! `remind_`: the store's account of reminders: the limits counted under a lock, a retried
//! definition taken as the first, a forget that leaves nothing, and the sweep of ended ones.

use std::time::Duration;

use clankie_store::{Added, Retention, StoredReminder};

use super::store;

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

fn reminder(id: u64, asker: u64, lane: &str) -> StoredReminder {
    StoredReminder {
        reminder_id: id,
        lane: lane.into(),
        guild_id: Some(100),
        channel_id: 200,
        asker_id: asker,
        text: format!("errand {id}"),
        due_at_ms: now_ms() + 3_600_000,
        created_at_ms: now_ms(),
        ..Default::default()
    }
}

#[tokio::test]
async fn remind_limits_hold_across_concurrent_asks_and_a_retried_ask_is_the_same_reminder() {
    let (store, _db) = store().await;
    // Twenty asks of one person at once against a limit of 5: exactly 5 are taken.
    let mut asks = tokio::task::JoinSet::new();
    for id in 1..=20 {
        let store = store.clone();
        asks.spawn(async move { store.add_reminder(&reminder(id, 7, "room:100:200"), 5, 0).await.unwrap() });
    }
    let added = asks.join_all().await;
    let taken = added.iter().filter(|a| **a == Added::New).count();
    let full = added.iter().filter(|a| matches!(a, Added::PersonFull(5))).count();
    assert_eq!((taken, full), (5, 15), "{added:?}");
    let first = store.pending_reminders(Some(7)).await.unwrap()[0].reminder_id;
    assert_eq!(store.add_reminder(&reminder(first, 7, "room:100:200"), 5, 0).await.unwrap(), Added::Again);
    // The room's bound counts everyone's.
    assert_eq!(store.add_reminder(&reminder(100, 8, "room:100:200"), 0, 5).await.unwrap(), Added::RoomFull(5));
    assert_eq!(store.add_reminder(&reminder(101, 8, "room:100:201"), 0, 5).await.unwrap(), Added::New);
}

#[tokio::test]
async fn remind_forget_leaves_none_of_a_persons_reminders_and_ended_ones_are_swept() {
    let (store, _db) = store().await;
    for id in 1..=3 {
        store.add_reminder(&reminder(id, 7, "room:100:200"), 0, 0).await.unwrap();
    }
    store.add_reminder(&reminder(4, 8, "room:100:200"), 0, 0).await.unwrap();
    store.set_time_zone(7, "Europe/Berlin").await.unwrap();
    let mut gone = store.forget_reminders(7).await.unwrap();
    gone.sort_unstable();
    assert_eq!(gone, [1, 2, 3]);
    assert_eq!(store.time_zone(7).await.unwrap(), None);
    assert_eq!(store.pending_reminders(None).await.unwrap().iter().map(|r| r.asker_id).collect::<Vec<_>>(), [8]);

    // One fired for the last time, one cancelled, one still pending: a sweep takes the ended two
    // once they are older than the records' retention.
    store.add_reminder(&reminder(5, 8, "room:100:200"), 0, 0).await.unwrap();
    store.add_reminder(&reminder(6, 8, "room:100:200"), 0, 0).await.unwrap();
    assert!(store.reminder_fired(4, now_ms(), true).await.unwrap());
    assert!(store.cancel_reminder(5).await.unwrap());
    assert!(!store.cancel_reminder(5).await.unwrap(), "cancelled once");
    sqlx::query("UPDATE reminders SET ended_at = now() - interval '8 days' WHERE ended IS NOT NULL").execute(store.pool()).await.unwrap();
    let week = Duration::from_secs(7 * 24 * 3600);
    let swept = store.sweep(&Retention { receipts: week, records: week, replaced_entries: week, batch: 1 }).await.unwrap();
    assert_eq!(swept.reminders, 2);
    assert_eq!(store.reminder(4).await.unwrap(), None);
    assert_eq!(store.reminder(5).await.unwrap(), None);
    let left = store.reminder(6).await.unwrap().expect("a pending reminder is never swept");
    assert_eq!((left.ended, left.fired), (None, 0));
}
