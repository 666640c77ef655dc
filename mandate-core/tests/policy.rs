//! The policy engine's rules, their order and their boundaries, and its properties.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines,
    missing_docs
)]

use mandate_core::{
    AgentHistory, AgentId, Amount, AuthorizationRequest, Evaluation, Mandate, MandateDraft,
    MandateId, MandateStatus, Mode, Verdict, evaluate,
};
use mandate_protocol::policy::evaluate_approval;
use proptest::prelude::*;
use serde_json::json;
use time::macros::datetime;
use time::{Duration, OffsetDateTime};

const NOW: OffsetDateTime = datetime!(2026-11-22 12:00 UTC);

fn mandate_with(status: MandateStatus, per_month: Option<u32>) -> Mandate {
    let mut limits = json!({"per_transaction": 100, "currency": "USD"});
    if let Some(p) = per_month {
        limits["per_month"] = json!(p);
    }
    let terms = MandateDraft::from_json(&json!({
        "agent": "agt_buyer",
        "limits": limits,
        "categories": ["software", "travel"],
        "review_above": 50,
        "expires": "2026-12-31"
    }))
    .unwrap();
    Mandate {
        id: MandateId::parse("mnd_m1").unwrap(),
        terms,
        status,
        created_at: datetime!(2026-11-01 0:00 UTC),
    }
}

fn mandate(status: MandateStatus) -> Mandate {
    mandate_with(status, Some(450))
}

fn request(amount: &str, currency: &str, category: &str) -> AuthorizationRequest {
    AuthorizationRequest::from_json(
        AgentId::parse("agt_buyer").unwrap(),
        &serde_json::from_str(&format!(
            r#"{{"amount": {amount}, "currency": "{currency}", "recipient": "vendor:acme", "category": "{category}"}}"#
        ))
        .unwrap(),
    )
    .unwrap()
}

fn allowed() -> Evaluation {
    Evaluation {
        verdict: Verdict::Allow,
        policy_verdict: Verdict::Allow,
        reason: None,
    }
}

fn denied() -> Evaluation {
    Evaluation {
        verdict: Verdict::DenyCategory,
        policy_verdict: Verdict::DenyCategory,
        reason: None,
    }
}

/// A history with `count` requests spread over the 50 seconds before `now`.
fn busy(count: i64, now: OffsetDateTime) -> AgentHistory {
    let mut history = AgentHistory::default();
    for i in 0..count {
        history.record(&denied(), Amount::ZERO, now - Duration::seconds(50 - i));
    }
    history
}

/// One row of the table: what the engine says in enforce mode, and its reason.
fn check(
    m: Option<&Mandate>,
    r: &AuthorizationRequest,
    h: &AgentHistory,
    now: OffsetDateTime,
    verdict: Verdict,
    reason: Option<&str>,
) {
    let got = evaluate(m, r, h, Mode::Enforce, now);
    assert_eq!(got.verdict, verdict, "reason: {:?}", got.reason);
    assert_eq!(got.policy_verdict, verdict);
    if let Some(expected) = reason {
        assert_eq!(got.reason.map(|r| r.to_string()).as_deref(), Some(expected));
    }
}

#[test]
fn each_rule_alone() {
    let active = mandate(MandateStatus::Active);
    let none = AgentHistory::default();
    check(
        None,
        &request("10", "USD", "software"),
        &none,
        NOW,
        Verdict::DenyNoMandate,
        Some("agent agt_buyer has no mandate"),
    );
    check(
        Some(&mandate(MandateStatus::Revoked)),
        &request("10", "USD", "software"),
        &none,
        NOW,
        Verdict::DenyRevoked,
        Some("mandate mnd_m1 was revoked"),
    );
    check(
        Some(&active),
        &request("10", "USD", "software"),
        &none,
        datetime!(2027-01-01 0:00 UTC),
        Verdict::DenyExpired,
        Some("mandate mnd_m1 expired at the end of 2026-12-31"),
    );
    check(
        Some(&active),
        &request("10", "USD", "software"),
        &busy(10, NOW),
        NOW,
        Verdict::DenyVelocity,
        Some("more than 10 requests from agent agt_buyer within 60 seconds"),
    );
    check(
        Some(&active),
        &request("10", "USD", "food"),
        &none,
        NOW,
        Verdict::DenyCategory,
        Some("category food is not allowed by mandate mnd_m1"),
    );
    check(
        Some(&active),
        &request("10", "EUR", "software"),
        &none,
        NOW,
        Verdict::DenyLimit,
        Some("currency EUR differs from the mandate's currency USD"),
    );
    check(
        Some(&active),
        &request("100.01", "USD", "software"),
        &none,
        NOW,
        Verdict::DenyLimit,
        Some("amount 100.01 exceeds per_transaction limit 100"),
    );
    check(
        Some(&active),
        &request("50.01", "USD", "software"),
        &none,
        NOW,
        Verdict::Review,
        Some("amount 50.01 is above review_above 50 and needs a human review"),
    );
    check(
        Some(&active),
        &request("10", "USD", "software"),
        &none,
        NOW,
        Verdict::Allow,
        None,
    );
}

