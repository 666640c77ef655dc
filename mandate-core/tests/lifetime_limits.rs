//! The mandate model of the third round (issue #36): `limits.total` over the mandate's
//! life, count limits per window (`limits.count`), and a start (`not_before`): parsing,
//! their place in the rule order, their boundaries, their reasons and their properties.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines,
    missing_docs
)]

use mandate_core::{
    AgentHistory, AgentId, Amount, AuthorizationRequest, Mandate, MandateDraft, MandateId,
    MandateStatus, Mode, Verdict, evaluate,
};
use mandate_protocol::policy::evaluate_approval;
use proptest::prelude::*;
use serde_json::{Value, json};
use time::macros::datetime;
use time::{Duration, OffsetDateTime};

/// Wednesday 2026-11-25, noon UTC.
const NOW: OffsetDateTime = datetime!(2026-11-25 12:00 UTC);

fn body() -> Value {
    serde_json::from_str(
        r#"{
            "agent": "agt_buyer",
            "limits": {"per_transaction": 100, "per_day": 300, "per_week": 600,
                       "per_month": 900, "total": 1000.50, "currency": "USD",
                       "count": {"per_day": 3, "per_week": 5, "per_month": 8, "total": 10}},
            "categories": ["software"],
            "expires": "2026-12-31",
            "not_before": "2026-11-20"
        }"#,
    )
    .unwrap()
}

fn mandate_from(body: &Value) -> Mandate {
    Mandate {
        id: MandateId::parse("mnd_m1").unwrap(),
        terms: MandateDraft::from_json(body).unwrap(),
        status: MandateStatus::Active,
        created_at: datetime!(2026-11-01 0:00 UTC),
    }
}

fn ask(amount: &str) -> AuthorizationRequest {
    AuthorizationRequest::from_json(
        AgentId::parse("agt_buyer").unwrap(),
        &serde_json::from_str(&format!(
            r#"{{"amount": {amount}, "currency": "USD", "recipient": "vendor:acme", "category": "software"}}"#
        ))
        .unwrap(),
    )
    .unwrap()
}

fn amount(text: &str) -> Amount {
    Amount::parse(text).unwrap()
}

/// A history whose allows were `spent` at each time given, oldest first.
fn spent(allows: &[(&str, OffsetDateTime)]) -> AgentHistory {
    let mut history = AgentHistory::default();
    for (a, at) in allows {
        mandate_protocol::history::spend_mut(&mut history).add(amount(a), *at);
    }
    history
}

fn judged(m: &Mandate, r: &AuthorizationRequest, h: &AgentHistory) -> (Verdict, Option<String>) {
    judged_at(m, r, h, NOW)
}

fn judged_at(
    m: &Mandate,
    r: &AuthorizationRequest,
    h: &AgentHistory,
    now: OffsetDateTime,
) -> (Verdict, Option<String>) {
    let got = evaluate(Some(m), r, h, Mode::Enforce, now);
    (got.verdict, got.reason.map(|r| r.to_string()))
}

fn error_for(edit: impl FnOnce(&mut Value)) -> String {
    let mut value = body();
    edit(&mut value);
    MandateDraft::from_json(&value).unwrap_err().to_string()
}

