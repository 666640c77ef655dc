//! The review state machine.
//!
//! A decision whose verdict is `review` opens a review that waits for the mandate owner.
//! The owner approves it (the server then makes a fresh decision, whose id becomes the
//! review's `resolution`) or denies it, with an optional reason; a review nobody resolves
//! expires 24 hours after it opened. The agent whose decision opened it may withdraw it
//! while it is pending (its client gave up on the payment): the review is then denied, and
//! says it was withdrawn, so that no approval can follow. Each transition here is a pure function of the review
//! and `now`; the server persists the result and emits `decision.resolved`.

use std::fmt;

use serde::{Deserialize, Serialize};
use time::{Duration, OffsetDateTime};

use crate::id::{DecisionId, ReviewId};

/// How long a review stays pending before it expires.
pub const REVIEW_LIFETIME: Duration = Duration::hours(24);

/// Where a review stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReviewStatus {
    /// Waiting for the mandate owner.
    Pending,
    /// Approved; a fresh decision was made.
    Approved,
    /// Denied by the mandate owner.
    Denied,
    /// Nobody resolved it within [`REVIEW_LIFETIME`].
    Expired,
}

impl ReviewStatus {
    /// The status as it appears on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Approved => "approved",
            Self::Denied => "denied",
            Self::Expired => "expired",
        }
    }

    /// Parses the wire form.
    pub fn parse(text: &str) -> Option<Self> {
        [Self::Pending, Self::Approved, Self::Denied, Self::Expired]
            .into_iter()
            .find(|s| s.as_str() == text)
    }
}

impl fmt::Display for ReviewStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a review cannot make the requested transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReviewError {
    /// The review was already resolved; only a pending review can be approved, denied or
    /// expired.
    #[error("review is {status}, not pending; only a pending review can be resolved")]
    NotPending {
        /// The status the review has.
        status: ReviewStatus,
    },
    /// The agent withdrew the review: it can no longer be approved or denied.
    #[error(
        "review was withdrawn by its agent, which no longer wants the payment; it can no longer be approved or denied"
    )]
    Withdrawn,
    /// The review's 24 hours are over: it can no longer be approved or denied. The caller
    /// should mark it expired with [`Review::expire`].
    #[error("review has expired and can no longer be approved or denied")]
    Expired,
    /// The review is pending and its 24 hours are not over yet.
    #[error("review is still pending and does not expire before its expires_at")]
    NotYetExpired,
}

/// A review of a decision whose verdict was `review`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Review {
    /// The review's id, `rev_…`.
    pub id: ReviewId,
    /// The decision that asked for the review.
    pub decision: DecisionId,
    /// Where the review stands.
    pub status: ReviewStatus,
    /// When the review opened.
    #[serde(with = "crate::timefmt")]
    pub created_at: OffsetDateTime,
    /// When a pending review expires: `created_at` + [`REVIEW_LIFETIME`].
    #[serde(with = "crate::timefmt")]
    pub expires_at: OffsetDateTime,
    /// When the review was approved, denied or expired; `null` while pending.
    #[serde(default, with = "crate::timefmt::option")]
    pub resolved_at: Option<OffsetDateTime>,
    /// On approval, the id of the fresh decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolution: Option<DecisionId>,
    /// On denial, the reason the owner gave, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Whether the denial is the agent's withdrawal of its own review (`denied` either
    /// way); written only when true.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub withdrawn: bool,
}

impl Review {
    /// Opens a pending review of `decision` at `now`; it expires [`REVIEW_LIFETIME`] later.
    pub fn open(id: ReviewId, decision: DecisionId, now: OffsetDateTime) -> Review {
        Review {
            id,
            decision,
            status: ReviewStatus::Pending,
            created_at: now,
            expires_at: now.saturating_add(REVIEW_LIFETIME),
            resolved_at: None,
            resolution: None,
            reason: None,
            withdrawn: false,
        }
    }

    /// Whether the review is pending and its 24 hours are over at `now`.
    pub fn is_due_to_expire(&self, now: OffsetDateTime) -> bool {
        self.status == ReviewStatus::Pending && now >= self.expires_at
    }

    /// Approves the review; `resolution` is the fresh decision the server made.
    pub fn approve(
        &self,
        resolution: DecisionId,
        now: OffsetDateTime,
    ) -> Result<Review, ReviewError> {
        self.check_resolvable(now)?;
        Ok(Review {
            status: ReviewStatus::Approved,
            resolved_at: Some(now),
            resolution: Some(resolution),
            ..self.clone()
        })
    }

