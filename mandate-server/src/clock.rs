//! The server's clock, injected so that tests can move time without sleeping; the time
//! and id helpers are storage's (`mandate_storage::clock`), re-exported here.

use std::sync::Mutex;

use time::OffsetDateTime;

/// A source of the current time.
pub trait Clock: Send + Sync + 'static {
    /// Now, in UTC.
    fn now(&self) -> OffsetDateTime;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> OffsetDateTime {
        OffsetDateTime::now_utc()
    }
}

/// A clock that moves only when told to (tests).
#[derive(Debug)]
pub struct ManualClock(Mutex<OffsetDateTime>);

impl ManualClock {
    /// A clock standing at `at`.
    pub fn new(at: OffsetDateTime) -> Self {
        Self(Mutex::new(at))
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: time::Duration) {
        let mut now = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *now += by;
    }

    /// Sets the clock to `at`.
    pub fn set(&self, at: OffsetDateTime) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = at;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> OffsetDateTime {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

pub use mandate_storage::clock::{
    fill_id_random, fill_random, from_ms, month_index, ms, ordered16, random16,
};
