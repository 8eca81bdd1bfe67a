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
pub mod rewrite;

use std::sync::Arc;
use std::time::Duration;

use clankie_agent::{SystemWallClock, WallClock};
use clankie_bus::{Bus, BusError};
use clankie_proto::{LaneKey, Subject, v1};
use clankie_store::{MemoryStatus, OwnerSettings, Persona, Store, StoreError};

pub use assemble::{SELF_CONTEXT_AUTHOR, SELF_CONTEXT_OPEN, Surface, assemble, self_context, self_context_due, self_context_message};

/// Whether `text` names him: one of `names` (his name and aliases) as whole words, any case.
/// "clankie, what do you think?" does; "I like Clankies" does not. Shared by the voice floor's
/// wake and the text lane's `named` admission, so both hear his name the same way.
pub fn names_him(text: &str, names: &[String]) -> bool {
    let lower = text.to_lowercase();
    let words: Vec<&str> = lower.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).collect();
    names.iter().any(|n| {
        let n = n.to_lowercase();
        let parts: Vec<&str> = n.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).collect();
        !parts.is_empty() && words.windows(parts.len()).any(|w| w == parts.as_slice())
    })
}

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
    /// Lanes that are their own audience (private threads): the policy keeps them from every
    /// other lane ([`policy::may_know_of`]).
    pub private_lanes: Vec<LaneKey>,
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
    clock: Arc<dyn WallClock>,
}

impl SelfSource {
    /// A source over the store; with a bus, voice presence is read from the live voice sessions.
    /// `bot_name` and `aliases` stand in for a persona that names none.
    pub fn new(store: Store, bus: Option<Bus>, bot_name: &str, aliases: &[String], presence_window: Duration) -> SelfSource {
        SelfSource {
            store,
            bus,
            bot_name: bot_name.to_owned(),
            aliases: aliases.to_vec(),
            presence_window,
            clock: Arc::new(SystemWallClock),
        }
    }

    /// Replaces the wall clock experiences are aged by (tests move it).
    pub fn with_clock(mut self, clock: Arc<dyn WallClock>) -> SelfSource {
        self.clock = clock;
        self
    }

    /// The wall clock experiences are aged by.
    pub fn clock(&self) -> &Arc<dyn WallClock> {
        &self.clock
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
        let now = self.clock.now_ms();
        let experiences = self.store.recent_experiences(thread.guild(), EXPERIENCE_CANDIDATES, now).await?;
        let lanes = self.store.present_lanes(self.presence_window).await?.iter().filter_map(|l| l.parse().ok()).collect();
        let mut voice = Vec::new();
        if let (Some(bus), Some(guild)) = (&self.bus, thread.guild()) {
            match bus.last::<v1::VoiceSession>(&Subject::VoiceSession { guild }).await {
                Ok(Some(session)) => voice.extend(session.live_channel(now).map(|channel| (guild, channel))),
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, "voice presence unavailable"),
            }
        }
        let private_lanes = self.store.private_lanes().await?.iter().filter_map(|l| l.parse().ok()).collect();
        Ok(Snapshot { persona, settings, memory, experiences, presence: Presence { lanes, voice }, private_lanes, read_at_ms: now })
    }

    /// The self with nothing but the deployment's name and aliases: what a thread speaks
    /// with when the store is unreachable and waiting is worse than a plainer prompt.
    pub fn bare(&self) -> Snapshot {
        let persona = Persona { name: self.bot_name.clone(), aliases: self.aliases.clone(), ..Default::default() };
        Snapshot { persona, read_at_ms: self.clock.now_ms(), ..Default::default() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Experiences age on the source's own clock: moving it past an experience's life takes
    /// the experience out of the next snapshot, with no real hour going by.
    #[tokio::test]
    async fn a_snapshot_ages_experiences_on_the_injected_clock() {
        let db = clankie_testkit::TestDb::create().await;
        let store = Store::connect(db.url()).await.unwrap();
        store.migrate().await.unwrap();
        let clock = clankie_agent::SuspendableClock::new();
        let source = SelfSource::new(store.clone(), None, "Clankie", &[], Duration::from_secs(60)).with_clock(Arc::new(clock.clone()));
        let happened = clock.now_ms();
        let e = v1::Experience {
            experience_id: "e1".into(),
            kind: "talked".into(),
            thread: "room:1:2".into(),
            guild_id: Some(1),
            at_ms: happened,
            ..Default::default()
        };
        store.insert_experience(&e, Duration::from_secs(3600)).await.unwrap();
        let lane: LaneKey = "room:1:2".parse().unwrap();
        assert_eq!(source.snapshot(&lane).await.unwrap().experiences.len(), 1);
        clock.suspend_for(Duration::from_secs(3601));
        let later = source.snapshot(&lane).await.unwrap();
        assert!(later.experiences.is_empty(), "an hour-old experience outlived its hour");
        assert!(later.read_at_ms - happened >= 3_601_000, "the snapshot is stamped by the same clock");
    }
}
