//! Escrows: funded once per decision, moved only from where they stand, one movement per
//! step at most, a step decided on a stale read writing nothing, and of two steps at once
//! exactly one applied. The store decides none of it: each funding and step is made here
//! as the escrow service makes it (the state machine is mandate-protocol's), and the
//! engine writes it, guarded by its unique keys and by where the escrow stands.

use super::*;

use mandate_protocol::escrow::EscrowStatus;
use mandate_storage::escrows::{
    EscrowChange, EscrowFunding, EscrowRow, MovementKind, MovementRow, Party,
};

/// The actor of every history step, as the escrow service names the funder.
const FUNDER: &str = "funder";

/// An allow of 42 USD for `agt_buyer` to vendor:acme, stored.
async fn allowed(store: &dyn Store) -> Decision {
    stored(
        store,
        decided(store, "agt_buyer", "42", Verdict::Allow).await,
    )
    .await
}

/// The organization, its buyer with a mandate, and an allow to fund an escrow with.
async fn onboarded(store: &dyn Store) -> Decision {
    onboard(store).await;
    agent(store, "agt_buyer", 10).await;
    mandate(store, "agt_buyer").await;
    allowed(store).await
}

/// An escrow's event: its type, and the escrow as it stands after the change.
fn event(event_type: &'static str, escrow: &EscrowRow) -> NewEvent {
    NewEvent {
        event_type,
        data: json!({
            "id": escrow.id.as_str(),
            "state": escrow.status.state.as_str(),
            "disputed": escrow.status.disputed,
        }),
    }
}

/// The movement of `kind` of `escrow`'s whole amount at `at`: a lock from the buyer into
/// the escrow, a release to the seller, a refund to the buyer.
fn movement(escrow: &EscrowRow, kind: MovementKind, at: OffsetDateTime) -> MovementRow {
    let (buyer, held, seller) = (
        Party::Agent(escrow.buyer.clone()),
        Party::Escrow(escrow.id.clone()),
        Party::Recipient(escrow.seller.clone()),
    );
    let (from_party, to_party) = match kind {
        MovementKind::Lock => (buyer, held),
        MovementKind::Release => (held, seller),
        MovementKind::Refund => (held, buyer),
    };
    MovementRow {
        escrow_id: escrow.id.clone(),
        kind,
        amount: escrow.amount,
        currency: escrow.currency.clone(),
        from_party,
        to_party,
        created_ms: ms(at),
    }
}

/// What funding a new escrow from `decision` writes: the escrow, its lock, `escrow.funded`.
fn funding_of(decision: &Decision) -> EscrowFunding {
    let request = &decision.claims.request;
    let escrow = EscrowRow {
        id: EscrowId::from_random(random16()),
        org_id: ORG.to_owned(),
        env: Env::Sandbox,
        amount: request.amount,
        currency: request.currency.clone(),
        buyer: request.agent.clone(),
        seller: request.recipient.clone(),
        decision: decision.claims.jti.clone(),
        arbiter: None,
        status: EscrowStatus::FUNDED,
        history: vec![HistoryEntry::new(EscrowStatus::FUNDED, NOW, FUNDER)],
        created_ms: ms(NOW),
    };
    EscrowFunding {
        movement: movement(&escrow, MovementKind::Lock, NOW),
        event: event("escrow.funded", &escrow),
        nonce: decision.claims.nonce.as_str().to_owned(),
        escrow,
    }
}

/// A funded escrow of a fresh allow.
async fn funded(store: &dyn Store, decision: &Decision) -> EscrowRow {
    let funding = funding_of(decision);
    assert!(store.fund_escrow(funding.clone()).await.unwrap());
    funding.escrow
}

/// The money an action moves: release and refund the whole amount, the others none.
fn movement_for(action: EscrowAction) -> Option<MovementKind> {
    match action {
        EscrowAction::Release => Some(MovementKind::Release),
        EscrowAction::Refund => Some(MovementKind::Refund),
        EscrowAction::Deliver | EscrowAction::Dispute => None,
    }
}

