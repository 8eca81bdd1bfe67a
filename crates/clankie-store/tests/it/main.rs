//! The store against a real PostgreSQL, one fresh database per test.

mod fencing;
mod migrations;
mod outbox;
mod outcomes;
mod reminders;
mod retention;
mod self_file;
mod sessions;
mod shared_self;
mod usage;

use clankie_store::Store;
use clankie_testkit::TestDb;

/// A migrated store on a fresh database; the database lives as long as the returned guard.
pub async fn store() -> (Store, TestDb) {
    let db = TestDb::create().await;
    let store = Store::connect(db.url()).await.unwrap();
    store.migrate().await.unwrap();
    (store, db)
}
