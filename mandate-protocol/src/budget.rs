//! What a mandate still allows at a moment, limit by limit: `remaining` on mandate reads.
//!
//! It reads the same [`SpendToDate`] the engine ([`crate::policy::evaluate`]) judges a
//! request with, and the same windows (`day_total_at`, `week_total_at`, `total_at`), so an
//! amount no larger than a window's remaining headroom passes that window's check, and one
//! larger is denied by it (`spent + amount > limit`).

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::amount::Amount;
use crate::history::SpendToDate;
use crate::mandate::Limits;

/// What is still allowed under each limit a mandate has, in `limits.currency`. A window
/// the mandate does not limit is absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Remaining {
    /// The largest single transaction: the limit itself.
    pub per_transaction: Amount,
    /// `per_day` minus this UTC day's spend, never below 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_day: Option<Amount>,
    /// `per_week` minus this ISO week's spend, never below 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_week: Option<Amount>,
    /// `per_month` minus this calendar month's spend (UTC), never below 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_month: Option<Amount>,
    /// `total` minus all spend under the mandate, never below 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<Amount>,
    /// The allows left under each count limit the mandate has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<RemainingCounts>,
}

/// How many allows each count limit still allows; a window the mandate does not count is
/// absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemainingCounts {
    /// `count.per_day` minus this UTC day's allows, never below 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_day: Option<u64>,
    /// `count.per_week` minus this ISO week's allows, never below 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_week: Option<u64>,
    /// `count.per_month` minus this calendar month's allows, never below 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_month: Option<u64>,
    /// `count.total` minus the mandate's allows over its life, never below 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
}