#[test]
fn the_first_rule_that_holds_wins() {
    // Everything wrong at once: revoked beats expired, velocity, category and limit.
    let everything = request("1000", "EUR", "food");
    let late = datetime!(2027-02-01 0:00 UTC);
    check(
        Some(&mandate(MandateStatus::Revoked)),
        &everything,
        &busy(10, late),
        late,
        Verdict::DenyRevoked,
        None,
    );
    check(
        Some(&mandate(MandateStatus::Active)),
        &everything,
        &busy(10, late),
        late,
        Verdict::DenyExpired,
        None,
    );
    check(
        Some(&mandate(MandateStatus::Active)),
        &everything,
        &busy(10, NOW),
        NOW,
        Verdict::DenyVelocity,
        None,
    );
    check(
        Some(&mandate(MandateStatus::Active)),
        &everything,
        &busy(9, NOW),
        NOW,
        Verdict::DenyCategory,
        None,
    );
    check(
        Some(&mandate(MandateStatus::Active)),
        &request("1000", "EUR", "travel"),
        &busy(9, NOW),
        NOW,
        Verdict::DenyLimit,
        Some("currency EUR differs from the mandate's currency USD"),
    );
    // Over per_transaction is a denial even though it is also above review_above.
    check(
        Some(&mandate(MandateStatus::Active)),
        &request("1000", "USD", "travel"),
        &busy(9, NOW),
        NOW,
        Verdict::DenyLimit,
        None,
    );
    // No mandate beats everything.
    check(
        None,
        &everything,
        &busy(10, NOW),
        NOW,
        Verdict::DenyNoMandate,
        None,
    );
}

#[test]
fn boundaries() {
    let active = mandate(MandateStatus::Active);
    let none = AgentHistory::default();
    // Equal to the limit is within it; equal to review_above is not above it.
    check(
        Some(&active),
        &request("100", "USD", "software"),
        &none,
        NOW,
        Verdict::Review,
        None,
    );
    check(
        Some(&active),
        &request("100.00", "USD", "software"),
        &none,
        NOW,
        Verdict::Review,
        None,
    );
    check(
        Some(&active),
        &request("50", "USD", "software"),
        &none,
        NOW,
        Verdict::Allow,
        None,
    );
    check(
        Some(&active),
        &request("50.000000001", "USD", "software"),
        &none,
        NOW,
        Verdict::Review,
        None,
    );
    // The 10th request in 60 s passes, the 11th is over.
    check(
        Some(&active),
        &request("1", "USD", "software"),
        &busy(9, NOW),
        NOW,
        Verdict::Allow,
        None,
    );
    check(
        Some(&active),
        &request("1", "USD", "software"),
        &busy(10, NOW),
        NOW,
        Verdict::DenyVelocity,
        None,
    );
    // Ten requests, the oldest exactly 60 s ago: it has left the window.
    let mut edge = AgentHistory::default();
    for i in 0..10 {
        edge.record(
            &denied(),
            Amount::ZERO,
            NOW - Duration::seconds(60) + Duration::milliseconds(i),
        );
    }
    check(
        Some(&active),
        &request("1", "USD", "software"),
        &edge,
        NOW,
        Verdict::Allow,
        None,
    );
    check(
        Some(&active),
        &request("1", "USD", "software"),
        &edge,
        NOW - Duration::milliseconds(1),
        Verdict::DenyVelocity,
        None,
    );
    // The last second of the expiry date is valid; the next is not.
    check(
        Some(&active),
        &request("1", "USD", "software"),
        &none,
        datetime!(2026-12-31 23:59:59.999 UTC),
        Verdict::Allow,
        None,
    );
    check(
        Some(&active),
        &request("1", "USD", "software"),
        &none,
        datetime!(2027-01-01 0:00 UTC),
        Verdict::DenyExpired,
        None,
    );
    // The expiry date is read in UTC, whatever offset `now` carries.
    check(
        Some(&active),
        &request("1", "USD", "software"),
        &none,
        datetime!(2026-12-31 20:00 -05:00),
        Verdict::DenyExpired,
        None,
    );
}

