//! Gateway shards shared across replicas, and the identify queue they share.
//!
//! Each replica claims shards by lease in the `clankie_gateway_shards` key-value bucket: the
//! entry `shard.<id>` names its owner and when the claim runs out, and carries the shard's
//! session as of its last stored message, so whoever claims it next resumes instead of
//! identifying. Every write is a compare-and-set on the entry's revision, which fences a
//! replica that lost its claim: its next write fails and it stops the shard. A replica
//! announces itself under `replica.<name>`; each aims at its fair share of the shards (the
//! total over the replicas alive), claims free or expired ones up to it, and hands back any
//! beyond it.
//!
//! Identifies are spaced as Discord's `max_concurrency` asks: one per bucket
//! (`shard_id % max_concurrency`) per 5 s, across all replicas, through the entry
//! `identify.<bucket>` (twilight's gateway queue, shared).

use std::time::Duration;

use clankie_bus::{KeyValue, now_ms};
use futures::StreamExt;
use serde::{Deserialize, Serialize};

use crate::session::SavedSession;

/// The bucket of shard claims, replica presence and identify slots.
pub const SHARDS_BUCKET: &str = "clankie_gateway_shards";

/// The entry naming the one replica that speaks REST to Discord (see `rest.rs`).
pub const REST_OWNER_KEY: &str = "rest.owner";

/// Discord's spacing of identifies in one bucket, with a margin for the way there: the slot
/// is taken before the identify is sent, and on a loaded machine one identify can leave a
/// quarter of a second later than the next (a fresh-clone CI run saw it once with 250 ms).
const IDENTIFY_SPACING_MS: i64 = 5_600;

/// One shard's claim, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    pub owner: String,
    /// Raised by every new claim: which tenure wrote the session.
    pub epoch: u64,
    /// Past this (wall clock, ms) the claim is free to take; 0 when handed back.
    pub expires_ms: i64,
    /// The shard's session as of its last stored message.
    pub session: Option<SavedSession>,
    /// The REST owner's requests that still count at Discord, as of its last write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spoken: Option<Spoken>,
}

/// What a REST holder's requests still count for at Discord, written with each renewal and
/// when it hands the lease back, so the next holder's first requests stay inside the same
/// limits: wall clock ms, since the next holder is another process.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spoken {
    /// When each request of the last second was answered (or, in flight, the moment written).
    pub answered_ms: Vec<i64>,
    /// Per channel, when each message create of the last create span was answered.
    pub creates: Vec<(u64, Vec<i64>)>,
}

/// What a new REST holder learns of the tenure before it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RestHandover {
    /// The previous holder, if another replica.
    pub previous: Option<String>,
    /// Its record as last written (complete when it handed the lease back).
    pub spoken: Option<Spoken>,
    /// When it lost the lease without handing it back: its lease's end, up to which it may
    /// have sent requests its record does not hold.
    pub unclean_end_ms: Option<i64>,
}

/// A claim this replica holds, with the revision its next write must match.
#[derive(Debug, Clone)]
pub struct Held {
    pub claim: Claim,
    pub revision: u64,
}

#[derive(Serialize, Deserialize)]
struct Presence {
    expires_ms: i64,
}

/// Why a write to the bucket did not happen.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// Someone else wrote the entry since: the claim is lost.
    #[error("shard {0}: the claim was taken")]
    Lost(u32),
    /// Someone else took the REST ownership.
    #[error("the REST ownership was taken")]
    RestLost,
    #[error("shard bucket: {0}")]
    Bucket(String),
}

/// This replica's view of the shard claims.
#[derive(Clone)]
pub struct ShardLeases {
    kv: KeyValue,
    replica: String,
    ttl: Duration,
}

fn shard_key(shard: u32) -> String {
    format!("shard.{shard}")
}

fn bucket_error(e: impl std::fmt::Display) -> LeaseError {
    LeaseError::Bucket(e.to_string())
}

impl ShardLeases {
    /// Claims in `kv` for `replica`, each lasting `ttl` unrenewed.
    pub fn new(kv: KeyValue, replica: &str, ttl: Duration) -> ShardLeases {
        ShardLeases { kv, replica: replica.to_owned(), ttl }
    }

    fn expiry(&self) -> i64 {
        now_ms() + self.ttl.as_millis() as i64
    }

    /// The stored claim of a shard, if any, with its revision.
    pub async fn read(&self, shard: u32) -> Result<Option<Held>, LeaseError> {
        self.read_key(&shard_key(shard)).await
    }

    async fn read_key(&self, key: &str) -> Result<Option<Held>, LeaseError> {
        let Some(entry) = self.kv.entry(key).await.map_err(bucket_error)? else { return Ok(None) };
        if entry.operation != clankie_bus::KeyValueOperation::Put {
            return Ok(None);
        }
        let claim = serde_json::from_slice(&entry.value).map_err(bucket_error)?;
        Ok(Some(Held { claim, revision: entry.revision }))
    }

