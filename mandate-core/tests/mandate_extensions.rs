//! The mandate extensions of issue #30: `limits.per_day`, `limits.per_week` and
//! `recipients`, their parsing, their place in the rule order, their boundaries and their
//! windows.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines,
    missing_docs
)]

use mandate_core::{
    AgentHistory, AgentId, Amount, AuthorizationRequest, Mandate, MandateDraft, MandateId,
    MandateStatus, Mode, Recipient, RecipientPattern, Verdict, evaluate,
};
use mandate_protocol::policy::evaluate_approval;
use proptest::prelude::*;
use serde_json::{Value, json};
use time::macros::datetime;
use time::{Duration, OffsetDateTime};

/// Wednesday 2026-11-25, noon UTC.
const NOW: OffsetDateTime = datetime!(2026-11-25 12:00 UTC);

fn body() -> Value {
    json!({
        "agent": "agt_buyer",
        "limits": {"per_transaction": 100, "per_day": 200, "per_week": 500, "per_month": 900, "currency": "USD"},
        "categories": ["software"],
        "recipients": {"allow": ["vendor:acme", "vendor:aws*"], "deny": ["vendor:aws-gov*"]},
        "review_above": 80,
        "expires": "2026-12-31"
    })
}

fn mandate_from(body: &Value) -> Mandate {
    Mandate {
        id: MandateId::parse("mnd_m1").unwrap(),
        terms: MandateDraft::from_json(body).unwrap(),
        status: MandateStatus::Active,
        created_at: datetime!(2026-11-01 0:00 UTC),
    }
}

fn mandate() -> Mandate {
    mandate_from(&body())
}

