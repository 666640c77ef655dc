//! The in-memory cache on the hot path: callers by key hash, with each key's request-rate
//! window. (Enforcement modes are cached beside the decisions, in the decision service.)
//!
//! An authorization should read nothing from the database. The caller behind a key is
//! cached until an operator command changes keys (it bumps `keys_generation` in the
//! settings table; the server polls it every 250 ms and empties the cache). Each cached
//! caller carries its key's rate window ([`Window`]), so that a request finds both in one
//! lookup; emptying the cache keeps the windows aside and gives each back when its key is
//! cached again, so that a key change does not reset anybody's rate.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use crate::http::rate_limit::Window;
use crate::model::Caller;

/// The most callers kept; past it the cache starts over.
const MAX_CALLERS: usize = 1_000_000;

/// A cached caller and its key's rate window (locked on its own, under the map's read
/// lock: requests of different keys never wait for each other).
struct Cached<S> {
    caller: Caller,
    /// For an agent key: its agent's slot, so that an authorization locks it without a
    /// lookup in the map of every agent.
    agent_slot: Option<S>,
    window: Mutex<Window>,
}

struct Callers<S> {
    /// Bumped at every clear: a load that began before a clear must not fill the cache.
    epoch: u64,
    map: HashMap<[u8; 32], Cached<S>>,
    /// The windows of the callers that clears forgot, each given back when its key is
    /// cached again; a clear drops those that no longer count (see [`KeyCache::clear`]).
    set_aside: HashMap<[u8; 32], Window>,
    /// One copy of each organization id and policy version that cached callers share:
    /// with 100,000 agent keys of one organization, two strings instead of 200,000.
    shared: HashSet<Arc<str>>,
}

impl<S> Default for Callers<S> {
    fn default() -> Self {
        Self {
            epoch: 0,
            map: HashMap::new(),
            set_aside: HashMap::new(),
            shared: HashSet::new(),
        }
    }
}

impl<S> Callers<S> {
    /// The shared copy of `text`.
    fn share(&mut self, text: &Arc<str>) -> Arc<str> {
        if let Some(known) = self.shared.get(text) {
            return Arc::clone(known);
        }
        self.shared.insert(Arc::clone(text));
        Arc::clone(text)
    }
}

/// Callers by key hash, each with what the server keeps beside it (`S`: for an agent
/// key, its agent's slot of the decision service, which this layer holds without knowing).
/// Unknown keys are never cached.
pub struct KeyCache<S = ()> {
    inner: Arc<RwLock<Callers<S>>>,
    /// How many server processes share the database (0 or 1: this one alone). Each admits
    /// its share of a key's rate, so that the key's rate holds across all of them.
    peers: Arc<AtomicU32>,
}

/// This process's share of a key's rate of `per_sec` when `peers` processes serve: the
/// rate divided among them, rounded up (so never 0).
pub fn share(per_sec: u32, peers: u32) -> u32 {
    per_sec.div_ceil(peers.max(1))
}

impl<S> Default for KeyCache<S> {
    fn default() -> Self {
        Self {
            inner: Arc::default(),
            peers: Arc::default(),
        }
    }
}

impl<S> Clone for KeyCache<S> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
            peers: Arc::clone(&self.peers),
        }
    }
}

impl<S: Clone> KeyCache<S> {
    /// Records how many server processes share the database (from their heartbeats).
    pub fn set_peers(&self, peers: u32) {
        self.peers.store(peers, Ordering::Relaxed);
    }

    /// The rate this process admits for a key of `per_sec`.
    fn per_process(&self, per_sec: u32) -> u32 {
        share(per_sec, self.peers.load(Ordering::Relaxed))
    }

    /// The cached caller of `hash`, with this request counted against its key's rate at
    /// `now_ms` (`Err(retry_after_secs)` if over: see [`Window::admit`]); on a miss, the
    /// cache's epoch, to pass to [`KeyCache::insert`] with the caller once loaded.
    pub fn admit(&self, hash: &[u8; 32], now_ms: i64) -> Result<Admitted<S>, u64> {
        let inner = self.inner.read().unwrap_or_else(|p| p.into_inner());
        let Some(cached) = inner.map.get(hash) else {
            return Err(inner.epoch);
        };
        let rate = cached
            .window
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .admit(self.per_process(cached.caller.rate_per_sec), now_ms);
        Ok(Admitted {
            caller: cached.caller.clone(),
            agent_slot: cached.agent_slot.clone(),
            rate,
        })
    }