/// What `action` at `at` writes on `escrow` as read, if the state machine allows it from
/// where the escrow stood: the escrow after it, and the change (from that status).
fn step(escrow: &EscrowRow, action: EscrowAction, at: OffsetDateTime) -> (EscrowRow, EscrowChange) {
    let to = escrow.status.apply(action).unwrap();
    let entry = HistoryEntry::new(to, at, FUNDER);
    let mut after = escrow.clone();
    after.status = to;
    after.history.push(entry.clone());
    let event_type = match action {
        EscrowAction::Deliver => "escrow.delivered",
        EscrowAction::Release => "escrow.released",
        EscrowAction::Refund => "escrow.refunded",
        EscrowAction::Dispute => "escrow.disputed",
    };
    let change = EscrowChange {
        from: escrow.status,
        entry,
        step: escrow.history.len(),
        movement: movement_for(action).map(|kind| movement(&after, kind, at)),
        event: event(event_type, &after),
    };
    (after, change)
}

/// Everything stored about an escrow: its row and history, its movements, and the escrow
/// events of the log.
async fn written(
    store: &dyn Store,
    escrow: &EscrowRow,
) -> (Option<EscrowRow>, Vec<MovementRow>, usize) {
    let events = all_events(store, None)
        .await
        .into_iter()
        .filter(|e| e.event_type.starts_with("escrow."))
        .count();
    (
        store.escrow(&escrow.id, None).await.unwrap(),
        store.escrow_movements(ORG, &escrow.id).await.unwrap(),
        events,
    )
}

pub async fn an_escrow_is_funded_once_and_moves_only_from_where_it_stands(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    let funding = onboarded(store).await;
    // Two fundings of one decision at once: exactly one is stored, with one lock and one
    // event; the other writes nothing.
    let (a, b) = (funding_of(&funding), funding_of(&funding));
    let (fa, fb) = tokio::join!(store.fund_escrow(a.clone()), store.fund_escrow(b.clone()));
    let (fa, fb) = (fa.unwrap(), fb.unwrap());
    assert!(fa ^ fb, "one of two fundings of a decision: {fa} {fb}");
    let (funded, refused) = if fa { (a, b) } else { (b, a) };
    assert_eq!(written(store, &refused.escrow).await, (None, vec![], 1));
    // The escrow, its lock and its event read back as written, typed.
    let escrow = funded.escrow.clone();
    let (row, moved, _) = written(store, &escrow).await;
    assert_eq!(row.as_ref(), Some(&escrow));
    assert_eq!(moved, std::slice::from_ref(&funded.movement));
    assert_eq!(moved[0].kind, MovementKind::Lock);
    assert_eq!(moved[0].amount, Amount::parse("42").unwrap());
    assert_eq!(moved[0].from_party, Party::Agent(agent_id("agt_buyer")));
    assert_eq!(moved[0].to_party, Party::Escrow(escrow.id.clone()));
    let event = &all_events(store, Some("escrow.funded")).await[0];
    assert_eq!(
        (&event.data, event.created_ms),
        (&funded.event.data, ms(NOW))
    );
    // Another decision's funding under a nonce already spent writes nothing either.
    let other = allowed(store).await;
    let reused = EscrowFunding {
        nonce: funded.nonce.clone(),
        ..funding_of(&other)
    };
    assert!(!store.fund_escrow(reused.clone()).await.unwrap());
    assert_eq!(written(store, &reused.escrow).await, (None, vec![], 1));
    // Public by id; with an owner, only the funding organization's.
    assert!(
        store
            .escrow(&escrow.id, Some((ORG, Env::Live)))
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        store
            .escrow(&escrow.id, Some((ORG, Env::Sandbox)))
            .await
            .unwrap(),
        Some(escrow.clone())
    );
    // Deliver; the same change again (the escrow no longer stands where it was decided
    // from), or by another organization, writes nothing.
    let (delivered, deliver) = step(&escrow, EscrowAction::Deliver, NOW);
    assert!(
        store
            .advance_escrow(ORG, Env::Sandbox, &escrow.id, deliver.clone())
            .await
            .unwrap()
    );
    let before = written(store, &escrow).await;
    assert_eq!(before.0.as_ref(), Some(&delivered));
    assert!(
        !store
            .advance_escrow(ORG, Env::Sandbox, &escrow.id, deliver)
            .await
            .unwrap(),
        "it no longer stands where the change was made from"
    );
    let (released, release) = step(&delivered, EscrowAction::Release, NOW + Duration::SECOND);
    assert!(
        !store
            .advance_escrow("org_other", Env::Sandbox, &escrow.id, release.clone())
            .await
            .unwrap(),
        "only the funding organization moves it"
    );
    assert_eq!(written(store, &escrow).await, before);
    assert!(
        store
            .advance_escrow(ORG, Env::Sandbox, &escrow.id, release)
            .await
            .unwrap()
    );
    let (row, moved, events) = written(store, &escrow).await;
    assert_eq!(row, Some(released.clone()));
    assert_eq!(released.history.len(), 3);
    let kinds: Vec<MovementKind> = moved.iter().map(|m| m.kind).collect();
    assert_eq!(
        kinds,
        [MovementKind::Lock, MovementKind::Release],
        "in the order recorded"
    );
    assert_eq!(moved[1].to_party, Party::Recipient(escrow.seller.clone()));
    assert_eq!(moved[1].created_ms, ms(NOW + Duration::SECOND));
    assert_eq!(events, 3);
    let last = &all_events(store, Some("escrow.released")).await[0];
    assert_eq!(
        last.created_ms,
        ms(NOW + Duration::SECOND),
        "at the step's time"
    );
}

