//! Why a request was not a plain `allow`: the [`Reason`] of every rule that can hold, kept
//! as data (deciding costs no formatting) and written out as the API's message by its
//! `Display`.

use std::fmt;

use serde::Serialize;

use crate::amount::Amount;
use crate::id::{AgentId, MandateId};
use crate::mandate::{RecipientRefusal, format_date};
use crate::names::{Category, Currency, Recipient};

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
                refusal,
            } => write_recipient(f, recipient, mandate, *refusal),
            Self::Window {
                window,
                spent,
                amount,
                limit,
            } => write_window(f, *window, *spent, *amount, *limit),
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
            } => write_total(f, *spent, *amount, *limit),
            Self::Count {
                window,
                count,
                limit,
            } => write_count(f, *window, *count, *limit),
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

/// The message of [`Reason::Recipient`]: which of the mandate's lists refuses the recipient.
fn write_recipient(
    f: &mut fmt::Formatter<'_>,
    recipient: &Recipient,
    mandate: &MandateId,
    refusal: RecipientRefusal,
) -> fmt::Result {
    match refusal {
        RecipientRefusal::Denied => write!(
            f,
            "recipient {recipient} is denied by mandate {mandate}'s recipients.deny"
        ),
        RecipientRefusal::NotAllowed => write!(
            f,
            "recipient {recipient} is not in mandate {mandate}'s recipients.allow"
        ),
    }
}

/// The message of [`Reason::Window`]: the day's or the week's spend the amount would bring
/// over its limit (or past any amount, when the sum overflows).
fn write_window(
    f: &mut fmt::Formatter<'_>,
    window: SpendWindow,
    spent: Amount,
    amount: Amount,
    limit: Amount,
) -> fmt::Result {
    let (spend, field) = match window {
        SpendWindow::Day => ("today's", "per_day"),
        SpendWindow::Week => ("this week's", "per_week"),
    };
    match spent.checked_add(amount) {
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

/// The message of [`Reason::Total`]: the mandate's spend over its life the amount would
/// bring over `total` (or past any amount, when the sum overflows).
fn write_total(
    f: &mut fmt::Formatter<'_>,
    spent: Amount,
    amount: Amount,
    limit: Amount,
) -> fmt::Result {
    match spent.checked_add(amount) {
        Some(total) => write!(
            f,
            "amount {amount} would bring the mandate's spend to {total}, over the total limit {limit}"
        ),
        None => write!(
            f,
            "amount {amount} would bring the mandate's spend of {spent} past any amount, over the total limit {limit}"
        ),
    }
}

/// The message of [`Reason::Count`]: the allows in the window already at its count limit.
fn write_count(
    f: &mut fmt::Formatter<'_>,
    window: CountWindow,
    count: u64,
    limit: u64,
) -> fmt::Result {
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
