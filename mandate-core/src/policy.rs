//! The policy engine: one pure function from a mandate, a request, the agent's history,
//! the enforcement mode and `now` to an [`Evaluation`].
//!
//! The rules run in a fixed order and the first that holds is the verdict:
//! `deny_no_mandate`, `deny_revoked`, `deny_expired`, `deny_replay` (a single-use
//! credential presented again, see [`evaluate_presenting`]), `deny_velocity`, `deny_category`,
//! `deny_recipient`, `deny_limit` (currency, minimum per transaction, per transaction, per day, per week, per
//! month, total, then the count limits per day, week, month and in total), `review`,
//! `allow`. A mandate before its `not_before` date is not in force: `deny_no_mandate`. Every denial
//! carries a [`Reason`] naming the numbers involved: kept as data, so that deciding costs
//! no formatting, and written out as text (its `Display`) when the decision is answered. In observe mode nothing blocks: the
//! returned verdict is `allow` and `policy_verdict` keeps what enforcement would have said.
//!
//! Longer than 800 lines: the verdicts, their reasons and the rules that give them are
//! read together, in the one order this file states.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;

use crate::amount::Amount;
use crate::field::{FieldError, amount, check_fields, invalid, object, required, string};
use crate::history::{AgentHistory, unix_ms};
use crate::id::{AgentId, MandateId};
use crate::mandate::{Mandate, MandateStatus, RecipientRefusal, format_date};
use crate::names::{Category, Currency, Recipient};

/// The outcome of an authorization request.
///
/// New denial codes are compatible additions (decisions.md, third round): the enum is
/// `#[non_exhaustive]`, and a code this version of the crate does not know is read as
/// [`Verdict::Unknown`], a denial, never as `allow`. The engine never returns `Unknown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Verdict {
    /// Within all limits.
    Allow,
    /// Above the review threshold: waits for a human.
    Review,
    /// The agent has no mandate.
    DenyNoMandate,
    /// The mandate was revoked.
    DenyRevoked,
    /// The mandate is past its expiry date.
    DenyExpired,
    /// The request carries a single-use credential (an AP2 closed payment mandate) that
    /// was already accepted.
    DenyReplay,
    /// More than 10 requests from the agent in 60 seconds.
    DenyVelocity,
    /// The category is not allowed.
    DenyCategory,
    /// The recipient is denied by, or not in, the mandate's recipient lists.
    DenyRecipient,
    /// A limit (per transaction, per day, per week, per month, or the currency) is exceeded.
    DenyLimit,
    /// A code this version of the crate does not know, read from a token or a stored
    /// decision of a later server: a denial. Written as `unknown`; never in [`Verdict::ALL`]
    /// and never returned by [`Verdict::parse`] or the engine.
    Unknown,
}

impl Verdict {
    /// Every verdict, in the order the engine checks them (allow last).
    pub const ALL: [Verdict; 10] = [
        Verdict::DenyNoMandate,
        Verdict::DenyRevoked,
        Verdict::DenyExpired,
        Verdict::DenyReplay,
        Verdict::DenyVelocity,
        Verdict::DenyCategory,
        Verdict::DenyRecipient,
        Verdict::DenyLimit,
        Verdict::Review,
        Verdict::Allow,
    ];

    /// The wire form, for example `deny_limit`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Review => "review",
            Self::DenyNoMandate => "deny_no_mandate",
            Self::DenyRevoked => "deny_revoked",
            Self::DenyExpired => "deny_expired",
            Self::DenyReplay => "deny_replay",
            Self::DenyVelocity => "deny_velocity",
            Self::DenyCategory => "deny_category",
            Self::DenyRecipient => "deny_recipient",
            Self::DenyLimit => "deny_limit",
            Self::Unknown => "unknown",
        }
    }

    /// Parses the wire form of a code this crate knows; `None` for any other text
    /// (`unknown` included).
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == text)
    }

    /// Reads a code as a verifier must: a code this crate does not know is
    /// [`Verdict::Unknown`], a denial.
    pub fn parse_lenient(text: &str) -> Self {
        Self::parse(text).unwrap_or(Self::Unknown)
    }

    /// Whether this is one of the `deny_*` codes, or a code this crate does not know.
    pub fn is_denial(self) -> bool {
        !matches!(self, Self::Allow | Self::Review)
    }

    /// Whether this is exactly `allow`: the one verdict a counterparty acts on.
    pub fn is_allow(self) -> bool {
        self == Self::Allow
    }
}

