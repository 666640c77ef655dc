//! Per-key request rates: a sliding-window counter per key, in memory.
//!
//! The window estimate is `previous second's count × the part of it still in the window
//! (rounded up) + this second's count`. One key's load never touches another key's counter.
//!
//! A key's counter matters for two seconds after its last request. The counters live in
//! two maps, `current` and `previous`; every two seconds `current` becomes `previous` and
//! the old `previous` (keys idle for two seconds or more) is dropped whole. A request
//! finds its key in `current`, or moves it there from `previous`. No request ever scans
//! the map: forgetting 100,000 idle keys costs one deallocation, not a sweep under the
//! lock every request shares.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::mem;
use std::sync::{Arc, Mutex};

/// Counters per key hash.
#[derive(Default, Clone)]
pub struct RateLimiter {
    inner: Arc<Mutex<Windows>>,
}

/// Seconds between rotations: a window reads its key's last two seconds, so a key not
/// seen for this long has nothing left to count.
const ROTATE_EVERY_SECS: i64 = 2;

#[derive(Default)]
struct Windows {
    /// Keys seen since the last rotation.
    current: HashMap<[u8; 32], Window>,
    /// Keys seen in the rotation period before, not since.
    previous: HashMap<[u8; 32], Window>,
    /// The second of the last rotation.
    rotated_at: i64,
}

impl Windows {
    /// Rotates the maps if `second` is a period or more past the last rotation, and
    /// returns the keys it forgets, for the caller to free once the lock is released.
    /// A key carried into `previous` after a quiet spell may be stale; its window resets
    /// itself when read, and the next rotation forgets it.
    fn rotate(&mut self, second: i64) -> HashMap<[u8; 32], Window> {
        if second < self.rotated_at + ROTATE_EVERY_SECS {
            return HashMap::new();
        }
        self.rotated_at = second;
        // Sized for as many keys as the last period saw: no rehash while it fills.
        let next = HashMap::with_capacity(self.current.len());
        let previous = mem::replace(&mut self.current, next);
        mem::replace(&mut self.previous, previous)
    }

    /// The window of `key`, moved into `current` if it was only in `previous`.
    fn window(&mut self, key: &[u8; 32]) -> &mut Window {
        match self.current.entry(*key) {
            Entry::Occupied(seen) => seen.into_mut(),
            Entry::Vacant(new) => new.insert(self.previous.remove(key).unwrap_or_default()),
        }
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct Window {
    second: i64,
    current: u32,
    previous: u32,
}

impl RateLimiter {
    /// Counts a request of `key` at `now_ms` against `per_sec`; `Err(retry_after_secs)`
    /// when it is over.
    pub fn check(&self, key: &[u8; 32], per_sec: u32, now_ms: i64) -> Result<(), u64> {
        let second = now_ms.div_euclid(1000);
        let into = now_ms.rem_euclid(1000);
        let mut windows = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let forgotten = windows.rotate(second);
        let verdict = windows.window(key).admit(per_sec, second, into);
        drop(windows);
        drop(forgotten);
        verdict
    }
}

impl Window {
    /// Counts one request at `into` ms of `second` if the window has room for it.
    fn admit(&mut self, per_sec: u32, second: i64, into: i64) -> Result<(), u64> {
        if self.second != second {
            self.previous = if self.second == second - 1 {
                self.current
            } else {
                0
            };
            self.current = 0;
            self.second = second;
        }
        let weighted = (u64::from(self.previous) * u64::try_from(1000 - into).unwrap_or(0))
            .div_ceil(1000)
            + u64::from(self.current);
        if weighted >= u64::from(per_sec) {
            // In one second this second's count becomes the previous one, still weighing
            // (1000 - into)/1000; if that alone is over, the window clears only in two.
            let next_second =
                (u64::from(self.current) * u64::try_from(1000 - into).unwrap_or(0)).div_ceil(1000);
            return Err(if next_second >= u64::from(per_sec) {
                2
            } else {
                1
            });
        }
        self.current = self.current.saturating_add(1);
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn key(i: u32) -> [u8; 32] {
        let mut k = [0u8; 32];
        k[..4].copy_from_slice(&i.to_le_bytes());
        k
    }

    /// One request from each of `keys` at `now_ms`, each admitted.
    fn admit(limiter: &RateLimiter, keys: std::ops::Range<u32>, now_ms: i64) {
        for i in keys {
            assert!(limiter.check(&key(i), 10, now_ms).is_ok(), "key {i}");
        }
    }

    fn keys_held(limiter: &RateLimiter) -> usize {
        let w = limiter.inner.lock().unwrap();
        w.current.len() + w.previous.len()
    }

    #[test]
    fn idle_keys_are_forgotten_within_two_rotations() {
        let limiter = RateLimiter::default();
        admit(&limiter, 0..10_000, 5_000);
        assert_eq!(keys_held(&limiter), 10_000);
        // Two seconds on, the ten thousand are the previous period's keys...
        admit(&limiter, 10_000..10_001, 7_000);
        assert_eq!(keys_held(&limiter), 10_001);
        // ...and two more seconds on, idle for two seconds or more, they are gone.
        admit(&limiter, 10_001..10_002, 9_000);
        assert_eq!(keys_held(&limiter), 2);
    }

    #[test]
    fn a_key_keeps_its_count_across_a_rotation() {
        let limiter = RateLimiter::default();
        let (a, b) = ([1u8; 32], [2u8; 32]);
        assert!(limiter.check(&b, 5, 6_000).is_ok());
        for _ in 0..5 {
            assert!(limiter.check(&a, 5, 7_900).is_ok());
        }
        // 8_100 rotates the maps; a's five requests of second 7 still weigh 90 %.
        assert_eq!(limiter.check(&a, 5, 8_100), Err(1));
        // Active in every period, b is carried forward each time; a, idle since second
        // 8, is forgotten.
        for second in 8..20 {
            assert!(limiter.check(&b, 5, second * 1_000).is_ok());
        }
        assert_eq!(keys_held(&limiter), 1);
        assert!(limiter.inner.lock().unwrap().current.contains_key(&b));
    }

    #[test]
    fn limits_each_key_on_its_own() {
        let limiter = RateLimiter::default();
        let (a, b) = ([1u8; 32], [2u8; 32]);
        for _ in 0..5 {
            assert!(limiter.check(&a, 5, 10_000).is_ok());
        }
        assert_eq!(limiter.check(&a, 5, 10_500), Err(1));
        assert!(limiter.check(&b, 5, 10_500).is_ok());
        // Half a second into the next second, half of the previous count still weighs.
        assert!(limiter.check(&a, 5, 11_500).is_ok());
        assert!(limiter.check(&a, 5, 11_500).is_ok());
        assert_eq!(limiter.check(&a, 5, 11_500), Err(1));
        // Two seconds later the window is empty.
        assert!(limiter.check(&a, 5, 13_000).is_ok());
        // A burst at the very start of a second still weighs fully one second later, so
        // Retry-After says two.
        let c = [3u8; 32];
        for _ in 0..5 {
            assert!(limiter.check(&c, 5, 20_000).is_ok());
        }
        assert_eq!(limiter.check(&c, 5, 20_000), Err(2));
        assert_eq!(limiter.check(&c, 5, 21_000), Err(1));
        assert!(limiter.check(&c, 5, 22_000).is_ok());
    }
}
