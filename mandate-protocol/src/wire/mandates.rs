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
    /// The first day (UTC) it is in force, `YYYY-MM-DD`, if given.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "opt_date")]
    pub not_before: Option<Date>,
    /// The accountable party, if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<Principal>,
    /// Which recipients may be paid, if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recipients: Option<Recipients>,
    /// What each limit still allows at the time of the answer, in `limits.currency`,
    /// computed by [`crate::budget::remaining`] from the spend the engine decides with: on
    /// `GET /v1/mandates/{id}` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remaining: Option<crate::budget::Remaining>,
    /// Amounts above this get `review`, if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review_above: Option<Amount>,
    /// Where its terms came from, on a mandate imported from an AP2 open payment mandate
    /// (absent on one written as plain terms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<MandateSource>,
    /// What its allows add up to this UTC day, ISO week and calendar month, in
    /// `limits.currency`: on `GET /v1/mandates/{id}` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spent: Option<Spent>,
    /// `active`, `revoked`, `superseded` or `expired`, as of the answer.
    pub status: MandateStatus,
}

/// The AP2 open payment mandate a mandate was imported from (docs/protocols.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MandateSource {
    /// `payment.allowed_payment_instruments`'s list, as given, if the open mandate has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_payment_instruments: Option<Vec<Value>>,
    /// `payment.allowed_pisps`'s list, as given, if the open mandate has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_pisps: Option<Vec<Value>>,
    /// Its digest (base64url SHA-256 of its issuer JWT): the verdicts' `ap2_mandate`.
    pub digest: String,
    /// The SD-JWT as imported.
    pub open_mandate: String,
    /// `payment.reference`'s `conditional_transaction_id`, if the open mandate has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payment_reference: Option<String>,
    /// What the open mandate had spent under the mandates imported from it before this one
    /// (for this agent or another), when this one was imported: its budget and its
    /// occurrence count are one running total, and this mandate's limits count from there.
    /// Absent on the open mandate's first import.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spent_before: Option<SpentBefore>,
    /// `ap2`.
    #[serde(rename = "type")]
    pub kind: String,
}

/// What an AP2 open mandate had spent before a mandate imported from it: the sum of the
/// allows under the mandates that carried it before, in `limits.currency`, and how many.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpentBefore {
    /// How many allows (counted against `limits.count.total`, AP2's `max_occurrences`).
    pub count: u64,
    /// Their sum (counted against `limits.total`, AP2's `payment.budget`).
    pub total: Amount,
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
    /// The first day (UTC) it is in force.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "opt_date")]
    pub not_before: Option<Date>,
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
            not_before: draft.not_before,
            principal: draft.principal,
            recipients: draft.recipients,
            review_above: draft.review_above,
        }
    }
}

/// A stored mandate in its API shape, as JSON, with its status as seen at `now`.
pub fn mandate_json(mandate: &crate::mandate::Mandate, now: OffsetDateTime) -> Value {
    super::to_value(&Mandate::of(mandate, now)).unwrap_or(Value::Null)
}

/// The stored mandate in its API shape: here, not in the `mandate` module, so that the
/// mandate's rules import nothing of the wire.
impl Mandate {
    /// A stored mandate as the API returns it, with its status as seen at `now`.
    pub fn of(mandate: &crate::mandate::Mandate, now: OffsetDateTime) -> Self {
        let terms = &mandate.terms;
        Mandate {
            agent: terms.agent.clone(),
            categories: terms.categories.clone(),
            created_at: mandate.created_at,
            escrow: terms.escrow.clone(),
            expires: terms.expires,
            id: mandate.id.clone(),
            limits: terms.limits.clone(),
            not_before: terms.not_before,
            principal: terms.principal.clone(),
            recipients: terms.recipients.clone(),
            review_above: terms.review_above,
            source: None,
            spent: None,
            remaining: None,
            status: mandate.status_at(now),
        }
    }
}

/// serde for `YYYY-MM-DD` dates.
mod date {
    use serde::{Deserialize, Deserializer, Serializer};
    use time::Date;

    use crate::mandate::{format_date, parse_date};

    pub(super) fn serialize<S: Serializer>(date: &Date, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&format_date(*date))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Date, D::Error> {
        let text = String::deserialize(deserializer)?;
        parse_date(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("{text:?} is not a YYYY-MM-DD date")))
    }
}

/// serde for optional `YYYY-MM-DD` dates.
mod opt_date {
    use serde::{Deserializer, Serializer};
    use time::Date;

    pub(super) fn serialize<S: Serializer>(
        date: &Option<Date>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match date {
            Some(date) => super::date::serialize(date, serializer),
            None => serializer.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Date>, D::Error> {
        super::date::deserialize(deserializer).map(Some)
    }
}
