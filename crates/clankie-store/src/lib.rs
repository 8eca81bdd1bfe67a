//! PostgreSQL for lanes and evidence.
//!
//! The invariant this crate keeps: **every lane-state write is fenced.** A
//! replica may change a lane only while it holds the lane's current lease
//! epoch; the check runs under a share lock on the lane row in the same
//! transaction as the write, so a replica whose lease was taken over cannot
//! slip a write in after the takeover.

mod audit;
mod controls;
mod lease;
mod outbox;
mod receipts;
mod reminders;
mod retention;
mod rewrite;
mod self_file;
mod session;
mod shared_self;
mod turns;
pub mod usage;
mod views;
mod voice_room;

use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

pub use audit::Audit;
pub use lease::{LaneRow, Lease};
pub use outbox::{AskOwner, ClaimedRow, OutboxRow, Proposals, Settlement};
pub use receipts::StoredReceipt;
pub use reminders::{Added, StoredReminder};
pub use retention::{Retention, RingRetention, Swept};
pub use rewrite::{ForgottenRows, HISTORY_AUTHOR, HeldWords, REWRITE_KIND, Rewritten};
pub use self_file::{MAX_FACT_CHARS, MAX_NAME_CHARS, MAX_PERSONA_CHARS, SELF_FILE_SOURCE, SelfFile, SelfFileError, SelfFileReport};
pub use session::{Entry, NewEntry};
pub use shared_self::{Memory, MemoryStatus, OwnerSettings, Persona, SelfVersion, Sharing};
pub use turns::{Exchange, IngressFacts, Outcome, Recorded, StoredChange, TurnEnd, TurnMode, TurnStart, TurnTotals};
pub use usage::{Bill, Prices, Since, Tokens, Usage};
pub use views::{HourFigures, LaneView, RoomView};
pub use voice_room::{RingRow, RoomLease};

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("lane {lane}: lease epoch {held} is no longer current (now {current}); the write was refused")]
    Fenced { lane: String, held: i64, current: i64 },
    #[error("delivery {0} already has its outcome; the turn answering it again was not settled")]
    AlreadySettled(String),
    #[error("lane {0} has never been leased")]
    UnknownLane(String),
    #[error("stored row is inconsistent: {0}")]
    Corrupt(String),
    #[error("invalid outcome: {0}")]
    InvalidOutcome(&'static str),
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migration: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
}

/// What a migration run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationReport {
    /// Versions applied by this run; empty when the database was already current.
    pub applied: Vec<i64>,
    /// Versions known to this build.
    pub known: Vec<i64>,
}

/// The database's migrations against this build's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationGap {
    /// This build's migrations the database has not had.
    pub pending: Vec<i64>,
    /// Migrations the database has had that this build does not know: a newer release ran.
    pub unknown: Vec<i64>,
    /// How many migrations the database has had.
    pub applied: usize,
}

/// A pool on the Clankie database and the repository functions over it.
#[derive(Clone, Debug)]
pub struct Store {
    pool: PgPool,
}

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

impl Store {
    /// Connects a pool; fails fast with the driver's reason when the database is unreachable.
    pub async fn connect(url: &str) -> Result<Store, StoreError> {
        let pool = PgPoolOptions::new().max_connections(16).acquire_timeout(Duration::from_secs(10)).connect(url).await?;
        Ok(Store { pool })
    }

    /// Wraps an existing pool.
    pub fn from_pool(pool: PgPool) -> Store {
        Store { pool }
    }

    /// The underlying pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Applies pending migrations; a no-op on a current database.
    pub async fn migrate(&self) -> Result<MigrationReport, StoreError> {
        let before = self.applied_versions().await?;
        MIGRATOR.run(&self.pool).await?;
        let after = self.applied_versions().await?;
        Ok(MigrationReport {
            applied: after.into_iter().filter(|v| !before.contains(v)).collect(),
            known: MIGRATOR.iter().map(|m| m.version).collect(),
        })
    }

    /// Whether every migration this build knows is applied; for readiness checks.
    pub async fn is_current(&self) -> Result<bool, StoreError> {
        let applied = self.applied_versions().await?;
        Ok(MIGRATOR.iter().all(|m| applied.contains(&m.version)))
    }

    /// How the database's migrations stand against this build's: for `clankie doctor`.
    pub async fn migration_gap(&self) -> Result<MigrationGap, StoreError> {
        let applied = self.applied_versions().await?;
        let known: Vec<i64> = MIGRATOR.iter().map(|m| m.version).collect();
        Ok(MigrationGap {
            pending: known.iter().copied().filter(|v| !applied.contains(v)).collect(),
            unknown: applied.iter().copied().filter(|v| !known.contains(v)).collect(),
            applied: applied.len(),
        })
    }

    async fn applied_versions(&self) -> Result<Vec<i64>, StoreError> {
        let exists: bool = sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL").fetch_one(&self.pool).await?;
        if !exists {
            return Ok(Vec::new());
        }
        Ok(sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success ORDER BY version").fetch_all(&self.pool).await?)
    }
}
