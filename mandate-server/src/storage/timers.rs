//! Timers at the boundary: reviews that expire and mandates whose expiry nears.

use time::{Date, OffsetDateTime};

use super::StoreFuture;
use crate::model::Env;

/// Something due, identified with its organization and environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueItem {
    /// The review or mandate id.
    pub id: String,
    /// Its organization.
    pub org_id: String,
    /// Its environment.
    pub env: Env,
}

/// What the timer worker reads and changes.
pub trait TimerStore {
    /// Up to `limit` pending reviews whose deadline is at or before `now_ms`, and up to
    /// `limit` active mandates expiring from `today` to `horizon` (`YYYY-MM-DD`) whose
    /// `mandate.expiring` has not fired.
    fn due_timers(
        &self,
        now_ms: i64,
        today: &str,
        horizon: &str,
        limit: i64,
    ) -> StoreFuture<'_, (Vec<DueItem>, Vec<DueItem>)>;

    /// Expires a pending review at `now` with its `decision.resolved` event, in one
    /// transaction; nothing if it was resolved meanwhile.
    fn expire_review(&self, item: &DueItem, now: OffsetDateTime) -> StoreFuture<'_, ()>;

    /// Fires `mandate.expiring` for an active mandate once `now` reaches
    /// `fires_at(expires)`, and records that it fired, in one transaction; nothing if it
    /// is not due, not active, or fired already.
    fn fire_expiring(
        &self,
        item: &DueItem,
        now: OffsetDateTime,
        fires_at: fn(Date) -> OffsetDateTime,
    ) -> StoreFuture<'_, ()>;
}
