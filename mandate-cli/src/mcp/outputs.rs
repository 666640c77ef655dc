//! What the tools answer: their structured results, each with the JSON Schema the client
//! validates them against, and how an answer of the API becomes one.

use std::borrow::Cow;

use mandate_core::Verdict;
use mandate_protocol::wire::Decision;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use super::review::{EXPIRED, ReviewState, WITHDRAWN};

/// `authorize_payment`'s output, also the result of its task once the review is settled.
#[derive(Debug, Serialize, JsonSchema)]
pub struct AuthorizeOutput {
    /// `allow`, `review`, or a denial (`deny_limit`, `deny_category`, `deny_velocity`, ...).
    pub verdict: String,
    /// Why, with the numbers involved (a denied review's: the reviewer's reason); null
    /// for a plain allow.
    pub reason: Option<String>,
    /// The decision's id (`dec_…`); after an approved review, the fresh decision the
    /// approval made.
    pub decision: String,
    /// On allow: the signed verdict (ES256 JWT) to hand to the payee; valid 5 minutes.
    pub verdict_token: Option<String>,
    /// On review: the review's id; a person decides.
    pub review: Option<String>,
    /// Where the review stands: `pending`, `approved`, `denied` or `expired`; null
    /// without one.
    pub review_status: Option<String>,
    /// The Idempotency-Key the request was sent with: pass it again to retry safely
    /// (null in a task's result, read from the decision).
    pub idempotency_key: Option<String>,
    /// What the mandate still allows after this decision, per limit; null without one.
    // A `Value`: tool outputs carry a JSON Schema, which the core's wire types do not.
    pub remaining: Option<Value>,
    /// What to do next, in a sentence.
    pub next_step: String,
}

impl AuthorizeOutput {
    /// The answer to `POST /v1/authorizations`, before any review is settled.
    pub fn answered(answer: Decision<'static>, key: String, remaining: Option<Value>) -> Self {
        let decision = answer.id.to_string();
        let next_step = match answer.verdict {
            Verdict::Allow => PAY.into(),
            Verdict::Review => format!(
                "Do not pay yet: a person reviews it. Call wait_for_review with decision {decision}."
            ),
            _ => REFUSED.into(),
        };
        Self {
            verdict_token: answer
                .verdict
                .is_allow()
                .then(|| answer.token().map(str::to_owned))
                .flatten(),
            review_status: answer.review.as_ref().map(|_| "pending".into()),
            review: answer.review.as_ref().map(|r| r.id().to_string()),
            reason: answer.reason.map(Cow::into_owned),
            verdict: answer.verdict.as_str().to_owned(),
            decision,
            idempotency_key: Some(key),
            remaining,
            next_step,
        }
    }

    /// The outcome of `decision` as read later (a task's result): its own verdict, or,
    /// for a review, where the review ended.
    pub fn settled(decision: &Decision, state: &ReviewState) -> Self {
        let mut output = Self {
            verdict: decision.verdict.as_str().to_owned(),
            reason: decision.reason.clone().map(Cow::into_owned),
            decision: decision.id.to_string(),
            verdict_token: token_of(decision),
            review: decision.review.as_ref().map(|r| r.id().to_string()),
            review_status: state.status().map(str::to_owned),
            idempotency_key: None,
            remaining: None,
            next_step: match decision.verdict {
                Verdict::Allow => PAY.into(),
                _ => REFUSED.into(),
            },
        };
        match state {
            ReviewState::None => {}
            ReviewState::Pending => {
                output.next_step =
                    "Do not pay yet: a person reviews it; the task completes when they decide."
                        .into();
            }
            ReviewState::Approved(fresh) => {
                output.verdict = fresh.verdict.as_str().to_owned();
                output.reason = fresh.reason.clone().map(Cow::into_owned);
                output.decision = fresh.id.to_string();
                output.verdict_token = token_of(fresh);
                output.next_step = if fresh.verdict.is_allow() {
                    PAY
                } else {
                    REFUSED
                }
                .into();
            }
            ReviewState::Denied(denial) => {
                output.reason = Some(denial.reason());
                output.next_step = "Do not pay: a person denied it. Tell the user why.".into();
            }
            ReviewState::Withdrawn(_) => {
                output.reason = Some(WITHDRAWN.into());
                output.next_step = "Do not pay: the review was withdrawn (the task was cancelled). Ask again if the payment is still needed.".into();
            }
            ReviewState::Expired => {
                output.reason = Some(EXPIRED.into());
                output.next_step =
                    "Do not pay: nobody decided in time. Ask again if the payment is still needed."
                        .into();
            }
        }
        output
    }
}

const PAY: &str = "Pay now and hand the payee verdict_token; it expires in 5 minutes.";
const REFUSED: &str = "Do not pay: the payment was refused. Tell the user the reason.";

