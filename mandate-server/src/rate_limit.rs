//! Per-key request rates: a sliding-window counter per key, in memory.
//!
//! The window estimate is `previous second's count × the part of it still in the window
//! (rounded up) + this second's count`. One key's load never touches another key's counter.
//!
//! Keys idle for two seconds are forgotten in a sweep once the map passes a size, and the
//! next sweep waits until the map has doubled: with more keys active at once than the
//! first mark (100,000 agents each calling every second), a sweep that frees nothing
//! would otherwise rescan the whole map on every request, under the lock all share.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Counters per key hash.
#[derive(Default, Clone)]
pub struct RateLimiter {
    inner: Arc<Mutex<Windows>>,
}

/// The map sweeps itself once it holds more keys than this.
const SWEEP_ABOVE: usize = 100_000;

#[derive(Default)]
struct Windows {
    by_key: HashMap<[u8; 32], Window>,
    /// Sweep when `by_key` holds more than this (0: [`SWEEP_ABOVE`]).
    sweep_above: usize,
    /// Sweeps run so far (read by tests).
    sweeps: u64,
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
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let windows = &mut *guard;
        if windows.by_key.len() > windows.sweep_above.max(SWEEP_ABOVE) {
            // Forget idle keys rather than grow without bound; what stays sets the next mark.
            windows.by_key.retain(|_, w| w.second >= second - 1);
            windows.sweep_above = windows.by_key.len().saturating_mul(2);
            windows.sweeps += 1;
        }
        let window = windows.by_key.entry(*key).or_default();
        if window.second != second {
            window.previous = if window.second == second - 1 {
                window.current
            } else {
                0
            };
            window.current = 0;
            window.second = second;
        }
        let weighted = (u64::from(window.previous) * u64::try_from(1000 - into).unwrap_or(0))
            .div_ceil(1000)
            + u64::from(window.current);
        if weighted >= u64::from(per_sec) {
            // In one second this second's count becomes the previous one, still weighing
            // (1000 - into)/1000; if that alone is over, the window clears only in two.
            let next_second = (u64::from(window.current) * u64::try_from(1000 - into).unwrap_or(0))
                .div_ceil(1000);
            return Err(if next_second >= u64::from(per_sec) {
                2
            } else {
                1
            });
        }
        window.current = window.current.saturating_add(1);
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

    fn sweeps_and_keys(limiter: &RateLimiter) -> (u64, usize) {
        let w = limiter.inner.lock().unwrap();
        (w.sweeps, w.by_key.len())
    }

    #[test]
    fn a_sweep_that_frees_nothing_is_not_repeated_on_every_request() {
        let limiter = RateLimiter::default();
        let active = u32::try_from(SWEEP_ABOVE).unwrap() + 1;
        admit(&limiter, 0..active, 5_000);
        // Every key is active: the first sweep over the mark frees nothing, and the
        // next thousand requests (new keys too) must not scan the map again.
        admit(&limiter, active..active + 1_000, 5_000);
        let (sweeps, keys) = sweeps_and_keys(&limiter);
        assert_eq!(sweeps, 1);
        assert_eq!(keys, SWEEP_ABOVE + 1_001);
    }

    #[test]
    fn idle_keys_are_forgotten_once_the_map_passes_its_mark() {
        let limiter = RateLimiter::default();
        let many = u32::try_from(SWEEP_ABOVE).unwrap() + 1;
        admit(&limiter, 0..many, 5_000);
        // Two seconds later every one of them is idle; one more request sweeps them.
        admit(&limiter, many..many + 1, 7_000);
        assert_eq!(sweeps_and_keys(&limiter), (1, 1));
        // The mark never drops below SWEEP_ABOVE: a small map is not swept again.
        admit(&limiter, 0..1_000, 9_000);
        assert_eq!(sweeps_and_keys(&limiter).0, 1);
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
