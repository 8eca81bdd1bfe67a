use std::time::Duration;

use clankie_proto::v1;
use clankie_store::{MemoryStatus, OwnerSettings, Persona, Sharing};

fn experience(id: &str, guild: Option<u64>, at_ms: i64) -> v1::Experience {
    v1::Experience {
        experience_id: id.into(),
        kind: "talked".into(),
        thread: guild.map_or("dm:9".into(), |g| format!("room:{g}:1")),
        guild_id: guild,
        summary: "I was talking.".into(),
        at_ms,
        ..Default::default()
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

#[tokio::test]
async fn persona_and_settings_edits_count_versions_and_read_back() {
    let (store, _db) = super::store().await;
    assert_eq!(store.persona().await.unwrap(), Persona::default());
    let p = Persona { name: "Clankie".into(), aliases: vec!["clanky".into()], character_sheet: "sheet".into(), ..Default::default() };
    assert_eq!(store.set_persona(&p).await.unwrap(), 1);
    assert_eq!(store.set_persona(&p).await.unwrap(), 2);
    assert_eq!(store.persona().await.unwrap(), Persona { version: 2, ..p.clone() });
    let s = OwnerSettings {
        owner_id: Some(1),
        guilds: vec![5, 6],
        trusted_dms: vec![9],
        trusted_rooms: vec![7],
        sharing: Sharing::None,
        ..Default::default()
    };
    assert_eq!(store.set_owner_settings(&s).await.unwrap(), 1);
    assert_eq!(store.owner_settings().await.unwrap(), OwnerSettings { version: 1, ..s });

    // Every edit is kept whole, under its version, newest first.
    let edited = Persona { speaking_style: "dry".into(), ..p.clone() };
    assert_eq!(store.set_persona(&edited).await.unwrap(), 3);
    let versions = store.self_versions("persona", 10).await.unwrap();
    assert_eq!(versions.iter().map(|v| v.version).collect::<Vec<_>>(), [3, 2, 1]);
    assert_eq!(versions[0].body["speaking_style"], "dry");
    assert_eq!(versions[1].body["speaking_style"], "");
    assert_eq!(versions[0].body["aliases"], serde_json::json!(["clanky"]));
    let settings = store.self_versions("settings", 10).await.unwrap();
    assert_eq!(settings.len(), 1);
    assert_eq!(settings[0].body["trusted_rooms"], serde_json::json!([7]));
    assert_eq!(settings[0].body["sharing"], "none");
}

#[tokio::test]
async fn a_proposal_moves_to_approved_or_rejected_and_only_approved_is_listed_as_memory() {
    let (store, _db) = super::store().await;
    let a = store.add_memory("a", MemoryStatus::Proposed, "room:1:2").await.unwrap();
    let b = store.add_memory("b", MemoryStatus::Proposed, "room:1:2").await.unwrap();
    assert!(store.memories(MemoryStatus::Approved, 10).await.unwrap().is_empty());
    assert!(store.decide_memory(a, MemoryStatus::Proposed, MemoryStatus::Approved).await.unwrap());
    assert!(store.decide_memory(b, MemoryStatus::Proposed, MemoryStatus::Rejected).await.unwrap());
    assert!(!store.decide_memory(999, MemoryStatus::Proposed, MemoryStatus::Approved).await.unwrap());
    let approved = store.memories(MemoryStatus::Approved, 10).await.unwrap();
    assert_eq!(approved.iter().map(|m| m.fact.as_str()).collect::<Vec<_>>(), ["a"]);
    assert!(store.memories(MemoryStatus::Proposed, 10).await.unwrap().is_empty());
}

#[tokio::test]
async fn experiences_are_stored_once_and_go_when_they_expire() {
    let (store, _db) = super::store().await;
    let now = now_ms();
    assert!(store.insert_experience(&experience("e1", Some(1), now), Duration::from_secs(3600)).await.unwrap());
    assert!(!store.insert_experience(&experience("e1", Some(1), now), Duration::from_secs(3600)).await.unwrap(), "a republish");
    store.insert_experience(&experience("e2", Some(2), now - 1), Duration::from_secs(3600)).await.unwrap();
    store.insert_experience(&experience("e3", None, now - 2), Duration::from_secs(3600)).await.unwrap();
    // Happened two hours ago with a one-hour life: expired already.
    store.insert_experience(&experience("old", Some(1), now - 7_200_000), Duration::from_secs(3600)).await.unwrap();

    let ids = |v: Vec<v1::Experience>| -> Vec<String> { v.into_iter().map(|e| e.experience_id).collect() };
    assert_eq!(ids(store.recent_experiences(Some(1), 10, now).await.unwrap()), ["e1", "e3"], "guild 1 and DMs, newest first");
    assert_eq!(ids(store.recent_experiences(None, 10, now).await.unwrap()), ["e1", "e2", "e3"]);
    assert_eq!(store.recent_experiences(None, 10, now).await.unwrap()[0], experience("e1", Some(1), now));
    // Aged by the reader's clock: e1 lives one hour from when it happened, to the millisecond.
    let store_ref = &store;
    let at = |ms: i64| async move { ids(store_ref.recent_experiences(Some(1), 10, now + ms).await.unwrap()) };
    assert_eq!(at(3_599_997).await, ["e1", "e3"]);
    assert_eq!(at(3_599_999).await, ["e1"], "e3 happened 2 ms earlier, so it went 2 ms earlier");
    assert_eq!(at(3_600_001).await, Vec::<String>::new(), "just past its hour e1 is gone");
    assert_eq!(store.expire_experiences(now).await.unwrap(), 1, "only the two-hour-old one had expired");
    assert_eq!(store.expire_experiences(now).await.unwrap(), 0);
    assert_eq!(store.expire_experiences(now + 3_600_001).await.unwrap(), 3);
}

#[tokio::test]
async fn erase_finds_experiences_by_id_so_a_namesake_keeps_theirs_and_one_recorded_late_is_refused() {
    let (store, _db) = super::store().await;
    let ttl = Duration::from_secs(3600);
    let lived = |id: &str, name: &str, ids: &[u64], at_ms: i64| v1::Experience {
        participants: vec![name.into()],
        participant_ids: ids.to_vec(),
        ..experience(id, Some(1), at_ms)
    };
    let before = now_ms() - 1_000;
    store.insert_experience(&lived("with-bob", "bob", &[2], before), ttl).await.unwrap();
    store.insert_experience(&lived("with-another-bob", "bob", &[9], before), ttl).await.unwrap();
    store.insert_experience(&lived("from-before-ids", "bob", &[], before), ttl).await.unwrap();
    store.insert_experience(&lived("with-ada", "ada", &[1], before), ttl).await.unwrap();

    let rows = store.forget_rows(2, &["bob".into()], &[], &[]).await.unwrap();
    assert_eq!(rows.experiences, 2, "his own, and the one from before ids was kept that names him");
    let mut left: Vec<String> = store.recent_experiences(None, 10, now_ms()).await.unwrap().into_iter().map(|e| e.experience_id).collect();
    left.sort();
    assert_eq!(left, ["with-ada", "with-another-bob"], "a stranger who is also called bob keeps theirs");

    // A recorder behind the stream brings one from before the forget: it stays out.
    let late = lived("with-bob-late", "bob", &[2, 1], before + 500);
    assert!(!store.insert_experience(&late, ttl).await.unwrap(), "an experience from before his forget was stored again");
    // Once forgotten he may come back: what happens with him afterwards is kept.
    let later = lived("with-bob-again", "bob", &[2], now_ms() + 1_000);
    assert!(store.insert_experience(&later, ttl).await.unwrap(), "what happened after the forget is refused");
}

/// His replies waiting in the outbox to turns only the forgotten person started hold his words
/// to them: the forget withdraws those rows unsent; a reply to anyone else's turn stays.
#[tokio::test]
async fn erase_withdraws_his_unsent_replies_to_turns_only_they_started_and_keeps_the_others() {
    let (store, _db) = super::store().await;
    let pool = store.pool();
    sqlx::query("INSERT INTO lanes (lane, epoch) VALUES ('room:1:2', 1)").execute(pool).await.unwrap();
    for (delivery, turn) in [("bobs-message", "bobs-turn"), ("adas-message", "adas-turn")] {
        sqlx::query("INSERT INTO deliveries (delivery_id, lane, turn_id, outcome) VALUES ($1, 'room:1:2', $2, 'replied')")
            .bind(delivery)
            .bind(turn)
            .execute(pool)
            .await
            .unwrap();
        sqlx::query(
            "INSERT INTO outbox (id, lane, turn_id, subject, payload) VALUES ($1, 'room:1:2', $2, 'clankie.body.send.2', '\\x0102')",
        )
        .bind(format!("reply-to-{turn}"))
        .bind(turn)
        .execute(pool)
        .await
        .unwrap();
    }
    let rows = store.forget_rows(2, &["bob".into()], &["bobs-message".into()], &["bobs-message".into()]).await.unwrap();
    let left: Vec<String> = sqlx::query_scalar("SELECT id FROM outbox ORDER BY id").fetch_all(pool).await.unwrap();
    println!("erase: unsent replies withdrawn {}, left {left:?}", rows.unsent_replies);
    assert_eq!(rows.unsent_replies, 1);
    assert_eq!(left, ["reply-to-adas-turn"], "his reply to bob's turn is still waiting to be posted, or ada's went with it");
}
