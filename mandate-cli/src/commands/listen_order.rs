//! `mandate listen` prints events in the order they were made, when it can.
//!
//! Mandate delivers events concurrently, so a `decision.resolved` can arrive before the
//! `decision.review_pending` it resolves. An event id (`evt_…`) begins with the event's
//! creation time in milliseconds, encoded so that ids sort as their times do. Lines are
//! held for a short window after they arrive; once the oldest has waited it out, every
//! line held whose id sorts up to the newest one due is printed, in id order. Events that
//! arrive further apart than the window are printed as they come.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A line held back, with the event id it is ordered by (`None`, a rejected POST, sorts
/// first: it has no id to place it by).
#[derive(Debug)]
struct Held {
    key: Option<String>,
    line: String,
    arrived: Instant,
}

/// Lines held back for up to `window`.
#[derive(Debug)]
pub struct Reorder {
    window: Duration,
    held: Mutex<Vec<Held>>,
}

impl Reorder {
    /// A buffer holding lines for `window` (zero: each line is due at once).
    pub fn new(window: Duration) -> Self {
        Self {
            window,
            held: Mutex::new(Vec::new()),
        }
    }

    /// Holds `line` of the event `key`, arrived at `now`.
    pub fn push(&self, key: Option<String>, line: String, now: Instant) {
        self.lock().push(Held {
            key,
            line,
            arrived: now,
        });
    }

    /// The lines to print at `now` (all of them with `all`, when stopping), in order.
    pub fn due(&self, now: Instant, all: bool) -> Vec<String> {
        let mut held = self.lock();
        let newest_due = held
            .iter()
            .filter(|h| all || now.saturating_duration_since(h.arrived) >= self.window)
            .map(|h| h.key.clone())
            .max();
        let Some(newest_due) = newest_due else {
            return Vec::new();
        };
        let (mut out, keep): (Vec<Held>, Vec<Held>) =
            held.drain(..).partition(|h| h.key <= newest_due);
        *held = keep;
        out.sort_by(|a, b| a.key.cmp(&b.key).then(a.arrived.cmp(&b.arrived)));
        out.into_iter().map(|h| h.line).collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Held>> {
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn an_event_made_earlier_but_arrived_later_is_printed_first() {
        let order = Reorder::new(Duration::from_millis(500));
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        // The resolution (made later) arrives first; the review it resolves 10 ms after.
        order.push(Some("evt_2".into()), "resolved".into(), t0);
        order.push(Some("evt_1".into()), "review_pending".into(), ms(10));
        assert!(order.due(ms(499), false).is_empty());
        // A later event, not yet due, stays held.
        order.push(Some("evt_3".into()), "later".into(), ms(400));
        assert_eq!(order.due(ms(500), false), ["review_pending", "resolved"]);
        assert!(order.due(ms(899), false).is_empty());
        assert_eq!(order.due(ms(900), false), ["later"]);
    }

    #[test]
    fn without_a_window_or_when_stopping_everything_is_due() {
        let order = Reorder::new(Duration::ZERO);
        let t0 = Instant::now();
        order.push(Some("evt_b".into()), "b".into(), t0);
        order.push(None, "rejected".into(), t0);
        assert_eq!(order.due(t0, false), ["rejected", "b"]);
        let order = Reorder::new(Duration::from_secs(60));
        order.push(Some("evt_b".into()), "b".into(), t0);
        order.push(Some("evt_a".into()), "a".into(), t0);
        assert_eq!(order.due(t0, true), ["a", "b"]);
    }
}
