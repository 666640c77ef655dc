//! Escrows: funding one from a decision and moving it, decided here for every engine.
//!
//! An escrow is funded by an unexpired `allow` decision of its buyer for the same amount,
//! currency and recipient ([`mandate_protocol::funding`]) and spends it. Its transitions are
//! [`mandate_protocol::escrow::transition`]. [`step`] decides what one action writes: the new
//! status and history step, the money movement (through the live
//! [`SettlementProvider`]) and the `escrow.*` event; the engine writes it in one
//! transaction only if the escrow still stands where it was read ([`crate::storage::escrows::EscrowStore`]).

use mandate_protocol::{
    escrow::EscrowAction, escrow::EscrowStatus, escrow::HistoryEntry, funding::FundingError,
    funding::FundingRequest, funding::check_funding, id::EscrowId, wire,
};
use serde_json::Value;
use time::OffsetDateTime;

use crate::clock::{from_ms, ms};
use crate::model::Env;
use crate::settlement::{Movement, MovementKind, Party, SettlementError, SettlementProvider};
use crate::storage::escrows::{EscrowChange, EscrowFunding, EscrowRow};
use crate::storage::events::NewEvent;
use crate::storage::{StorageError, Store};

/// The actor of every history step: only the funding organization's keys move an escrow,
/// and the public contract names it by its role, not its organization id.
pub const FUNDER: &str = "funder";

