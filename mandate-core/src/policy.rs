//! The policy engine.

use serde::{Deserialize, Serialize};

/// The outcome of an authorization request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
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
    /// More than 10 requests from the agent in 60 seconds.
    DenyVelocity,
    /// The category is not allowed.
    DenyCategory,
    /// A limit (per transaction, per month, or the currency) is exceeded.
    DenyLimit,
}
