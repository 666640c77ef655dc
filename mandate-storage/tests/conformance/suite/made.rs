//! What the layers above the store hand it, made here by hand: a decision as the decision
//! service makes it (its claims signed with mandate-core's ES256 signer, the review it
//! opens with that event's data, the agent's hint), and the rules a revocation or a timer
//! passes in, as the server's are written (mandate-protocol's mandate and review states).
//! The engines store what they are given; these only make it what they would be given.

use super::*;

use mandate_core::{
    AuthorizationRequest, Category, Currency, DecisionId, Evaluation, Issuance, Nonce, P256Signer,
    Recipient, VerdictClaims, sign_token,
};
use mandate_storage::StorageError;
use mandate_storage::mandates::MandateRevoked;
use mandate_storage::model::decision::TokenSignature;
use mandate_storage::timers::ExpiringEvent;
use time::Time;

/// The key id of the suite's signing key.
const KID: &str = "sandbox-1";

/// `verdict` on `amount` USD of software from `agent` to vendor:acme at [`NOW`], judged
/// under `mandate` in `mode`: its claims signed with mandate-core's ES256 signer, as the
/// decision service signs them (a fixed secret: the suite draws no key).
pub fn made(
    agent: &str,
    amount: &str,
    verdict: Verdict,
    mandate: Option<&MandateId>,
    mode: Mode,
) -> Decision {
    let request = AuthorizationRequest {
        agent: agent_id(agent),
        amount: Amount::parse(amount).unwrap(),
        currency: Currency::parse("USD").unwrap(),
        recipient: Recipient::parse("vendor:acme").unwrap(),
        category: Category::parse("software").unwrap(),
    };
    let evaluation = Evaluation {
        verdict,
        policy_verdict: verdict,
        reason: None,
    };
    let issuance = Issuance {
        issuer: "https://verdicts.test".into(),
        jti: DecisionId::from_random(random16()),
        nonce: Nonce::from_random(random16()),
        policy_version: "pol_2026-11-22.1".into(),
        issued_at: NOW,
    };
    let claims = VerdictClaims::new(request, &evaluation, mandate.cloned(), issuance);
    let signer = P256Signer::from_secret_bytes(KID, &[7; 32]).unwrap();
    let token = sign_token(&signer, &claims).unwrap();
    Decision {
        reason: (verdict != Verdict::Allow).then(|| format!("{} by the suite", verdict.as_str())),
        claims,
        mode,
        supersedes: None,
        review: None,
        created_ms: ms(NOW),
        is_request: true,
        review_state: None,
        signature: TokenSignature::of(KID, &token),
    }
}

/// [`made`]'s decision for `agent` as the decision service hands it to the store: judged
/// under the agent's current mandate, in its environment's mode, with the agent's hint as
/// read just now (the state the service would hold), implying nothing else.
pub async fn decided(
    store: &dyn Store,
    agent: &str,
    amount: &str,
    verdict: Verdict,
) -> NewDecision {
    let (mode, _) = store.mode(ORG, Env::Sandbox).await.unwrap();
    let record = store
        .agent_record(Arc::from(ORG), Env::Sandbox, agent_id(agent), 10, 0)
        .await
        .unwrap();
    let mandate = record.mandate.as_ref().map(|m| &m.id);
    NewDecision {
        org: Arc::from(ORG),
        env: Env::Sandbox,
        decision: made(agent, amount, verdict, mandate, record.mode.unwrap_or(mode)),
        review: None,
        idempotency: None,
        hint: record.hint,
        accepts: None,
    }
}

/// `new` opening its review, as a `review` verdict does: the review, pending until a day
/// after [`NOW`], and its `decision.review_pending` event's data (the decision's JSON).
pub fn opening_review(mut new: NewDecision) -> NewDecision {
    let id = ReviewId::from_random(random16());
    let review = Review::open(id.clone(), new.decision.claims.jti.clone(), NOW);
    new.decision.review = Some(id);
    let data = new.decision.view_json(None).unwrap();
    new.review = Some((review, String::from_utf8(data).unwrap()));
    new
}

/// Stores `new`, which the store must take; the decision handed over.
pub async fn stored(store: &dyn Store, new: NewDecision) -> Decision {
    let decision = new.decision.clone();
    let outcome = store.record_decision(new).await.unwrap();
    assert!(matches!(outcome, Recorded::Stored(_)), "{outcome:?}");
    decision
}

/// What revoking `mandate` at `now` writes, by the server's rule: only a mandate active at
/// `now` is revoked (an expired one stays expired), with its `mandate.revoked` event.
pub fn revocation(mandate: &Mandate, now: OffsetDateTime) -> Result<MandateRevoked, MandateStatus> {
    let status = mandate.status_at(now);
    if status != MandateStatus::Active {
        return Err(status);
    }
    let mut revoked = mandate.clone();
    revoked.status = MandateStatus::Revoked;
    Ok(MandateRevoked {
        event: NewEvent {
            event_type: "mandate.revoked",
            data: mandate_protocol::wire::mandate_json(&revoked, now),
        },
        mandate: revoked,
        at_ms: ms(now),
    })
}

/// What expiring `review` at `now` writes, by the server's rule: a pending review past its
/// deadline expires, with its `decision.resolved` event; anything else writes nothing.
pub fn review_expiry(
    review: &Review,
    now: OffsetDateTime,
) -> Result<Option<ReviewExpiry>, StorageError> {
    let Ok(expired) = review.expire(now) else {
        return Ok(None);
    };
    Ok(Some(ReviewExpiry {
        event: NewEvent {
            event_type: "decision.resolved",
            data: serde_json::to_value(&expired).unwrap(),
        },
        review: expired,
        at_ms: ms(now),
    }))
}

/// What firing `mandate.expiring` for `mandate` at `now` writes, by the server's rule:
/// the event, once, for an active mandate from 00:00 UTC seven days before its `expires`
/// date; nothing before that, or once it `fired`.
pub fn expiring_event(
    mandate: &Mandate,
    fired: bool,
    now: OffsetDateTime,
) -> Option<ExpiringEvent> {
    let due = (mandate.terms.expires - Duration::days(7))
        .with_time(Time::MIDNIGHT)
        .assume_utc();
    if fired || mandate.status_at(now) != MandateStatus::Active || now < due {
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