impl<'de> Deserialize<'de> for Verdict {
    /// Reads any string: a code this crate does not know becomes [`Verdict::Unknown`], so
    /// a token from a later server with a new denial code still reads (as a denial).
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = std::borrow::Cow::<str>::deserialize(deserializer)?;
        Ok(Self::parse_lenient(&text))
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The enforcement mode of an environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Verdicts are recorded, nothing blocks.
    Observe,
    /// Verdicts take effect.
    Enforce,
}

impl Mode {
    /// The wire form.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Observe => "observe",
            Self::Enforce => "enforce",
        }
    }

    /// Parses the wire form.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "observe" => Some(Self::Observe),
            "enforce" => Some(Self::Enforce),
            _ => None,
        }
    }
}

/// An agent's request to spend, parsed at the edge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthorizationRequest {
    /// The agent asking (from its key, not from the body).
    pub agent: AgentId,
    /// The amount, exact.
    pub amount: Amount,
    /// The currency of the amount.
    pub currency: Currency,
    /// Who is to be paid, `vendor:<name>`.
    pub recipient: Recipient,
    /// The spending category.
    pub category: Category,
}

impl AuthorizationRequest {
    /// Parses the body of `POST /v1/authorizations` for `agent`, naming the field in every
    /// error.
    pub fn from_json(agent: AgentId, body: &Value) -> Result<Self, FieldError> {
        let fields = object(body)?;
        check_fields(
            fields,
            "",
            &["amount", "currency", "recipient", "category"],
            &["agent", "id", "verdict"],
        )?;
        Self::build(
            agent,
            || amount(required(fields, "amount", "amount")?, "amount"),
            || string(required(fields, "currency", "currency")?, "currency"),
            || string(required(fields, "recipient", "recipient")?, "recipient"),
            || string(required(fields, "category", "category")?, "category"),
        )
    }

    /// The checks after parsing, shared by [`AuthorizationRequest::from_json`] and
    /// [`AuthorizationRequest::from_json_bytes`]: each field is read (by its closure) and
    /// checked in this order, so the first problem found is the one reported.
    fn build<'a>(
        agent: AgentId,
        amount: impl FnOnce() -> Result<Amount, FieldError>,
        currency: impl FnOnce() -> Result<&'a str, FieldError>,
        recipient: impl FnOnce() -> Result<&'a str, FieldError>,
        category: impl FnOnce() -> Result<&'a str, FieldError>,
    ) -> Result<Self, FieldError> {
        let amount = amount()?;
        let currency = Currency::parse(currency()?).map_err(|e| invalid("currency", e))?;
        let recipient = Recipient::parse(recipient()?).map_err(|e| invalid("recipient", e))?;
        let category = Category::parse(category()?).map_err(|e| invalid("category", e))?;
        Ok(Self {
            agent,
            amount,
            currency,
            recipient,
            category,
        })
    }
}

/// Why the bytes of a `POST /v1/authorizations` body do not make a request: the same
/// errors as any body's ([`crate::field::BodyError`]).
pub use crate::field::BodyError as RequestBodyError;

/// The plain shape of a request body: exactly the four fields, once each, with strings
/// that need no unescaping and a number for the amount (kept as its raw text, so it is
/// exact whatever serde_json's features).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlainRequest<'a> {
    #[serde(borrow)]
    amount: &'a serde_json::value::RawValue,
    currency: &'a str,
    recipient: &'a str,
    category: &'a str,
}

impl AuthorizationRequest {
    /// Parses the bytes of a `POST /v1/authorizations` body for `agent`: the same
    /// request, and the same error, as parsing them into a [`Value`] and calling
    /// [`AuthorizationRequest::from_json`].
    ///
    /// A body of the plain shape (the four fields, once each, strings without escapes)
    /// is read straight into them, without building a `Value` (a map, and a string for
    /// every key and value, on every authorization). Anything else (a field unknown,
    /// read-only, missing, repeated, null or of another type, an escape in a string, JSON
    /// that is not an object, or no JSON at all) goes the `Value` way, whose messages name
    /// the problem. In the plain shape the checks after parsing are the same code, in the
    /// same order, as in `from_json` (`build`).
    pub fn from_json_bytes(agent: AgentId, body: &[u8]) -> Result<Self, RequestBodyError> {
        // serde's derive reads a struct from an array too (by position), so only an object
        // takes the plain way; it refuses a repeated field, which the `Value` way names.
        let is_object = body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
        if is_object
            && let Ok(plain) = serde_json::from_slice::<PlainRequest<'_>>(body)
            && plain
                .amount
                .get()
                .starts_with(|c: char| c == '-' || c.is_ascii_digit())
        {
            return Ok(Self::from_plain(agent, plain)?);
        }
        let value = crate::field::parse_body(body)?;
        Ok(Self::from_json(agent, &value)?)
    }

