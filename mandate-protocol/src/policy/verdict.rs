//! The verdicts the engine gives and the enforcement modes that decide which one is
//! returned.

use std::fmt;

use serde::{Deserialize, Serialize};

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
    pub(crate) fn parse_lenient(text: &str) -> Self {
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
