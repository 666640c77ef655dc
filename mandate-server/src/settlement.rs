//! Settlement: where an escrow's money actually moves.
//!
//! Licensed external providers execute settlement; the service talks to them through one
//! trait, [`SettlementProvider`], with exactly one live adapter chosen by the operator
//! (`serve --settlement`, see [`Adapter`]). Which adapter is live is operator knowledge: its
//! name appears in no API response, event or error message.
//!
//! Every movement is made inside the database transaction of the escrow state change that
//! causes it, and is idempotent on (escrow, kind): a retried transition can never move the
//! money twice. An adapter turns a movement into the record the store writes in that
//! transaction. The one adapter today, [`Ledger`], records each movement durably in the
//! service's own database. An adapter for an external provider would, in the same
//! transaction, write the movement to an outbox that a worker sends to the provider with
//! the idempotency key `<escrow id>:<kind>`, the way webhook deliveries work.

use std::sync::Arc;

use mandate_core::{Amount, Currency};
use mandate_protocol::{escrow::EscrowAction, id::EscrowId};

use crate::storage::escrows::MovementRow;

pub use crate::storage::escrows::{MovementKind, Party};

/// The movement an escrow action causes: release and refund move money; deliver and
/// dispute only change the state.
pub fn movement_for(action: EscrowAction) -> Option<MovementKind> {
    match action {
        EscrowAction::Release => Some(MovementKind::Release),
        EscrowAction::Refund => Some(MovementKind::Refund),
        EscrowAction::Deliver | EscrowAction::Dispute => None,
    }
}

/// One movement of an escrow's money.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Movement<'a> {
    /// The escrow; with `kind`, the idempotency key.
    pub escrow: &'a EscrowId,
    /// What kind of movement.
    pub kind: MovementKind,
    /// The exact amount.
    pub amount: Amount,
    /// Its currency.
    pub currency: &'a Currency,
    /// Whose money it was (the buyer, or the escrow for locked funds).
    pub from: Party,
    /// Whose money it becomes.
    pub to: Party,
}

/// Settlement failed; the state change it belonged to is rolled back with it.
#[derive(Debug, thiserror::Error)]
pub enum SettlementError {
    /// The adapter refused the movement.
    #[error("settlement refused: {0}")]
    Refused(String),
}

/// A settlement provider's adapter.
pub trait SettlementProvider: Send + Sync + 'static {
    /// The durable record of `movement` at `now_ms`, which the store writes in the
    /// transaction of the state change that causes it, once per (escrow, kind): a
    /// movement already recorded moves nothing.
    fn settle(&self, movement: &Movement<'_>, now_ms: i64) -> Result<MovementRow, SettlementError>;
}

/// The ledger adapter: records every movement in the `settlement_movements` table, keyed
/// uniquely by (escrow, kind).
#[derive(Debug, Default, Clone, Copy)]
pub struct Ledger;

impl SettlementProvider for Ledger {
    fn settle(&self, movement: &Movement<'_>, now_ms: i64) -> Result<MovementRow, SettlementError> {
        Ok(MovementRow {
            escrow_id: movement.escrow.clone(),
            kind: movement.kind,
            amount: movement.amount,
            currency: movement.currency.clone(),
            from_party: movement.from.clone(),
            to_party: movement.to.clone(),
            created_ms: now_ms,
        })
    }
}

/// The adapters an operator can make live; exactly one is, for the whole service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Adapter {
    /// [`Ledger`].
    #[default]
    Ledger,
}

impl Adapter {
    /// Every adapter, for the operator's command line.
    pub const ALL: [Adapter; 1] = [Self::Ledger];

    /// The operator's name for it (never shown to API clients).
    pub fn name(self) -> &'static str {
        match self {
            Self::Ledger => "ledger",
        }
    }

    /// Parses the operator's name.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.name() == name)
    }

    /// The live provider.
    pub fn provider(self) -> Arc<dyn SettlementProvider> {
        match self {
            Self::Ledger => Arc::new(Ledger),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for adapter in Adapter::ALL {
            assert_eq!(Adapter::parse(adapter.name()), Some(adapter));
        }
        assert_eq!(Adapter::parse("stripe"), None);
        assert_eq!(Adapter::default(), Adapter::Ledger);
    }

    #[test]
    fn only_release_and_refund_move_money() {
        assert_eq!(
            movement_for(EscrowAction::Release),
            Some(MovementKind::Release)
        );
        assert_eq!(
            movement_for(EscrowAction::Refund),
            Some(MovementKind::Refund)
        );
        assert_eq!(movement_for(EscrowAction::Deliver), None);
        assert_eq!(movement_for(EscrowAction::Dispute), None);
    }
}