#[test]
fn the_new_fields_parse_exactly_and_errors_name_the_field() {
    let m = mandate_from(&body());
    let limits = &m.terms.limits;
    assert_eq!(limits.total.unwrap().to_string(), "1000.50");
    let count = limits.count.unwrap();
    assert_eq!(
        (count.per_day, count.per_week, count.per_month, count.total),
        (Some(3), Some(5), Some(8), Some(10))
    );
    assert!(mandate_protocol::mandate::counts_lifetime(limits));
    let json = mandate_protocol::wire::mandate_json(&m, NOW);
    assert_eq!(json["limits"]["total"].to_string(), "1000.50");
    assert_eq!(
        json["limits"]["count"],
        json!({"per_day": 3, "per_week": 5, "per_month": 8, "total": 10})
    );
    assert_eq!(json["not_before"], "2026-11-20");

    assert_eq!(
        error_for(|v| v["limits"]["total"] = json!("10")),
        "limits.total must be a plain decimal number such as 12.50"
    );
    assert_eq!(
        error_for(|v| v["limits"]["count"]["per_day"] = json!(0)),
        "limits.count.per_day must be a whole number from 1 to 1000000000"
    );
    assert_eq!(
        error_for(|v| v["limits"]["count"]["total"] = json!(2.5)),
        "limits.count.total must be a whole number from 1 to 1000000000"
    );
    // JSON Schema's integer: a whole number written with a zero fraction is that number.
    let mut whole = body();
    whole["limits"]["count"]["per_week"] = serde_json::from_str("46730.0").unwrap();
    let draft = MandateDraft::from_json(&whole).unwrap();
    assert_eq!(draft.limits.count.unwrap().per_week, Some(46730));
    assert_eq!(
        error_for(|v| v["limits"]["count"]["per_week"] = serde_json::from_str("2.50").unwrap()),
        "limits.count.per_week must be a whole number from 1 to 1000000000"
    );
    assert_eq!(
        error_for(|v| v["limits"]["count"]["per_year"] = json!(1)),
        "unknown field limits.count.per_year"
    );
    assert_eq!(
        error_for(|v| v["limits"]["count"] = json!({})),
        "limits.count must set at least one of per_day, per_week, per_month and total"
    );
    assert_eq!(
        error_for(|v| v["limits"]["count"] = json!(3)),
        "limits.count must be an object"
    );
    assert_eq!(
        error_for(|v| v["not_before"] = json!("2026-11-31")),
        "not_before must be a date, YYYY-MM-DD"
    );
    assert_eq!(
        error_for(|v| v["not_before"] = json!("2027-01-01")),
        "not_before must be on or before expires (2026-12-31)"
    );

    // Without them: none echoed, no lifetime reading needed.
    let mut plain = body();
    plain["limits"].as_object_mut().unwrap().remove("total");
    plain["limits"]["count"] = json!({"per_day": 1});
    plain.as_object_mut().unwrap().remove("not_before");
    let m = mandate_from(&plain);
    assert!(!mandate_protocol::mandate::counts_lifetime(&m.terms.limits));
    let json = mandate_protocol::wire::mandate_json(&m, NOW);
    assert!(json.get("not_before").is_none() && json["limits"].get("total").is_none());
}

#[test]
fn before_not_before_the_mandate_is_not_in_force() {
    let m = mandate_from(&body());
    let none = AgentHistory::default();
    let start = datetime!(2026-11-20 0:00 UTC);
    assert_eq!(
        judged_at(&m, &ask("10"), &none, start - Duration::seconds(1)),
        (
            Verdict::DenyNoMandate,
            Some("mandate mnd_m1 is not in force before 2026-11-20 (not_before)".into())
        )
    );
    assert_eq!(judged_at(&m, &ask("10"), &none, start).0, Verdict::Allow);
    // Read in UTC: 2026-11-20 00:30 in Paris is still the 19th.
    let paris = datetime!(2026-11-20 0:30 +01:00);
    assert_eq!(
        judged_at(&m, &ask("10"), &none, paris).0,
        Verdict::DenyNoMandate
    );
    // deny_no_mandate comes before deny_revoked.
    let mut revoked = m.clone();
    revoked.status = MandateStatus::Revoked;
    assert_eq!(
        judged_at(&revoked, &ask("10"), &none, start - Duration::days(1)).0,
        Verdict::DenyNoMandate
    );
    assert_eq!(
        judged_at(&revoked, &ask("10"), &none, start).0,
        Verdict::DenyRevoked
    );
    // In observe nothing blocks, the policy verdict keeps it.
    let got = evaluate(
        Some(&m),
        &ask("10"),
        &none,
        Mode::Observe,
        start - Duration::days(1),
    );
    assert_eq!(
        (got.verdict, got.policy_verdict),
        (Verdict::Allow, Verdict::DenyNoMandate)
    );
}

