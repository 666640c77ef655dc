//! Escrows and their money movements at the boundary: the typed rows, the change an engine
//! writes (decided above it, by `services::escrows`), and the decoding of stored columns
//! that every engine shares.

use mandate_core::amount::Amount;
use mandate_core::escrow::{EscrowState, EscrowStatus, HistoryEntry};
use mandate_core::id::{AgentId, DecisionId, EscrowId};
use mandate_core::names::{Currency, Recipient};

use super::events::NewEvent;
use super::{StorageError, StoreFuture};
use crate::clock::from_ms;
use crate::model::Env;

/// A stored escrow with its full history, oldest step first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EscrowRow {
    /// `esc_…`.
    pub id: EscrowId,
    /// The organization that funded it.
    pub org_id: String,
    /// Its environment.
    pub env: Env,
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

/// The kinds of money movement, at most one of each per escrow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MovementKind {
    /// Funding: the buyer's funds are locked.
    Lock,
    /// The locked funds go to the seller.
    Release,
    /// The locked funds go back to the buyer.
    Refund,
}

impl MovementKind {
    /// The stored form.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Lock => "lock",
            Self::Release => "release",
            Self::Refund => "refund",
        }
    }

    /// Parses the stored form.
    pub fn parse(text: &str) -> Option<Self> {
        [Self::Lock, Self::Release, Self::Refund]
            .into_iter()
            .find(|k| k.as_str() == text)
    }
}

/// Whose money a movement takes or gives: the buyer (an agent), the escrow holding locked
/// funds, or the seller (a recipient).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Party {
    /// An agent, `agt_…`.
    Agent(AgentId),
    /// The escrow itself, holding the locked funds.
    Escrow(EscrowId),
    /// A recipient, `vendor:…`.
    Recipient(Recipient),
}

impl Party {
    /// The stored form: the id or the recipient.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Agent(id) => id.as_str(),
            Self::Escrow(id) => id.as_str(),
            Self::Recipient(r) => r.as_str(),
        }
    }

    /// Parses the stored form (the three forms have distinct prefixes).
    pub fn parse(text: &str) -> Option<Self> {
        if let Ok(id) = EscrowId::parse(text) {
            Some(Self::Escrow(id))
        } else if let Ok(id) = AgentId::parse(text) {
            Some(Self::Agent(id))
        } else {
            Recipient::parse(text).ok().map(Self::Recipient)
        }
    }
}

/// One recorded money movement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MovementRow {
    /// The escrow it belongs to.
    pub escrow_id: EscrowId,
    /// What kind of movement; with `escrow_id`, unique.
    pub kind: MovementKind,
    /// The exact amount.
    pub amount: Amount,
    /// Its currency.
    pub currency: Currency,
    /// Whose money it was.
    pub from_party: Party,
    /// Whose money it became.
    pub to_party: Party,
    /// When it was recorded, unix ms.
    pub created_ms: i64,
}

/// A freshly funded escrow as it is written: the row with its first history step, the
/// decision's nonce (unique, like the decision), the lock movement and the event.
#[derive(Debug, Clone, PartialEq)]
pub struct EscrowFunding {
    /// The escrow, its history holding the one `funded` step.
    pub escrow: EscrowRow,
    /// The nonce of the funding decision.
    pub nonce: String,
    /// The lock of the buyer's funds.
    pub movement: MovementRow,
    /// `escrow.funded`, appended at `escrow.created_ms`.
    pub event: NewEvent,
}

/// A change of an escrow: its new history step, the money it moves and its event.
#[derive(Debug, Clone, PartialEq)]
pub struct EscrowChange {
    /// Where the escrow must stand for the change to apply.
    pub from: EscrowStatus,
    /// The new step; its status is where the escrow goes, its time the event's.
    pub entry: HistoryEntry,
    /// The position of the new step in the history.
    pub step: usize,
    /// The money movement it causes, if any (recorded once per escrow and kind).
    pub movement: Option<MovementRow>,
    /// Its `escrow.*` event.
    pub event: NewEvent,
}

