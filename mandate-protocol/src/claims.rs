//! The claims of signed tokens: verdicts and webhook events.
//!
//! Claim names are canonical: a stored decision uses the same names, so a counterparty and
//! an auditor read one vocabulary. Everything a settlement depends on (amount, currency,
//! recipient, mandate, policy version, nonce) is under the signature.
//!
//! Reading is forward-compatible: claims this crate does not know are ignored (a later
//! server may add some), while every claim it knows is strictly typed, so a known claim
//! with a wrong type is still refused. A verdict code it does not know reads as
//! [`Verdict::Unknown`], a denial.

use serde::{Deserialize, Serialize};

use crate::id::{DecisionId, EventId, MandateId, Nonce};
use crate::policy::{AuthorizationRequest, Evaluation, Verdict};
use time::OffsetDateTime;

/// Lifetime of a signed verdict: `exp = iat + 300`.
pub const VERDICT_LIFETIME_SECS: i64 = 300;

/// Lifetime of a signed event delivery attempt: `exp = iat + 300`, `iat` being when the
/// attempt was signed, so that a captured event can't be replayed to a receiver later.
pub const EVENT_LIFETIME_SECS: i64 = 300;

/// The claims of a signed verdict (and the names of a stored decision).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerdictClaims {
    /// Issuer: the service's verdicts URL.
    pub iss: String,
    /// The decision id.
    pub jti: DecisionId,
    /// Issue time, seconds since the Unix epoch.
    pub iat: i64,
    /// Expiry, `iat + 300`.
    pub exp: i64,
    /// The verdict that was returned (what a counterparty acts on).
    pub verdict: Verdict,
    /// What the policy engine concluded; differs from `verdict` only in observe mode.
    pub policy_verdict: Verdict,
    /// The mandate the request was judged under; absent for `deny_no_mandate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mandate: Option<MandateId>,
    /// The organization's policy set, `pol_<date>.<n>`.
    pub policy_version: String,
    /// Single-use value: a verifier treats a nonce seen before as a replay.
    pub nonce: Nonce,
    /// The request that was judged.
    pub request: AuthorizationRequest,
    /// What the verdict is bound to besides the request: the payment protocols' objects,
    /// each its own optional claim at the top level (`ap2_mandate`, `ap2_transaction`,
    /// `x402_payment`, `acp_allowance`, `acp_checkout_session`), omitted when absent.
    #[serde(flatten)]
    pub bindings: Bindings,
}

/// What a verdict is bound to besides the request: the payment protocols' own objects, by
/// digest or id. Each is an optional claim of the token, omitted when absent (a verifier
/// that does not know them ignores them): [`VerdictClaims::bindings`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Bindings {
    /// The AP2 open payment mandate's digest: the `ap2_mandate` claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ap2_mandate: Option<String>,
    /// The AP2 closed payment mandate's transaction id: the `ap2_transaction` claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ap2_transaction: Option<String>,
    /// The x402 payment's digest ([`x402::digest`](crate::x402::digest)): the `x402_payment`
    /// claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x402_payment: Option<String>,
    /// The ACP allowance's digest ([`acp::digest`](crate::acp::digest)): the
    /// `acp_allowance` claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acp_allowance: Option<String>,
    /// The ACP allowance's `checkout_session_id`: the `acp_checkout_session` claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acp_checkout_session: Option<String>,
}

impl Bindings {
    /// Whether it binds nothing.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// What the issuer adds to a decision when it signs it: its own values and the fresh
/// ones it drew (ids and nonces are made from random bytes the caller draws).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issuance {
    /// The issuer, the service's verdicts URL: the token's `iss`.
    pub issuer: String,
    /// The decision id: the token's `jti`.
    pub jti: DecisionId,
    /// The single-use nonce.
    pub nonce: Nonce,
    /// The organization's policy set, `pol_<date>.<n>`.
    pub policy_version: String,
    /// When the decision is made: `iat`, and `exp` [`VERDICT_LIFETIME_SECS`] later.
    pub issued_at: OffsetDateTime,
}

impl VerdictClaims {
    /// The claims of a decision: the request that was judged, the engine's evaluation,
    /// the mandate it was judged under (`None` when the agent had none) and the issuer's
    /// values. `exp` is `iat +` [`VERDICT_LIFETIME_SECS`].
    pub fn new(
        request: AuthorizationRequest,
        evaluation: &Evaluation,
        mandate: Option<MandateId>,
        issuance: Issuance,
    ) -> Self {
        let iat = issuance.issued_at.unix_timestamp();
        Self {
            iss: issuance.issuer,
            jti: issuance.jti,
            iat,
            exp: iat.saturating_add(VERDICT_LIFETIME_SECS),
            verdict: evaluation.verdict,
            policy_verdict: evaluation.policy_verdict,
            mandate,
            policy_version: issuance.policy_version,
            nonce: issuance.nonce,
            request,
            bindings: Bindings::default(),
        }
    }

    /// These claims bound to `bindings` (each binding replaces the claim's value; an
    /// absent one removes it).
    pub fn with_bindings(mut self, bindings: Bindings) -> Self {
        self.bindings = bindings;
        self
    }

    /// `iat` as a time (`None` only for a value no calendar holds).
    pub fn issued_at(&self) -> Option<OffsetDateTime> {
        OffsetDateTime::from_unix_timestamp(self.iat).ok()
    }

    /// `exp` as a time (`None` only for a value no calendar holds).
    pub fn expires_at(&self) -> Option<OffsetDateTime> {
        OffsetDateTime::from_unix_timestamp(self.exp).ok()
    }
}

/// The claims of a signed webhook event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventClaims {
    /// Issuer: the service's verdicts URL.
    pub iss: String,
    /// The event id; unchanged across delivery retries, usable for de-duplication.
    pub jti: EventId,
    /// Issue time: when this delivery attempt was signed (each attempt is signed when it
    /// is sent), seconds since the Unix epoch.
    pub iat: i64,
    /// Expiry, `iat + 300` ([`EVENT_LIFETIME_SECS`]).
    pub exp: i64,
    /// The event type, for example `mandate.revoked`.
    #[serde(rename = "type")]
    pub event_type: String,
    /// The object the event is about, in the shape the API returns it.
    pub data: serde_json::Value,
}
