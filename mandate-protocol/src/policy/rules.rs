//! The rules, one small step each, in the order decisions.md gives: no_mandate (and not yet
//! in force), revoked (and superseded), expired, replay, velocity, category, recipient,
//! limit (currency, min_per_transaction, per_transaction, then the spend windows per_day,
//! per_week, per_month and total, then the count limits), review. The first rule that holds
//! is the verdict; when none holds, `allow`.
//!
//! The spend windows and the count limits are tables ([`SPEND_LIMITS`], [`COUNT_LIMITS`])
//! read by one loop each: a window is its limit, the spend (or the allows) it counts and the
//! reason it gives.

use time::OffsetDateTime;

use super::reason::{CountWindow, Reason, SpendWindow};
use super::request::{AuthorizationRequest, SingleUse};
use super::verdict::Verdict;
use crate::amount::Amount;
use crate::history::{AgentHistory, SpendToDate};
use crate::mandate::{CountLimits, Limits, Mandate, MandateStatus};

/// A rule's conclusion when it holds: the verdict and why.
type Holds = Option<(Verdict, Reason)>;

/// What every rule reads: the request, the agent's current mandate and history, the
/// single-use credential presented (if any) and `now`.
struct Case<'a> {
    mandate: &'a Mandate,
    request: &'a AuthorizationRequest,
    history: &'a AgentHistory,
    presented: Option<&'a SingleUse>,
    now: OffsetDateTime,
}

/// The rules, in order, without the mode applied.
pub(super) fn judge(
    mandate: Option<&Mandate>,
    request: &AuthorizationRequest,
    history: &AgentHistory,
    presented: Option<&SingleUse>,
    now: OffsetDateTime,
) -> (Verdict, Option<Reason>) {
    let Some(mandate) = mandate else {
        let agent = request.agent.clone();
        return (Verdict::DenyNoMandate, Some(Reason::NoMandate { agent }));
    };
    let case = Case {
        mandate,
        request,
        history,
        presented,
        now,
    };
    let holds = not_yet_in_force(&case)
        .or_else(|| revoked_or_superseded(&case))
        .or_else(|| expired(&case))
        .or_else(|| replay(&case))
        .or_else(|| velocity(&case))
        .or_else(|| category(&case))
        .or_else(|| recipient(&case))
        .or_else(|| currency(&case))
        .or_else(|| min_per_transaction(&case))
        .or_else(|| per_transaction(&case))
        .or_else(|| spend_limits(&case))
        .or_else(|| count_limits(&case))
        .or_else(|| review(&case));
    match holds {
        Some((verdict, reason)) => (verdict, Some(reason)),
        None => (Verdict::Allow, None),
    }
}

/// `deny_no_mandate` before the mandate's `not_before` date (which comes before
/// `deny_revoked`).
fn not_yet_in_force(case: &Case<'_>) -> Holds {
    let mandate = case.mandate;
    let not_before = mandate.terms.not_before?;
    mandate.is_before_start_at(case.now).then(|| {
        let mandate = mandate.id.clone();
        let reason = Reason::NotYetInForce {
            mandate,
            not_before,
        };
        (Verdict::DenyNoMandate, reason)
    })
}

/// `deny_revoked`; a superseded mandate is never current, so it reads as no mandate rather
/// than allow.
fn revoked_or_superseded(case: &Case<'_>) -> Holds {
    let mandate = || case.mandate.id.clone();
    match case.mandate.status {
        MandateStatus::Revoked => {
            let reason = Reason::Revoked { mandate: mandate() };
            Some((Verdict::DenyRevoked, reason))
        }
        MandateStatus::Superseded => {
            let reason = Reason::Superseded { mandate: mandate() };
            Some((Verdict::DenyNoMandate, reason))
        }
        MandateStatus::Active | MandateStatus::Expired => None,
    }
}