#[test]
fn per_month_counts_allowed_spend_in_the_calendar_month() {
    let active = mandate(MandateStatus::Active);
    let mut history = AgentHistory::default();
    let forty = Amount::parse("40").unwrap();
    for day in 1..=11 {
        history.record(
            &allowed(),
            forty,
            datetime!(2026-11-01 0:00 UTC) + Duration::days(day),
        );
    }
    // 440 spent: 10 more is exactly 450, 10.01 more is over.
    check(
        Some(&active),
        &request("10", "USD", "software"),
        &history,
        NOW,
        Verdict::Allow,
        None,
    );
    check(
        Some(&active),
        &request("10.01", "USD", "software"),
        &history,
        NOW,
        Verdict::DenyLimit,
        Some("month-to-date spend 440 plus amount 10.01 exceeds per_month limit 450"),
    );
    // A new month starts from zero.
    check(
        Some(&active),
        &request("40", "USD", "software"),
        &history,
        datetime!(2026-12-01 0:00 UTC),
        Verdict::Allow,
        None,
    );
    // Denials do not count as spend.
    let mut only_denials = AgentHistory::default();
    for _ in 0..20 {
        only_denials.record(
            &denied(),
            Amount::parse("100").unwrap(),
            NOW - Duration::days(2),
        );
    }
    check(
        Some(&active),
        &request("40", "USD", "software"),
        &only_denials,
        NOW,
        Verdict::Allow,
        None,
    );
    // Without per_month there is no monthly cap.
    let uncapped = mandate_with(MandateStatus::Active, None);
    check(
        Some(&uncapped),
        &request("40", "USD", "software"),
        &history,
        NOW,
        Verdict::Allow,
        None,
    );
}

#[test]
fn observe_mode_never_blocks_and_keeps_what_enforce_would_say() {
    let active = mandate(MandateStatus::Active);
    let got = evaluate(
        Some(&active),
        &request("100.01", "USD", "software"),
        &AgentHistory::default(),
        Mode::Observe,
        NOW,
    );
    assert_eq!(got.verdict, Verdict::Allow);
    assert_eq!(got.policy_verdict, Verdict::DenyLimit);
    assert_eq!(
        got.reason.map(|r| r.to_string()).as_deref(),
        Some("amount 100.01 exceeds per_transaction limit 100")
    );
    let review = evaluate(
        Some(&active),
        &request("60", "USD", "software"),
        &AgentHistory::default(),
        Mode::Observe,
        NOW,
    );
    assert_eq!(
        (review.verdict, review.policy_verdict),
        (Verdict::Allow, Verdict::Review)
    );
    assert!(!mandate_protocol::policy::opens_review(&review));
    let enforced = evaluate(
        Some(&active),
        &request("60", "USD", "software"),
        &AgentHistory::default(),
        Mode::Enforce,
        NOW,
    );
    assert!(mandate_protocol::policy::opens_review(&enforced));
}

#[test]
fn approval_rechecks_the_mandate_as_it_is_now() {
    let active = mandate(MandateStatus::Active);
    let r = request("60", "USD", "software");
    // Above review_above and at the velocity limit, still allowed on approval.
    assert_eq!(
        evaluate_approval(Some(&active), &r, &busy(10, NOW), Mode::Enforce, NOW).verdict,
        Verdict::Allow
    );
    assert_eq!(
        evaluate_approval(
            Some(&mandate(MandateStatus::Revoked)),
            &r,
            &AgentHistory::default(),
            Mode::Enforce,
            NOW
        )
        .verdict,
        Verdict::DenyRevoked
    );
    assert_eq!(
        evaluate_approval(
            Some(&active),
            &r,
            &AgentHistory::default(),
            Mode::Enforce,
            datetime!(2027-01-01 0:00 UTC)
        )
        .verdict,
        Verdict::DenyExpired
    );
    let mut spent = AgentHistory::default();
    spent.record(&allowed(), Amount::parse("400").unwrap(), NOW);
    assert_eq!(
        evaluate_approval(Some(&active), &r, &spent, Mode::Enforce, NOW).verdict,
        Verdict::DenyLimit
    );
}

