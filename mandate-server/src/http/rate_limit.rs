//! Per-key request rates: a sliding-window counter per key.
//!
//! The window estimate is `previous second's count × the part of it still in the window
//! (rounded up) + this second's count`. One key's load never touches another key's counter.
//!
//! The windows live beside the callers they count, in [`crate::http::cache::KeyCache`]: an
//! authenticated request finds its caller and its window in one lookup of one map, with no
//! lock that every request shares and no second lookup (mostly a cache miss) in a map of
//! every key.

/// One key's counts: this second's and the second before's.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    second: i64,
    current: u32,
    previous: u32,
}

impl Window {
    /// The second of the last request counted (0 for a window that counted none).
    pub fn last_second(&self) -> i64 {
        self.second
    }

    /// Counts one request at `now_ms` against `per_sec` if the window has room for it;
    /// `Err(retry_after_secs)` when it has not.
    pub fn admit(&mut self, per_sec: u32, now_ms: i64) -> Result<(), u64> {
        let second = now_ms.div_euclid(1000);
        let into = now_ms.rem_euclid(1000);
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

    #[test]
    fn counts_the_last_second_and_part_of_the_one_before() {
        let mut a = Window::default();
        for _ in 0..5 {
            assert!(a.admit(5, 10_000).is_ok());
        }
        assert_eq!(a.admit(5, 10_500), Err(1));
        // Half a second into the next second, half of the previous count still weighs.
        assert!(a.admit(5, 11_500).is_ok());
        assert!(a.admit(5, 11_500).is_ok());
        assert_eq!(a.admit(5, 11_500), Err(1));
        // Two seconds later the window is empty.
        assert!(a.admit(5, 13_000).is_ok());
        // A burst at the very start of a second still weighs fully one second later, so
        // Retry-After says two.
        let mut c = Window::default();
        for _ in 0..5 {
            assert!(c.admit(5, 20_000).is_ok());
        }
        assert_eq!(c.admit(5, 20_000), Err(2));
        assert_eq!(c.admit(5, 21_000), Err(1));
        assert!(c.admit(5, 22_000).is_ok());
    }

    #[test]
    fn a_refused_request_is_not_counted() {
        let mut a = Window::default();
        assert!(a.admit(1, 5_000).is_ok());
        for _ in 0..100 {
            assert_eq!(a.admit(1, 5_999), Err(2));
        }
        // The hundred refusals did not fill the window: at 6_999 the previous second
        // weighs 1/1000 of its one request, rounded up to one, and at 7_000 nothing.
        assert_eq!(a.admit(1, 6_999), Err(1));
        assert!(a.admit(1, 7_000).is_ok());
    }
}