    /// Denies the review, with the owner's reason if one was given.
    pub fn deny(&self, reason: Option<String>, now: OffsetDateTime) -> Result<Review, ReviewError> {
        self.check_resolvable(now)?;
        Ok(Review {
            status: ReviewStatus::Denied,
            resolved_at: Some(now),
            reason,
            ..self.clone()
        })
    }

    /// Withdraws the review for the agent whose decision opened it: denied, with the
    /// agent's reason if it gave one, and marked withdrawn.
    pub fn withdraw(
        &self,
        reason: Option<String>,
        now: OffsetDateTime,
    ) -> Result<Review, ReviewError> {
        Ok(Review {
            withdrawn: true,
            ..self.deny(reason, now)?
        })
    }

    /// Marks a pending review expired once `now` has reached `expires_at`.
    ///
    /// `resolved_at` is set to `expires_at`, the moment it expired, not `now`: a sweeper
    /// that runs late does not move the record.
    pub fn expire(&self, now: OffsetDateTime) -> Result<Review, ReviewError> {
        if self.status != ReviewStatus::Pending {
            return Err(ReviewError::NotPending {
                status: self.status,
            });
        }
        if now < self.expires_at {
            return Err(ReviewError::NotYetExpired);
        }
        Ok(Review {
            status: ReviewStatus::Expired,
            resolved_at: Some(self.expires_at),
            ..self.clone()
        })
    }