    fn from_plain(agent: AgentId, plain: PlainRequest<'_>) -> Result<Self, FieldError> {
        let PlainRequest {
            amount: number,
            currency,
            recipient,
            category,
        } = plain;
        Self::build(
            agent,
            || Amount::parse(number.get()).map_err(|e| invalid("amount", e)),
            || Ok(currency),
            || Ok(recipient),
            || Ok(category),
        )
    }
}

/// A spend window shorter than the month, limited by `limits.per_day` or `limits.per_week`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SpendWindow {
    /// The UTC calendar day.
    Day,
    /// The ISO week, from Monday 00:00 UTC.
    Week,
}

/// A window of a count limit (`limits.count`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CountWindow {
    /// The UTC calendar day.
    Day,
    /// The ISO week, from Monday 00:00 UTC.
    Week,
    /// The calendar month, UTC.
    Month,
    /// The mandate's whole life.
    Total,
}

impl CountWindow {
    /// The field of `limits.count` that limits this window.
    pub fn field(self) -> &'static str {
        match self {
            Self::Day => "per_day",
            Self::Week => "per_week",
            Self::Month => "per_month",
            Self::Total => "total",
        }
    }
}

/// What the engine concluded, with its reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evaluation {
    /// The verdict returned and signed: in observe mode always `allow`.
    pub verdict: Verdict,
    /// What the rules say, whatever the mode.
    pub policy_verdict: Verdict,
    /// Why, with the numbers involved; `None` for a plain `allow`.
    pub reason: Option<Reason>,
}

