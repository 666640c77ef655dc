//! Time-driven state, read from the injected clock on every tick of the worker:
//!
//! - a pending review expires 24 hours after it opened: marked `expired` (through
//!   [`mandate_protocol::review::Review::expire`]) with its `decision.resolved` event in one transaction;
//! - `mandate.expiring` fires once per active mandate at 00:00 UTC seven days before its
//!   `expires` date ([`expiring_at`]), at once for a mandate created inside that window; the
//!   once-only mark and the event are written in one transaction.
//!
//! Each item is its own transaction, re-checked inside it, so a review resolved or a mandate
//! revoked meanwhile is left alone and one bad row never blocks the others. What each
//! writes is decided here ([`review_expiry`], [`expiring_event`]), on the row the engine
//! read in its transaction; the engine only reads, guards and writes.

use mandate_core::{Mandate, MandateStatus};
use mandate_protocol::{mandate::format_date, review::Review};
use time::{Date, Duration, OffsetDateTime, Time, UtcOffset};

use crate::clock::ms;
use crate::storage::StorageError;
use crate::storage::events::NewEvent;
use crate::storage::timers::{DueItem, ExpiringEvent, ReviewExpiry};
use crate::workers::Context;

/// How long before a mandate's `expires` date `mandate.expiring` fires.
pub const EXPIRING_LEAD: Duration = Duration::days(7);

/// Items handled per kind and tick; the rest wait for the next tick.
const BATCH: i64 = 100;

/// When `mandate.expiring` is due for a mandate expiring on `expires`: the start (00:00 UTC)
/// of the date seven days earlier.
pub fn expiring_at(expires: Date) -> OffsetDateTime {
    expires
        .checked_sub(EXPIRING_LEAD)
        .unwrap_or(Date::MIN)
        .with_time(Time::MIDNIGHT)
        .assume_utc()
}

/// The `expires` dates whose `mandate.expiring` is due at `now` and that have not passed:
/// from today to today + 7 days, as `YYYY-MM-DD`.
pub fn expiring_dates(now: OffsetDateTime) -> (String, String) {
    let today = now.to_offset(UtcOffset::UTC).date();
    let horizon = today.checked_add(EXPIRING_LEAD).unwrap_or(Date::MAX);
    (format_date(today), format_date(horizon))
}

/// What expiring `review` at `now` writes: the review expired (by
/// [`Review::expire`]: a pending review past its deadline) with its `decision.resolved`
/// event, whose data is the resolved review; `None` for a review already resolved or not
/// yet due.
pub fn review_expiry(
    review: &Review,
    now: OffsetDateTime,
) -> Result<Option<ReviewExpiry>, StorageError> {
    let Ok(expired) = Review::expire(review, now) else {
        return Ok(None);
    };
    let data = serde_json::to_value(&expired)
        .map_err(|e| StorageError::Corrupt(format!("review {}: {e}", expired.id)))?;
    Ok(Some(ReviewExpiry {
        review: expired,
        event: NewEvent {
            event_type: "decision.resolved",
            data,
        },
        at_ms: ms(now),
    }))
}

/// What firing `mandate.expiring` for `mandate` at `now` writes: the event, whose data is
/// the mandate as the API shows it at `now`, if the mandate is active, `now` has reached
/// [`expiring_at`] of its `expires` date, and it has not `fired` before; `None` otherwise.
pub fn expiring_event(
    mandate: &Mandate,
    fired: bool,
    now: OffsetDateTime,
) -> Option<ExpiringEvent> {
    if fired
        || mandate.status_at(now) != MandateStatus::Active
        || now < expiring_at(mandate.terms.expires)
    {
        return None;
    }
    Some(ExpiringEvent {
        event: NewEvent {
            event_type: "mandate.expiring",
            data: mandate_protocol::wire::mandate_json(mandate, now),
        },
        at_ms: ms(now),
    })
}

/// Expires due reviews and fires due `mandate.expiring` events.
pub async fn run(context: &Context) -> Result<(), StorageError> {
    let now = context.now();
    let now_ms = ms(now);
    let (today, horizon) = expiring_dates(now);
    let (due_reviews, due_mandates) = context
        .store
        .due_timers(now_ms, &today, &horizon, BATCH)
        .await?;
    for item in due_reviews {
        if let Err(e) = expire_review(context, item.clone(), now).await {
            tracing::error!(review = %item.id, "expiring a review: {e}");
        }
    }
    for item in due_mandates {
        if let Err(e) = fire_expiring(context, item.clone(), now).await {
            tracing::error!(mandate = %item.id, "firing mandate.expiring: {e}");
        }
    }
    Ok(())
}

