//! Mandates: the data that grants an agent authority to spend.
//!
//! A [`MandateDraft`] is parsed from the JSON body of `POST /v1/mandates` by
//! [`MandateDraft::from_json`], which names the offending field in every error
//! (`limits.currency is required`, `unknown field foo`). Past that edge a [`Mandate`] only
//! holds valid values. Whether a mandate is expired is a question of time, so it is asked
//! with `now` ([`Mandate::status_at`]), never stored.

mod parse;

use std::fmt;

use serde::{Deserialize, Serialize};
use time::{Date, OffsetDateTime};

use crate::amount::Amount;
use crate::field::{FieldError, invalid};
use crate::id::{AgentId, MandateId};
use crate::names::{Category, Currency, Principal, Recipient};

/// The limits of a mandate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// The hard cap on one transaction.
    pub per_transaction: Amount,
    /// The least one transaction may be, if any (AP2's `payment.amount_range.min`): a
    /// request below it is `deny_limit`. At most `per_transaction`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_per_transaction: Option<Amount>,
    /// The cap on this mandate's allowed spend in one UTC calendar day, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_day: Option<Amount>,
    /// The cap on this mandate's allowed spend in one ISO week (from Monday 00:00 UTC), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_week: Option<Amount>,
    /// The cap on this mandate's allowed spend in one calendar month (UTC), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_month: Option<Amount>,
    /// The cap on this mandate's allowed spend over its whole life, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<Amount>,
    /// Caps on how many allows this mandate gives per window, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<CountLimits>,
    /// The currency every amount is in.
    pub currency: Currency,
}

impl Limits {
    /// Whether a limit counts over the mandate's whole life (`total` or `count.total`):
    /// then deciding needs every allow since the mandate was created, not only this
    /// month's and week's.
    pub(crate) fn counts_lifetime(&self) -> bool {
        self.total.is_some() || self.count.is_some_and(|c| c.total.is_some())
    }
}

/// Caps on the number of allows a mandate gives: in one UTC day, one ISO week, one
/// calendar month (UTC), and over its whole life. Each is a whole number from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CountLimits {
    /// At most this many allows in one UTC day.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_day: Option<u64>,
    /// At most this many allows in one ISO week.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_week: Option<u64>,
    /// At most this many allows in one calendar month.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_month: Option<u64>,
    /// At most this many allows over the mandate's life.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
}

/// The largest count limit accepted.
pub(crate) const MAX_COUNT_LIMIT: u64 = 1_000_000_000;

/// The most entries `recipients.allow` and `recipients.deny` may each hold.
pub(crate) const MAX_RECIPIENT_ENTRIES: usize = 100;

/// One entry of a recipient list: an exact recipient (`vendor:acme`) or a prefix ending in
/// `*` (`vendor:aws*`), which matches every recipient that starts with the text before it.
/// Both match without regard to ASCII letter case.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RecipientPattern {
    /// This recipient only.
    Exact(Recipient),
    /// Every recipient that starts with this text (stored without the `*`).
    Prefix(String),
}

impl RecipientPattern {
    /// Parses `vendor:<name>` or `vendor:<start>*`, where `<start>` may be empty.
    pub fn parse(text: &str) -> Option<Self> {
        match text.strip_suffix('*') {
            Some(prefix) => {
                let start = prefix.strip_prefix("vendor:")?;
                let tail = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-');
                (start.len() <= 128 && start.bytes().all(tail))
                    .then(|| Self::Prefix(prefix.to_owned()))
            }
            None => Recipient::parse(text).ok().map(Self::Exact),
        }
    }

    /// Whether `recipient` is this one or starts with this prefix, without regard to
    /// ASCII letter case (`vendor:EVIL` matches `vendor:evil`; decisions.md, third round):
    /// a payee list must not be dodged by writing a name in capitals.
    pub fn matches(&self, recipient: &Recipient) -> bool {
        let recipient = recipient.as_str().as_bytes();
        match self {
            Self::Exact(exact) => recipient.eq_ignore_ascii_case(exact.as_str().as_bytes()),
            Self::Prefix(prefix) => recipient
                .get(..prefix.len())
                .is_some_and(|start| start.eq_ignore_ascii_case(prefix.as_bytes())),
        }
    }
}

