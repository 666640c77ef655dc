//! Timers at the boundary: reviews that expire and mandates whose expiry nears. What a
//! timer writes is decided by engine-neutral code (`workers::timers`), handed to the engine
//! as a function it calls on the row it read (and locked) in its transaction; the engine
//! writes the change it is given.

use mandate_core::{Mandate, MandateId};
use mandate_protocol::{id::ReviewId, review::Review};
use time::OffsetDateTime;

use super::deciding;
use super::engine::{Access, Columns, Engine, Lock, Result, Scope, Tx, env_of, first, id_of};
use super::events::{self, NewEvent};
use super::statements::TimerSql;
use super::{StoreFuture, mandates};
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
pub type DecideExpiry = fn(&Review, OffsetDateTime) -> Result<Option<ReviewExpiry>>;

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

fn read_item(r: &dyn Columns) -> Result<DueItem> {
    Ok(DueItem {
        id: r.text(0)?,
        org_id: r.text(1)?,
        env: env_of(&r.text(2)?)?,
    })
}

/// Expires the review of `item` as `decide` says (its row locked, or left to the process
/// that holds it), with its event.
async fn expire<T: Tx>(
    tx: &mut T,
    item: &DueItem,
    now: OffsetDateTime,
    decide: DecideExpiry,
) -> Result<()> {
    let id = id_of(&item.id, "review id", ReviewId::parse)?;
    let s = Scope::new(&item.org_id, item.env);
    let Some((review, _agent)) = deciding::review(tx, s, &id, Lock::Skip).await? else {
        return Ok(());
    };
    let Some(change) = decide(&review, now)? else {
        return Ok(());
    };
    if deciding::resolve(tx, s, &change.review).await? {
        events::append(tx, s, &change.event, change.at_ms).await?;
    }
    Ok(())
}

/// Fires `mandate.expiring` for the mandate of `item` as `decide` says (its row locked, or
/// left to the process that holds it: it finds the mark on a later tick), with the mark.
async fn fire<T: Tx>(
    tx: &mut T,
    item: &DueItem,
    now: OffsetDateTime,
    decide: DecideExpiring,
) -> Result<()> {
    let id = id_of(&item.id, "mandate id", MandateId::parse)?;
    let s = Scope::new(&item.org_id, item.env);
    let Some(mandate) = mandates::get(tx, s, id.as_str(), Lock::Skip).await? else {
        return Ok(());
    };
    let params = [item.org_id.as_str().into(), item.id.as_str().into()];
    let fired = tx
        .query(TimerSql::ExpiringFired.into(), &params, |r| r.flag(0))
        .await?;
    let Some(ExpiringEvent { event, at_ms }) = decide(&mandate, first(fired).unwrap_or(false), now)
    else {
        return Ok(());
    };
    let event_id = events::append(tx, s, &event, at_ms).await?;
    let params = [
        item.org_id.as_str().into(),
        item.id.as_str().into(),
        event_id.as_str().into(),
        at_ms.into(),
    ];
    tx.execute(TimerSql::MarkExpiringFired.into(), &params)
        .await?;
    Ok(())
}

impl<E: Engine> TimerStore for E {
    fn due_timers(
        &self,
        now_ms: i64,
        today: &str,
        horizon: &str,
        limit: i64,
    ) -> StoreFuture<'_, (Vec<DueItem>, Vec<DueItem>)> {
        let args = (today.to_owned(), horizon.to_owned());
        Box::pin(self.run(Access::Read, args, move |tx, (today, horizon)| {
            Box::pin(async move {
                let params = [now_ms.into(), limit.into()];
                let reviews = tx
                    .query(TimerSql::DueReviews.into(), &params, read_item)
                    .await?;
                let params = [today.into(), horizon.into(), limit.into()];
                let expiring = tx
                    .query(TimerSql::DueExpiring.into(), &params, read_item)
                    .await?;
                Ok((reviews, expiring))
            })
        }))
    }

    fn expire_review(
        &self,
        item: &DueItem,
        now: OffsetDateTime,
        decide: DecideExpiry,
    ) -> StoreFuture<'_, ()> {
        Box::pin(self.run(Access::Write, item.clone(), move |tx, item| {
            Box::pin(expire(tx, item, now, decide))
        }))
    }

    fn fire_expiring(
        &self,
        item: &DueItem,
        now: OffsetDateTime,
        decide: DecideExpiring,
    ) -> StoreFuture<'_, ()> {
        Box::pin(self.run(Access::Write, item.clone(), move |tx, item| {
            Box::pin(fire(tx, item, now, decide))
        }))
    }
}