/// Why an escrow request was not done.
#[derive(Debug, thiserror::Error)]
pub enum EscrowError {
    /// No such escrow (or, to move it, none of the caller's organization and environment).
    #[error("no escrow with id {0}")]
    NoEscrow(String),
    /// No such decision of the caller's organization and environment.
    #[error("no decision with id {0}")]
    NoDecision(String),
    /// The decision cannot fund this escrow (or has funded one already).
    #[error(transparent)]
    Funding(#[from] FundingError),
    /// The action is not allowed from where the escrow stands.
    #[error(transparent)]
    Transition(#[from] mandate_protocol::escrow::EscrowError),
    /// The settlement adapter refused the movement; nothing was written.
    #[error(transparent)]
    Settlement(#[from] SettlementError),
    /// The store failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The escrow could not be encoded as its event's data.
    #[error("encoding the escrow: {0}")]
    Encoding(String),
}

/// An escrow in its API shape, also the `data` of every `escrow.*` event. `escrow` repeats
/// `id` under the name the event data of the written interface uses. `environment` tells a
/// reader of another organization whether the money is real (`live`) or not (`sandbox`);
/// the funding organization's id is not shown.
pub fn escrow_wire(e: &EscrowRow) -> wire::Escrow {
    wire::Escrow {
        amount: e.amount,
        arbiter: e.arbiter.clone(),
        buyer: e.buyer.clone(),
        created_at: from_ms(e.created_ms),
        currency: e.currency.clone(),
        decision: e.decision.clone(),
        disputed: e.status.disputed,
        environment: e.env.as_str().to_owned(),
        escrow: e.id.clone(),
        history: e.history.clone(),
        id: e.id.clone(),
        seller: e.seller.clone(),
        state: e.status.state,
    }
}

fn event(event_type: &'static str, escrow: &EscrowRow) -> Result<NewEvent, EscrowError> {
    let data: Value =
        wire::to_value(&escrow_wire(escrow)).map_err(|e| EscrowError::Encoding(e.to_string()))?;
    Ok(NewEvent { event_type, data })
}

/// The event each action fires.
pub fn event_type(action: EscrowAction) -> &'static str {
    match action {
        EscrowAction::Deliver => "escrow.delivered",
        EscrowAction::Release => "escrow.released",
        EscrowAction::Refund => "escrow.refunded",
        EscrowAction::Dispute => "escrow.disputed",
    }
}

/// The money movement of `kind` for `escrow`: a lock from the buyer into the escrow, a
/// release to the seller or a refund to the buyer out of it, always the whole amount.
pub fn movement(escrow: &EscrowRow, kind: MovementKind) -> Movement<'_> {
    let (buyer, held, seller) = (
        Party::Agent(escrow.buyer.clone()),
        Party::Escrow(escrow.id.clone()),
        Party::Recipient(escrow.seller.clone()),
    );
    let (from, to) = match kind {
        MovementKind::Lock => (buyer, held),
        MovementKind::Release => (held, seller),
        MovementKind::Refund => (held, buyer),
    };
    Movement {
        escrow: &escrow.id,
        kind,
        amount: escrow.amount,
        currency: &escrow.currency,
        from,
        to,
    }
}

/// What funding escrow `id` by `request` of `owner` at `now` writes (the funding decision's
/// `nonce` given): the escrow, its lock and `escrow.funded`.
pub fn funding(
    id: EscrowId,
    owner: (&str, Env),
    request: &FundingRequest,
    nonce: &str,
    now: OffsetDateTime,
    settlement: &dyn SettlementProvider,
) -> Result<EscrowFunding, EscrowError> {
    let escrow = EscrowRow {
        id,
        org_id: owner.0.to_owned(),
        env: owner.1,
        amount: request.amount,
        currency: request.currency.clone(),
        buyer: request.buyer.clone(),
        seller: request.seller.clone(),
        decision: request.decision.clone(),
        arbiter: request.arbiter.clone(),
        status: EscrowStatus::FUNDED,
        history: vec![HistoryEntry::new(EscrowStatus::FUNDED, now, FUNDER)],
        created_ms: ms(now),
    };
    let movement = settlement.settle(&movement(&escrow, MovementKind::Lock), ms(now))?;
    Ok(EscrowFunding {
        event: event("escrow.funded", &escrow)?,
        nonce: nonce.to_owned(),
        movement,
        escrow,
    })
}

/// What `action` at `now` does to `escrow` as read: the escrow after it, and the change to
/// write if the escrow still stands where it was read (its status and history step, the
/// money movement of release and refund, the event). A refused action is an error and
/// writes nothing.
pub fn step(
    escrow: &EscrowRow,
    action: EscrowAction,
    now: OffsetDateTime,
    settlement: &dyn SettlementProvider,
) -> Result<(EscrowRow, EscrowChange), EscrowError> {
    let from = escrow.status;
    let to = from.apply(action)?;
    let entry = HistoryEntry::new(to, now, FUNDER);
    let mut after = escrow.clone();
    after.status = to;
    after.history.push(entry.clone());
    let movement = match crate::settlement::movement_for(action) {
        Some(kind) => Some(settlement.settle(&movement(&after, kind), ms(now))?),
        None => None,
    };
    let change = EscrowChange {
        from,
        entry,
        step: escrow.history.len(),
        movement,
        event: event(event_type(action), &after)?,
    };
    Ok((after, change))
}

/// Funds a new escrow `id` of `owner` (organization, environment) by `request` at `now`:
/// the escrow, its lock and its event in one transaction.
///
/// Decisions are never changed once stored: the one read is checked outside the write, and
/// the escrow's unique keys (decision, nonce) decide between racing requests.
pub async fn fund(
    store: &dyn Store,
    settlement: &dyn SettlementProvider,
    owner: (&str, Env),
    id: EscrowId,
    request: &FundingRequest,
    now: OffsetDateTime,
) -> Result<EscrowRow, EscrowError> {
    let decision = store
        .decision(owner.0, owner.1, None, &request.decision)
        .await?
        .ok_or_else(|| EscrowError::NoDecision(request.decision.as_str().to_owned()))?;
    check_funding(request, &decision.claims, now)?;
    let funding = funding(
        id,
        owner,
        request,
        decision.claims.nonce.as_str(),
        now,
        settlement,
    )?;
    let escrow = funding.escrow.clone();
    if !store.fund_escrow(funding).await? {
        return Err(FundingError::Spent {
            decision: request.decision.clone(),
        }
        .into());
    }
    Ok(escrow)
}

/// An escrow by its id, whoever funded it: it is a public contract.
pub async fn show(store: &dyn Store, id: &str) -> Result<EscrowRow, EscrowError> {
    let escrow = match EscrowId::parse(id) {
        Ok(wanted) => store.escrow(&wanted, None).await?,
        Err(_) => None,
    };
    escrow.ok_or_else(|| EscrowError::NoEscrow(id.to_owned()))
}

/// Applies `action` at `now` to escrow `id` of `owner` (organization, environment): the
/// state change, its history step, its money movement and its event, in one transaction.
/// A refused action writes nothing.
///
/// The change is decided on the escrow as read and written only if the escrow still
/// stands where it was read; when another change came first, it is read again and the
/// action judged anew, so concurrent actions apply one after the other.
pub async fn act(
    store: &dyn Store,
    settlement: &dyn SettlementProvider,
    owner: (&str, Env),
    id: &str,
    action: EscrowAction,
    now: OffsetDateTime,
) -> Result<EscrowRow, EscrowError> {
    let missing = || EscrowError::NoEscrow(id.to_owned());
    let wanted = EscrowId::parse(id).map_err(|_| missing())?;
    loop {
        let escrow = store
            .escrow(&wanted, Some(owner))
            .await?
            .ok_or_else(missing)?;
        let (after, change) = step(&escrow, action, now, settlement)?;
        if store
            .advance_escrow(owner.0, owner.1, &wanted, change)
            .await?
        {
            return Ok(after);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use mandate_core::{AgentId, Amount, Currency, DecisionId, Recipient};
    use mandate_protocol::escrow::EscrowError as Refusal;
    use time::macros::datetime;

    use super::*;
    use crate::settlement::Ledger;

    const NOW: OffsetDateTime = datetime!(2026-11-25 01:00 UTC);

    fn funded() -> EscrowRow {
        EscrowRow {
            id: EscrowId::parse("esc_one").unwrap(),
            org_id: "org_a".into(),
            env: Env::Live,
            amount: Amount::parse("42.50").unwrap(),
            currency: Currency::parse("USD").unwrap(),
            buyer: AgentId::parse("agt_buyer").unwrap(),
            seller: Recipient::parse("vendor:acme").unwrap(),
            decision: DecisionId::parse("dec_one").unwrap(),
            arbiter: None,
            status: EscrowStatus::FUNDED,
            history: vec![HistoryEntry::new(EscrowStatus::FUNDED, NOW, FUNDER)],
            created_ms: ms(NOW),
        }
    }

    #[test]
    fn money_moves_from_the_buyer_into_the_escrow_and_out_to_one_side() {
        let escrow = funded();
        let (buyer, held, seller) = (
            Party::Agent(escrow.buyer.clone()),
            Party::Escrow(escrow.id.clone()),
            Party::Recipient(escrow.seller.clone()),
        );
        for (kind, from, to) in [
            (MovementKind::Lock, &buyer, &held),
            (MovementKind::Release, &held, &seller),
            (MovementKind::Refund, &held, &buyer),
        ] {
            let m = movement(&escrow, kind);
            assert_eq!(
                (&m.from, &m.to, m.amount),
                (from, to, escrow.amount),
                "{kind:?}"
            );
        }
    }

    #[test]
    fn a_step_is_the_cores_transition_with_its_movement_and_event() {
        let escrow = funded();
        let refused = step(&escrow, EscrowAction::Release, NOW, &Ledger);
        assert!(
            matches!(refused, Err(EscrowError::Transition(Refusal::NotDelivered))),
            "{refused:?}"
        );
        let (delivered, change) = step(&escrow, EscrowAction::Deliver, NOW, &Ledger).unwrap();
        assert_eq!((change.from, change.step), (EscrowStatus::FUNDED, 1));
        assert_eq!(change.movement, None);
        assert_eq!(change.event.event_type, "escrow.delivered");
        assert_eq!(change.event.data["state"], "delivered");
        assert_eq!(delivered.history.last(), Some(&change.entry));
        let at = NOW + time::Duration::MINUTE;
        let (released, change) = step(&delivered, EscrowAction::Release, at, &Ledger).unwrap();
        let moved = change.movement.expect("a release moves the money");
        assert_eq!(
            (moved.kind, moved.amount),
            (MovementKind::Release, escrow.amount)
        );
        assert_eq!(moved.created_ms, ms(at));
        assert_eq!(change.event.event_type, "escrow.released");
        assert_eq!(
            change.event.data,
            wire::to_value(&escrow_wire(&released)).unwrap()
        );
        assert_eq!((released.history.len(), change.step), (3, 2));
    }
}