/// The token of an `allow` read from the log.
fn token_of(decision: &Decision) -> Option<String> {
    decision
        .verdict
        .is_allow()
        .then(|| decision.token().map(str::to_owned))
        .flatten()
}

/// `wait_for_review`'s output.
#[derive(Debug, Serialize, JsonSchema)]
pub struct WaitOutput {
    /// `approved`, `denied`, `expired`, or `pending` when the wait ended first.
    pub status: String,
    /// On approval: the fresh decision the approval made.
    pub decision: Option<String>,
    /// On approval: its verdict (`allow`, or a denial if the mandate changed meanwhile).
    pub verdict: Option<String>,
    /// On approval with `allow`: the signed verdict to hand to the payee.
    pub verdict_token: Option<String>,
    /// Why, when there is a reason to give (a denial: the reviewer's reason).
    pub reason: Option<String>,
    /// Seconds waited.
    pub waited_seconds: u64,
}

impl WaitOutput {
    /// The wait's answer once the review is settled, or `None` while it is pending.
    pub fn settled(state: &ReviewState, waited_seconds: u64) -> Option<Self> {
        let done = |status: &str, reason: Option<String>| Self {
            status: status.into(),
            decision: None,
            verdict: None,
            verdict_token: None,
            reason,
            waited_seconds,
        };
        Some(match state {
            ReviewState::None | ReviewState::Pending => return None,
            ReviewState::Approved(fresh) => Self {
                decision: Some(fresh.id.to_string()),
                verdict: Some(fresh.verdict.as_str().to_owned()),
                verdict_token: token_of(fresh),
                reason: fresh.reason.clone().map(Cow::into_owned),
                ..done("approved", None)
            },
            ReviewState::Denied(denial) => done("denied", Some(denial.reason())),
            ReviewState::Withdrawn(_) => done("denied", Some(WITHDRAWN.into())),
            ReviewState::Expired => done("expired", Some(EXPIRED.into())),
        })
    }
}

/// One decision in `list_decisions`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct DecisionSummary {
    /// `dec_…`.
    pub id: String,
    /// The verdict.
    pub verdict: String,
    /// Why.
    pub reason: Option<String>,
    /// The amount, as signed.
    pub amount: String,
    /// The currency.
    pub currency: String,
    /// The recipient.
    pub recipient: String,
    /// The category.
    pub category: String,
    /// When (RFC 3339, UTC).
    pub created_at: String,
    /// Where its review stands, if it opened one.
    pub review_status: Option<String>,
    /// The decision an approval of its review made.
    pub review_resolution: Option<String>,
    /// Its signed verdict (null for decisions stored before tokens were kept).
    pub verdict_token: Option<String>,
}

impl From<Decision<'_>> for DecisionSummary {
    fn from(d: Decision) -> Self {
        Self {
            id: d.id.to_string(),
            verdict: d.verdict.as_str().to_owned(),
            reason: d.reason.map(Cow::into_owned),
            amount: d.request.amount.to_string(),
            currency: d.request.currency.to_string(),
            recipient: d.request.recipient.to_string(),
            category: d.request.category.to_string(),
            created_at: mandate_protocol::timefmt::format(d.created_at),
            review_status: d.review_status.map(|s| s.as_str().to_owned()),
            review_resolution: d.review_resolution.map(|r| r.to_string()),
            verdict_token: d.verdict_token.flatten().map(Cow::into_owned),
        }
    }
}

/// `list_decisions`' output.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ListOutput {
    /// Newest first.
    pub decisions: Vec<DecisionSummary>,
    /// Whether older ones exist.
    pub has_more: bool,
}

/// `get_mandate`'s output: the agent's mandate in force, as the API reads it.
#[derive(Debug, Serialize, JsonSchema)]
pub struct MandateOutput {
    /// Whether the agent has an active mandate; without one every request is denied.
    pub active: bool,
    /// The mandate (`id`, `limits`, `remaining`, `spent`, `categories`, `recipients`,
    /// `review_above`, `expires`, `status`); null without one.
    // A `Value`: tool outputs carry a JSON Schema, which the core's wire types do not.
    pub mandate: Option<Value>,
}

/// `verify_verdict`'s output.
#[derive(Debug, Serialize, JsonSchema)]
pub struct VerifyOutput {
    /// True only for a valid, unexpired `allow` signed by this service for exactly this
    /// amount, currency and recipient (and the protocol payment given, if any).
    pub valid: bool,
    /// Why not, one reason each; empty when valid.
    pub reasons: Vec<String>,
    /// The signed decision id, when the signature held.
    pub decision: Option<String>,
    /// The signed verdict, when the signature held.
    pub verdict: Option<String>,
    /// The key's environment (`sandbox` or `live`), from its kid.
    pub environment: Option<String>,
}