/// Why a request was not a plain `allow`: the rule that decided, with what it compared.
/// `Display` writes the message the API returns (and serializes it as that string).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reason {
    /// `deny_no_mandate`: the agent has no mandate.
    NoMandate {
        /// The agent.
        agent: AgentId,
    },
    /// `deny_no_mandate`: the mandate is not in force before its `not_before` date.
    NotYetInForce {
        /// The mandate.
        mandate: MandateId,
        /// Its first day in force.
        not_before: time::Date,
    },
    /// `deny_revoked`.
    Revoked {
        /// The revoked mandate.
        mandate: MandateId,
    },
    /// `deny_no_mandate`: the newest mandate was superseded and none replaced it.
    Superseded {
        /// The superseded mandate.
        mandate: MandateId,
    },
    /// `deny_expired`.
    Expired {
        /// The expired mandate.
        mandate: MandateId,
        /// Its last valid day.
        expires: time::Date,
    },
    /// `deny_replay`: the single-use credential was already accepted.
    Replay {
        /// The credential's id (for an AP2 closed payment mandate, its digest).
        credential: String,
    },
    /// `deny_velocity`.
    Velocity {
        /// The agent.
        agent: AgentId,
    },
    /// `deny_category`.
    Category {
        /// The category asked for.
        category: Category,
        /// The mandate that does not allow it.
        mandate: MandateId,
    },
    /// `deny_recipient`: the recipient is denied by, or not allowed by, the mandate's lists.
    Recipient {
        /// The recipient asked for.
        recipient: Recipient,
        /// The mandate whose lists refuse it.
        mandate: MandateId,
        /// Which list refuses it.
        refusal: RecipientRefusal,
    },
    /// `deny_limit`: the spend this UTC day or ISO week plus the amount is over its limit.
    Window {
        /// The day or the week.
        window: SpendWindow,
        /// Allowed so far in the window.
        spent: Amount,
        /// The amount asked for.
        amount: Amount,
        /// The limit.
        limit: Amount,
    },
    /// `deny_limit`: another currency than the mandate's.
    Currency {
        /// The currency asked for.
        requested: Currency,
        /// The mandate's.
        allowed: Currency,
    },
    /// `deny_limit`: under the mandate's minimum for one transaction
    /// (`limits.min_per_transaction`).
    MinPerTransaction {
        /// The amount asked for.
        amount: Amount,
        /// The minimum.
        minimum: Amount,
    },
    /// `deny_limit`: over the per-transaction limit.
    PerTransaction {
        /// The amount asked for.
        amount: Amount,
        /// The limit.
        limit: Amount,
    },
    /// `deny_limit`: the month-to-date spend plus the amount is over the monthly limit.
    PerMonth {
        /// Allowed so far this month.
        spent: Amount,
        /// The amount asked for.
        amount: Amount,
        /// The limit.
        limit: Amount,
    },
    /// `deny_limit`: the mandate's spend over its life plus the amount is over `total`.
    Total {
        /// Allowed so far under the mandate.
        spent: Amount,
        /// The amount asked for.
        amount: Amount,
        /// The limit.
        limit: Amount,
    },
    /// `deny_limit`: one more allow would be over a count limit.
    Count {
        /// The window counted.
        window: CountWindow,
        /// Allows so far in the window.
        count: u64,
        /// The limit.
        limit: u64,
    },
    /// `review`: above the review threshold.
    Review {
        /// The amount asked for.
        amount: Amount,
        /// The threshold.
        review_above: Amount,
    },
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use crate::history::{VELOCITY_LIMIT, VELOCITY_WINDOW_MS};
        match self {
            Self::NoMandate { agent } => write!(f, "agent {agent} has no mandate"),
            Self::NotYetInForce {
                mandate,
                not_before,
            } => write!(
                f,
                "mandate {mandate} is not in force before {} (not_before)",
                format_date(*not_before)
            ),
            Self::Revoked { mandate } => write!(f, "mandate {mandate} was revoked"),
            Self::Superseded { mandate } => write!(
                f,
                "mandate {mandate} was superseded and the agent has no current mandate"
            ),
            Self::Expired { mandate, expires } => write!(
                f,
                "mandate {mandate} expired at the end of {}",
                format_date(*expires)
            ),
            Self::Replay { credential } => write!(
                f,
                "single-use credential {credential} was already accepted and cannot be presented again"
            ),
            Self::Velocity { agent } => write!(
                f,
                "more than {VELOCITY_LIMIT} requests from agent {agent} within {} seconds",
                VELOCITY_WINDOW_MS / 1000
            ),
            Self::Category { category, mandate } => {
                write!(f, "category {category} is not allowed by mandate {mandate}")
            }
            Self::Recipient {
                recipient,
                mandate,
                refusal: RecipientRefusal::Denied,
            } => write!(
                f,
                "recipient {recipient} is denied by mandate {mandate}'s recipients.deny"
            ),
            Self::Recipient {
                recipient,
                mandate,
                refusal: RecipientRefusal::NotAllowed,
            } => write!(
                f,
                "recipient {recipient} is not in mandate {mandate}'s recipients.allow"
            ),
            Self::Window {
                window,
                spent,
                amount,
                limit,
            } => {
                let (spend, field) = match window {
                    SpendWindow::Day => ("today's", "per_day"),
                    SpendWindow::Week => ("this week's", "per_week"),
                };
                match spent.checked_add(*amount) {
                    Some(total) => write!(
                        f,
                        "amount {amount} would bring {spend} spend to {total}, over the {field} limit {limit}"
                    ),
                    None => write!(
                        f,
                        "amount {amount} would bring {spend} spend of {spent} past any amount, over the {field} limit {limit}"
                    ),
                }
            }
            Self::Currency { requested, allowed } => write!(
                f,
                "currency {requested} differs from the mandate's currency {allowed}"
            ),
            Self::MinPerTransaction { amount, minimum } => write!(
                f,
                "amount {amount} is below the min_per_transaction minimum {minimum}"
            ),
            Self::PerTransaction { amount, limit } => {
                write!(f, "amount {amount} exceeds per_transaction limit {limit}")
            }
            Self::PerMonth {
                spent,
                amount,
                limit,
            } => write!(
                f,
                "month-to-date spend {spent} plus amount {amount} exceeds per_month limit {limit}"
            ),
            Self::Total {
                spent,
                amount,
                limit,
            } => match spent.checked_add(*amount) {
                Some(total) => write!(
                    f,
                    "amount {amount} would bring the mandate's spend to {total}, over the total limit {limit}"
                ),
                None => write!(
                    f,
                    "amount {amount} would bring the mandate's spend of {spent} past any amount, over the total limit {limit}"
                ),
            },
            Self::Count {
                window,
                count,
                limit,
            } => {
                let within = match window {
                    CountWindow::Day => "today",
                    CountWindow::Week => "this week",
                    CountWindow::Month => "this month",
                    CountWindow::Total => "under the mandate",
                };
                write!(
                    f,
                    "{count} allows {within} already, one more would be over the count.{} limit {limit}",
                    window.field()
                )
            }
            Self::Review {
                amount,
                review_above,
            } => write!(
                f,
                "amount {amount} is above review_above {review_above} and needs a human review"
            ),
        }
    }
}