/// Escrows. The engine decides nothing: it writes the funding or change it is given in one
/// transaction, guarded by the unique keys (funding) or by where the escrow stands
/// (changes), and reads.
pub trait EscrowStore {
    /// Stores a freshly funded escrow with its first history step, its lock movement and
    /// its event, in one transaction. `false` when its decision (or that decision's
    /// `nonce`) has already funded an escrow: nothing is written then.
    fn fund_escrow(&self, funding: EscrowFunding) -> StoreFuture<'_, bool>;

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

/// An escrow's columns as an engine reads them (text as stored), decoded into an
/// [`EscrowRow`] the same way by every engine.
#[derive(Debug)]
pub struct StoredEscrow {
    /// `id`.
    pub id: String,
    /// `org_id`.
    pub org_id: String,
    /// `env`.
    pub env: String,
    /// `amount`, exact text.
    pub amount: String,
    /// `currency`.
    pub currency: String,
    /// `buyer`.
    pub buyer: String,
    /// `seller`.
    pub seller: String,
    /// `decision_id`.
    pub decision_id: String,
    /// `arbiter`.
    pub arbiter: Option<String>,
    /// `state`.
    pub state: String,
    /// `disputed`.
    pub disputed: bool,
    /// `created_ms`.
    pub created_ms: i64,
}

/// One `escrow_history` row as stored.
#[derive(Debug)]
pub struct StoredStep {
    /// `state`.
    pub state: String,
    /// `disputed`.
    pub disputed: bool,
    /// `at_ms`.
    pub at_ms: i64,
    /// `actor`.
    pub actor: String,
}

/// One `settlement_movements` row as stored.
#[derive(Debug)]
pub struct StoredMovement {
    /// `escrow_id`.
    pub escrow_id: String,
    /// `kind`.
    pub kind: String,
    /// `amount`, exact text.
    pub amount: String,
    /// `currency`.
    pub currency: String,
    /// `from_party`.
    pub from_party: String,
    /// `to_party`.
    pub to_party: String,
    /// `created_ms`.
    pub created_ms: i64,
}

/// Parses a stored escrow state.
pub fn escrow_state(text: &str) -> Result<EscrowState, StorageError> {
    [
        EscrowState::Funded,
        EscrowState::Delivered,
        EscrowState::Released,
        EscrowState::Refunded,
    ]
    .into_iter()
    .find(|s| s.as_str() == text)
    .ok_or_else(|| StorageError::Corrupt(format!("escrow state {text:?}")))
}

impl StoredStep {
    /// The history entry.
    pub fn decode(self) -> Result<HistoryEntry, StorageError> {
        Ok(HistoryEntry {
            state: escrow_state(&self.state)?,
            disputed: self.disputed,
            at: from_ms(self.at_ms),
            actor: self.actor,
        })
    }
}

impl StoredEscrow {
    /// The escrow, with its `history` read beside it (oldest step first).
    pub fn decode(self, history: Vec<StoredStep>) -> Result<EscrowRow, StorageError> {
        let bad = |what: &str| StorageError::Corrupt(format!("escrow {} column {what}", self.id));
        Ok(EscrowRow {
            id: EscrowId::parse(&self.id).map_err(|_| bad("id"))?,
            env: Env::parse(&self.env).ok_or_else(|| bad("env"))?,
            amount: Amount::parse(&self.amount).map_err(|_| bad("amount"))?,
            currency: Currency::parse(&self.currency).map_err(|_| bad("currency"))?,
            buyer: AgentId::parse(&self.buyer).map_err(|_| bad("buyer"))?,
            seller: Recipient::parse(&self.seller).map_err(|_| bad("seller"))?,
            decision: DecisionId::parse(&self.decision_id).map_err(|_| bad("decision_id"))?,
            status: EscrowStatus {
                state: escrow_state(&self.state)?,
                disputed: self.disputed,
            },
            history: history
                .into_iter()
                .map(StoredStep::decode)
                .collect::<Result<_, _>>()?,
            org_id: self.org_id,
            arbiter: self.arbiter,
            created_ms: self.created_ms,
        })
    }
}

impl StoredMovement {
    /// The movement.
    pub fn decode(self) -> Result<MovementRow, StorageError> {
        let bad = |what: &str| {
            StorageError::Corrupt(format!(
                "movement of escrow {} column {what}",
                self.escrow_id
            ))
        };
        Ok(MovementRow {
            escrow_id: EscrowId::parse(&self.escrow_id).map_err(|_| bad("escrow_id"))?,
            kind: MovementKind::parse(&self.kind).ok_or_else(|| bad("kind"))?,
            amount: Amount::parse(&self.amount).map_err(|_| bad("amount"))?,
            currency: Currency::parse(&self.currency).map_err(|_| bad("currency"))?,
            from_party: Party::parse(&self.from_party).ok_or_else(|| bad("from_party"))?,
            to_party: Party::parse(&self.to_party).ok_or_else(|| bad("to_party"))?,
            created_ms: self.created_ms,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn stored_forms_round_trip() {
        for kind in [
            MovementKind::Lock,
            MovementKind::Release,
            MovementKind::Refund,
        ] {
            assert_eq!(MovementKind::parse(kind.as_str()), Some(kind));
        }
        assert_eq!(MovementKind::parse("steal"), None);
        for text in ["agt_buyer", "esc_0123", "vendor:acme"] {
            assert_eq!(Party::parse(text).unwrap().as_str(), text);
        }
        assert!(matches!(Party::parse("agt_b"), Some(Party::Agent(_))));
        assert!(matches!(Party::parse("esc_b"), Some(Party::Escrow(_))));
        assert_eq!(Party::parse("role:legal"), None);
        assert!(escrow_state("lost").is_err());
    }
}