#[test]
fn approval_in_observe_allows_and_keeps_what_the_recheck_found() {
    let active = mandate(MandateStatus::Active);
    let revoked = mandate(MandateStatus::Revoked);
    let r = request("60", "USD", "software");
    let mut spent = AgentHistory::default();
    spent.record(&allowed(), Amount::parse("400").unwrap(), NOW);
    let after_expiry = datetime!(2027-01-01 0:00 UTC);
    let fresh = AgentHistory::default();
    let cases: [(Option<&Mandate>, &AgentHistory, OffsetDateTime, Verdict); 5] = [
        (Some(&revoked), &fresh, NOW, Verdict::DenyRevoked),
        (Some(&active), &fresh, after_expiry, Verdict::DenyExpired),
        (Some(&active), &spent, NOW, Verdict::DenyLimit),
        (None, &fresh, NOW, Verdict::DenyNoMandate),
        (Some(&active), &busy(10, NOW), NOW, Verdict::Allow),
    ];
    for (m, history, now, found) in cases {
        let enforced = evaluate_approval(m, &r, history, Mode::Enforce, now);
        let observed = evaluate_approval(m, &r, history, Mode::Observe, now);
        // Nothing blocks in observe; the re-check's finding and reason are kept.
        assert_eq!(observed.verdict, Verdict::Allow, "{found:?}");
        assert_eq!(observed.policy_verdict, found);
        assert_eq!(observed.reason, enforced.reason);
        // In enforce the finding is the verdict.
        assert_eq!((enforced.verdict, enforced.policy_verdict), (found, found));
    }
    // An observe-mode allow counts in month-to-date, as recorded by the caller.
    let mut history = AgentHistory::default();
    let observed = evaluate_approval(Some(&active), &r, &spent, Mode::Observe, NOW);
    history.record(&observed, Amount::parse("60").unwrap(), NOW);
    assert_eq!(history.spent_at(NOW), Amount::parse("60").unwrap());
}

#[test]
fn request_bodies_name_the_field() {
    let agent = AgentId::parse("agt_buyer").unwrap();
    let err = |body: serde_json::Value| {
        AuthorizationRequest::from_json(agent.clone(), &body)
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        err(json!({"currency": "USD", "recipient": "vendor:a", "category": "x"})),
        "amount is required"
    );
    assert_eq!(
        err(json!({"amount": "1", "currency": "USD", "recipient": "vendor:a", "category": "x"})),
        "amount must be a plain decimal number such as 12.50"
    );
    assert_eq!(
        err(json!({"amount": 1, "currency": "USD", "recipient": "acme", "category": "x"})),
        "recipient must be vendor:<name>, where name is 1 to 128 characters of [A-Za-z0-9._-]"
    );
    assert_eq!(
        err(
            json!({"amount": 1, "currency": "USD", "recipient": "vendor:a", "category": "x", "tip": 1})
        ),
        "unknown field tip"
    );
    assert_eq!(
        err(
            json!({"amount": 1, "currency": "USD", "recipient": "vendor:a", "category": "x", "agent": "agt_x"})
        ),
        "agent is read-only and cannot be set"
    );
}

fn amount_strategy() -> impl Strategy<Value = Amount> {
    (0u64..20_000, 0u32..3).prop_map(|(cents, scale)| {
        Amount::from_decimal(rust_decimal::Decimal::new(cents as i64, scale)).unwrap()
    })
}

