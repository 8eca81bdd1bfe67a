//! The warm-session cache: each lane's session kept in memory between runs, within a byte
//! budget (`CLANKIE_WARM_CACHE_MIB`), the least recently used let go first. A lane let go
//! opens from its stored tree next time, with the same context: the cache saves loading, it
//! never holds anything the store does not.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

/// What the cache weighs an entry by.
pub trait Weighed {
    /// About how many bytes it holds.
    fn weight(&self) -> usize;
}

struct Slot<T> {
    value: T,
    bytes: usize,
    used: u64,
}

/// A map with a byte budget and least-recently-used eviction.
pub struct WarmCache<K, T> {
    budget: usize,
    bytes: usize,
    clock: u64,
    slots: HashMap<K, Slot<T>>,
    by_use: BTreeMap<u64, K>,
}

impl<K: Clone + Eq + Hash, T: Weighed> WarmCache<K, T> {
    /// An empty cache that holds at most `budget` bytes.
    pub fn new(budget: usize) -> WarmCache<K, T> {
        WarmCache { budget, bytes: 0, clock: 0, slots: HashMap::new(), by_use: BTreeMap::new() }
    }

    /// Takes a key's entry out (a run uses it and puts it back when done).
    pub fn take(&mut self, key: &K) -> Option<T> {
        let slot = self.slots.remove(key)?;
        self.by_use.remove(&slot.used);
        self.bytes -= slot.bytes;
        Some(slot.value)
    }

    /// The key's entry, marked used.
    pub fn get_mut(&mut self, key: &K) -> Option<&mut T> {
        let slot = self.slots.get_mut(key)?;
        self.by_use.remove(&slot.used);
        self.clock += 1;
        slot.used = self.clock;
        self.by_use.insert(self.clock, key.clone());
        Some(&mut slot.value)
    }

    /// Keeps `value` as the most recently used, letting the least recently used go until the
    /// cache is within its budget again; returns how many were let go. A value heavier than the
    /// whole budget is not kept.
    pub fn put(&mut self, key: K, value: T) -> usize {
        self.take(&key);
        let bytes = value.weight();
        let mut evicted = 0;
        if bytes > self.budget {
            return evicted;
        }
        while self.bytes + bytes > self.budget {
            let Some((_, oldest)) = self.by_use.pop_first() else { break };
            if let Some(slot) = self.slots.remove(&oldest) {
                self.bytes -= slot.bytes;
                evicted += 1;
            }
        }
        self.clock += 1;
        self.by_use.insert(self.clock, key.clone());
        self.slots.insert(key, Slot { value, bytes, used: self.clock });
        self.bytes += bytes;
        evicted
    }

    /// How many entries it holds.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The bytes its entries weigh, together.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Blob(usize);

    impl Weighed for Blob {
        fn weight(&self) -> usize {
            self.0
        }
    }

    #[test]
    fn cache_budget_5000_lanes_in_16_mib_stay_under_budget_and_keep_the_most_recent() {
        const MIB: usize = 1024 * 1024;
        let mut cache = WarmCache::new(16 * MIB);
        let mut evicted = 0;
        // Sessions of 2 to 10 KiB, about 30 MiB together: the cache can hold about half.
        for lane in 0..5_000usize {
            evicted += cache.put(lane, Blob(2_048 + (lane * 7_919) % 8_192));
            assert!(cache.bytes() <= 16 * MIB, "over budget at lane {lane}: {}", cache.bytes());
        }
        assert!(evicted > 1_000 && cache.len() + evicted == 5_000, "{} kept, {evicted} let go", cache.len());
        assert!(cache.take(&4_999).is_some(), "the newest was let go");
        assert!(cache.take(&0).is_none(), "the oldest was kept");
        // Using a lane keeps it: touched, the oldest survives the next evictions.
        let oldest_kept = (0..5_000).find(|l| cache.get_mut(l).is_some()).expect("something kept");
        for lane in 5_000..5_100 {
            cache.put(lane, Blob(8_192));
        }
        assert!(cache.take(&oldest_kept).is_some(), "a lane just used was let go first");
    }

    #[test]
    fn a_session_heavier_than_the_budget_is_not_kept_and_taking_frees_its_bytes() {
        let mut cache = WarmCache::new(100);
        assert_eq!(cache.put("big", Blob(101)), 0);
        assert!(cache.is_empty());
        cache.put("a", Blob(60));
        assert_eq!(cache.bytes(), 60);
        cache.put("a", Blob(30));
        assert_eq!((cache.len(), cache.bytes()), (1, 30), "a put replaces");
        cache.take(&"a");
        assert_eq!(cache.bytes(), 0);
    }
}