#[test]
fn total_counts_every_allow_of_the_mandate_and_is_strict() {
    let m = mandate_from(&body());
    // 950.50 over four months: no window holds more than its limit.
    let history = spent(&[
        ("250", datetime!(2026-08-03 10:00 UTC)),
        ("250", datetime!(2026-09-07 10:00 UTC)),
        ("250", datetime!(2026-10-05 10:00 UTC)),
        ("200.50", datetime!(2026-11-23 10:00 UTC)),
    ]);
    assert_eq!(judged(&m, &ask("50"), &history).0, Verdict::Allow);
    assert_eq!(
        judged(&m, &ask("50.01"), &history),
        (
            Verdict::DenyLimit,
            Some(
                "amount 50.01 would bring the mandate's spend to 1000.51, over the total limit 1000.50"
                    .into()
            )
        )
    );
}

#[test]
fn count_limits_cap_allows_per_window_and_in_total() {
    let m = mandate_from(&body());
    let day = spent(&[("1", NOW), ("1", NOW), ("1", NOW)]);
    assert_eq!(
        judged(&m, &ask("1"), &day),
        (
            Verdict::DenyLimit,
            Some("3 allows today already, one more would be over the count.per_day limit 3".into())
        )
    );
    // Two today, three earlier this week: the week is full.
    let week = spent(&[
        ("1", NOW - Duration::days(2)),
        ("1", NOW - Duration::days(2)),
        ("1", NOW - Duration::days(1)),
        ("1", NOW),
        ("1", NOW),
    ]);
    let got = judged(&m, &ask("1"), &week);
    assert_eq!(
        got.1.as_deref(),
        Some("5 allows this week already, one more would be over the count.per_week limit 5")
    );
    // Monday: a new week, the day and the week are free.
    let monday = datetime!(2026-11-30 0:00 UTC);
    assert_eq!(judged_at(&m, &ask("1"), &week, monday).0, Verdict::Allow);
    // Eight this month over three weeks.
    let mut times = Vec::new();
    for d in [2, 3, 4, 9, 10, 11, 16, 17] {
        times.push(("1", datetime!(2026-11-01 12:00 UTC) + Duration::days(d)));
    }
    let month = spent(&times);
    assert_eq!(
        judged(&m, &ask("1"), &month).1.as_deref(),
        Some("8 allows this month already, one more would be over the count.per_month limit 8")
    );
    // Ten over the mandate's life, two months apart.
    let mut times = Vec::new();
    for d in 0..10 {
        times.push(("1", datetime!(2026-08-03 12:00 UTC) + Duration::days(d * 7)));
    }
    let life = spent(&times);
    assert_eq!(
        judged(&m, &ask("1"), &life).1.as_deref(),
        Some(
            "10 allows under the mandate already, one more would be over the count.total limit 10"
        )
    );
}

