//! Escrows and their money movements at the boundary.

use mandate_core::amount::Amount;
use mandate_core::escrow::{EscrowStatus, HistoryEntry};
use mandate_core::id::{AgentId, DecisionId, EscrowId};
use mandate_core::names::{Currency, Recipient};

use super::StoreFuture;
use super::events::NewEvent;
use crate::model::Env;

/// A stored escrow with its full history, oldest step first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EscrowRow {
    /// `esc_…`.
    pub id: EscrowId,
    /// The organization that funded it.
    pub org_id: String,
    /// Its environment.
    pub env: String,
    /// The locked amount.
    pub amount: Amount,
    /// Its currency.
    pub currency: Currency,
    /// The agent whose funds are locked.
    pub buyer: AgentId,
    /// Who is paid on release.
    pub seller: Recipient,
    /// The decision that funded it.
    pub decision: DecisionId,
    /// Stored and returned, never read.
    pub arbiter: Option<String>,
    /// Where it stands.
    pub status: EscrowStatus,
    /// Every step, oldest first; the first is `funded`.
    pub history: Vec<HistoryEntry>,
    /// Creation time, unix ms.
    pub created_ms: i64,
}

/// One recorded money movement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MovementRow {
    /// The escrow it belongs to.
    pub escrow_id: String,
    /// `lock`, `release` or `refund`.
    pub kind: String,
    /// The exact amount, as text.
    pub amount: String,
    /// Its currency.
    pub currency: String,
    /// Whose money it was.
    pub from_party: String,
    /// Whose money it became.
    pub to_party: String,
    /// When it was recorded, unix ms.
    pub created_ms: i64,
}

/// A change of an escrow: its new history step, the money it moves and its event.
#[derive(Debug, Clone, PartialEq)]
pub struct EscrowChange {
    /// Where the escrow must stand for the change to apply.
    pub from: EscrowStatus,
    /// The new step; its status is where the escrow goes.
    pub entry: HistoryEntry,
    /// The position of the new step in the history.
    pub step: usize,
    /// The money movement it causes, if any (recorded once per escrow and kind).
    pub movement: Option<MovementRow>,
    /// Its `escrow.*` event.
    pub event: NewEvent,
}

/// Escrows.
pub trait EscrowStore {
    /// Stores a freshly funded escrow with its first history step, its lock movement and
    /// its event, in one transaction. `false` when its decision (or that decision's
    /// `nonce`) has already funded an escrow: nothing is written then.
    fn fund_escrow(
        &self,
        escrow: EscrowRow,
        nonce: &str,
        movement: MovementRow,
        event: NewEvent,
    ) -> StoreFuture<'_, bool>;

    /// An escrow by id, whoever funded it (escrows are public contracts); with `owner`,
    /// only if it belongs to that organization and environment.
    fn escrow(
        &self,
        id: &EscrowId,
        owner: Option<(&str, Env)>,
    ) -> StoreFuture<'_, Option<EscrowRow>>;

    /// Applies `change` to escrow `id` of `org_id` in one transaction: its status, history
    /// step, movement and event. `false` when the escrow no longer stands at
    /// `change.from` (nothing is written then).
    fn advance_escrow(
        &self,
        org_id: &str,
        env: Env,
        id: &EscrowId,
        change: EscrowChange,
    ) -> StoreFuture<'_, bool>;

    /// The movements of an escrow, in the order they were recorded.
    fn escrow_movements(&self, id: &EscrowId) -> StoreFuture<'_, Vec<MovementRow>>;
}
