//! Escrows: `POST /v1/escrows`, `GET /v1/escrows/{id}`, and the steps
//! `POST /v1/escrows/{id}/deliver|release|refund|dispute` (no body; each answers the
//! [`Escrow`]).

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::amount::Amount;
use crate::escrow::{EscrowState, HistoryEntry};
use crate::id::{AgentId, DecisionId, EscrowId};
use crate::names::{Currency, Recipient};

/// An escrow, also the `data` of every `escrow.*` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Escrow {
    /// The locked amount.
    pub amount: Amount,
    /// The party named to settle disputes, if any (`null` if none).
    pub arbiter: Option<String>,
    /// The agent whose funds are locked.
    pub buyer: AgentId,
    /// When it was funded.
    #[serde(with = "crate::timefmt")]
    pub created_at: OffsetDateTime,
    /// The amount's currency.
    pub currency: Currency,
    /// The decision that funded it.
    pub decision: DecisionId,
    /// Whether a dispute was raised.
    pub disputed: bool,
    /// `live` (real money) or `sandbox`.
    pub environment: String,
    /// The id again, under the name the events' data uses.
    pub escrow: EscrowId,
    /// Every step, oldest first.
    pub history: Vec<HistoryEntry>,
    /// `esc_…`.
    pub id: EscrowId,
    /// Who is paid on release.
    pub seller: Recipient,
    /// Where the money stands.
    pub state: EscrowState,
}

/// The body of `POST /v1/escrows`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateEscrow {
    /// The amount to lock, exactly the decision's.
    pub amount: Amount,
    /// A party named to settle disputes: stored and returned, never read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arbiter: Option<String>,
    /// The agent whose funds are locked: the decision's agent.
    pub buyer: AgentId,
    /// The currency, exactly the decision's.
    pub currency: Currency,
    /// The `allow` decision that backs the escrow.
    pub decision: DecisionId,
    /// Who is paid on release: the decision's recipient.
    pub seller: Recipient,
}