proptest! {
    /// No sequence of requests drives month-to-date past per_month through `allow`.
    #[test]
    fn allows_never_exceed_per_month(
        steps in proptest::collection::vec((amount_strategy(), 0i64..200_000), 1..200),
        review_above in proptest::option::of(0u32..150),
    ) {
        let mut m = mandate(MandateStatus::Active);
        m.terms.review_above = review_above.map(|v| Amount::from_decimal(v.into()).unwrap());
        let per_month = m.terms.limits.per_month.unwrap();
        let mut history = AgentHistory::default();
        let mut now = datetime!(2026-11-01 0:00 UTC);
        let mut allowed_total = rust_decimal::Decimal::ZERO;
        for (amount, gap_ms) in steps {
            now += Duration::milliseconds(gap_ms);
            if now.month() != time::Month::November { break; }
            let mut r = request("1", "USD", "software");
            r.amount = amount;
            let got = evaluate(Some(&m), &r, &history, Mode::Enforce, now);
            if got.verdict == Verdict::Allow {
                allowed_total += amount.value();
                prop_assert!(amount <= m.terms.limits.per_transaction);
            }
            prop_assert!(allowed_total <= per_month.value());
            history.record(&got, amount, now);
        }
    }

    /// Observe never returns a denial; enforce never allows above per_transaction.
    #[test]
    fn modes_keep_their_promises(amount in amount_strategy(), category in "(software|travel|food)", busy_count in 0i64..12, revoked: bool) {
        let m = mandate(if revoked { MandateStatus::Revoked } else { MandateStatus::Active });
        let mut r = request("1", "USD", &category);
        r.amount = amount;
        let history = busy(busy_count, NOW);
        let observed = evaluate(Some(&m), &r, &history, Mode::Observe, NOW);
        prop_assert!(!observed.verdict.is_denial());
        prop_assert_eq!(observed.verdict, Verdict::Allow);
        let enforced = evaluate(Some(&m), &r, &history, Mode::Enforce, NOW);
        prop_assert_eq!(enforced.policy_verdict, observed.policy_verdict);
        if amount > m.terms.limits.per_transaction {
            prop_assert_ne!(enforced.verdict, Verdict::Allow);
        }
    }
}

/// A reason is data (what the rule compared) and serializes as the message the API returns;
/// the superseded case names the mandate.
#[test]
fn reasons_are_data_and_serialize_as_their_message() {
    let reason = mandate_core::Reason::PerMonth {
        spent: Amount::parse("440").unwrap(),
        amount: Amount::parse("10.01").unwrap(),
        limit: Amount::parse("450").unwrap(),
    };
    assert_eq!(
        serde_json::to_value(&reason).unwrap(),
        json!("month-to-date spend 440 plus amount 10.01 exceeds per_month limit 450")
    );
    let superseded = mandate_core::Reason::Superseded {
        mandate: MandateId::parse("mnd_m1").unwrap(),
    };
    assert_eq!(
        superseded.to_string(),
        "mandate mnd_m1 was superseded and the agent has no current mandate"
    );
}

/// `limits.min_per_transaction` (AP2's `payment.amount_range.min`): below it is
/// `deny_limit` naming the minimum and the amount, after the currency and before the
/// per-transaction cap; at it is allowed. A minimum above the cap is refused at parse.
#[test]
fn the_minimum_per_transaction_comes_after_the_currency_and_before_the_cap() {
    let body = |min: &str| {
        serde_json::from_str::<serde_json::Value>(&format!(
            r#"{{"agent": "agt_buyer", "categories": ["software"], "expires": "2026-12-31",
                "limits": {{"per_transaction": 100, "min_per_transaction": {min}, "currency": "USD"}}}}"#
        ))
        .unwrap()
    };
    let mandate = Mandate {
        id: MandateId::parse("mnd_m1").unwrap(),
        terms: MandateDraft::from_json(&body("5.00")).unwrap(),
        status: MandateStatus::Active,
        created_at: datetime!(2026-11-01 0:00 UTC),
    };
    let decide = |amount: &str, currency: &str| {
        let e = evaluate(
            Some(&mandate),
            &request(amount, currency, "software"),
            &AgentHistory::default(),
            Mode::Enforce,
            NOW,
        );
        let reason = e.reason.as_ref().map(|r| (r.rule(), r.to_string()));
        (e.verdict, reason)
    };
    assert_eq!(
        decide("4.99", "USD"),
        (
            Verdict::DenyLimit,
            Some((
                "limits.min_per_transaction",
                "amount 4.99 is below the min_per_transaction minimum 5.00".to_owned()
            ))
        )
    );
    assert_eq!(decide("4.99", "EUR").1.unwrap().0, "limits.currency");
    assert_eq!(decide("5.00", "USD"), (Verdict::Allow, None));
    assert_eq!(decide("5", "USD").0, Verdict::Allow);
    assert_eq!(
        decide("100.01", "USD").1.unwrap().0,
        "limits.per_transaction"
    );
    assert_eq!(
        MandateDraft::from_json(&body("100.01"))
            .unwrap_err()
            .to_string(),
        "limits.min_per_transaction must be <= limits.per_transaction (100)"
    );
    assert!(MandateDraft::from_json(&body("100")).is_ok());
}