/// `deny_expired`: stored as expired, or past its `expires` date at `now`.
fn expired(case: &Case<'_>) -> Holds {
    let mandate = case.mandate;
    let expired = mandate.status == MandateStatus::Expired || mandate.is_expired_at(case.now);
    expired.then(|| {
        let reason = Reason::Expired {
            mandate: mandate.id.clone(),
            expires: mandate.terms.expires,
        };
        (Verdict::DenyExpired, reason)
    })
}

/// `deny_replay`: the single-use credential presented was already accepted.
fn replay(case: &Case<'_>) -> Holds {
    let credential = case.presented.filter(|c| c.already_accepted)?;
    let credential = credential.id.clone();
    Some((Verdict::DenyReplay, Reason::Replay { credential }))
}

/// `deny_velocity`: too many requests from the agent in the trailing window.
fn velocity(case: &Case<'_>) -> Holds {
    case.history.velocity.is_exceeded_at(case.now).then(|| {
        let agent = case.request.agent.clone();
        (Verdict::DenyVelocity, Reason::Velocity { agent })
    })
}

/// `deny_category`: the category is not one the mandate allows.
fn category(case: &Case<'_>) -> Holds {
    let category = &case.request.category;
    (!case.mandate.terms.categories.contains(category)).then(|| {
        let reason = Reason::Category {
            category: category.clone(),
            mandate: case.mandate.id.clone(),
        };
        (Verdict::DenyCategory, reason)
    })
}

/// `deny_recipient`: the mandate's recipient lists refuse the recipient.
fn recipient(case: &Case<'_>) -> Holds {
    let recipients = case.mandate.terms.recipients.as_ref()?;
    let refusal = recipients.check(&case.request.recipient).err()?;
    let reason = Reason::Recipient {
        recipient: case.request.recipient.clone(),
        mandate: case.mandate.id.clone(),
        refusal,
    };
    Some((Verdict::DenyRecipient, reason))
}

/// The mandate's limits.
fn limits<'a>(case: &Case<'a>) -> &'a Limits {
    &case.mandate.terms.limits
}

/// `deny_limit`: another currency than the mandate's.
fn currency(case: &Case<'_>) -> Holds {
    let allowed = &limits(case).currency;
    let requested = &case.request.currency;
    (requested != allowed).then(|| {
        let reason = Reason::Currency {
            requested: requested.clone(),
            allowed: allowed.clone(),
        };
        (Verdict::DenyLimit, reason)
    })
}

/// `deny_limit`: under the mandate's minimum for one transaction.
fn min_per_transaction(case: &Case<'_>) -> Holds {
    let minimum = limits(case).min_per_transaction?;
    let amount = case.request.amount;
    (amount < minimum).then_some((
        Verdict::DenyLimit,
        Reason::MinPerTransaction { amount, minimum },
    ))
}

/// `deny_limit`: over the per-transaction limit.
fn per_transaction(case: &Case<'_>) -> Holds {
    let limit = limits(case).per_transaction;
    let amount = case.request.amount;
    (amount > limit).then_some((Verdict::DenyLimit, Reason::PerTransaction { amount, limit }))
}

/// A limit on the spend of a window: the limit, the spend to date it counts, and the reason
/// it gives when the spend plus the amount would be over it.
struct SpendLimit {
    /// The limit, if the mandate has it.
    limit: fn(&Limits) -> Option<Amount>,
    /// The allowed spend so far in the window at `now`.
    spent: fn(&SpendToDate, OffsetDateTime) -> Amount,
    /// The reason, from the spend so far, the amount asked for and the limit.
    reason: fn(Amount, Amount, Amount) -> Reason,
}

