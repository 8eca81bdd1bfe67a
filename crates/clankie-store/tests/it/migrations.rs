use clankie_store::Store;
use clankie_testkit::TestDb;

#[tokio::test]
async fn migrations_apply_to_an_empty_database_and_rerun_as_a_no_op() {
    let db = TestDb::create().await;
    let store = Store::connect(db.url()).await.unwrap();
    assert!(!store.is_current().await.unwrap());
    let first = store.migrate().await.unwrap();
    assert_eq!(first.applied, first.known);
    assert!(!first.applied.is_empty());
    assert!(store.is_current().await.unwrap());

    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables WHERE table_schema = 'public' AND table_name <> '_sqlx_migrations' ORDER BY 1",
    )
    .fetch_all(store.pool())
    .await
    .unwrap();
    assert_eq!(
        tables,
        [
            "admissions",
            "deliveries",
            "exchanges",
            "forgotten_users",
            "lanes",
            "message_changes",
            "outbox",
            "private_lanes",
            "receipts",
            "reminders",
            "self_experiences",
            "self_file_applied",
            "self_memory",
            "self_persona",
            "self_settings",
            "self_versions",
            "session_entries",
            "time_zones",
            "turns",
            "voice_ring",
            "voice_rooms"
        ]
    );

    let second = store.migrate().await.unwrap();
    assert!(second.applied.is_empty(), "re-run applied {:?}", second.applied);
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations").fetch_one(store.pool()).await.unwrap();
    assert_eq!(rows as usize, first.known.len());
}

#[tokio::test]
async fn the_receipts_table_has_no_column_for_text() {
    let (store, _db) = super::store().await;
    let columns: Vec<String> = sqlx::query_scalar(
        "SELECT column_name::text FROM information_schema.columns WHERE table_name = 'receipts' ORDER BY ordinal_position",
    )
    .fetch_all(store.pool())
    .await
    .unwrap();
    assert_eq!(
        columns,
        ["id", "dedup_key", "kind", "delivery_id", "service", "lane", "at", "ids", "counts", "flags", "codes", "stored_at"]
    );
}
