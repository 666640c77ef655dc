//! Mandates: `POST/GET /v1/mandates`, `GET /v1/mandates/{id}`,
//! `POST /v1/mandates/{id}/revoke`.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::{Date, OffsetDateTime};

use crate::amount::Amount;
use crate::id::{AgentId, MandateId};
use crate::mandate::{EscrowTerms, Limits, MandateDraft, MandateStatus, Recipients};
use crate::names::{Category, Principal};

/// A mandate, also the `data` of `mandate.*` events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mandate {
    /// The agent it grants authority to.
    pub agent: AgentId,
    /// The allowed categories, in the order given.
    pub categories: Vec<Category>,
    /// When it was created.
    #[serde(with = "crate::timefmt")]
    pub created_at: OffsetDateTime,
    /// Escrow terms, if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escrow: Option<EscrowTerms>,
    /// The last day (UTC) it is valid, `YYYY-MM-DD`.
    #[serde(with = "date")]
    pub expires: Date,
    /// `mnd_…`.
    pub id: MandateId,
    /// Spending limits.
    pub limits: Limits,
    /// The accountable party, if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<Principal>,
    /// Which recipients may be paid, if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recipients: Option<Recipients>,
    /// Amounts above this get `review`, if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review_above: Option<Amount>,
    /// What its allows add up to this UTC day, ISO week and calendar month, in
    /// `limits.currency`: on `GET /v1/mandates/{id}` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spent: Option<Spent>,
    /// `active`, `revoked`, `superseded` or `expired`, as of the answer.
    pub status: MandateStatus,
}

/// A mandate's spend to date, as the engine counts it against `per_day`, `per_week` and
/// `per_month`: the sum of its `allow` decisions in the current period (UTC).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spent {
    /// This UTC calendar day.
    pub day: Amount,
    /// This calendar month, UTC.
    pub month: Amount,
    /// This ISO week (from Monday 00:00 UTC).
    pub week: Amount,
}

/// The body of `POST /v1/mandates`. The server parses it with
/// [`crate::mandate::MandateDraft::from_json`], which names the field in every error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateMandate {
    /// The agent it is for.
    pub agent: AgentId,
    /// The allowed categories.
    pub categories: Vec<Category>,
    /// Escrow terms, stored and echoed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escrow: Option<EscrowTerms>,
    /// The last day (UTC) it is valid.
    #[serde(with = "date")]
    pub expires: Date,
    /// Spending limits.
    pub limits: Limits,
    /// The accountable party.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<Principal>,
    /// Which recipients may be paid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recipients: Option<Recipients>,
    /// Amounts above this get `review`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review_above: Option<Amount>,
}

impl From<MandateDraft> for CreateMandate {
    fn from(draft: MandateDraft) -> Self {
        Self {
            agent: draft.agent,
            categories: draft.categories,
            escrow: draft.escrow,
            expires: draft.expires,
            limits: draft.limits,
            principal: draft.principal,
            recipients: draft.recipients,
            review_above: draft.review_above,
        }
    }
}

/// The stored mandate in its API shape: here, not in [`crate::mandate`], so that the
/// mandate's rules import nothing of the wire.
impl crate::mandate::Mandate {
    /// The mandate in its API shape, with the status as seen at `now`.
    pub fn to_json(&self, now: OffsetDateTime) -> Value {
        super::to_value(&self.to_wire(now)).unwrap_or(Value::Null)
    }

    /// The mandate as the API returns it, with its status as seen at `now`.
    pub fn to_wire(&self, now: OffsetDateTime) -> crate::wire::Mandate {
        let terms = &self.terms;
        Mandate {
            agent: terms.agent.clone(),
            categories: terms.categories.clone(),
            created_at: self.created_at,
            escrow: terms.escrow.clone(),
            expires: terms.expires,
            id: self.id.clone(),
            limits: terms.limits.clone(),
            principal: terms.principal.clone(),
            recipients: terms.recipients.clone(),
            review_above: terms.review_above,
            spent: None,
            status: self.status_at(now),
        }
    }
}

/// serde for `YYYY-MM-DD` dates.
mod date {
    use serde::{Deserialize, Deserializer, Serializer};
    use time::Date;

    use crate::mandate::{format_date, parse_date};

    pub fn serialize<S: Serializer>(date: &Date, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&format_date(*date))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Date, D::Error> {
        let text = String::deserialize(deserializer)?;
        parse_date(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("{text:?} is not a YYYY-MM-DD date")))
    }
}