/// What `limits` still allow at `now`, given the mandate's `spend` to date (its allows, as
/// the engine counts them).
pub fn remaining(limits: &Limits, spend: &SpendToDate, now: OffsetDateTime) -> Remaining {
    let left = |limit: Amount, spent: Amount| {
        let value = limit.value() - spent.value();
        Amount::from_decimal(value).unwrap_or(Amount::ZERO)
    };
    Remaining {
        per_transaction: limits.per_transaction,
        per_day: limits.per_day.map(|l| left(l, spend.day_total_at(now))),
        per_week: limits.per_week.map(|l| left(l, spend.week_total_at(now))),
        per_month: limits.per_month.map(|l| left(l, spend.total_at(now))),
        total: limits.total.map(|l| left(l, spend.lifetime.total())),
        count: limits.count.map(|c| RemainingCounts {
            per_day: c.per_day.map(|l| l.saturating_sub(spend.day_count_at(now))),
            per_week: c
                .per_week
                .map(|l| l.saturating_sub(spend.week_count_at(now))),
            per_month: c
                .per_month
                .map(|l| l.saturating_sub(spend.month_count_at(now))),
            total: c.total.map(|l| l.saturating_sub(spend.lifetime.count())),
        }),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use time::macros::datetime;

    use super::*;
    use crate::history::AgentHistory;
    use crate::id::{AgentId, MandateId};
    use crate::mandate::{Mandate, MandateDraft, MandateStatus};
    use crate::names::{Category, Currency, Recipient};
    use crate::policy::{AuthorizationRequest, Mode, Verdict, evaluate};

    fn amount(text: &str) -> Amount {
        Amount::parse(text).unwrap()
    }

    fn limits(day: Option<&str>, week: Option<&str>, month: Option<&str>) -> Limits {
        Limits {
            per_transaction: amount("100"),
            min_per_transaction: None,
            per_day: day.map(amount),
            per_week: week.map(amount),
            per_month: month.map(amount),
            total: None,
            count: None,
            currency: Currency::parse("USD").unwrap(),
        }
    }

    #[test]
    fn each_window_is_its_limit_minus_its_spend_and_absent_limits_are_absent() {
        let now = datetime!(2026-11-25 12:00 UTC); // a Wednesday
        let mut spend = SpendToDate::default();
        // Oldest first, as the engine records them.
        spend.add(amount("50"), datetime!(2026-11-02 08:00 UTC)); // this month, not this week
        spend.add(amount("40"), datetime!(2026-11-23 08:00 UTC)); // Monday: this week
        spend.add(amount("30.25"), datetime!(2026-11-25 08:00 UTC)); // today
        let r = remaining(&limits(Some("60"), Some("80"), Some("500")), &spend, now);
        assert_eq!(r.per_transaction, amount("100"));
        assert_eq!(r.per_day, Some(amount("29.75")));
        assert_eq!(r.per_week, Some(amount("9.75")));
        assert_eq!(r.per_month, Some(amount("379.75")));
        let none = remaining(&limits(None, None, None), &spend, now);
        assert_eq!(
            (none.per_day, none.per_week, none.per_month),
            (None, None, None)
        );
        // Windows roll over: the next day, week and month start full.
        let later = remaining(
            &limits(Some("60"), Some("80"), Some("500")),
            &spend,
            datetime!(2026-12-01 00:00 UTC),
        );
        assert_eq!(later.per_day, Some(amount("60")));
        assert_eq!(later.per_week, Some(amount("80")));
        assert_eq!(later.per_month, Some(amount("500")));
    }

    #[test]
    fn spend_over_a_limit_leaves_zero_never_less() {
        let now = datetime!(2026-11-25 12:00 UTC);
        let mut spend = SpendToDate::default();
        // Over the limit (a mandate lowered after the spend, or an approval in observe).
        spend.add(amount("75"), now);
        let r = remaining(&limits(Some("60"), None, Some("75")), &spend, now);
        assert_eq!(r.per_day, Some(Amount::ZERO));
        assert_eq!(r.per_month, Some(Amount::ZERO));
    }

    /// The number the agent reads is the number the engine applies: the remaining amount
    /// of the tightest window is allowed, a cent more is denied, whatever the spend.
    #[test]
    fn the_remaining_amount_passes_the_engine_and_a_cent_more_does_not() {
        let now = datetime!(2026-11-25 12:00 UTC);
        let terms = MandateDraft::from_json(&serde_json::json!({
            "agent": "agt_a",
            "limits": {"per_transaction": 100, "per_day": 90, "per_week": 95,
                       "per_month": 99.99, "currency": "USD"},
            "categories": ["software"],
            "expires": "2026-12-31"
        }))
        .unwrap();
        let mandate = Mandate {
            id: MandateId::parse("mnd_m").unwrap(),
            terms,
            status: MandateStatus::Active,
            created_at: datetime!(2026-11-01 0:00 UTC),
        };
        for spent in ["0", "10.01", "42", "89.99", "90"] {
            let mut history = AgentHistory::default();
            history.spend.add(amount(spent), now);
            let r = remaining(&mandate.terms.limits, &history.spend, now);
            let tightest = [r.per_day, r.per_week, r.per_month]
                .into_iter()
                .flatten()
                .min()
                .unwrap()
                .min(r.per_transaction);
            let ask = |a: Amount| AuthorizationRequest {
                agent: AgentId::parse("agt_a").unwrap(),
                amount: a,
                currency: Currency::parse("USD").unwrap(),
                recipient: Recipient::parse("vendor:acme").unwrap(),
                category: Category::parse("software").unwrap(),
            };
            let cent = amount("0.01");
            let at_limit = evaluate(Some(&mandate), &ask(tightest), &history, Mode::Enforce, now);
            if tightest > Amount::ZERO {
                assert_eq!(at_limit.verdict, Verdict::Allow, "spent {spent}");
            }
            let over = tightest.checked_add(cent).unwrap();
            let beyond = evaluate(Some(&mandate), &ask(over), &history, Mode::Enforce, now);
            assert_eq!(beyond.verdict, Verdict::DenyLimit, "spent {spent}");
        }
    }

    /// The lifetime total and the count limits: what is left is what the engine still
    /// allows (the last allow left passes; with none left, the next is denied).
    #[test]
    fn the_total_and_the_counts_left_are_what_the_engine_still_allows() {
        let now = datetime!(2026-11-25 12:00 UTC);
        let terms = MandateDraft::from_json(&serde_json::json!({
            "agent": "agt_a",
            "limits": {"per_transaction": 100, "total": 250, "currency": "USD",
                       "count": {"per_day": 5, "per_month": 4, "total": 3}},
            "categories": ["software"],
            "expires": "2099-12-31"
        }))
        .unwrap();
        let mandate = Mandate {
            id: MandateId::parse("mnd_m").unwrap(),
            terms,
            status: MandateStatus::Active,
            created_at: datetime!(2026-10-01 0:00 UTC),
        };
        let mut history = AgentHistory::default();
        history
            .spend
            .add(amount("100"), datetime!(2026-10-20 08:00 UTC)); // an earlier month
        history
            .spend
            .add(amount("60.50"), datetime!(2026-11-25 08:00 UTC)); // today
        let r = remaining(&mandate.terms.limits, &history.spend, now);
        assert_eq!(r.total, Some(amount("89.50")));
        let counts = r.count.unwrap();
        assert_eq!(
            (
                counts.per_day,
                counts.per_week,
                counts.per_month,
                counts.total
            ),
            (Some(4), None, Some(3), Some(1))
        );
        let ask = |a: &str| AuthorizationRequest {
            agent: AgentId::parse("agt_a").unwrap(),
            amount: amount(a),
            currency: Currency::parse("USD").unwrap(),
            recipient: Recipient::parse("vendor:acme").unwrap(),
            category: Category::parse("software").unwrap(),
        };
        let over_total = evaluate(Some(&mandate), &ask("89.51"), &history, Mode::Enforce, now);
        assert_eq!(over_total.verdict, Verdict::DenyLimit);
        let last = evaluate(Some(&mandate), &ask("89.50"), &history, Mode::Enforce, now);
        assert_eq!(last.verdict, Verdict::Allow);
        history.spend.add(amount("1"), now);
        let r = remaining(&mandate.terms.limits, &history.spend, now);
        assert_eq!(r.count.unwrap().total, Some(0));
        let none_left = evaluate(Some(&mandate), &ask("1"), &history, Mode::Enforce, now);
        assert_eq!(none_left.verdict, Verdict::DenyLimit);
    }
}
