//! Escrows and their money movements at the boundary: the typed rows, the change an engine
//! writes (decided above it, by `services::escrows`), and the decoding of stored columns
//! that every engine shares.

use mandate_core::{AgentId, Amount, Currency, DecisionId, Recipient};
use mandate_protocol::{
    escrow::EscrowState, escrow::EscrowStatus, escrow::HistoryEntry, id::EscrowId,
};

use super::engine::{Access, Columns, Engine, Result, Scope, Tx, first};
use super::events::{self, NewEvent};
use super::statements::EscrowSql;
use super::{StorageError, StoreFuture};
use crate::clock::{from_ms, ms};
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

    /// The movements of an escrow of `org_id`, in the order they were recorded.
    fn escrow_movements(&self, org_id: &str, id: &EscrowId) -> StoreFuture<'_, Vec<MovementRow>>;
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
pub fn escrow_state(text: &str) -> Result<EscrowState> {
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
    pub fn decode(self) -> Result<HistoryEntry> {
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
    pub fn decode(self, history: Vec<StoredStep>) -> Result<EscrowRow> {
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
                .collect::<Result<_>>()?,
            org_id: self.org_id,
            arbiter: self.arbiter,
            created_ms: self.created_ms,
        })
    }
}

impl StoredMovement {
    /// The movement.
    pub fn decode(self) -> Result<MovementRow> {
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

/// The columns of an escrow's reads, in [`StoredEscrow`]'s order.
pub const COLUMNS: &str = "id, org_id, env, amount, currency, buyer, seller, decision_id, arbiter,
    state, disputed, created_ms";

/// Appends `entry` as history step `step` of escrow `id` of `org`.
async fn push_history<T: Tx>(
    tx: &mut T,
    org: &str,
    id: &str,
    step: usize,
    entry: &HistoryEntry,
) -> Result<()> {
    let params = [
        org.into(),
        id.into(),
        i64::try_from(step).unwrap_or(i64::MAX).into(),
        entry.state.as_str().into(),
        entry.disputed.into(),
        ms(entry.at).into(),
        entry.actor.as_str().into(),
    ];
    tx.execute(EscrowSql::PushHistory.into(), &params).await?;
    Ok(())
}

/// Records `movement` of an escrow of `org` unless one of its kind exists for its escrow;
/// whether this call recorded it.
pub async fn record_movement<T: Tx>(tx: &mut T, org: &str, movement: &MovementRow) -> Result<bool> {
    let params = [
        org.into(),
        movement.escrow_id.as_str().into(),
        movement.kind.as_str().into(),
        movement.amount.to_string().into(),
        movement.currency.as_str().into(),
        movement.from_party.as_str().into(),
        movement.to_party.as_str().into(),
        movement.created_ms.into(),
    ];
    Ok(tx
        .execute(EscrowSql::RecordMovement.into(), &params)
        .await?
        == 1)
}

/// Stores a funding: the escrow with its first step (unless its decision or nonce funded
/// one), its lock and its event.
async fn fund<T: Tx>(tx: &mut T, funding: &EscrowFunding) -> Result<bool> {
    let EscrowFunding {
        escrow,
        nonce,
        movement,
        event,
    } = funding;
    let params = [
        escrow.org_id.as_str().into(),
        escrow.env.into(),
        escrow.id.as_str().into(),
        escrow.amount.to_string().into(),
        escrow.currency.as_str().into(),
        escrow.buyer.as_str().into(),
        escrow.seller.as_str().into(),
        escrow.decision.as_str().into(),
        nonce.as_str().into(),
        escrow.arbiter.as_ref().into(),
        escrow.status.state.as_str().into(),
        escrow.status.disputed.into(),
        escrow.created_ms.into(),
    ];
    if tx.execute(EscrowSql::Insert.into(), &params).await? == 0 {
        return Ok(false);
    }
    let org = escrow.org_id.as_str();
    for (step, entry) in escrow.history.iter().enumerate() {
        push_history(tx, org, escrow.id.as_str(), step, entry).await?;
    }
    record_movement(tx, org, movement).await?;
    let scope = Scope::new(&escrow.org_id, escrow.env);
    events::append(tx, scope, event, escrow.created_ms).await?;
    Ok(true)
}

/// Applies `change` to escrow `id` if it still stands where the change was decided.
async fn advance<T: Tx>(
    tx: &mut T,
    s: Scope<'_>,
    id: &EscrowId,
    change: &EscrowChange,
) -> Result<bool> {
    let EscrowChange {
        from,
        entry,
        step,
        movement,
        event,
    } = change;
    let params = [
        s.org.into(),
        s.env.into(),
        id.as_str().into(),
        entry.state.as_str().into(),
        entry.disputed.into(),
        from.state.as_str().into(),
        from.disputed.into(),
    ];
    if tx.execute(EscrowSql::Advance.into(), &params).await? != 1 {
        return Ok(false);
    }
    push_history(tx, s.org, id.as_str(), *step, entry).await?;
    if let Some(movement) = movement {
        record_movement(tx, s.org, movement).await?;
    }
    events::append(tx, s, event, ms(entry.at)).await?;
    Ok(true)
}

/// An escrow by id, with `owner` only if it is theirs.
async fn get<T: Tx>(
    tx: &mut T,
    id: &EscrowId,
    owner: Option<(&str, Env)>,
) -> Result<Option<EscrowRow>> {
    let (org, env) = owner.unzip();
    let params = [id.as_str().into(), org.into(), env.into()];
    let read = |r: &dyn Columns| {
        Ok(StoredEscrow {
            id: r.text(0)?,
            org_id: r.text(1)?,
            env: r.text(2)?,
            amount: r.text(3)?,
            currency: r.text(4)?,
            buyer: r.text(5)?,
            seller: r.text(6)?,
            decision_id: r.text(7)?,
            arbiter: r.opt_text(8)?,
            state: r.text(9)?,
            disputed: r.flag(10)?,
            created_ms: r.int(11)?,
        })
    };
    let Some(stored) = first(tx.query(EscrowSql::Get.into(), &params, read).await?) else {
        return Ok(None);
    };
    let read = |r: &dyn Columns| {
        Ok(StoredStep {
            state: r.text(0)?,
            disputed: r.flag(1)?,
            at_ms: r.int(2)?,
            actor: r.text(3)?,
        })
    };
    // The escrow's own organization: the id alone may have been looked up anywhere.
    let params = [stored.org_id.as_str().into(), id.as_str().into()];
    let history = tx.query(EscrowSql::History.into(), &params, read).await?;
    stored.decode(history).map(Some)
}

impl<E: Engine> EscrowStore for E {
    fn fund_escrow(&self, funding: EscrowFunding) -> StoreFuture<'_, bool> {
        Box::pin(self.run(Access::Write, funding, |tx, funding| {
            Box::pin(fund(tx, funding))
        }))
    }

    fn escrow(
        &self,
        id: &EscrowId,
        owner: Option<(&str, Env)>,
    ) -> StoreFuture<'_, Option<EscrowRow>> {
        let args = (id.clone(), owner.map(|(org, env)| (org.to_owned(), env)));
        Box::pin(self.run(Access::Read, args, |tx, (id, owner)| {
            let owner = owner.as_ref().map(|(org, env)| (org.as_str(), *env));
            Box::pin(get(tx, id, owner))
        }))
    }

    fn advance_escrow(
        &self,
        org_id: &str,
        env: Env,
        id: &EscrowId,
        change: EscrowChange,
    ) -> StoreFuture<'_, bool> {
        let args = (org_id.to_owned(), env, id.clone(), change);
        Box::pin(self.run(Access::Write, args, |tx, (org, env, id, change)| {
            Box::pin(advance(tx, Scope::new(org, *env), id, change))
        }))
    }

    fn escrow_movements(&self, org_id: &str, id: &EscrowId) -> StoreFuture<'_, Vec<MovementRow>> {
        let args = (org_id.to_owned(), id.clone());
        Box::pin(self.run(Access::Read, args, |tx, (org, id)| {
            Box::pin(async move {
                let read = |r: &dyn Columns| {
                    StoredMovement {
                        escrow_id: r.text(0)?,
                        kind: r.text(1)?,
                        amount: r.text(2)?,
                        currency: r.text(3)?,
                        from_party: r.text(4)?,
                        to_party: r.text(5)?,
                        created_ms: r.int(6)?,
                    }
                    .decode()
                };
                let params = [org.into(), id.as_str().into()];
                tx.query(EscrowSql::Movements.into(), &params, read).await
            })
        }))
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