impl Reason {
    /// The rule that decided, as the mandate names it: `no_mandate`, `revoked`,
    /// `superseded`, `expired`, `replay`, `velocity`, `categories`, `recipients.deny`,
    /// `recipients.allow`, `limits.currency`, `limits.min_per_transaction`,
    /// `limits.per_transaction`, `limits.per_day`,
    /// `limits.per_week`, `limits.per_month`, `limits.total`, `limits.count.per_day`,
    /// `limits.count.per_week`, `limits.count.per_month`, `limits.count.total`,
    /// `not_before` or `review_above`.
    pub fn rule(&self) -> &'static str {
        match self {
            Self::NoMandate { .. } => "no_mandate",
            Self::NotYetInForce { .. } => "not_before",
            Self::Total { .. } => "limits.total",
            Self::Count { window, .. } => match window {
                CountWindow::Day => "limits.count.per_day",
                CountWindow::Week => "limits.count.per_week",
                CountWindow::Month => "limits.count.per_month",
                CountWindow::Total => "limits.count.total",
            },
            Self::Revoked { .. } => "revoked",
            Self::Superseded { .. } => "superseded",
            Self::Expired { .. } => "expired",
            Self::Replay { .. } => "replay",
            Self::Velocity { .. } => "velocity",
            Self::Category { .. } => "categories",
            Self::Recipient {
                refusal: RecipientRefusal::Denied,
                ..
            } => "recipients.deny",
            Self::Recipient {
                refusal: RecipientRefusal::NotAllowed,
                ..
            } => "recipients.allow",
            Self::Window {
                window: SpendWindow::Day,
                ..
            } => "limits.per_day",
            Self::Window {
                window: SpendWindow::Week,
                ..
            } => "limits.per_week",
            Self::Currency { .. } => "limits.currency",
            Self::MinPerTransaction { .. } => "limits.min_per_transaction",
            Self::PerTransaction { .. } => "limits.per_transaction",
            Self::PerMonth { .. } => "limits.per_month",
            Self::Review { .. } => "review_above",
        }
    }
}

impl Serialize for Reason {
    /// As its message.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl Evaluation {
    /// Whether a review should be opened: only when `review` is the returned verdict.
    pub fn opens_review(&self) -> bool {
        self.verdict == Verdict::Review
    }
}