/// The spend limits, in the order they are checked.
const SPEND_LIMITS: [SpendLimit; 4] = [
    SpendLimit {
        limit: |limits| limits.per_day,
        spent: SpendToDate::day_total_at,
        reason: |spent, amount, limit| Reason::Window {
            window: SpendWindow::Day,
            spent,
            amount,
            limit,
        },
    },
    SpendLimit {
        limit: |limits| limits.per_week,
        spent: SpendToDate::week_total_at,
        reason: |spent, amount, limit| Reason::Window {
            window: SpendWindow::Week,
            spent,
            amount,
            limit,
        },
    },
    SpendLimit {
        limit: |limits| limits.per_month,
        spent: SpendToDate::total_at,
        reason: |spent, amount, limit| Reason::PerMonth {
            spent,
            amount,
            limit,
        },
    },
    SpendLimit {
        limit: |limits| limits.total,
        spent: |spend, _| spend.lifetime.total(),
        reason: |spent, amount, limit| Reason::Total {
            spent,
            amount,
            limit,
        },
    },
];

/// `deny_limit`: the first spend limit the spend so far plus the amount would be over (a
/// sum past any amount is over every limit).
fn spend_limits(case: &Case<'_>) -> Holds {
    let amount = case.request.amount;
    SPEND_LIMITS.iter().find_map(|window| {
        let limit = (window.limit)(limits(case))?;
        let spent = (window.spent)(&case.history.spend, case.now);
        let over = spent.checked_add(amount).is_none_or(|sum| sum > limit);
        over.then(|| (Verdict::DenyLimit, (window.reason)(spent, amount, limit)))
    })
}

/// A limit on the number of allows in a window: the window, its limit and the allows so far.
struct CountLimit {
    /// The window, which the reason names.
    window: CountWindow,
    /// The limit, if the mandate has it.
    limit: fn(&CountLimits) -> Option<u64>,
    /// The allows so far in the window at `now`.
    count: fn(&SpendToDate, OffsetDateTime) -> u64,
}

/// The count limits, in the order they are checked.
const COUNT_LIMITS: [CountLimit; 4] = [
    CountLimit {
        window: CountWindow::Day,
        limit: |counts| counts.per_day,
        count: SpendToDate::day_count_at,
    },
    CountLimit {
        window: CountWindow::Week,
        limit: |counts| counts.per_week,
        count: SpendToDate::week_count_at,
    },
    CountLimit {
        window: CountWindow::Month,
        limit: |counts| counts.per_month,
        count: SpendToDate::month_count_at,
    },
    CountLimit {
        window: CountWindow::Total,
        limit: |counts| counts.total,
        count: |spend, _| spend.lifetime.count(),
    },
];

/// `deny_limit`: the first count limit already reached, so that one more allow would be
/// over it.
fn count_limits(case: &Case<'_>) -> Holds {
    let counts = limits(case).count.as_ref()?;
    COUNT_LIMITS.iter().find_map(|window| {
        let limit = (window.limit)(counts)?;
        let count = (window.count)(&case.history.spend, case.now);
        (count >= limit).then_some((
            Verdict::DenyLimit,
            Reason::Count {
                window: window.window,
                count,
                limit,
            },
        ))
    })
}

/// `review`: above the mandate's review threshold.
fn review(case: &Case<'_>) -> Holds {
    let review_above = case.mandate.terms.review_above?;
    let amount = case.request.amount;
    (amount > review_above).then_some((
        Verdict::Review,
        Reason::Review {
            amount,
            review_above,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tables hold the windows in the documented order: per_day, per_week, per_month,
    /// total; then the counts per day, week, month and in total.
    #[test]
    fn the_window_tables_are_in_the_documented_order() {
        let zero = Amount::ZERO;
        let spend: Vec<&str> = SPEND_LIMITS
            .iter()
            .map(|w| (w.reason)(zero, zero, zero).rule())
            .collect();
        assert_eq!(
            spend,
            [
                "limits.per_day",
                "limits.per_week",
                "limits.per_month",
                "limits.total"
            ]
        );
        let counts: Vec<&str> = COUNT_LIMITS.iter().map(|w| w.window.field()).collect();
        assert_eq!(counts, ["per_day", "per_week", "per_month", "total"]);
    }
}
