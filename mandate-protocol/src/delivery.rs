//! Webhook delivery as pure decisions: which event types exist, when the next attempt is
//! due, and what to do after an attempt.
//!
//! The server's worker performs the HTTP POST and stores the result; everything it decides
//! comes from here. Time arrives as `OffsetDateTime` (counted to the millisecond) and
//! randomness as one jitter byte, so the whole retry schedule is testable without a clock
//! or an RNG.
//!
//! The schedule: after the n-th failed attempt the next one waits 1 s × 2^(n-1), capped at
//! one hour, scaled by a jitter factor between 0.8 and 1.2. Retries stop for good once the
//! next attempt would fall at or after 24 hours from the event's creation.

/// The event types an endpoint can subscribe to, in the order the spec lists them.
pub const EVENT_TYPES: &[&str] = &[
    "decision.review_pending",
    "decision.resolved",
    "mandate.revoked",
    "mandate.expiring",
    "escrow.funded",
    "escrow.delivered",
    "escrow.released",
    "escrow.refunded",
    "escrow.disputed",
    "ping",
];

/// Whether `name` is one of [`EVENT_TYPES`].
pub fn is_event_type(name: &str) -> bool {
    EVENT_TYPES.contains(&name)
}

/// How long after its creation an event is still delivered: 24 hours, in ms.
pub const RETRY_WINDOW_MS: i64 = 24 * 60 * 60 * 1000;

/// The wait after the first failed attempt, in ms.
pub const FIRST_BACKOFF_MS: i64 = 1000;

/// The longest wait between two attempts (before jitter), in ms.
pub const MAX_BACKOFF_MS: i64 = 60 * 60 * 1000;

use time::{Duration, OffsetDateTime};

use crate::history::unix_ms;

/// Whether the event's delivery window is over at `now`: no attempt may start.
pub fn window_closed(event_created: OffsetDateTime, now: OffsetDateTime) -> bool {
    window_closed_ms(unix_ms(event_created), unix_ms(now))
}

fn window_closed_ms(event_created_ms: i64, now_ms: i64) -> bool {
    now_ms >= event_created_ms.saturating_add(RETRY_WINDOW_MS)
}

/// The wait after failed attempt number `attempt_no` (1 for the first attempt), in whole
/// milliseconds: `1 s × 2^(attempt_no - 1)`, capped at [`MAX_BACKOFF_MS`], then scaled by
/// a factor from 0.8 (`jitter_byte` 0) to 1.2 (`jitter_byte` 255).
pub fn backoff(attempt_no: u32, jitter_byte: u8) -> Duration {
    Duration::milliseconds(backoff_ms(attempt_no, jitter_byte))
}

/// [`backoff`] in milliseconds.
fn backoff_ms(attempt_no: u32, jitter_byte: u8) -> i64 {
    let doublings = attempt_no.saturating_sub(1).min(32);
    let base = FIRST_BACKOFF_MS
        .saturating_mul(1_i64 << doublings)
        .min(MAX_BACKOFF_MS);
    // factor in thousandths: 800 ..= 1200
    let factor = 800 + i64::from(jitter_byte) * 400 / 255;
    base * factor / 1000
}

/// When to try again after failed attempt number `attempt_no`, made at `now`; `None` when
/// that time would be at or past the end of the event's 24-hour window.
pub fn next_attempt(
    attempt_no: u32,
    event_created: OffsetDateTime,
    now: OffsetDateTime,
    jitter_byte: u8,
) -> Option<OffsetDateTime> {
    let now_ms = unix_ms(now);
    let at = now_ms.saturating_add(backoff_ms(attempt_no, jitter_byte));
    if window_closed_ms(unix_ms(event_created), at) {
        return None;
    }
    // In range: before the window's end, which lies within a day of a representable time.
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(at) * 1_000_000).ok()
}

/// Whether a receiver's answer acknowledges the event: any 2xx status. `None` (no answer:
/// a timeout, a refused connection, a refused address) never does.
pub fn acknowledges(status: Option<u16>) -> bool {
    status.is_some_and(|s| (200..300).contains(&s))
}

/// What the worker must do after an attempt.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextStep {
    /// The receiver acknowledged: the delivery is done.
    Delivered,
    /// Try again at this time (a whole millisecond).
    RetryAt(OffsetDateTime),
    /// The 24-hour window is over: mark the delivery failed and never try again.
    GiveUp,
}

