//! The shared self: what every thread of him has in common.
//!
//! Persona, owner settings, approved memory, presence and a digest of recent
//! experiences are shared; conversation is not. A [`Snapshot`] is read fresh
//! for every turn (so an edit reaches a warm lane's next turn without a
//! restart), and [`assemble`] is the one function that turns it into a
//! system prompt for any thread, text lane or voice room. The privacy policy
//! ([`policy`]) is applied inside it, so no caller can forget it.

mod assemble;
pub mod blocks;
pub mod experience;
pub mod policy;

use std::time::Duration;

use clankie_bus::{Bus, BusError, now_ms};
use clankie_proto::{LaneKey, Subject, v1};
use clankie_store::{MemoryStatus, OwnerSettings, Persona, Store, StoreError};

pub use assemble::{Surface, assemble};

/// Why the shared self could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SelfError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Bus(#[from] BusError),
}

/// Approved facts a prompt carries at most.
pub const MEMORY_LIMIT: i64 = 50;
/// Experience candidates read per snapshot, before the policy and the digest bound apply.
const EXPERIENCE_CANDIDATES: i64 = 64;

/// Where he is right now, derived from lane and voice state (never written separately).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Presence {
    /// Lanes with a live run or an exchange that settled recently.
    pub lanes: Vec<LaneKey>,
    /// Live voice rooms as (guild, channel).
    pub voice: Vec<(u64, u64)>,
}

/// The shared self as one thread reads it for one turn.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// The persona with the deployment's name and aliases filled in where it has none.
    pub persona: Persona,
    pub settings: OwnerSettings,
    /// Approved facts, oldest first.
    pub memory: Vec<String>,
    /// Recent experiences, newest first: candidates only; [`assemble`] decides what is shown.
    pub experiences: Vec<v1::Experience>,
    pub presence: Presence,
    /// When it was read, for "how long ago" in the digest.
    pub read_at_ms: i64,
}

/// Reads snapshots of the shared self.
#[derive(Clone)]
pub struct SelfSource {
    store: Store,
    bus: Option<Bus>,
    bot_name: String,
    aliases: Vec<String>,
    presence_window: Duration,
}

impl SelfSource {
    /// A source over the store; with a bus, voice presence is read from the live voice sessions.
    /// `bot_name` and `aliases` stand in for a persona that names none.
    pub fn new(store: Store, bus: Option<Bus>, bot_name: &str, aliases: &[String], presence_window: Duration) -> SelfSource {
        SelfSource { store, bus, bot_name: bot_name.to_owned(), aliases: aliases.to_vec(), presence_window }
    }

    /// The store behind it.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Everything a turn in `thread` may draw on, read now.
    pub async fn snapshot(&self, thread: &LaneKey) -> Result<Snapshot, SelfError> {
        let mut persona = self.store.persona().await?;
        if persona.name.trim().is_empty() {
            persona.name = self.bot_name.clone();
        }
        if persona.aliases.is_empty() {
            persona.aliases = self.aliases.clone();
        }
        let settings = self.store.owner_settings().await?;
        let memory = self.store.memories(MemoryStatus::Approved, MEMORY_LIMIT).await?.into_iter().map(|m| m.fact).collect();
        let experiences = self.store.recent_experiences(thread.guild(), EXPERIENCE_CANDIDATES).await?;
        let lanes = self.store.present_lanes(self.presence_window).await?.iter().filter_map(|l| l.parse().ok()).collect();
        let mut voice = Vec::new();
        if let (Some(bus), Some(guild)) = (&self.bus, thread.guild()) {
            match bus.last::<v1::VoiceSession>(&Subject::VoiceSession { guild }).await {
                Ok(Some(v1::VoiceSession { channel_id: Some(channel), .. })) => voice.push((guild, channel)),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "voice presence unavailable"),
            }
        }
        Ok(Snapshot { persona, settings, memory, experiences, presence: Presence { lanes, voice }, read_at_ms: now_ms() })
    }

    /// The self with nothing but the deployment's name and aliases: what a thread speaks
    /// with when the store is unreachable and waiting is worse than a plainer prompt.
    pub fn bare(&self) -> Snapshot {
        let persona = Persona { name: self.bot_name.clone(), aliases: self.aliases.clone(), ..Default::default() };
        Snapshot { persona, read_at_ms: now_ms(), ..Default::default() }
    }

    /// Records a memory he proposed in `thread`; it reaches no prompt until approved.
    pub async fn propose_memory(&self, thread: &LaneKey, fact: &str) -> Result<i64, SelfError> {
        Ok(self.store.add_memory(fact, MemoryStatus::Proposed, &thread.to_string()).await?)
    }
}
