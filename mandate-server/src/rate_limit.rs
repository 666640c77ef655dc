//! Per-key request rates: a sliding-window counter per key, in memory.
//!
//! The window estimate is `previous second's count × the part of it still in the window
//! (rounded up) + this second's count`. One key's load never touches another key's counter.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Counters per key hash.
#[derive(Default, Clone)]
pub struct RateLimiter {
    windows: Arc<Mutex<HashMap<[u8; 32], Window>>>,
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
        let mut windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        if windows.len() > 100_000 {
            // Forget idle keys rather than grow without bound.
            windows.retain(|_, w| w.second >= second - 1);
        }
        let window = windows.entry(*key).or_default();
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