/// The rules, in order, without the mode applied.
fn judge(
    mandate: Option<&Mandate>,
    request: &AuthorizationRequest,
    history: &AgentHistory,
    presented: Option<&SingleUse>,
    now: OffsetDateTime,
) -> (Verdict, Option<Reason>) {
    let Some(mandate) = mandate else {
        return (
            Verdict::DenyNoMandate,
            Some(Reason::NoMandate {
                agent: request.agent.clone(),
            }),
        );
    };
    // Not yet in force is `deny_no_mandate`, which comes before `deny_revoked`.
    if let Some(not_before) = mandate.terms.not_before
        && mandate.is_before_start_at(now)
    {
        return (
            Verdict::DenyNoMandate,
            Some(Reason::NotYetInForce {
                mandate: mandate.id.clone(),
                not_before,
            }),
        );
    }
    match mandate.status {
        MandateStatus::Revoked => {
            return (
                Verdict::DenyRevoked,
                Some(Reason::Revoked {
                    mandate: mandate.id.clone(),
                }),
            );
        }
        MandateStatus::Superseded => {
            // A superseded mandate is never current; treat it as absent rather than allow.
            return (
                Verdict::DenyNoMandate,
                Some(Reason::Superseded {
                    mandate: mandate.id.clone(),
                }),
            );
        }
        MandateStatus::Active | MandateStatus::Expired => {}
    }
    let terms = &mandate.terms;
    if mandate.status == MandateStatus::Expired || mandate.is_expired_at(now) {
        return (
            Verdict::DenyExpired,
            Some(Reason::Expired {
                mandate: mandate.id.clone(),
                expires: terms.expires,
            }),
        );
    }
    if let Some(credential) = presented
        && credential.already_accepted
    {
        return (
            Verdict::DenyReplay,
            Some(Reason::Replay {
                credential: credential.id.clone(),
            }),
        );
    }
    if history.velocity.is_exceeded_at(unix_ms(now)) {
        return (
            Verdict::DenyVelocity,
            Some(Reason::Velocity {
                agent: request.agent.clone(),
            }),
        );
    }
    if !terms.categories.contains(&request.category) {
        return (
            Verdict::DenyCategory,
            Some(Reason::Category {
                category: request.category.clone(),
                mandate: mandate.id.clone(),
            }),
        );
    }
    if let Some(recipients) = &terms.recipients
        && let Err(refusal) = recipients.check(&request.recipient)
    {
        return (
            Verdict::DenyRecipient,
            Some(Reason::Recipient {
                recipient: request.recipient.clone(),
                mandate: mandate.id.clone(),
                refusal,
            }),
        );
    }
    let limits = &terms.limits;
    if request.currency != limits.currency {
        return (
            Verdict::DenyLimit,
            Some(Reason::Currency {
                requested: request.currency.clone(),
                allowed: limits.currency.clone(),
            }),
        );
    }
    if let Some(minimum) = limits.min_per_transaction
        && request.amount < minimum
    {
        return (
            Verdict::DenyLimit,
            Some(Reason::MinPerTransaction {
                amount: request.amount,
                minimum,
            }),
        );
    }
    if request.amount > limits.per_transaction {
        return (
            Verdict::DenyLimit,
            Some(Reason::PerTransaction {
                amount: request.amount,
                limit: limits.per_transaction,
            }),
        );
    }
    for (window, limit) in [
        (SpendWindow::Day, limits.per_day),
        (SpendWindow::Week, limits.per_week),
    ] {
        let Some(limit) = limit else { continue };
        let spent = match window {
            SpendWindow::Day => history.spend.day_total_at(now),
            SpendWindow::Week => history.spend.week_total_at(now),
        };
        let over = match spent.checked_add(request.amount) {
            Some(total) => total > limit,
            None => true,
        };
        if over {
            return (
                Verdict::DenyLimit,
                Some(Reason::Window {
                    window,
                    spent,
                    amount: request.amount,
                    limit,
                }),
            );
        }
    }
    if let Some(per_month) = limits.per_month {
        let spent = history.spend.total_at(now);
        let over = match spent.checked_add(request.amount) {
            Some(total) => total > per_month,
            None => true,
        };
        if over {
            return (
                Verdict::DenyLimit,
                Some(Reason::PerMonth {
                    spent,
                    amount: request.amount,
                    limit: per_month,
                }),
            );
        }
    }
    if let Some(total) = limits.total {
        let spent = history.spend.lifetime.total();
        let over = match spent.checked_add(request.amount) {
            Some(sum) => sum > total,
            None => true,
        };
        if over {
            return (
                Verdict::DenyLimit,
                Some(Reason::Total {
                    spent,
                    amount: request.amount,
                    limit: total,
                }),
            );
        }
    }
    if let Some(counts) = limits.count {
        let spend = &history.spend;
        for (window, limit, count) in [
            (CountWindow::Day, counts.per_day, spend.day_count_at(now)),
            (CountWindow::Week, counts.per_week, spend.week_count_at(now)),
            (
                CountWindow::Month,
                counts.per_month,
                spend.month_count_at(now),
            ),
            (CountWindow::Total, counts.total, spend.lifetime.count()),
        ] {
            if let Some(limit) = limit
                && count >= limit
            {
                return (
                    Verdict::DenyLimit,
                    Some(Reason::Count {
                        window,
                        count,
                        limit,
                    }),
                );
            }
        }
    }
    if let Some(review_above) = terms.review_above
        && request.amount > review_above
    {
        return (
            Verdict::Review,
            Some(Reason::Review {
                amount: request.amount,
                review_above,
            }),
        );
    }
    (Verdict::Allow, None)
}