#[test]
fn the_order_within_deny_limit_is_money_then_counts() {
    let m = mandate_from(&body());
    let rule = |r: &AuthorizationRequest, h: &AgentHistory| {
        evaluate(Some(&m), r, h, Mode::Enforce, NOW)
            .reason
            .map(|r| r.rule())
    };
    // A day full by count and by amount: per_day (money) is named first.
    let full = spent(&[("100", NOW), ("100", NOW), ("100", NOW)]);
    assert_eq!(rule(&ask("1"), &full), Some("limits.per_day"));
    // Over per_transaction and every count: per_transaction first.
    assert_eq!(rule(&ask("100.01"), &full), Some("limits.per_transaction"));
    // The lifetime total before the count limits.
    let total = spent(&[
        ("300", datetime!(2026-09-01 0:00 UTC)),
        ("300", datetime!(2026-10-01 0:00 UTC)),
        ("300", datetime!(2026-11-02 0:00 UTC)),
        ("1", NOW),
        ("1", NOW),
        ("1", NOW),
    ]);
    assert_eq!(rule(&ask("99"), &total), Some("limits.total"));
    assert_eq!(rule(&ask("1"), &total), Some("limits.count.per_day"));
    // The count windows in order: day, week, month, total.
    let mut counts = m.clone();
    counts.terms.limits.count.as_mut().unwrap().per_day = None;
    let week = spent(&[("1", NOW); 5]);
    let got = evaluate(Some(&counts), &ask("1"), &week, Mode::Enforce, NOW);
    assert_eq!(got.reason.map(|r| r.rule()), Some("limits.count.per_week"));
    // A currency mismatch before all of them.
    let mut eur = ask("1");
    eur.currency = mandate_core::Currency::parse("EUR").unwrap();
    assert_eq!(rule(&eur, &full), Some("limits.currency"));
    // And the review after them.
    let mut review = m.clone();
    review.terms.review_above = Some(amount("0.5"));
    let got = evaluate(Some(&review), &ask("1"), &full, Mode::Enforce, NOW);
    assert_eq!(got.verdict, Verdict::DenyLimit);
    let got = evaluate(
        Some(&review),
        &ask("1"),
        &AgentHistory::default(),
        Mode::Enforce,
        NOW,
    );
    assert_eq!(got.verdict, Verdict::Review);
}

#[test]
fn an_approval_rechecks_total_and_counts_as_they_are_now() {
    let m = mandate_from(&body());
    let full = spent(&[("1", NOW), ("1", NOW), ("1", NOW)]);
    let got = evaluate_approval(Some(&m), &ask("1"), &full, Mode::Enforce, NOW);
    assert_eq!(got.reason.map(|r| r.rule()), Some("limits.count.per_day"));
    let big = spent(&[
        ("300", datetime!(2026-09-01 0:00 UTC)),
        ("300", datetime!(2026-10-01 0:00 UTC)),
        ("350", datetime!(2026-11-02 0:00 UTC)),
    ]);
    let got = evaluate_approval(Some(&m), &ask("60"), &big, Mode::Enforce, NOW);
    assert_eq!(got.reason.map(|r| r.rule()), Some("limits.total"));
}

fn amount_strategy() -> impl Strategy<Value = Amount> {
    (0u64..12_000, 0u32..3).prop_map(|(cents, scale)| {
        Amount::from_decimal(rust_decimal::Decimal::new(cents as i64, scale)).unwrap()
    })
}

proptest! {
    /// No sequence of requests over weeks and months drives the mandate's allows past its
    /// total, or any window's number of allows past its count limit.
    #[test]
    fn allows_never_exceed_the_total_or_a_count(
        steps in proptest::collection::vec((amount_strategy(), 0i64..200_000_000), 1..300),
    ) {
        let mut m = mandate_from(&body());
        m.terms.not_before = None;
        m.terms.expires = time::macros::date!(2030 - 12 - 31);
        let count = m.terms.limits.count.unwrap();
        let mut history = AgentHistory::default();
        let mut now = datetime!(2026-11-01 0:00 UTC);
        let (mut total, mut allows) = (rust_decimal::Decimal::ZERO, 0u64);
        let mut by_day = std::collections::HashMap::<i64, u64>::new();
        let mut by_week = std::collections::HashMap::<i64, u64>::new();
        for (amount, gap_ms) in steps {
            now += Duration::milliseconds(gap_ms);
            let mut r = ask("1");
            r.amount = amount;
            let got = evaluate(Some(&m), &r, &history, Mode::Enforce, now);
            if got.verdict == Verdict::Allow {
                total += amount.value();
                allows += 1;
                let day = by_day.entry(mandate_protocol::history::day_of(now)).or_default();
                *day += 1;
                let week = by_week.entry(mandate_protocol::history::week_of(now)).or_default();
                *week += 1;
                prop_assert!(total <= m.terms.limits.total.unwrap().value());
                prop_assert!(allows <= count.total.unwrap());
                prop_assert!(*day <= count.per_day.unwrap());
                prop_assert!(*week <= count.per_week.unwrap());
            }
            history.record(&got, amount, now);
        }
    }
}