/// Decides what follows attempt number `attempt_no` (1 for the first), made at `now`,
/// that got `status` (`None` when no HTTP answer came back).
pub fn after_attempt(
    status: Option<u16>,
    attempt_no: u32,
    event_created: OffsetDateTime,
    now: OffsetDateTime,
    jitter_byte: u8,
) -> NextStep {
    if acknowledges(status) {
        return NextStep::Delivered;
    }
    match next_attempt(attempt_no, event_created, now, jitter_byte) {
        Some(at) => NextStep::RetryAt(at),
        None => NextStep::GiveUp,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn ms(at: i64) -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp_nanos(i128::from(at) * 1_000_000).unwrap()
    }

    const T0: i64 = 1_795_348_800_000;
    const MID: u8 = 128; // a factor of about 1.0

    #[test]
    fn backoff_doubles_from_one_second_to_the_hour_cap() {
        let waits: Vec<i64> = (1..=14).map(|n| backoff_ms(n, 0) * 10 / 8).collect();
        assert_eq!(
            waits,
            [
                1000, 2000, 4000, 8000, 16000, 32000, 64000, 128000, 256000, 512000, 1024000,
                2048000, 3600000, 3600000
            ]
        );
        assert_eq!(backoff_ms(u32::MAX, 0), MAX_BACKOFF_MS * 8 / 10);
        assert_eq!(backoff_ms(0, 0), 800);
        assert_eq!(backoff(3, 255), Duration::milliseconds(4800));
    }

    #[test]
    fn jitter_stays_within_twenty_percent() {
        for n in 1..=40 {
            let base = FIRST_BACKOFF_MS
                .saturating_mul(1 << (n - 1).min(32))
                .min(MAX_BACKOFF_MS);
            for byte in 0..=255u8 {
                let wait = backoff_ms(n, byte);
                assert!(
                    wait >= base * 8 / 10 && wait <= base * 12 / 10,
                    "{n} {byte}"
                );
            }
            assert_eq!(backoff_ms(n, 0), base * 8 / 10);
            assert_eq!(backoff_ms(n, 255), base * 12 / 10);
            assert!(backoff_ms(n, 64) < backoff_ms(n, 192));
        }
    }

    #[test]
    fn acknowledged_only_by_2xx() {
        for status in [200, 201, 202, 204, 299] {
            assert!(acknowledges(Some(status)));
        }
        for status in [100, 199, 300, 301, 308, 400, 404, 410, 429, 500, 503] {
            assert!(!acknowledges(Some(status)), "{status}");
        }
        assert!(!acknowledges(None));
    }

    #[test]
    fn after_attempt_delivers_retries_or_gives_up() {
        assert_eq!(
            after_attempt(Some(204), 1, ms(T0), ms(T0), MID),
            NextStep::Delivered
        );
        // Acknowledged even late in the window.
        let late = T0 + RETRY_WINDOW_MS - 1;
        assert_eq!(
            after_attempt(Some(200), 30, ms(T0), ms(late), 0),
            NextStep::Delivered
        );
        assert_eq!(
            after_attempt(Some(500), 1, ms(T0), ms(T0), 0),
            NextStep::RetryAt(ms(T0 + 800))
        );
        assert_eq!(
            after_attempt(None, 3, ms(T0), ms(T0 + 5000), 255),
            NextStep::RetryAt(ms(T0 + 5000 + 4800))
        );
        // A retry that would land at or past the end of the window is not scheduled.
        let edge = T0 + RETRY_WINDOW_MS - 800;
        assert_eq!(
            after_attempt(Some(503), 1, ms(T0), ms(edge), 0),
            NextStep::GiveUp
        );
        assert_eq!(
            after_attempt(Some(503), 1, ms(T0), ms(edge - 1), 0),
            NextStep::RetryAt(ms(T0 + RETRY_WINDOW_MS - 1))
        );
        assert_eq!(
            after_attempt(None, 1, ms(T0), ms(late), MID),
            NextStep::GiveUp
        );
    }

    #[test]
    fn a_receiver_that_never_accepts_is_tried_until_the_window_ends() {
        // Attempts made exactly when due: the schedule ends inside 24 hours, with waits that
        // never shrink and never pass 1.2 hours.
        for byte in [0u8, MID, 255] {
            let mut now = T0;
            let mut attempts = 0u32;
            let mut last_wait = 0;
            loop {
                assert!(!window_closed(ms(T0), ms(now)));
                attempts += 1;
                match after_attempt(Some(500), attempts, ms(T0), ms(now), byte) {
                    NextStep::RetryAt(at) => {
                        let at = unix_ms(at);
                        let wait = at - now;
                        assert!(wait >= last_wait && wait <= MAX_BACKOFF_MS * 12 / 10);
                        last_wait = wait;
                        now = at;
                    }
                    NextStep::GiveUp => break,
                    NextStep::Delivered => panic!("never acknowledged"),
                }
            }
            assert!((25..=50).contains(&attempts), "{attempts} attempts");
            assert!(now < T0 + RETRY_WINDOW_MS);
        }
    }

    #[test]
    fn window_closes_at_24_hours() {
        assert!(!window_closed(ms(T0), ms(T0)));
        assert!(!window_closed(ms(T0), ms(T0 + RETRY_WINDOW_MS - 1)));
        assert!(window_closed(ms(T0), ms(T0 + RETRY_WINDOW_MS)));
        assert_eq!(next_attempt(1, ms(T0), ms(T0 + RETRY_WINDOW_MS), MID), None);
    }

    #[test]
    fn event_types_are_the_spec_list() {
        assert_eq!(EVENT_TYPES.len(), 10);
        assert!(is_event_type("mandate.expiring"));
        assert!(is_event_type("ping"));
        assert!(!is_event_type("mandate.*"));
        assert!(!is_event_type("Ping"));
        assert!(!is_event_type(""));
    }
}