/// Every status an escrow can stand at before it is final.
const STATUSES: [EscrowStatus; 4] = [
    EscrowStatus::FUNDED,
    EscrowStatus {
        state: mandate_protocol::escrow::EscrowState::Delivered,
        disputed: false,
    },
    EscrowStatus {
        state: mandate_protocol::escrow::EscrowState::Funded,
        disputed: true,
    },
    EscrowStatus {
        state: mandate_protocol::escrow::EscrowState::Delivered,
        disputed: true,
    },
];

/// Every action from every state the state machine reaches: a step the escrow's status
/// allows writes its history step, its event and the movement of release and refund (the
/// whole amount, at the step's time); one the status refuses, decided by a caller that
/// read the escrow where the action is allowed, writes nothing.
pub async fn every_escrow_step_writes_its_movement_and_a_refused_step_nothing(fresh: &Fresh) {
    use EscrowAction::{Deliver, Dispute, Refund, Release};
    let store = fresh.store.as_ref();
    let mut decisions = vec![onboarded(store).await];
    // Paths through the state machine, each on an escrow of its own.
    let paths: &[&[EscrowAction]] = &[
        &[Deliver, Release, Refund, Deliver, Dispute],
        &[Release, Refund, Release],
        &[Dispute, Deliver, Dispute, Release, Refund],
        &[Deliver, Deliver, Dispute, Refund, Dispute],
    ];
    for _ in 1..paths.len() {
        decisions.push(allowed(store).await);
    }
    for (path, funding) in paths.iter().zip(&decisions) {
        let escrow = funded(store, funding).await;
        // Not an escrow of the caller's organization and environment: not found there,
        // and a change of it there writes nothing.
        let there = store.escrow(&escrow.id, Some((ORG, Env::Live)));
        assert_eq!(there.await.unwrap(), None);
        let before = written(store, &escrow).await;
        let (_, change) = step(&escrow, Refund, NOW);
        let moved = store.advance_escrow(ORG, Env::Live, &escrow.id, change);
        assert!(!moved.await.unwrap());
        assert_eq!(written(store, &escrow).await, before);
        let mut expected = escrow.clone();
        for (i, action) in path.iter().enumerate() {
            let at = NOW + Duration::seconds(i as i64 + 1);
            let before = written(store, &escrow).await;
            if expected.status.apply(*action).is_err() {
                // Decided on a read where the action is allowed: the escrow is not there.
                let misread = STATUSES
                    .into_iter()
                    .find(|s| s.apply(*action).is_ok())
                    .unwrap();
                let stale = EscrowRow {
                    status: misread,
                    ..expected.clone()
                };
                let (_, change) = step(&stale, *action, at);
                assert!(
                    !store
                        .advance_escrow(ORG, Env::Sandbox, &escrow.id, change)
                        .await
                        .unwrap(),
                    "{action:?} from {:?}",
                    expected.status
                );
                assert_eq!(
                    written(store, &escrow).await,
                    before,
                    "a refused {action:?} writes nothing"
                );
                continue;
            }
            let (after, change) = step(&expected, *action, at);
            assert!(
                store
                    .advance_escrow(ORG, Env::Sandbox, &escrow.id, change)
                    .await
                    .unwrap()
            );
            expected = after;
            let (row, moved, events) = written(store, &escrow).await;
            assert_eq!(row.as_ref(), Some(&expected));
            assert_eq!(events, before.2 + 1, "one event a step");
            let new: Vec<&MovementRow> = moved.iter().skip(before.1.len()).collect();
            match movement_for(*action) {
                None => assert!(new.is_empty(), "{action:?} moves no money"),
                Some(kind) => {
                    assert_eq!(new.len(), 1, "{action:?}: {new:?}");
                    assert_eq!((new[0].kind, new[0].amount), (kind, escrow.amount));
                    assert_eq!(new[0].created_ms, ms(at));
                }
            }
        }
    }
}