    /// Caches `caller`, loaded while the cache was at `epoch`, and counts this request
    /// against its rate at `now_ms`. If the cache was cleared since `epoch` the caller is
    /// not cached (it may be stale), but the request is still counted, in the window set
    /// aside for its key.
    pub fn insert(
        &self,
        epoch: u64,
        mut caller: Caller,
        agent_slot: Option<S>,
        now_ms: i64,
    ) -> Admitted<S> {
        let mut inner = self.inner.write().unwrap_or_else(|p| p.into_inner());
        let hash = caller.key_hash;
        if inner.epoch != epoch {
            let per_sec = self.per_process(caller.rate_per_sec);
            let window = inner.set_aside.entry(hash).or_default();
            let rate = window.admit(per_sec, now_ms);
            return Admitted {
                caller,
                agent_slot,
                rate,
            };
        }
        if inner.map.len() >= MAX_CALLERS {
            // Past the bound the cache starts over; windows reset with it (a million keys
            // in use at once is not a load this server is sized for).
            inner.map.clear();
            inner.shared.clear();
            inner.set_aside.clear();
        }
        caller.org_id = inner.share(&caller.org_id);
        caller.policy_version = inner.share(&caller.policy_version);
        // Another request of the same key may have cached it meanwhile: count in its window.
        let mut window = match inner.map.remove(&hash) {
            Some(cached) => cached
                .window
                .into_inner()
                .unwrap_or_else(|p| p.into_inner()),
            None => inner.set_aside.remove(&hash).unwrap_or_default(),
        };
        let rate = window.admit(self.per_process(caller.rate_per_sec), now_ms);
        inner.map.insert(
            hash,
            Cached {
                caller: caller.clone(),
                agent_slot: agent_slot.clone(),
                window: Mutex::new(window),
            },
        );
        Admitted {
            caller,
            agent_slot,
            rate,
        }
    }

    /// Forgets every caller (keys were revoked or changed); their windows are set aside,
    /// with those set aside before that still count: a window whose last second is two
    /// or more before the newest one's has nothing left to count and is dropped.
    pub fn clear(&self) {
        let mut inner = self.inner.write().unwrap_or_else(|p| p.into_inner());
        inner.epoch += 1;
        let mut windows = std::mem::take(&mut inner.set_aside);
        for (hash, cached) in std::mem::take(&mut inner.map) {
            let window = cached
                .window
                .into_inner()
                .unwrap_or_else(|p| p.into_inner());
            windows.insert(hash, window);
        }
        let newest = windows.values().map(Window::last_second).max();
        if let Some(newest) = newest {
            windows.retain(|_, window| window.last_second() > newest - 2);
        }
        inner.set_aside = windows;
        inner.shared.clear();
    }
}

/// A caller found or loaded, and whether its request is within its key's rate.
#[derive(Debug)]
pub struct Admitted<S> {
    /// The caller.
    pub caller: Caller,
    /// For an agent key, its agent's slot.
    pub agent_slot: Option<S>,
    /// `Err(retry_after_secs)` when the request is over the key's rate.
    pub rate: Result<(), u64>,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::model::Env;

    fn caller(byte: u8) -> Caller {
        Caller {
            key_hash: [byte; 32],
            org_id: "org_a".into(),
            env: Env::Sandbox,
            agent: None,
            rate_per_sec: 100,
            policy_version: "pol_2026-11-22.1".into(),
        }
    }

    /// Caches `caller` as a request that missed at `now_ms` would.
    fn load(cache: &KeyCache, caller: Caller, now_ms: i64) -> Admitted<()> {
        let epoch = cache.admit(&caller.key_hash, now_ms).unwrap_err();
        cache.insert(epoch, caller, None, now_ms)
    }

    fn rate(cache: &KeyCache, byte: u8, now_ms: i64) -> Result<(), u64> {
        cache.admit(&[byte; 32], now_ms).unwrap().rate
    }

    #[test]
    fn a_load_that_straddles_a_clear_is_not_cached() {
        let cache = KeyCache::default();
        let epoch = cache.admit(&[1; 32], 0).unwrap_err();
        cache.clear();
        cache.insert(epoch, caller(1), None, 0);
        assert!(cache.admit(&[1; 32], 0).is_err());
        load(&cache, caller(1), 0);
        assert!(cache.admit(&[1; 32], 0).is_ok());
    }

    /// Each key has its own window, counted on every request, hit or miss, and refusing
    /// past its caller's rate.
    #[test]
    fn each_key_is_counted_against_its_own_rate() {
        let cache = KeyCache::default();
        let mut slow = caller(1);
        slow.rate_per_sec = 3;
        assert!(load(&cache, slow, 10_000).rate.is_ok());
        assert!(load(&cache, caller(2), 10_000).rate.is_ok());
        assert!(rate(&cache, 1, 10_100).is_ok());
        assert!(rate(&cache, 1, 10_200).is_ok());
        assert_eq!(rate(&cache, 1, 10_300), Err(2));
        // Key 2 (100 a second) is not touched by key 1's load.
        for _ in 0..50 {
            assert!(rate(&cache, 2, 10_300).is_ok());
        }
        assert!(rate(&cache, 1, 12_000).is_ok());
    }

