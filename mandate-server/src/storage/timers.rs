//! Timers at the boundary: reviews that expire and mandates whose expiry nears. What a
//! timer writes is decided by engine-neutral code (`workers::timers`), handed to the engine
//! as a function it calls on the row it read (and locked) in its transaction; the engine
//! writes the change it is given.

use mandate_core::mandate::Mandate;
use mandate_core::review::Review;
use time::OffsetDateTime;

use super::events::NewEvent;
use super::{StorageError, StoreFuture};
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

/// What expiring a review writes: the review in its resolved state (stored only while the
/// row is still pending), and the event appended with it.
#[derive(Debug, Clone, PartialEq)]
pub struct ReviewExpiry {
    /// The review as it is to be stored.
    pub review: Review,
    /// Its `decision.resolved` event.
    pub event: NewEvent,
    /// When, unix ms (the event's time).
    pub at_ms: i64,
}

/// What firing `mandate.expiring` writes: the event, and the mark that it fired (at the
/// same time), which is what keeps it from firing twice.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpiringEvent {
    /// The event.
    pub event: NewEvent,
    /// When, unix ms.
    pub at_ms: i64,
}

/// Decides, on a review as read in the engine's transaction, what its expiry at `now`
/// writes; `None`: nothing.
pub type DecideExpiry = fn(&Review, OffsetDateTime) -> Result<Option<ReviewExpiry>, StorageError>;

/// Decides, on a mandate as read (locked) in the engine's transaction and whether its
/// `mandate.expiring` has fired before, what firing it at `now` writes; `None`: nothing.
pub type DecideExpiring = fn(&Mandate, bool, OffsetDateTime) -> Option<ExpiringEvent>;

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

    /// Reads the review of `item` in a transaction (locked, or left alone if another
    /// process holds it), asks `decide` what expiring it at `now` writes, and writes that:
    /// the review, only while its row is still pending, and then its event; all or
    /// nothing. Nothing if the review is gone or `decide` says nothing.
    fn expire_review(
        &self,
        item: &DueItem,
        now: OffsetDateTime,
        decide: DecideExpiry,
    ) -> StoreFuture<'_, ()>;

    /// Reads the mandate of `item` in a transaction (locked, or left alone if another
    /// process holds it) with whether its `mandate.expiring` fired, asks `decide` what
    /// firing it at `now` writes, and writes that: the event and the mark that it fired,
    /// all or nothing (a second mark fails, and its event goes with it).
    fn fire_expiring(
        &self,
        item: &DueItem,
        now: OffsetDateTime,
        decide: DecideExpiring,
    ) -> StoreFuture<'_, ()>;
}
