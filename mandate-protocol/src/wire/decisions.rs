//! Decisions: `POST /v1/authorizations` and `POST /v1/reviews/{id}/approve` (each answers
//! a [`DecisionAnswer`]), `GET /v1/decisions`, `GET /v1/decisions/{id}` (a [`Decision`]).

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::amount::Amount;
use crate::id::{DecisionId, MandateId, Nonce, ReviewId};
use crate::names::{Category, Currency, Recipient};
use crate::policy::AuthorizationRequest;
use crate::policy::{Mode, Verdict};
use crate::review::{Review, ReviewStatus};

/// A stored decision: the signed claims' names plus `id`, `mode`, `reason`, `supersedes`,
/// `review` (the id of the review it opened, with its status and expiry when read) and
/// `created_at`. Also the `data` of `decision.*` events other than `decision.resolved`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    /// The ACP allowance's digest it is bound to (the `acp_allowance` claim); absent when
    /// none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acp_allowance: Option<String>,
    /// The ACP allowance's checkout session it is bound to (the `acp_checkout_session`
    /// claim); absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acp_checkout_session: Option<String>,
    /// The AP2 open payment mandate's digest it is bound to (the `ap2_mandate` claim);
    /// absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ap2_mandate: Option<String>,
    /// The AP2 closed payment mandate's transaction id it is bound to (the
    /// `ap2_transaction` claim); absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ap2_transaction: Option<String>,
    /// When it was made.
    #[serde(with = "crate::timefmt")]
    pub created_at: OffsetDateTime,
    /// Expiry of its token, `iat + 300`.
    pub exp: i64,
    /// Issue time, seconds since the Unix epoch.
    pub iat: i64,
    /// `dec_…`, the token's `jti`.
    pub id: DecisionId,
    /// The issuer.
    pub iss: String,
    /// The decision id, as signed.
    pub jti: DecisionId,
    /// On reads of the log: its place in the organization's decision log, with the
    /// inclusion proof against the newest checkpoint, once a checkpoint covers it
    /// (`Some(None)`, written `null`, until then); absent (`None`) in events' data.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present_entry"
    )]
    pub log: Option<Option<crate::tlog::LogEntry>>,
    /// The mandate it was judged under; `null` for `deny_no_mandate`.
    pub mandate: Option<MandateId>,
    /// The mode in force when it was made.
    pub mode: Mode,
    /// Its single-use nonce.
    pub nonce: Nonce,
    /// What the policy concluded.
    pub policy_verdict: Verdict,
    /// The organization's policy set.
    pub policy_version: String,
    /// Why, with the numbers involved; `null` for a plain allow.
    pub reason: Option<String>,
    /// The request that was judged.
    pub request: AuthorizationRequest,
    /// The review it opened, if any.
    pub review: Option<ReviewId>,
    /// When the review it opened expires (or expired) unresolved; on reads of the log
    /// (`GET /v1/decisions`, `GET /v1/decisions/{id}`, the export) of a decision that
    /// opened one, absent otherwise.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::timefmt::option"
    )]
    pub review_expires_at: Option<OffsetDateTime>,
    /// Once the review it opened was denied: the reason the person gave, if any (the
    /// review's `reason`), on the same reads as `review_expires_at`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review_reason: Option<String>,
    /// Once the review it opened was resolved: when it was approved, denied or expired
    /// (the review's `resolved_at`), on the same reads as `review_expires_at`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::timefmt::option"
    )]
    pub review_resolved_at: Option<OffsetDateTime>,
    /// Where the review it opened stands, on the same reads as `review_expires_at`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review_status: Option<ReviewStatus>,
    /// Once the review it opened was approved: the fresh decision the approval made (the
    /// review's `resolution`), on the same reads as `review_expires_at`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review_resolution: Option<DecisionId>,
    /// Once the review it opened was withdrawn by this decision's agent (`review_status`
    /// `denied`): `true`, on the same reads as `review_expires_at`; absent otherwise.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub review_withdrawn: bool,
    /// On a decision made by approving a review: the original decision.
    pub supersedes: Option<DecisionId>,
    /// The verdict returned.
    pub verdict: Verdict,
    /// On reads of the log: the token answered when it was made, byte for byte
    /// (`Some(None)`, written `null`, for a decision stored before tokens were kept); absent
    /// (`None`) in events' data.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub verdict_token: Option<Option<String>>,
    /// The x402 payment's digest it is bound to (the `x402_payment` claim); absent when
    /// none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x402_payment: Option<String>,
}

/// A member that is present, even as `null`: `Some(None)` for `null` (absent is `None`,
/// through `#[serde(default)]`).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

/// [`present`] for the `log` member.
fn present_entry<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Option<crate::tlog::LogEntry>>, D::Error> {
    Option::<crate::tlog::LogEntry>::deserialize(d).map(Some)
}