/// Defined here rather than in `history` so that the history, plain data, does not depend
/// on the engine that reads it.
impl AgentHistory {
    /// Records a request that reached the engine. Every request counts for velocity,
    /// whatever its verdict; an `allow` verdict (the effective one, what was returned and
    /// signed) adds its amount to the day's, the week's and the month's spend.
    pub fn record(&mut self, evaluation: &Evaluation, amount: Amount, now: OffsetDateTime) {
        self.velocity.record(unix_ms(now));
        if evaluation.verdict == Verdict::Allow {
            self.spend.add(amount, now);
        }
    }
}

/// Evaluates a request. `mandate` is the agent's current mandate (the newest one, whatever
/// its status), `history` the agent's past as of just before this request.
///
/// The caller records the request afterwards with
/// [`AgentHistory::record`](crate::history::AgentHistory::record).
pub fn evaluate(
    mandate: Option<&Mandate>,
    request: &AuthorizationRequest,
    history: &AgentHistory,
    mode: Mode,
    now: OffsetDateTime,
) -> Evaluation {
    evaluate_presenting(mandate, request, history, None, mode, now)
}

/// A single-use credential presented with a request (an AP2 closed payment mandate): its
/// id, and whether a decision already accepted it, as the owner's stored decisions say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SingleUse {
    /// The credential's id (for an AP2 closed payment mandate, its digest).
    pub id: String,
    /// Whether an earlier decision accepted it (its verdict was `allow` or `review`).
    pub already_accepted: bool,
}

impl Evaluation {
    /// Whether this decision accepts (and so uses up) the single-use credential presented
    /// with its request: its verdict is `allow` or `review` and the credential was not
    /// accepted before. The owner stores the use with the decision, in one transaction.
    pub fn accepts(&self, presented: Option<&SingleUse>) -> bool {
        presented.is_some_and(|c| !c.already_accepted)
            && matches!(self.verdict, Verdict::Allow | Verdict::Review)
    }
}

/// Evaluates a request that may carry a single-use credential: as [`evaluate`], with
/// `deny_replay` (after `deny_expired`, before `deny_velocity`) when the credential was
/// already accepted.
pub fn evaluate_presenting(
    mandate: Option<&Mandate>,
    request: &AuthorizationRequest,
    history: &AgentHistory,
    presented: Option<&SingleUse>,
    mode: Mode,
    now: OffsetDateTime,
) -> Evaluation {
    let (policy_verdict, reason) = judge(mandate, request, history, presented, now);
    let verdict = match mode {
        Mode::Enforce => policy_verdict,
        Mode::Observe => Verdict::Allow,
    };
    Evaluation {
        verdict,
        policy_verdict,
        reason,
    }
}

/// Re-checks an approved review against the mandate as it is now: revoked, expired, a
/// category or recipient it no longer allows, or over `per_day`, `per_week` or `per_month`
/// gives that denial instead of `allow`; the review threshold and the velocity rule are
/// not applied again.
///
/// `mode` is the one in force at approval. Reviews open only in `enforce`, but the
/// environment may have switched to `observe` since: then nothing blocks, as for any
/// decision in observe, so `verdict` is `allow` and `policy_verdict` (with its reason)
/// is what the re-check found. The caller counts an `allow` verdict's amount in the
/// month-to-date spend, like an observe-mode allow of a request.
pub fn evaluate_approval(
    mandate: Option<&Mandate>,
    request: &AuthorizationRequest,
    history: &AgentHistory,
    mode: Mode,
    now: OffsetDateTime,
) -> Evaluation {
    let mut relaxed = mandate.cloned();
    if let Some(m) = relaxed.as_mut() {
        m.terms.review_above = None;
    }
    // Velocity is not re-applied: judge against a history with an empty window.
    let history = AgentHistory {
        velocity: Default::default(),
        spend: history.spend,
    };
    // The credential, if any, was accepted by the review this approval resolves.
    let (policy_verdict, reason) = judge(relaxed.as_ref(), request, &history, None, now);
    let verdict = match mode {
        Mode::Enforce => policy_verdict,
        Mode::Observe => Verdict::Allow,
    };
    Evaluation {
        verdict,
        policy_verdict,
        reason,
    }
}
