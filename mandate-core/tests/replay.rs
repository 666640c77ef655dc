//! `deny_replay` (decisions.md, third round): a single-use credential already accepted is
//! denied, in its place in the order (after `deny_expired`, before `deny_velocity`), and a
//! decision accepts a credential only by an `allow` or a `review`.
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
use mandate_protocol::{policy::SingleUse, policy::evaluate_presenting};
use serde_json::json;
use time::macros::datetime;
use time::{Duration, OffsetDateTime};

const NOW: OffsetDateTime = datetime!(2026-11-25 12:00 UTC);

fn mandate(status: MandateStatus) -> Mandate {
    Mandate {
        id: MandateId::parse("mnd_m1").unwrap(),
        terms: MandateDraft::from_json(&json!({
            "agent": "agt_buyer",
            "limits": {"per_transaction": 100, "currency": "USD"},
            "categories": ["software"],
            "review_above": 50,
            "expires": "2026-12-31"
        }))
        .unwrap(),
        status,
        created_at: datetime!(2026-11-01 0:00 UTC),
    }
}

fn ask(amount: &str, category: &str) -> AuthorizationRequest {
    AuthorizationRequest::from_json(
        AgentId::parse("agt_buyer").unwrap(),
        &serde_json::from_str(&format!(
            r#"{{"amount": {amount}, "currency": "USD", "recipient": "vendor:acme", "category": "{category}"}}"#
        ))
        .unwrap(),
    )
    .unwrap()
}

fn credential(already_accepted: bool) -> SingleUse {
    SingleUse {
        id: "sha-256:abc".into(),
        already_accepted,
    }
}

fn judged(m: Option<&Mandate>, h: &AgentHistory, c: &SingleUse) -> Evaluation {
    evaluate_presenting(m, &ask("10", "software"), h, Some(c), Mode::Enforce, NOW)
}

/// Eleven requests in the last 50 seconds: the velocity rule holds.
fn busy() -> AgentHistory {
    let mut history = AgentHistory::default();
    let denied = Evaluation {
        verdict: Verdict::DenyCategory,
        policy_verdict: Verdict::DenyCategory,
        reason: None,
    };
    for i in 0..11 {
        history.record(&denied, Amount::ZERO, NOW - Duration::seconds(50 - i));
    }
    history
}

#[test]
fn deny_replay_is_the_fourth_verdict() {
    let all: Vec<&str> = Verdict::ALL.iter().map(|v| v.as_str()).collect();
    assert_eq!(
        all[..5],
        [
            "deny_no_mandate",
            "deny_revoked",
            "deny_expired",
            "deny_replay",
            "deny_velocity"
        ]
    );
    assert_eq!(Verdict::parse("deny_replay"), Some(Verdict::DenyReplay));
    assert!(Verdict::DenyReplay.is_denial());
}

#[test]
fn a_credential_accepted_before_is_deny_replay_in_its_place() {
    let active = mandate(MandateStatus::Active);
    let used = credential(true);
    let got = judged(Some(&active), &AgentHistory::default(), &used);
    assert_eq!(got.verdict, Verdict::DenyReplay);
    let reason = got.reason.unwrap();
    assert_eq!(reason.rule(), "replay");
    assert_eq!(
        reason.to_string(),
        "single-use credential sha-256:abc was already accepted and cannot be presented again"
    );
    // Before velocity: a replay from a busy agent is still named a replay.
    assert_eq!(
        judged(Some(&active), &busy(), &used).verdict,
        Verdict::DenyReplay
    );
    // After no mandate, revoked and expired.
    let none = judged(None, &AgentHistory::default(), &used);
    assert_eq!(none.verdict, Verdict::DenyNoMandate);
    let revoked = mandate(MandateStatus::Revoked);
    let got = judged(Some(&revoked), &AgentHistory::default(), &used);
    assert_eq!(got.verdict, Verdict::DenyRevoked);
    let later = datetime!(2027-01-01 0:00 UTC);
    let got = evaluate_presenting(
        Some(&active),
        &ask("10", "software"),
        &AgentHistory::default(),
        Some(&used),
        Mode::Enforce,
        later,
    );
    assert_eq!(got.verdict, Verdict::DenyExpired);
    // In observe nothing blocks; the policy verdict keeps the replay.
    let got = evaluate_presenting(
        Some(&active),
        &ask("10", "software"),
        &AgentHistory::default(),
        Some(&used),
        Mode::Observe,
        NOW,
    );
    assert_eq!(
        (got.verdict, got.policy_verdict),
        (Verdict::Allow, Verdict::DenyReplay)
    );
    assert!(
        !mandate_protocol::policy::accepts(&got, Some(&used)),
        "an accepted credential is not accepted again"
    );
}

#[test]
fn a_fresh_credential_is_judged_as_without_it_and_accepted_by_allow_or_review() {
    let active = mandate(MandateStatus::Active);
    let fresh = credential(false);
    let none = AgentHistory::default();
    for (amount, category, verdict, accepts) in [
        ("10", "software", Verdict::Allow, true),
        ("60", "software", Verdict::Review, true),
        ("10", "travel", Verdict::DenyCategory, false),
        ("120", "software", Verdict::DenyLimit, false),
    ] {
        let request = ask(amount, category);
        let with = evaluate_presenting(
            Some(&active),
            &request,
            &none,
            Some(&fresh),
            Mode::Enforce,
            NOW,
        );
        let without = evaluate(Some(&active), &request, &none, Mode::Enforce, NOW);
        assert_eq!(with, without);
        assert_eq!(with.verdict, verdict);
        assert_eq!(
            mandate_protocol::policy::accepts(&with, Some(&fresh)),
            accepts,
            "{amount} {category}"
        );
        assert!(!mandate_protocol::policy::accepts(&with, None));
    }
}
