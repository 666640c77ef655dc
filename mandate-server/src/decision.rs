//! A stored decision: the signed claims plus what is stored besides (mode, reason,
//! supersedes, review, creation time), and its API shape.

use mandate_core::claims::VerdictClaims;
use mandate_core::id::{DecisionId, ReviewId};
use mandate_core::mandate::format_timestamp;
use mandate_core::policy::Mode;
use serde_json::{Value, json};

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

impl Decision {
    /// The decision object of the API: the claim names, plus `id`, `mode`, `reason`,
    /// `supersedes`, `review` and `created_at`.
    pub fn to_json(&self) -> Value {
        let mut value = serde_json::to_value(&self.claims).unwrap_or(Value::Null);
        if let Value::Object(map) = &mut value {
            map.insert("id".into(), json!(self.claims.jti));
            // The token omits an absent mandate; the object shows it as null, like the
            // other optional fields.
            map.entry("mandate").or_insert(Value::Null);
            map.insert("mode".into(), json!(self.mode));
            map.insert("reason".into(), json!(self.reason));
            map.insert("supersedes".into(), json!(self.supersedes));
            map.insert("review".into(), json!(self.review));
            map.insert(
                "created_at".into(),
                json!(format_timestamp(from_ms(self.created_ms))),
            );
        }
        value
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
        policy_version: caller.policy_version.clone(),
        nonce: mandate_core::id::Nonce::from_random(crate::clock::ordered16(now)),
        request,
    };
    let token = mandate_core::jws::sign_token(state.signer(caller.env)?.as_ref(), &claims)
        .map_err(|e| crate::error::ApiError::Server(format!("signing: {e}")))?;
    Ok((claims, token))
}