/// The answer to the request (or approval) that made a decision: the decision's members
/// with `review` the whole review it opened, and the signed `verdict_token` last.
///
/// Unlike every other object it is written in the order of the signed claims (`id`, then
/// `iss` to `request` as signed, then `mode` to `created_at`), not sorted by name: the
/// server copies the signed claims' bytes into it rather than serializing them again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionAnswer {
    /// `dec_…`.
    pub id: DecisionId,
    /// The issuer.
    pub iss: String,
    /// The decision id, as signed.
    pub jti: DecisionId,
    /// Issue time.
    pub iat: i64,
    /// Expiry.
    pub exp: i64,
    /// The verdict returned.
    pub verdict: Verdict,
    /// What the policy concluded.
    pub policy_verdict: Verdict,
    /// The mandate it was judged under; `null` for `deny_no_mandate`.
    pub mandate: Option<MandateId>,
    /// The organization's policy set.
    pub policy_version: String,
    /// Its single-use nonce.
    pub nonce: Nonce,
    /// The request that was judged.
    pub request: AuthorizationRequest,
    /// The AP2 open payment mandate's digest it is bound to (the `ap2_mandate` claim);
    /// absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ap2_mandate: Option<String>,
    /// The AP2 closed payment mandate's transaction id it is bound to (the
    /// `ap2_transaction` claim); absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ap2_transaction: Option<String>,
    /// The x402 payment's digest it is bound to (the `x402_payment` claim); absent when
    /// none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x402_payment: Option<String>,
    /// The ACP allowance's digest it is bound to (the `acp_allowance` claim); absent when
    /// none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acp_allowance: Option<String>,
    /// The ACP allowance's checkout session it is bound to (the `acp_checkout_session`
    /// claim); absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acp_checkout_session: Option<String>,
    /// The mode in force.
    pub mode: Mode,
    /// Why; `null` for a plain allow.
    pub reason: Option<String>,
    /// On an approval: the original decision.
    pub supersedes: Option<DecisionId>,
    /// The review it opened (the whole object), else `null`.
    pub review: Option<OpenedReview>,
    /// When it was made.
    #[serde(with = "crate::timefmt")]
    pub created_at: OffsetDateTime,
    /// The signed verdict (compact JWS) a counterparty verifies.
    pub verdict_token: String,
}

/// `review` in a [`DecisionAnswer`]: the review the request opened, or (on a stored
/// decision written with its token) only its id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum OpenedReview {
    /// The whole review.
    Review(Review),
    /// Its id.
    Id(ReviewId),
}

impl OpenedReview {
    /// The review's id.
    pub fn id(&self) -> &ReviewId {
        match self {
            Self::Review(review) => &review.id,
            Self::Id(id) => id,
        }
    }

    /// The whole review, when the answer carries it.
    pub fn review(&self) -> Option<&Review> {
        match self {
            Self::Review(review) => Some(review),
            Self::Id(_) => None,
        }
    }
}

/// The `ap2` member of `POST /v1/authorizations`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ap2Presentation {
    /// `<open-sd-jwt>~~<closed>` as AP2's SDK presents it, or the closed hop alone.
    pub closed_mandate: String,
}

/// The `acp` member of `POST /v1/authorizations`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcpPresentation {
    /// The Agentic Commerce Protocol's delegated payment allowance the request is made
    /// under, as ACP writes it.
    pub allowance: AcpAllowance,
}

/// ACP's delegated payment allowance as ACP writes it (`delegate_payment`'s `Allowance`):
/// its six members and no other. The server reads the member as a tree and judges each
/// value itself ([`crate::acp::Allowance::from_json`] names a wrong one); this is its shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcpAllowance {
    /// The checkout session it pays, once.
    pub checkout_session_id: String,
    /// An ISO 4217 code, lower case in ACP (`usd`).
    pub currency: String,
    /// Until when it holds, RFC 3339.
    pub expires_at: String,
    /// The maximum, in minor units of the currency.
    pub max_amount: u64,
    /// The merchant: the request's recipient is `vendor:<merchant_id>`.
    pub merchant_id: String,
    /// `one_time`, the one reason ACP defines.
    pub reason: String,
}

/// The body of `POST /v1/authorizations` (the agent is the key's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Authorize {
    /// The ACP delegated payment allowance the request is made under, if any: the amount
    /// is its maximum (docs/protocols.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acp: Option<AcpPresentation>,
    /// The amount, exact.
    pub amount: Amount,
    /// The agent's AP2 closed payment mandate for exactly this payment, if it presents one
    /// (docs/protocols.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ap2: Option<Ap2Presentation>,
    /// The spending category.
    pub category: Category,
    /// The currency of the amount.
    pub currency: Currency,
    /// Who is to be paid, `vendor:<name>`.
    pub recipient: Recipient,
    /// The x402 payment this is for (a v2 PaymentRequirements, or a PaymentPayload whose
    /// `accepted` is read; [`crate::x402::PaymentRequirements`]): the verdict then carries `x402_payment`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x402: Option<serde_json::Value>,
}