fn ask(amount: &str, recipient: &str, category: &str) -> AuthorizationRequest {
    AuthorizationRequest::from_json(
        AgentId::parse("agt_buyer").unwrap(),
        &serde_json::from_str(&format!(
            r#"{{"amount": {amount}, "currency": "USD", "recipient": "{recipient}", "category": "{category}"}}"#
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

fn judged(
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
fn the_new_fields_parse_and_errors_name_the_field() {
    let terms = mandate().terms;
    assert_eq!(terms.limits.per_day, Some(amount("200")));
    assert_eq!(terms.limits.per_week, Some(amount("500")));
    let recipients = terms.recipients.unwrap();
    assert_eq!(recipients.allow.len(), 2);
    assert_eq!(recipients.deny[0].to_string(), "vendor:aws-gov*");

    assert_eq!(
        error_for(|v| v["limits"]["per_day"] = json!("200")),
        "limits.per_day must be a plain decimal number such as 12.50"
    );
    assert_eq!(
        error_for(|v| v["limits"]["per_week"] = json!(-1)),
        "limits.per_week must be >= 0"
    );
    assert_eq!(
        error_for(|v| v["recipients"] = json!(["vendor:acme"])),
        "recipients must be an object with allow and deny lists"
    );
    assert_eq!(
        error_for(|v| v["recipients"]["only"] = json!([])),
        "unknown field recipients.only"
    );
    assert_eq!(
        error_for(|v| v["recipients"]["allow"] = json!("vendor:acme")),
        "recipients.allow must be an array of strings"
    );
    for bad in [
        "acme",
        "vendor:",
        "vendor:a*b",
        "vendor:a**",
        "*",
        "vendor:a b*",
        "role:x*",
    ] {
        assert_eq!(
            error_for(|v| v["recipients"]["deny"] = json!(["vendor:ok", bad])),
            "recipients.deny[1] must be a recipient, vendor:<name>, or a prefix ending in *, such as vendor:aws*",
            "{bad}"
        );
    }
    assert_eq!(
        error_for(|v| v["recipients"]["allow"] = json!([1])),
        "recipients.allow[0] must be a string"
    );
    let hundred: Vec<String> = (0..100).map(|i| format!("vendor:v{i}")).collect();
    let mut ok = body();
    ok["recipients"]["allow"] = json!(hundred);
    ok["recipients"]["deny"] = json!(hundred);
    assert!(MandateDraft::from_json(&ok).is_ok());
    let mut more = hundred.clone();
    more.push("vendor:v100".into());
    assert_eq!(
        error_for(|v| v["recipients"]["allow"] = json!(more)),
        "recipients.allow must have at most 100 entries"
    );
    assert_eq!(
        error_for(|v| v["recipients"]["deny"] = json!(more)),
        "recipients.deny must have at most 100 entries"
    );
    // `vendor:*` is any vendor; an empty object means any recipient.
    let mut any = body();
    any["recipients"] = json!({});
    let m = mandate_from(&any);
    assert_eq!(
        judged(
            &m,
            &ask("10", "vendor:zed", "software"),
            &AgentHistory::default(),
            NOW
        )
        .0,
        Verdict::Allow
    );
}

#[test]
fn a_mandate_without_the_new_fields_echoes_none_of_them() {
    let mut plain = body();
    plain["limits"] = json!({"per_transaction": 100, "currency": "USD"});
    plain.as_object_mut().unwrap().remove("recipients");
    let m = mandate_from(&plain);
    let shown = mandate_protocol::wire::mandate_json(&m, NOW);
    assert_eq!(
        shown["limits"],
        json!({"per_transaction": 100, "currency": "USD"})
    );
    assert!(shown.get("recipients").is_none());
    // With them, the answer carries them and reads back to the same terms.
    let full = mandate_protocol::wire::mandate_json(&mandate(), NOW);
    assert_eq!(full["limits"]["per_day"], json!(200));
    assert_eq!(full["limits"]["per_week"], json!(500));
    assert_eq!(
        full["recipients"],
        json!({"allow": ["vendor:acme", "vendor:aws*"], "deny": ["vendor:aws-gov*"]})
    );
    let mut again = full.clone();
    for key in ["id", "status", "created_at"] {
        again.as_object_mut().unwrap().remove(key);
    }
    assert_eq!(MandateDraft::from_json(&again).unwrap(), mandate().terms);
}

#[test]
fn recipients_deny_wins_and_allow_limits() {
    let m = mandate();
    let none = AgentHistory::default();
    assert_eq!(
        judged(&m, &ask("10", "vendor:acme", "software"), &none, NOW).0,
        Verdict::Allow
    );
    assert_eq!(
        judged(&m, &ask("10", "vendor:aws", "software"), &none, NOW).0,
        Verdict::Allow
    );
    assert_eq!(
        judged(&m, &ask("10", "vendor:aws-eu", "software"), &none, NOW).0,
        Verdict::Allow
    );
    assert_eq!(
        judged(&m, &ask("10", "vendor:aws-gov-1", "software"), &none, NOW),
        (
            Verdict::DenyRecipient,
            Some("recipient vendor:aws-gov-1 is denied by mandate mnd_m1's recipients.deny".into())
        )
    );
    // Exact entries are exact: a longer name is another recipient.
    assert_eq!(
        judged(&m, &ask("10", "vendor:acme2", "software"), &none, NOW),
        (
            Verdict::DenyRecipient,
            Some("recipient vendor:acme2 is not in mandate mnd_m1's recipients.allow".into())
        )
    );
    // An empty allow list means any recipient, the deny list still applies.
    let mut open = body();
    open["recipients"]["allow"] = json!([]);
    let m = mandate_from(&open);
    assert_eq!(
        judged(&m, &ask("10", "vendor:zed", "software"), &none, NOW).0,
        Verdict::Allow
    );
    assert_eq!(
        judged(&m, &ask("10", "vendor:aws-gov", "software"), &none, NOW).0,
        Verdict::DenyRecipient
    );
    // The same entry in both lists: deny wins.
    let mut both = body();
    both["recipients"] = json!({"allow": ["vendor:acme"], "deny": ["vendor:acme"]});
    let m = mandate_from(&both);
    assert_eq!(
        judged(&m, &ask("10", "vendor:acme", "software"), &none, NOW).0,
        Verdict::DenyRecipient
    );
}

#[test]
fn the_order_is_category_recipient_then_limits() {
    let m = mandate();
    let none = AgentHistory::default();
    // Category before recipient.
    assert_eq!(
        judged(&m, &ask("10", "vendor:zed", "food"), &none, NOW).0,
        Verdict::DenyCategory
    );
    // Recipient before every limit, currency included.
    let mut r = ask("1000", "vendor:zed", "software");
    r.currency = mandate_core::Currency::parse("EUR").unwrap();
    assert_eq!(judged(&m, &r, &none, NOW).0, Verdict::DenyRecipient);
    // per_transaction before per_day.
    let today = spent(&[("150", NOW - Duration::hours(1))]);
    assert_eq!(
        judged(&m, &ask("101", "vendor:acme", "software"), &today, NOW)
            .1
            .unwrap(),
        "amount 101 exceeds per_transaction limit 100"
    );
    // per_day before per_week before per_month.
    let history = spent(&[
        ("400", datetime!(2026-11-02 9:00 UTC)),
        ("330", NOW - Duration::days(2)),
        ("150", NOW - Duration::hours(1)),
    ]);
    assert_eq!(
        judged(&m, &ask("60", "vendor:acme", "software"), &history, NOW),
        (
            Verdict::DenyLimit,
            Some("amount 60 would bring today's spend to 210, over the per_day limit 200".into())
        )
    );
    let history = spent(&[
        ("400", datetime!(2026-11-02 9:00 UTC)),
        ("460", NOW - Duration::days(2)),
    ]);
    assert_eq!(
        judged(&m, &ask("50", "vendor:acme", "software"), &history, NOW),
        (
            Verdict::DenyLimit,
            Some(
                "amount 50 would bring this week's spend to 510, over the per_week limit 500"
                    .into()
            )
        )
    );
    let history = spent(&[("880", datetime!(2026-11-02 9:00 UTC))]);
    assert_eq!(
        judged(&m, &ask("30", "vendor:acme", "software"), &history, NOW)
            .1
            .unwrap(),
        "month-to-date spend 880 plus amount 30 exceeds per_month limit 900"
    );
    // Limits before review.
    let history = spent(&[("150", NOW - Duration::hours(1))]);
    assert_eq!(
        judged(&m, &ask("90", "vendor:acme", "software"), &history, NOW).0,
        Verdict::DenyLimit
    );
    assert_eq!(
        judged(
            &m,
            &ask("90", "vendor:acme", "software"),
            &AgentHistory::default(),
            NOW
        )
        .0,
        Verdict::Review
    );
}

#[test]
fn window_limits_are_strict_and_roll_over_in_utc() {
    let m = mandate();
    // Reaching the limit exactly passes; a cent more does not.
    let history = spent(&[("150", NOW - Duration::hours(1))]);
    assert_eq!(
        judged(&m, &ask("50", "vendor:acme", "software"), &history, NOW).0,
        Verdict::Allow
    );
    assert_eq!(
        judged(&m, &ask("50.01", "vendor:acme", "software"), &history, NOW).0,
        Verdict::DenyLimit
    );
    // The day ends at 24:00 UTC: the last second still counts today's spend.
    let last = datetime!(2026-11-25 23:59:59 UTC);
    let next = datetime!(2026-11-26 0:00 UTC);
    assert_eq!(
        judged(&m, &ask("60", "vendor:acme", "software"), &history, last).0,
        Verdict::DenyLimit
    );
    assert_eq!(
        judged(&m, &ask("60", "vendor:acme", "software"), &history, next).0,
        Verdict::Allow
    );
    // The week ends on Sunday 24:00 UTC: 450 this week leaves 50 until Monday.
    let week = spent(&[
        ("200", datetime!(2026-11-23 0:00 UTC)),
        ("200", datetime!(2026-11-24 10:00 UTC)),
        ("50", datetime!(2026-11-25 10:00 UTC)),
    ]);
    let sunday = datetime!(2026-11-29 23:59:59 UTC);
    let monday = datetime!(2026-11-30 0:00 UTC);
    assert_eq!(
        judged(&m, &ask("50", "vendor:acme", "software"), &week, sunday).0,
        Verdict::Allow
    );
    assert_eq!(
        judged(&m, &ask("51", "vendor:acme", "software"), &week, sunday).0,
        Verdict::DenyLimit
    );
    assert_eq!(
        judged(&m, &ask("51", "vendor:acme", "software"), &week, monday).0,
        Verdict::Allow
    );
    // A week across a month: Monday 2026-11-30's spend counts on Tuesday 2026-12-01,
    // the month's does not.
    let across = spent(&[
        ("210", datetime!(2026-11-30 8:00 UTC)),
        ("200", datetime!(2026-11-30 9:00 UTC)),
    ]);
    let tuesday = datetime!(2026-12-01 8:00 UTC);
    assert_eq!(
        judged(&m, &ask("100", "vendor:acme", "software"), &across, tuesday),
        (
            Verdict::DenyLimit,
            Some(
                "amount 100 would bring this week's spend to 510, over the per_week limit 500"
                    .into()
            )
        )
    );
}

#[test]
fn approval_rechecks_the_lists_and_the_windows_as_they_are_now() {
    let m = mandate();
    let r = ask("90", "vendor:acme", "software");
    assert_eq!(
        judged(&m, &r, &AgentHistory::default(), NOW).0,
        Verdict::Review
    );
    // Approved after other allows filled the day: the day's limit refuses it.
    let since = spent(&[("150", NOW)]);
    let got = evaluate_approval(
        Some(&m),
        &r,
        &since,
        Mode::Enforce,
        NOW + Duration::minutes(5),
    );
    assert_eq!(got.verdict, Verdict::DenyLimit);
    assert_eq!(
        got.reason.unwrap().to_string(),
        "amount 90 would bring today's spend to 240, over the per_day limit 200"
    );
    // The next day the day is empty again, the week still has room.
    let got = evaluate_approval(Some(&m), &r, &since, Mode::Enforce, NOW + Duration::days(1));
    assert_eq!(got.verdict, Verdict::Allow);
    // A mandate that now denies the recipient refuses the approval.
    let mut changed = body();
    changed["recipients"]["deny"] = json!(["vendor:acme"]);
    let got = evaluate_approval(
        Some(&mandate_from(&changed)),
        &r,
        &AgentHistory::default(),
        Mode::Enforce,
        NOW,
    );
    assert_eq!(got.verdict, Verdict::DenyRecipient);
    // In observe the approval allows and keeps what the re-check found.
    let got = evaluate_approval(
        Some(&mandate_from(&changed)),
        &r,
        &AgentHistory::default(),
        Mode::Observe,
        NOW,
    );
    assert_eq!(
        (got.verdict, got.policy_verdict),
        (Verdict::Allow, Verdict::DenyRecipient)
    );
}

#[test]
fn deny_recipient_has_its_place_among_the_verdicts() {
    let all: Vec<&str> = Verdict::ALL.iter().map(|v| v.as_str()).collect();
    assert_eq!(
        all,
        [
            "deny_no_mandate",
            "deny_revoked",
            "deny_expired",
            "deny_replay",
            "deny_velocity",
            "deny_category",
            "deny_recipient",
            "deny_limit",
            "review",
            "allow"
        ]
    );
    assert_eq!(
        Verdict::parse("deny_recipient"),
        Some(Verdict::DenyRecipient)
    );
    assert!(Verdict::DenyRecipient.is_denial());
}

fn amount_strategy() -> impl Strategy<Value = Amount> {
    (0u64..12_000, 0u32..3).prop_map(|(cents, scale)| {
        Amount::from_decimal(rust_decimal::Decimal::new(cents as i64, scale)).unwrap()
    })
}

proptest! {
    /// No sequence of requests, over days and weeks and in either mode of recording,
    /// drives any UTC day's or ISO week's allows past its limit.
    #[test]
    fn allows_never_exceed_a_day_or_a_week(
        steps in proptest::collection::vec((amount_strategy(), 0i64..40_000_000), 1..200),
    ) {
        let mut m = mandate();
        m.terms.review_above = None;
        m.terms.limits.per_month = None;
        let mut history = AgentHistory::default();
        let mut now = datetime!(2026-11-01 0:00 UTC);
        let mut by_day = std::collections::HashMap::<i64, rust_decimal::Decimal>::new();
        let mut by_week = std::collections::HashMap::<i64, rust_decimal::Decimal>::new();
        for (amount, gap_ms) in steps {
            now += Duration::milliseconds(gap_ms);
            if now.year() > 2026 { break; }
            let mut r = ask("1", "vendor:acme", "software");
            r.amount = amount;
            let got = evaluate(Some(&m), &r, &history, Mode::Enforce, now);
            if got.verdict == Verdict::Allow {
                let day = mandate_protocol::history::day_of(now);
                let week = mandate_protocol::history::week_of(now);
                *by_day.entry(day).or_default() += amount.value();
                *by_week.entry(week).or_default() += amount.value();
                prop_assert!(by_day[&day] <= m.terms.limits.per_day.unwrap().value());
                prop_assert!(by_week[&week] <= m.terms.limits.per_week.unwrap().value());
            }
            history.record(&got, amount, now);
        }
    }
}

/// Each reason names its rule as the mandate's field, for tools such as `simulate`.
#[test]
fn reasons_name_their_rule() {
    let m = mandate();
    let rule = |r: &AuthorizationRequest, h: &AgentHistory| {
        evaluate(Some(&m), r, h, Mode::Enforce, NOW)
            .reason
            .map(|r| r.rule())
    };
    let none = AgentHistory::default();
    assert_eq!(
        rule(&ask("10", "vendor:aws-gov", "software"), &none),
        Some("recipients.deny")
    );
    assert_eq!(
        rule(&ask("10", "vendor:zed", "software"), &none),
        Some("recipients.allow")
    );
    assert_eq!(
        rule(&ask("10", "vendor:acme", "food"), &none),
        Some("categories")
    );
    let today = spent(&[("150", NOW)]);
    assert_eq!(
        rule(&ask("60", "vendor:acme", "software"), &today),
        Some("limits.per_day")
    );
    let week = spent(&[
        ("250", NOW - Duration::days(2)),
        ("200", NOW - Duration::days(1)),
    ]);
    assert_eq!(
        rule(&ask("60", "vendor:acme", "software"), &week),
        Some("limits.per_week")
    );
    assert_eq!(
        rule(&ask("90", "vendor:acme", "software"), &none),
        Some("review_above")
    );
    assert_eq!(rule(&ask("10", "vendor:acme", "software"), &none), None);
}

/// Payee lists match without regard to ASCII case (decisions.md, third round): the
/// finding of issue #40 (`vendor:EVIL`, `vendor:Evil`, `vendor:AWS-gov` allowed past a
/// deny of `vendor:evil` and `vendor:aws*`), and the allow list the same way.
#[test]
fn recipient_lists_ignore_ascii_case() {
    let none = AgentHistory::default();
    let mut deny = body();
    deny["recipients"] = json!({"deny": ["vendor:evil", "vendor:aws*"]});
    let m = mandate_from(&deny);
    for recipient in [
        "vendor:evil",
        "vendor:EVIL",
        "vendor:Evil",
        "vendor:AWS-gov",
        "vendor:Aws",
    ] {
        let (verdict, reason) = judged(&m, &ask("10", recipient, "software"), &none, NOW);
        assert_eq!(verdict, Verdict::DenyRecipient, "{recipient}");
        // The reason names the recipient as sent.
        assert_eq!(
            reason.unwrap(),
            format!("recipient {recipient} is denied by mandate mnd_m1's recipients.deny")
        );
    }
    assert_eq!(
        judged(&m, &ask("10", "vendor:evil2", "software"), &none, NOW).0,
        Verdict::Allow
    );
    let mut allow = body();
    allow["recipients"] = json!({"allow": ["vendor:Acme", "vendor:AWS*"]});
    let m = mandate_from(&allow);
    for recipient in ["vendor:acme", "vendor:ACME", "vendor:aws-eu", "vendor:AwS"] {
        assert_eq!(
            judged(&m, &ask("10", recipient, "software"), &none, NOW).0,
            Verdict::Allow,
            "{recipient}"
        );
    }
    assert_eq!(
        judged(&m, &ask("10", "vendor:acm", "software"), &none, NOW).0,
        Verdict::DenyRecipient
    );
}

proptest! {
    /// Changing the ASCII case of any letters of a recipient never changes whether a
    /// list entry matches it.
    #[test]
    fn list_matching_is_case_blind(name in "[a-z0-9._-]{1,20}", flips in proptest::collection::vec(any::<bool>(), 20), cut in 0usize..21) {
        let flipped: String = name
            .chars()
            .zip(flips.iter().chain(std::iter::repeat(&false)))
            .map(|(c, f)| if *f { c.to_ascii_uppercase() } else { c })
            .collect();
        let original = Recipient::parse(&format!("vendor:{name}")).unwrap();
        let changed = Recipient::parse(&format!("vendor:{flipped}")).unwrap();
        let prefix = &name[..cut.min(name.len())];
        for entry in [format!("vendor:{name}"), format!("vendor:{prefix}*"), "vendor:zz*".to_owned()] {
            let pattern = RecipientPattern::parse(&entry).unwrap();
            prop_assert_eq!(pattern.matches(&original), pattern.matches(&changed), "{}", entry);
        }
        let exact = RecipientPattern::parse(&format!("vendor:{name}")).unwrap();
        prop_assert!(exact.matches(&changed));
    }
}
