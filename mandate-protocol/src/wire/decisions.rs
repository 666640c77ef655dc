//! Decisions: `POST /v1/authorizations` and `POST /v1/reviews/{id}/approve` (each answers
//! a [`Decision`] with its token and review), `GET /v1/decisions`, `GET /v1/decisions/{id}`
//! (a [`Decision`] with its log entry).

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::amount::Amount;
use crate::id::{DecisionId, MandateId, Nonce, ReviewId};
use crate::names::{Category, Currency, Recipient};
use crate::policy::AuthorizationRequest;
use crate::policy::{Mode, Verdict};
use crate::review::{Review, ReviewStatus};

/// The decision object, defined once for every place it appears: the answer to the request
/// (or approval) that made it (with `review` the whole review it opened and the signed
/// `verdict_token`), reads of the log (`GET /v1/decisions`, `GET /v1/decisions/{id}`, the
/// export: with `review` the id, the review's state, `log` and `verdict_token`), and the
/// `data` of `decision.*` events other than `decision.resolved`.
///
/// Written in the order of the signed claims (`id`, then `iss` to `request` as signed,
/// then `mode` to `created_at`): the server copies the signed claims' bytes into the
/// answer rather than serializing them again. The server writes it borrowed from what it
/// stored (`Cow::Borrowed`, no copy); a reader gets it owned (`Decision<'static>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision<'a> {
    /// `dec_…`, the token's `jti`.
    pub id: Cow<'a, DecisionId>,
    /// The issuer.
    pub iss: Cow<'a, str>,
    /// The decision id, as signed.
    pub jti: Cow<'a, DecisionId>,
    /// Issue time, seconds since the Unix epoch.
    pub iat: i64,
    /// Expiry of its token, `iat + 300`.
    pub exp: i64,
    /// The verdict returned.
    pub verdict: Verdict,
    /// What the policy concluded.
    pub policy_verdict: Verdict,
    /// The mandate it was judged under; `null` for `deny_no_mandate` (the token omits it).
    pub mandate: Option<Cow<'a, MandateId>>,
    /// The organization's policy set.
    pub policy_version: Cow<'a, str>,
    /// Its single-use nonce.
    pub nonce: Cow<'a, Nonce>,
    /// The request that was judged.
    pub request: Cow<'a, AuthorizationRequest>,
    /// The AP2 open payment mandate's digest it is bound to (the `ap2_mandate` claim);
    /// absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ap2_mandate: Option<Cow<'a, str>>,
    /// The AP2 closed payment mandate's transaction id it is bound to (the
    /// `ap2_transaction` claim); absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ap2_transaction: Option<Cow<'a, str>>,
    /// The x402 payment's digest it is bound to (the `x402_payment` claim); absent when
    /// none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x402_payment: Option<Cow<'a, str>>,
    /// The ACP allowance's digest it is bound to (the `acp_allowance` claim); absent when
    /// none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acp_allowance: Option<Cow<'a, str>>,
    /// The ACP allowance's checkout session it is bound to (the `acp_checkout_session`
    /// claim); absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acp_checkout_session: Option<Cow<'a, str>>,
    /// The mode in force when it was made.
    pub mode: Mode,
    /// Why, with the numbers involved; `null` for a plain allow.
    pub reason: Option<Cow<'a, str>>,
    /// On a decision made by approving a review: the original decision.
    pub supersedes: Option<Cow<'a, DecisionId>>,
    /// The review it opened, if any: the whole review in the answer that opened it, its
    /// id elsewhere.
    pub review: Option<OpenedReview<'a>>,
    /// Where the review it opened stands; on reads of the log of a decision that opened
    /// one, absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review_status: Option<ReviewStatus>,
    /// When the review it opened expires (or expired) unresolved, on the same reads as
    /// `review_status`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::timefmt::option"
    )]
    pub review_expires_at: Option<OffsetDateTime>,
    /// Once the review it opened was approved: the fresh decision the approval made (the
    /// review's `resolution`), on the same reads as `review_status`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review_resolution: Option<Cow<'a, DecisionId>>,
    /// Once the review it opened was withdrawn by this decision's agent (`review_status`
    /// `denied`): `true`, on the same reads as `review_status`; absent otherwise.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub review_withdrawn: bool,
    /// Once the review it opened was denied: the reason the person gave, if any (the
    /// review's `reason`), on the same reads as `review_status`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review_reason: Option<Cow<'a, str>>,
    /// Once the review it opened was resolved: when it was approved, denied or expired
    /// (the review's `resolved_at`), on the same reads as `review_status`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::timefmt::option"
    )]
    pub review_resolved_at: Option<OffsetDateTime>,
    /// When it was made.
    #[serde(with = "crate::timefmt")]
    pub created_at: OffsetDateTime,
    /// On reads of the log: its place in the organization's decision log, with the
    /// inclusion proof against the newest checkpoint, once a checkpoint covers it
    /// (`Some(None)`, written `null`, until then); absent (`None`) in the answer and in
    /// events' data.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present_entry"
    )]
    pub log: Option<Option<crate::tlog::LogEntry>>,
    /// The token answered when it was made, byte for byte: in the answer, and on reads of
    /// the log (`Some(None)`, written `null`, for a decision stored before tokens were
    /// kept); absent (`None`) in events' data.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub verdict_token: Option<Option<Cow<'a, str>>>,
}

impl Decision<'_> {
    /// The signed verdict (compact JWS) a counterparty verifies, where the object carries
    /// it: always in the answer to the request that made the decision.
    pub fn token(&self) -> Option<&str> {
        self.verdict_token.as_ref()?.as_deref()
    }

    /// The whole review the decision opened, where the object carries it (the answer to
    /// the request that opened it).
    pub fn opened_review(&self) -> Option<&Review> {
        self.review.as_ref()?.review()
    }
}

/// A member that is present, even as `null`: `Some(None)` for `null` (absent is `None`,
/// through `#[serde(default)]`).
fn present<'de, 'a, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Option<Cow<'a, str>>>, D::Error> {
    Option::<String>::deserialize(d).map(|token| Some(token.map(Cow::Owned)))
}

/// [`present`] for the `log` member.
fn present_entry<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Option<crate::tlog::LogEntry>>, D::Error> {
    Option::<crate::tlog::LogEntry>::deserialize(d).map(Some)
}

/// `review` in a [`Decision`]: the review the request opened, or (on a read of the log)
/// only its id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum OpenedReview<'a> {
    /// The whole review.
    Review(Cow<'a, Review>),
    /// Its id.
    Id(Cow<'a, ReviewId>),
}

impl OpenedReview<'_> {
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
