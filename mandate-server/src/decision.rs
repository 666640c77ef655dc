//! A stored decision: the signed claims plus what is stored besides (mode, reason,
//! supersedes, review, creation time), and its API shape.

use mandate_core::claims::{RequestClaims, VerdictClaims};
use mandate_core::id::{DecisionId, MandateId, Nonce, ReviewId};
use mandate_core::mandate::format_timestamp;
use mandate_core::policy::{Mode, Verdict};
use mandate_core::review::Review;
use serde::Serialize;
use serde_json::Value;

use crate::clock::from_ms;

/// A decision as stored and returned.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The claims, exactly as signed.
    pub claims: VerdictClaims,
    /// Why, with the numbers involved.
    pub reason: Option<String>,
    /// The mode in force when it was made.
    pub mode: Mode,
    /// On a decision made by approving a review: the original decision.
    pub supersedes: Option<DecisionId>,
    /// The review this decision opened, if any.
    pub review: Option<ReviewId>,
    /// Creation time, unix ms.
    pub created_ms: i64,
    /// Whether it answers an agent's request (counts for velocity) or an approval.
    pub is_request: bool,
}

/// The decision object of the API, serialized straight from a [`Decision`] (no
/// intermediate `Value` on the hot path): the claim names, plus `id`, `mode`, `reason`,
/// `supersedes`, `review` and `created_at`; in the answer to a request, also
/// `verdict_token` and the review object it opened.
#[derive(Serialize)]
pub struct DecisionView<'a> {
    id: &'a DecisionId,
    iss: &'a str,
    jti: &'a DecisionId,
    iat: i64,
    exp: i64,
    verdict: Verdict,
    policy_verdict: Verdict,
    // The token omits an absent mandate; the object shows it as null, like the other
    // optional fields.
    mandate: Option<&'a MandateId>,
    policy_version: &'a str,
    nonce: &'a Nonce,
    request: &'a RequestClaims,
    mode: Mode,
    reason: Option<&'a str>,
    supersedes: Option<&'a DecisionId>,
    review: ReviewField<'a>,
    created_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    verdict_token: Option<&'a str>,
}

/// `review`: the id on a stored decision, the whole review in the answer that opened it.
#[derive(Serialize)]
#[serde(untagged)]
enum ReviewField<'a> {
    Id(Option<&'a ReviewId>),
    Opened(&'a Review),
}

impl<'a> DecisionView<'a> {
    /// The answer to the request (or approval) that made the decision: with its token and
    /// the review it opened.
    pub fn answer(mut self, token: &'a str, review: Option<&'a Review>) -> Self {
        self.verdict_token = Some(token);
        if let Some(review) = review {
            self.review = ReviewField::Opened(review);
        }
        self
    }
}

impl Decision {
    /// The decision object of the API, ready to serialize.
    pub fn view(&self) -> DecisionView<'_> {
        let c = &self.claims;
        DecisionView {
            id: &c.jti,
            iss: &c.iss,
            jti: &c.jti,
            iat: c.iat,
            exp: c.exp,
            verdict: c.verdict,
            policy_verdict: c.policy_verdict,
            mandate: c.mandate.as_ref(),
            policy_version: &c.policy_version,
            nonce: &c.nonce,
            request: &c.request,
            mode: self.mode,
            reason: self.reason.as_deref(),
            supersedes: self.supersedes.as_ref(),
            review: ReviewField::Id(self.review.as_ref()),
            created_at: format_timestamp(from_ms(self.created_ms)),
            verdict_token: None,
        }
    }

    /// The decision object of the API as a JSON value.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self.view()).unwrap_or(Value::Null)
    }
}

/// Builds and signs the claims of a new decision made at `now`: issuer, `exp = iat + 300`,
/// a fresh nonce, the caller's policy version, and the mandate it was judged under.
/// Returns the claims and the compact token.
pub fn sign_new(
    state: &crate::state::AppState,
    caller: &crate::model::Caller,
    jti: DecisionId,
    evaluation: &mandate_core::policy::Evaluation,
    mandate: Option<&mandate_core::mandate::Mandate>,
    request: mandate_core::claims::RequestClaims,
    now: time::OffsetDateTime,
) -> Result<(VerdictClaims, String), crate::error::ApiError> {
    let iat = now.unix_timestamp();
    let claims = VerdictClaims {
        iss: state.verdicts_url.clone(),
        jti,
        iat,
        exp: iat + mandate_core::claims::VERDICT_LIFETIME_SECS,
        verdict: evaluation.verdict,
        policy_verdict: evaluation.policy_verdict,
        mandate: mandate.map(|m| m.id.clone()),
        policy_version: caller.policy_version.to_string(),
        nonce: mandate_core::id::Nonce::from_random(crate::clock::ordered16(now)),
        request,
    };
    let token = mandate_core::jws::sign_token(state.signer(caller.env)?.as_ref(), &claims)
        .map_err(|e| crate::error::ApiError::Server(format!("signing: {e}")))?;
    Ok((claims, token))
}