    /// Claims a shard nobody holds (never claimed, handed back, or expired, or this replica's
    /// own from before a restart); the claim keeps the shard's last session.
    pub async fn claim(&self, shard: u32) -> Result<Option<Held>, LeaseError> {
        self.claim_key(&shard_key(shard)).await
    }

    /// Claims the REST ownership ([`REST_OWNER_KEY`]) on the same terms as a shard.
    /// With the claim comes what the previous holder's requests still count for at Discord.
    pub async fn claim_rest(&self) -> Result<Option<(Held, RestHandover)>, LeaseError> {
        let (claimed, before) = self.claim_key_after(REST_OWNER_KEY).await?;
        let Some(held) = claimed else { return Ok(None) };
        let handover = match before {
            Some(b) if b.claim.owner != self.replica => RestHandover {
                previous: Some(b.claim.owner),
                unclean_end_ms: (b.claim.expires_ms != 0).then_some(b.claim.expires_ms),
                spoken: b.claim.spoken,
            },
            _ => RestHandover::default(),
        };
        Ok(Some((held, handover)))
    }

    /// Renews the REST ownership for another TTL with the holder's record of what it spoke;
    /// [`LeaseError::RestLost`] when another took it.
    pub async fn renew_rest(&self, held: &mut Held, spoken: Spoken) -> Result<(), LeaseError> {
        held.claim.spoken = Some(spoken);
        self.rewrite_key(REST_OWNER_KEY, LeaseError::RestLost, held, self.expiry(), None).await
    }

    /// Hands the REST ownership back, for another replica to take at once, with the holder's
    /// complete record of what it spoke.
    pub async fn release_rest(&self, held: &mut Held, spoken: Spoken) -> Result<(), LeaseError> {
        held.claim.spoken = Some(spoken);
        self.rewrite_key(REST_OWNER_KEY, LeaseError::RestLost, held, 0, None).await
    }

    /// Who owns REST now, if anyone's claim is unexpired.
    pub async fn rest_owner(&self) -> Result<Option<String>, LeaseError> {
        Ok(self.read_key(REST_OWNER_KEY).await?.filter(|h| h.claim.expires_ms > now_ms()).map(|h| h.claim.owner))
    }

    async fn claim_key(&self, key: &str) -> Result<Option<Held>, LeaseError> {
        Ok(self.claim_key_after(key).await?.0)
    }

    /// Claims `key`, with the entry the claim replaced.
    async fn claim_key_after(&self, key: &str) -> Result<(Option<Held>, Option<Held>), LeaseError> {
        let current = self.read_key(key).await?;
        let (epoch, session) = match &current {
            Some(h) if h.claim.owner != self.replica && h.claim.expires_ms > now_ms() => return Ok((None, current)),
            Some(h) => (h.claim.epoch + 1, h.claim.session.clone()),
            None => (1, None),
        };
        let claim = Claim { owner: self.replica.clone(), epoch, expires_ms: self.expiry(), session, spoken: None };
        let value = serde_json::to_vec(&claim).map_err(bucket_error)?;
        let written = match &current {
            Some(h) => self.kv.update(key, value.into(), h.revision).await.map_err(|e| e.to_string()),
            None => self.kv.create(key, value.into()).await.map_err(|e| e.to_string()),
        };
        // Another replica's write got in first: not ours this time.
        Ok((written.ok().map(|revision| Held { claim, revision }), current))
    }

    /// Renews a held claim for another TTL, storing `session` if given; fails with
    /// [`LeaseError::Lost`] when someone else wrote the entry since.
    pub async fn renew(&self, shard: u32, held: &mut Held, session: Option<SavedSession>) -> Result<(), LeaseError> {
        self.rewrite(shard, held, self.expiry(), session).await
    }

    /// Hands a claim back: it expires now and keeps `session`, for the next holder to resume.
    pub async fn release(&self, shard: u32, held: &mut Held, session: Option<SavedSession>) -> Result<(), LeaseError> {
        self.rewrite(shard, held, 0, session).await
    }

    /// Writes the held claim again with a new expiry (and session, if given), fenced by its revision.
    async fn rewrite(&self, shard: u32, held: &mut Held, expires_ms: i64, session: Option<SavedSession>) -> Result<(), LeaseError> {
        self.rewrite_key(&shard_key(shard), LeaseError::Lost(shard), held, expires_ms, session).await
    }

