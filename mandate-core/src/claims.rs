//! The claims of signed tokens: verdicts and webhook events.
//!
//! Claim names are canonical: a stored decision uses the same names, so a counterparty and
//! an auditor read one vocabulary. Everything a settlement depends on (amount, currency,
//! recipient, mandate, policy version, nonce) is under the signature.

use serde::{Deserialize, Serialize};

use crate::amount::Amount;
use crate::id::{AgentId, DecisionId, EventId, MandateId, Nonce};
use crate::names::{Category, Currency, Recipient};
use crate::policy::Verdict;

/// Lifetime of a signed verdict: `exp = iat + 300`.
pub const VERDICT_LIFETIME_SECS: i64 = 300;

/// Lifetime of a signed event delivery attempt: `exp = iat + 300`, `iat` being when the
/// attempt was signed, so that a captured event can't be replayed to a receiver later.
pub const EVENT_LIFETIME_SECS: i64 = 300;

/// The request as signed into a verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestClaims {
    /// The agent that asked.
    pub agent: AgentId,
    /// The amount asked for, exact.
    pub amount: Amount,
    /// The currency of the amount.
    pub currency: Currency,
    /// Who is to be paid.
    pub recipient: Recipient,
    /// The spending category.
    pub category: Category,
}

/// The claims of a signed verdict (and the names of a stored decision).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
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
    pub request: RequestClaims,
}

/// The claims of a signed webhook event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
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