impl fmt::Display for RecipientPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Exact(exact) => f.write_str(exact.as_str()),
            Self::Prefix(prefix) => write!(f, "{prefix}*"),
        }
    }
}

impl Serialize for RecipientPattern {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for RecipientPattern {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse(&text).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "{text:?} is not vendor:<name> or a prefix ending in *"
            ))
        })
    }
}

/// Which recipients a mandate may pay: `deny` wins over `allow`, and an empty `allow`
/// means any recipient not denied.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Recipients {
    /// Recipients that may be paid; empty for any.
    #[serde(default)]
    pub allow: Vec<RecipientPattern>,
    /// Recipients that may never be paid.
    #[serde(default)]
    pub deny: Vec<RecipientPattern>,
}

/// Why a recipient is refused by a mandate's lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecipientRefusal {
    /// It matches an entry of `recipients.deny`.
    Denied,
    /// `recipients.allow` is not empty and no entry matches it.
    NotAllowed,
}

impl Recipients {
    /// Whether `recipient` may be paid, or why not.
    pub(crate) fn check(&self, recipient: &Recipient) -> Result<(), RecipientRefusal> {
        if self.deny.iter().any(|p| p.matches(recipient)) {
            return Err(RecipientRefusal::Denied);
        }
        if !self.allow.is_empty() && !self.allow.iter().any(|p| p.matches(recipient)) {
            return Err(RecipientRefusal::NotAllowed);
        }
        Ok(())
    }
}

/// Escrow terms: stored and echoed, never read by the policy engine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EscrowTerms {
    /// Amounts above this would call for an escrow (informational).
    pub required_above: Amount,
}

/// A validated mandate body, before the server gives it an id.
///
/// Serialized (serde, JSON) in the form of the API's mandate body (`expires` and
/// `not_before` as `YYYY-MM-DD`, absent options left out), for an embedder to store.
/// Reading it back trusts what was written: read an untrusted body with [`Self::from_json`],
/// which checks every rule and names the field that breaks one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MandateDraft {
    /// The agent the mandate is for.
    pub agent: AgentId,
    /// The accountable party.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<Principal>,
    /// Spending limits.
    pub limits: Limits,
    /// Allowed categories, non-empty, without duplicates, in the order given.
    pub categories: Vec<Category>,
    /// Amounts above this get `review`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review_above: Option<Amount>,
    /// Last day (UTC) on which the mandate is valid.
    #[serde(with = "day")]
    pub expires: Date,
    /// First day (UTC) on which the mandate is in force; before it, requests are
    /// `deny_no_mandate`. `None`: in force from its creation.
    #[serde(
        default,
        with = "optional_day",
        skip_serializing_if = "Option::is_none"
    )]
    pub not_before: Option<Date>,
    /// Escrow terms, stored and echoed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escrow: Option<EscrowTerms>,
    /// Which recipients may be paid; `None` for any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recipients: Option<Recipients>,
}

/// `YYYY-MM-DD` for a stored draft's days.
mod day {
    use serde::{Deserialize, Deserializer, Serializer};
    use time::Date;

    pub(super) fn serialize<S: Serializer>(date: &Date, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&super::format_date(*date))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Date, D::Error> {
        let text = String::deserialize(deserializer)?;
        super::parse_date(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("{text:?} is not a YYYY-MM-DD date")))
    }
}

/// [`day`] for an optional day.
mod optional_day {
    use serde::{Deserialize, Deserializer, Serializer};
    use time::Date;