/// Two steps at once on one escrow: exactly one is applied (the engine's guard), the
/// other writes nothing, even among eight.
pub async fn of_two_escrow_steps_at_once_exactly_one_applies(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    let funding = onboarded(store).await;
    let escrow = funded(store, &funding).await;
    // Two changes decided from the same status, written at once.
    let (disputed, dispute) = step(&escrow, EscrowAction::Dispute, NOW);
    let (refunded, refund) = step(&escrow, EscrowAction::Refund, NOW);
    let (ra, rb) = tokio::join!(
        store.advance_escrow(ORG, Env::Sandbox, &escrow.id, dispute),
        store.advance_escrow(ORG, Env::Sandbox, &escrow.id, refund),
    );
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    assert!(ra ^ rb, "one of two changes from one status: {ra} {rb}");
    let (row, moved, events) = written(store, &escrow).await;
    let (winner, movements) = if ra { (disputed, 1) } else { (refunded, 2) };
    assert_eq!(row, Some(winner), "the winner's change alone");
    assert_eq!(events, 2, "funded and one change");
    assert_eq!(moved.len(), movements, "{moved:?}");

    // Eight refunds and releases of a delivered escrow at once, each decided from
    // `delivered`: one ends it, the others find it moved on and write nothing.
    let funding = allowed(store).await;
    let escrow = funded(store, &funding).await;
    let (delivered, deliver) = step(&escrow, EscrowAction::Deliver, NOW);
    assert!(
        store
            .advance_escrow(ORG, Env::Sandbox, &escrow.id, deliver)
            .await
            .unwrap()
    );
    let changes = (0..8).map(|i| {
        let action = if i % 2 == 0 {
            EscrowAction::Release
        } else {
            EscrowAction::Refund
        };
        step(&delivered, action, NOW + Duration::SECOND)
    });
    let (afters, changes): (Vec<EscrowRow>, Vec<EscrowChange>) = changes.unzip();
    let results = join_all(
        changes
            .into_iter()
            .map(|change| store.advance_escrow(ORG, Env::Sandbox, &escrow.id, change)),
    )
    .await;
    let applied: Vec<usize> = results
        .iter()
        .enumerate()
        .filter(|(_, r)| *r.as_ref().unwrap())
        .map(|(i, _)| i)
        .collect();
    assert_eq!(applied.len(), 1, "{results:?}");
    let (row, moved, events) = written(store, &escrow).await;
    assert_eq!(row, Some(afters[applied[0]].clone()));
    assert_eq!(row.unwrap().history.len(), 3);
    assert_eq!(
        moved.len(),
        2,
        "the lock and one release or refund: {moved:?}"
    );
    assert_eq!(
        events,
        2 + 3,
        "the first escrow's two, then funded, delivered, one end"
    );
}