async fn expire_review(
    context: &Context,
    item: DueItem,
    now: OffsetDateTime,
) -> Result<(), StorageError> {
    context.store.expire_review(&item, now, review_expiry).await
}

async fn fire_expiring(
    context: &Context,
    item: DueItem,
    now: OffsetDateTime,
) -> Result<(), StorageError> {
    context
        .store
        .fire_expiring(&item, now, expiring_event)
        .await
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use mandate_core::{DecisionId, MandateDraft, MandateId};
    use mandate_protocol::{id::ReviewId, review::REVIEW_LIFETIME, review::ReviewStatus};
    use time::macros::{date, datetime};

    use super::*;

    const OPENED: OffsetDateTime = datetime!(2026-11-22 12:00 UTC);

    fn review() -> Review {
        Review::open(
            ReviewId::from_random([1; 16]),
            DecisionId::from_random([2; 16]),
            OPENED,
        )
    }

    #[test]
    fn a_pending_review_expires_at_its_deadline_with_its_event_and_a_resolved_one_never() {
        let late = OPENED + REVIEW_LIFETIME;
        assert_eq!(
            review_expiry(&review(), late - Duration::seconds(1)).unwrap(),
            None
        );
        let change = review_expiry(&review(), late).unwrap().unwrap();
        assert_eq!(change.review.status, ReviewStatus::Expired);
        assert_eq!(change.review.resolved_at, Some(late));
        assert_eq!(change.event.event_type, "decision.resolved");
        assert_eq!(
            change.event.data,
            serde_json::to_value(&change.review).unwrap()
        );
        assert_eq!(change.at_ms, ms(late));
        let denied = review().deny(None, OPENED).unwrap();
        assert_eq!(review_expiry(&denied, late).unwrap(), None);
        assert_eq!(review_expiry(&change.review, late).unwrap(), None);
    }

    #[test]
    fn expiring_fires_for_an_active_mandate_once_due_and_never_twice() {
        let terms = serde_json::json!({"agent": "agt_x", "limits": {"per_transaction": 5,
            "currency": "USD"}, "categories": ["software"], "expires": "2026-12-31"});
        let mut mandate = Mandate {
            id: MandateId::from_random([3; 16]),
            terms: MandateDraft::from_json(&terms).unwrap(),
            status: MandateStatus::Active,
            created_at: OPENED,
        };
        let due = datetime!(2026-12-24 00:00 UTC);
        assert_eq!(
            expiring_event(&mandate, false, due - Duration::seconds(1)),
            None
        );
        let fired = expiring_event(&mandate, false, due).unwrap();
        assert_eq!(fired.event.event_type, "mandate.expiring");
        assert_eq!(
            fired.event.data,
            mandate_protocol::wire::mandate_json(&mandate, due)
        );
        assert_eq!(fired.at_ms, ms(due));
        assert_eq!(expiring_event(&mandate, true, due), None);
        mandate.status = MandateStatus::Revoked;
        assert_eq!(expiring_event(&mandate, false, due), None);
    }

    #[test]
    fn expiring_is_due_at_midnight_utc_seven_days_before_the_date() {
        assert_eq!(
            expiring_at(date!(2026 - 12 - 31)),
            datetime!(2026-12-24 00:00 UTC)
        );
        assert_eq!(
            expiring_at(date!(2027 - 03 - 03)),
            datetime!(2027-02-24 00:00 UTC)
        );
    }

    #[test]
    fn the_window_runs_from_today_to_a_week_ahead() {
        let (today, horizon) = expiring_dates(datetime!(2026-12-24 00:00 UTC));
        assert_eq!(
            (today.as_str(), horizon.as_str()),
            ("2026-12-24", "2026-12-31")
        );
        // The date is read in UTC whatever the offset of `now`.
        let (today, _) = expiring_dates(datetime!(2026-12-23 23:30 -01:00));
        assert_eq!(today, "2026-12-24");
        // At the boundary both views agree: due exactly when the date enters the window.
        for expires in [date!(2026 - 12 - 31), date!(2027 - 01 - 06)] {
            let at = expiring_at(expires);
            let (_, horizon) = expiring_dates(at);
            assert_eq!(horizon, format_date(expires));
            let (_, before) = expiring_dates(at - Duration::seconds(1));
            assert!(before < format_date(expires));
        }
    }
}