    async fn rewrite_key(
        &self,
        key: &str,
        lost: LeaseError,
        held: &mut Held,
        expires_ms: i64,
        session: Option<SavedSession>,
    ) -> Result<(), LeaseError> {
        let mut claim = held.claim.clone();
        claim.expires_ms = expires_ms;
        if session.is_some() {
            claim.session = session;
        }
        let value = serde_json::to_vec(&claim).map_err(bucket_error)?;
        match self.kv.update(key, value.into(), held.revision).await {
            Ok(revision) => {
                *held = Held { claim, revision };
                Ok(())
            }
            Err(e) if e.kind() == clankie_bus::KeyValueUpdateErrorKind::WrongLastRevision => Err(lost),
            Err(e) => {
                // A write that timed out may have landed or not: read back to tell a lost claim
                // from a bus that is away.
                match self.read_key(key).await {
                    // It landed: the entry is this write.
                    Ok(Some(now)) if now.claim == claim => {
                        *held = now;
                        Ok(())
                    }
                    Ok(Some(now)) if now.revision != held.revision => Err(lost),
                    _ => Err(bucket_error(e)),
                }
            }
        }
    }

    /// Says this replica is alive for another TTL.
    pub async fn announce(&self) -> Result<(), LeaseError> {
        let value = serde_json::to_vec(&Presence { expires_ms: self.expiry() }).map_err(bucket_error)?;
        self.kv.put(format!("replica.{}", clankie_bus::kv_key(&self.replica)), value.into()).await.map_err(bucket_error)?;
        Ok(())
    }

    /// Gateway replicas alive now (this one included once it has announced itself).
    pub async fn replicas_alive(&self) -> Result<usize, LeaseError> {
        let mut keys = self.kv.keys().await.map_err(bucket_error)?;
        let now = now_ms();
        let mut alive = 0;
        while let Some(key) = keys.next().await {
            let key = key.map_err(bucket_error)?;
            if !key.starts_with("replica.") {
                continue;
            }
            if let Ok(Some(value)) = self.kv.get(&key).await
                && serde_json::from_slice::<Presence>(&value).is_ok_and(|p| p.expires_ms > now)
            {
                alive += 1;
            }
        }
        Ok(alive)
    }
}

/// The shards a replica should hold when `replicas` share `total`: the total over the
/// replicas, rounded up, so every shard has a holder.
pub fn fair_share(total: u32, replicas: usize) -> u32 {
    let replicas = u32::try_from(replicas.max(1)).unwrap_or(u32::MAX);
    total.div_ceil(replicas)
}

/// Twilight's identify queue, shared by every replica through the bucket.
#[derive(Clone)]
pub struct SharedIdentifyQueue {
    kv: KeyValue,
    max_concurrency: u32,
}

impl SharedIdentifyQueue {
    /// A queue over `kv` allowing `max_concurrency` identifies per 5 s.
    pub fn new(kv: KeyValue, max_concurrency: u32) -> SharedIdentifyQueue {
        SharedIdentifyQueue { kv, max_concurrency: max_concurrency.max(1) }
    }

    /// Waits for the bucket's next identify slot and takes it.
    async fn take_slot(kv: KeyValue, bucket: u32) {
        let key = format!("identify.{bucket}");
        loop {
            let now = now_ms();
            let wait_ms = match kv.entry(&key).await {
                Ok(None) => match kv.create(&key, now.to_string().into_bytes().into()).await {
                    Ok(_) => return,
                    Err(_) => 50,
                },
                Ok(Some(entry)) => {
                    let last = std::str::from_utf8(&entry.value).ok().and_then(|v| v.parse::<i64>().ok()).unwrap_or(0);
                    if now - last >= IDENTIFY_SPACING_MS {
                        match kv.update(&key, now.to_string().into_bytes().into(), entry.revision).await {
                            Ok(_) => return,
                            Err(_) => 50,
                        }
                    } else {
                        IDENTIFY_SPACING_MS - (now - last)
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "identify slot unreadable; trying again");
                    1_000
                }
            };
            tokio::time::sleep(Duration::from_millis(wait_ms.max(10) as u64)).await;
        }
    }
}

impl twilight_gateway::queue::Queue for SharedIdentifyQueue {
    fn enqueue(&self, shard: u32) -> tokio::sync::oneshot::Receiver<()> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let (kv, bucket) = (self.kv.clone(), shard % self.max_concurrency);
        tokio::spawn(async move {
            SharedIdentifyQueue::take_slot(kv, bucket).await;
            let _ = tx.send(());
        });
        rx
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fair_share_leaves_no_shard_without_a_holder() {
        assert_eq!(fair_share(4, 2), 2);
        assert_eq!(fair_share(4, 1), 4);
        assert_eq!(fair_share(5, 2), 3);
        assert_eq!(fair_share(1, 3), 1);
        assert_eq!(fair_share(4, 0), 4);
    }
}