    fn check_resolvable(&self, now: OffsetDateTime) -> Result<(), ReviewError> {
        if self.withdrawn {
            return Err(ReviewError::Withdrawn);
        }
        if self.status != ReviewStatus::Pending {
            return Err(ReviewError::NotPending {
                status: self.status,
            });
        }
        if now >= self.expires_at {
            return Err(ReviewError::Expired);
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use time::macros::datetime;

    use super::*;

    const T0: OffsetDateTime = datetime!(2025-06-01 12:00:00 UTC);

    fn review() -> Review {
        Review::open(
            ReviewId::from_random([1; 16]),
            DecisionId::from_random([2; 16]),
            T0,
        )
    }

    fn fresh_decision() -> DecisionId {
        DecisionId::from_random([3; 16])
    }

    #[test]
    fn opens_pending_for_24_hours() {
        let review = review();
        assert_eq!(review.status, ReviewStatus::Pending);
        assert_eq!(review.created_at, T0);
        assert_eq!(review.expires_at, datetime!(2025-06-02 12:00:00 UTC));
        assert_eq!(review.resolved_at, None);
        assert_eq!(review.resolution, None);
        assert_eq!(review.reason, None);
    }

    #[test]
    fn approve_records_the_fresh_decision() {
        let now = T0 + Duration::hours(1);
        let approved = review().approve(fresh_decision(), now).unwrap();
        assert_eq!(approved.status, ReviewStatus::Approved);
        assert_eq!(approved.resolved_at, Some(now));
        assert_eq!(approved.resolution, Some(fresh_decision()));
        assert_eq!(approved.id, review().id);
        assert_eq!(approved.decision, review().decision);
        assert_eq!(approved.expires_at, review().expires_at);
    }

    #[test]
    fn deny_records_the_reason() {
        let now = T0 + Duration::minutes(5);
        let denied = review().deny(Some("too much".to_owned()), now).unwrap();
        assert_eq!(denied.status, ReviewStatus::Denied);
        assert_eq!(denied.resolved_at, Some(now));
        assert_eq!(denied.reason.as_deref(), Some("too much"));
        assert_eq!(denied.resolution, None);
        let silent = review().deny(None, now).unwrap();
        assert_eq!(silent.reason, None);
    }

    #[test]
    fn resolving_at_or_after_expiry_is_refused() {
        let last = review().expires_at - Duration::nanoseconds(1);
        assert!(review().approve(fresh_decision(), last).is_ok());
        assert!(review().deny(None, last).is_ok());
        for now in [review().expires_at, review().expires_at + Duration::days(3)] {
            assert_eq!(
                review().approve(fresh_decision(), now),
                Err(ReviewError::Expired)
            );
            assert_eq!(review().deny(None, now), Err(ReviewError::Expired));
        }
    }

    #[test]
    fn expire_only_when_due() {
        let review = review();
        let last = review.expires_at - Duration::seconds(1);
        assert!(!review.is_due_to_expire(last));
        assert_eq!(review.expire(last), Err(ReviewError::NotYetExpired));
        let late = review.expires_at + Duration::hours(2);
        assert!(review.is_due_to_expire(review.expires_at));
        let expired = review.expire(late).unwrap();
        assert_eq!(expired.status, ReviewStatus::Expired);
        assert_eq!(expired.resolved_at, Some(review.expires_at));
        assert!(!expired.is_due_to_expire(late));
    }

    #[test]
    fn only_pending_reviews_move() {
        let now = T0 + Duration::hours(1);
        let resolved = [
            review().approve(fresh_decision(), now).unwrap(),
            review().deny(None, now).unwrap(),
            review().expire(review().expires_at).unwrap(),
        ];
        for review in resolved {
            let not_pending = Err(ReviewError::NotPending {
                status: review.status,
            });
            assert_eq!(review.approve(fresh_decision(), now), not_pending);
            assert_eq!(review.deny(None, now), not_pending);
            assert_eq!(review.expire(review.expires_at), not_pending);
        }
    }

    #[test]
    fn a_withdrawn_review_is_denied_and_nothing_follows_it() {
        let now = T0 + Duration::minutes(2);
        let withdrawn = review()
            .withdraw(Some("the client cancelled".to_owned()), now)
            .unwrap();
        assert_eq!(withdrawn.status, ReviewStatus::Denied);
        assert!(withdrawn.withdrawn);
        assert_eq!(withdrawn.resolved_at, Some(now));
        assert_eq!(withdrawn.reason.as_deref(), Some("the client cancelled"));
        assert_eq!(
            withdrawn.approve(fresh_decision(), now),
            Err(ReviewError::Withdrawn)
        );
        assert_eq!(withdrawn.deny(None, now), Err(ReviewError::Withdrawn));
        assert_eq!(withdrawn.withdraw(None, now), Err(ReviewError::Withdrawn));
        // A person's denial is no withdrawal, and a resolved review cannot be withdrawn.
        let denied = review().deny(None, now).unwrap();
        assert!(!denied.withdrawn);
        assert_eq!(
            denied.withdraw(None, now),
            Err(ReviewError::NotPending {
                status: ReviewStatus::Denied
            })
        );
        assert_eq!(
            review().withdraw(None, review().expires_at),
            Err(ReviewError::Expired)
        );
        // On the wire, only a withdrawal says so.
        let json = serde_json::to_value(&withdrawn).unwrap();
        assert_eq!(json["withdrawn"], true);
        assert_eq!(serde_json::from_value::<Review>(json).unwrap(), withdrawn);
        assert!(
            serde_json::to_value(&denied)
                .unwrap()
                .get("withdrawn")
                .is_none()
        );
    }

    #[test]
    fn not_pending_outranks_expired() {
        let denied = review().deny(None, T0).unwrap();
        let late = denied.expires_at + Duration::hours(1);
        assert_eq!(
            denied.approve(fresh_decision(), late),
            Err(ReviewError::NotPending {
                status: ReviewStatus::Denied
            })
        );
    }

    #[test]
    fn serializes_with_rfc3339_and_snake_case() {
        let pending = serde_json::to_value(review()).unwrap();
        assert_eq!(pending["status"], "pending");
        assert_eq!(pending["created_at"], "2025-06-01T12:00:00Z");
        assert_eq!(pending["expires_at"], "2025-06-02T12:00:00Z");
        assert!(pending["resolved_at"].is_null());
        assert!(pending.get("resolution").is_none());
        assert!(pending.get("reason").is_none());

        let approved = review()
            .approve(fresh_decision(), T0 + Duration::seconds(90))
            .unwrap();
        let json = serde_json::to_value(&approved).unwrap();
        assert_eq!(json["status"], "approved");
        assert_eq!(json["resolved_at"], "2025-06-01T12:01:30Z");
        assert_eq!(json["resolution"], fresh_decision().as_str());
        let back: Review = serde_json::from_value(json).unwrap();
        assert_eq!(back, approved);

        let denied = review().deny(Some("no".to_owned()), T0).unwrap();
        let text = serde_json::to_string(&denied).unwrap();
        assert_eq!(serde_json::from_str::<Review>(&text).unwrap(), denied);
    }

    #[test]
    fn messages() {
        assert_eq!(
            ReviewError::NotPending {
                status: ReviewStatus::Approved
            }
            .to_string(),
            "review is approved, not pending; only a pending review can be resolved"
        );
        assert_eq!(
            ReviewError::Expired.to_string(),
            "review has expired and can no longer be approved or denied"
        );
    }
}