    /// With N processes on one database, each admits its share of a key's rate (rounded
    /// up): a key of 10 a second gets 5 on each of two processes, 4 on each of three; alone
    /// (or before any heartbeat) it gets all 10.
    #[test]
    fn each_process_admits_its_share_of_a_keys_rate() {
        let admitted = |peers: u32| {
            let cache = KeyCache::default();
            if peers > 0 {
                cache.set_peers(peers);
            }
            let mut key = caller(1);
            key.rate_per_sec = 10;
            let mut n = u32::from(load(&cache, key, 50_000).rate.is_ok());
            while rate(&cache, 1, 50_000).is_ok() {
                n += 1;
            }
            n
        };
        assert_eq!(admitted(0), 10);
        assert_eq!(admitted(1), 10);
        assert_eq!(admitted(2), 5);
        assert_eq!(admitted(3), 4);
        assert_eq!(share(1, 4), 1);
        assert_eq!(share(100, 3), 34);
    }

    /// An operator's key change empties the cache; a key at its rate stays at it.
    #[test]
    fn a_clear_does_not_reset_a_keys_rate() {
        let cache = KeyCache::default();
        let mut busy = caller(1);
        busy.rate_per_sec = 2;
        assert!(load(&cache, busy.clone(), 5_000).rate.is_ok());
        assert!(rate(&cache, 1, 5_100).is_ok());
        assert_eq!(rate(&cache, 1, 5_200), Err(2));
        cache.clear();
        // Loaded again after the clear: the window set aside comes back with it.
        assert_eq!(load(&cache, busy.clone(), 5_300).rate, Err(2));
        // A load that straddles a clear is not cached, but is still counted.
        cache.clear();
        let epoch = cache.admit(&[1; 32], 5_400).unwrap_err();
        cache.clear();
        assert_eq!(cache.insert(epoch, busy.clone(), None, 5_400).rate, Err(2));
        assert_eq!(load(&cache, busy.clone(), 5_500).rate, Err(1));
        // The window's seconds pass as usual.
        assert!(rate(&cache, 1, 7_000).is_ok());
    }

    /// Windows set aside are kept across clears only while they still count.
    #[test]
    fn windows_set_aside_are_dropped_once_they_no_longer_count() {
        let cache = KeyCache::default();
        load(&cache, caller(1), 1_000);
        load(&cache, caller(2), 5_000);
        cache.clear();
        let held = |cache: &KeyCache| {
            let inner = cache.inner.read().unwrap();
            let mut keys: Vec<u8> = inner.set_aside.keys().map(|k| k[0]).collect();
            keys.sort_unstable();
            keys
        };
        // Key 1's last request, at second 1, no longer weighs at second 5.
        assert_eq!(held(&cache), vec![2]);
        load(&cache, caller(3), 5_500);
        cache.clear();
        // Key 2 was not seen since the first clear, but its window still counts.
        assert_eq!(held(&cache), vec![2, 3]);
        load(&cache, caller(2), 5_600);
        assert_eq!(held(&cache), vec![3]);
    }

    /// Callers of one organization, loaded separately (each with its own strings), share
    /// one copy of the organization id and policy version once cached; a different
    /// organization keeps its own, and a clear lets go of them.
    #[test]
    fn cached_callers_share_their_organizations_strings() {
        let cache = KeyCache::default();
        let mut other = caller(3);
        other.org_id = "org_b".into();
        for c in [caller(1), caller(2), other] {
            load(&cache, c, 0);
        }
        let get = |byte: u8| cache.admit(&[byte; 32], 0).unwrap().caller;
        let (one, two, three) = (get(1), get(2), get(3));
        assert!(Arc::ptr_eq(&one.org_id, &two.org_id));
        assert!(Arc::ptr_eq(&one.policy_version, &two.policy_version));
        assert!(Arc::ptr_eq(&one.policy_version, &three.policy_version));
        assert_eq!(&*three.org_id, "org_b");
        assert!(!Arc::ptr_eq(&one.org_id, &three.org_id));
        cache.clear();
        assert_eq!(
            Arc::strong_count(&one.org_id),
            2,
            "ours and two's, not the cache's"
        );
    }

    /// A caller's description leaves out its key hash; its agent's slot (the agent's
    /// mandate and history) is kept beside it, not in it.
    #[test]
    fn a_callers_debug_leaves_its_agents_state_out() {
        let c = caller(1);
        let text = format!("{c:?}");
        assert!(text.contains("org_a"), "{text}");
        for hidden in ["agent_slot", "AgentState", "history", "key_hash"] {
            assert!(!text.contains(hidden), "{hidden} in {text}");
        }
    }
}