    pub(super) fn serialize<S: Serializer>(
        date: &Option<Date>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match date {
            Some(date) => super::day::serialize(date, serializer),
            None => serializer.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Date>, D::Error> {
        match Option::<String>::deserialize(deserializer)? {
            None => Ok(None),
            Some(text) => super::parse_date(&text).map(Some).ok_or_else(|| {
                serde::de::Error::custom(format!("{text:?} is not a YYYY-MM-DD date"))
            }),
        }
    }
}

/// RFC 3339 with the fraction of a second kept, for a stored mandate's creation time.
mod instant {
    use serde::{Deserialize, Deserializer, Serializer};
    use time::OffsetDateTime;
    use time::format_description::well_known::Rfc3339;

    pub(super) fn serialize<S: Serializer>(
        at: &OffsetDateTime,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        let text = at.format(&Rfc3339).map_err(serde::ser::Error::custom)?;
        serializer.serialize_str(&text)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<OffsetDateTime, D::Error> {
        let text = String::deserialize(deserializer)?;
        OffsetDateTime::parse(&text, &Rfc3339).map_err(serde::de::Error::custom)
    }
}

/// The stored state of a mandate. `expired` is never stored: see [`Mandate::status_at`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MandateStatus {
    /// In force.
    Active,
    /// Revoked by the organization.
    Revoked,
    /// Replaced by a newer mandate for the same agent.
    Superseded,
    /// Past its `expires` date.
    Expired,
}

impl MandateStatus {
    /// The status as it is written on the wire and in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Revoked => "revoked",
            Self::Superseded => "superseded",
            Self::Expired => "expired",
        }
    }

    /// Parses the wire form.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "active" => Some(Self::Active),
            "revoked" => Some(Self::Revoked),
            "superseded" => Some(Self::Superseded),
            "expired" => Some(Self::Expired),
            _ => None,
        }
    }
}

/// A mandate as stored: a draft with an id, a stored status and a creation time.
///
/// Serialized (serde, JSON) as `{"id", "terms", "status", "created_at"}`: `terms` as
/// [`MandateDraft`] is, `status` in its wire form, `created_at` in RFC 3339 with its
/// fraction of a second (read back to the same instant).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mandate {
    /// The mandate id.
    pub id: MandateId,
    /// The validated body.
    pub terms: MandateDraft,
    /// Stored status: `active`, `revoked` or `superseded`.
    pub status: MandateStatus,
    /// When it was created.
    #[serde(with = "instant")]
    pub created_at: OffsetDateTime,
}

/// Parses a `YYYY-MM-DD` date.
pub fn parse_date(text: &str) -> Option<Date> {
    let format = time::macros::format_description!("[year]-[month]-[day]");
    if text.len() != 10 {
        return None;
    }
    Date::parse(text, format).ok()
}

impl MandateDraft {
    /// Refuses a draft whose `expires` date is already past at `now` (UTC): such a mandate
    /// would replace the agent's current one and deny everything at once.
    pub fn check_not_expired_at(&self, now: OffsetDateTime) -> Result<(), FieldError> {
        let today = now.to_offset(time::UtcOffset::UTC).date();
        if self.expires < today {
            return Err(invalid(
                "expires",
                format!("must be today or later ({} UTC)", format_date(today)),
            ));
        }
        Ok(())
    }
}

impl Mandate {
    /// Whether the mandate is past its `expires` date at `now`. A mandate is valid through
    /// the last second of its `expires` date, UTC.
    pub(crate) fn is_expired_at(&self, now: OffsetDateTime) -> bool {
        now.to_offset(time::UtcOffset::UTC).date() > self.terms.expires
    }

    /// Whether the mandate is not yet in force at `now`: `now` is before the first second
    /// (UTC) of its `not_before` date.
    pub(crate) fn is_before_start_at(&self, now: OffsetDateTime) -> bool {
        self.terms
            .not_before
            .is_some_and(|start| now.to_offset(time::UtcOffset::UTC).date() < start)
    }

    /// The status as seen at `now`: a stored `active` mandate past its date reads `expired`.
    pub fn status_at(&self, now: OffsetDateTime) -> MandateStatus {
        match self.status {
            MandateStatus::Active if self.is_expired_at(now) => MandateStatus::Expired,
            other => other,
        }
    }
}

/// Formats a date as `YYYY-MM-DD`.
pub fn format_date(date: Date) -> String {
    format!(
        "{:04}-{:02}-{:02}",
        date.year(),
        u8::from(date.month()),
        date.day()
    )
}

// What Mandate's server and CLI compute with this module's types beyond their methods
// an embedder sees through mandate-core.

/// Whether a limit counts over the mandate's whole life (`total` or `count.total`):
/// then deciding needs every allow since the mandate was created.
pub fn counts_lifetime(limits: &Limits) -> bool {
    limits.counts_lifetime()
}

#[cfg(test)]
mod tests;
