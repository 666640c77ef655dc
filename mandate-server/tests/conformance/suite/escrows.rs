//! Escrows: funded once per decision, moved only from where they stand, one movement per
//! step at most, a refused step writing nothing, and of two steps at once exactly one
//! applied. The changes are decided by the server's one escrow service
//! (`services::escrows`), the same for every engine, and written through the traits.

use super::*;

use mandate_server::services::escrows::{self, EscrowError};
use mandate_server::settlement::{Ledger, MovementKind, Party};
use mandate_server::storage::escrows::{EscrowFunding, EscrowRow, MovementRow};

/// An allow of 42 USD for `agt_buyer` to vendor:acme, stored through the decision service.
async fn allowed(store: &dyn Store) -> Decision {
    onboard(store).await;
    agent(store, "agt_buyer", 10).await;
    mandate(store, "agt_buyer").await;
    let answer = Deciding::new()
        .authorize(store, "agt_buyer", "42", None)
        .await;
    decision(store, &answer).await
}

fn request(funding: &Decision) -> FundingRequest {
    let claims = &funding.claims;
    FundingRequest::from_json(&json!({
        "amount": claims.request.amount,
        "currency": claims.request.currency.as_str(),
        "buyer": claims.request.agent.as_str(),
        "seller": claims.request.recipient.as_str(),
        "decision": claims.jti.as_str(),
    }))
    .unwrap()
}

/// What funding a new escrow from `decision` writes, decided by the escrow service.
fn funding_of(decision: &Decision) -> EscrowFunding {
    escrows::funding(
        EscrowId::from_random(random16()),
        (ORG, Env::Sandbox),
        &request(decision),
        decision.claims.nonce.as_str(),
        NOW,
        &Ledger,
    )
    .unwrap()
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
    let funding = allowed(store).await;
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
        (event.data["id"].as_str(), event.created_ms),
        (Some(escrow.id.as_str()), ms(NOW))
    );
    // Public by id; with an owner, only the funding organization's.
    assert!(
        store
            .escrow(&escrow.id, Some((ORG, Env::Live)))
            .await
            .unwrap()
            .is_none()
    );
    // Deliver; the same change again (the escrow no longer stands where it was decided
    // from), or by another organization, writes nothing.
    let (delivered, deliver) = escrows::step(&escrow, EscrowAction::Deliver, NOW, &Ledger).unwrap();
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
    let (released, release) = escrows::step(
        &delivered,
        EscrowAction::Release,
        NOW + Duration::SECOND,
        &Ledger,
    )
    .unwrap();
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

/// Every action from every state the service can reach: an allowed step writes its
/// history step, its event and the movement of release and refund (one of each kind at
/// most, the whole amount), a refused one writes nothing.
pub async fn every_escrow_step_writes_its_movement_and_a_refused_step_nothing(fresh: &Fresh) {
    use EscrowAction::{Deliver, Dispute, Refund, Release};
    let store = fresh.store.as_ref();
    let mut decisions = vec![allowed(store).await];
    let deciding = Deciding::new();
    // Paths through the state machine, each on an escrow of its own.
    let paths: &[&[EscrowAction]] = &[
        &[Deliver, Release, Refund, Deliver, Dispute],
        &[Release, Refund, Release],
        &[Dispute, Deliver, Dispute, Release, Refund],
        &[Deliver, Deliver, Dispute, Refund, Dispute],
    ];
    for _ in 1..paths.len() {
        let answer = deciding.authorize(store, "agt_buyer", "42", None).await;
        decisions.push(decision(store, &answer).await);
    }
    for (path, funding) in paths.iter().zip(&decisions) {
        let escrow = escrows::fund(
            store,
            &Ledger,
            (ORG, Env::Sandbox),
            EscrowId::from_random(random16()),
            &request(funding),
            NOW,
        )
        .await
        .unwrap();
        let mut expected = escrow.clone();
        for (i, action) in path.iter().enumerate() {
            let at = NOW + Duration::seconds(i as i64 + 1);
            let before = written(store, &escrow).await;
            let allowed = expected.status.apply(*action);
            let acted = escrows::act(
                store,
                &Ledger,
                (ORG, Env::Sandbox),
                escrow.id.as_str(),
                *action,
                at,
            )
            .await;
            let (row, moved, events) = written(store, &escrow).await;
            match allowed {
                Err(refusal) => {
                    assert!(
                        matches!(&acted, Err(EscrowError::Transition(e)) if *e == refusal),
                        "{action:?} from {:?}: {acted:?}",
                        expected.status
                    );
                    assert_eq!(
                        (row, moved, events),
                        before,
                        "a refused {action:?} writes nothing"
                    );
                }
                Ok(to) => {
                    let acted = acted.unwrap();
                    expected.status = to;
                    expected
                        .history
                        .push(HistoryEntry::new(to, at, escrows::FUNDER));
                    assert_eq!(acted, expected);
                    assert_eq!(row.as_ref(), Some(&expected));
                    assert_eq!(events, before.2 + 1, "one event a step");
                    let new: Vec<&MovementRow> = moved.iter().skip(before.1.len()).collect();
                    match mandate_server::settlement::movement_for(*action) {
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
        // Not an escrow of the caller's organization and environment: not found.
        let other = escrows::act(
            store,
            &Ledger,
            (ORG, Env::Live),
            escrow.id.as_str(),
            Refund,
            NOW,
        )
        .await;
        assert!(matches!(other, Err(EscrowError::NoEscrow(_))), "{other:?}");
    }
}

/// Two steps at once on one escrow: exactly one is applied (the engine's guard), and the
/// service judges the other anew on the escrow as it then stands.
pub async fn of_two_escrow_steps_at_once_exactly_one_applies(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    let funding = allowed(store).await;
    let escrow = escrows::fund(
        store,
        &Ledger,
        (ORG, Env::Sandbox),
        EscrowId::from_random(random16()),
        &request(&funding),
        NOW,
    )
    .await
    .unwrap();
    // Through the traits: two changes decided from the same status, written at once.
    let (disputed, dispute) = escrows::step(&escrow, EscrowAction::Dispute, NOW, &Ledger).unwrap();
    let (refunded, refund) = escrows::step(&escrow, EscrowAction::Refund, NOW, &Ledger).unwrap();
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

    // Through the service: eight refunds and releases of a delivered escrow at once; one
    // ends it, the others find it final.
    let answer = Deciding::new()
        .authorize(store, "agt_buyer", "42", None)
        .await;
    let funding = decision(store, &answer).await;
    let owner = (ORG, Env::Sandbox);
    let escrow = escrows::fund(
        store,
        &Ledger,
        owner,
        EscrowId::from_random(random16()),
        &request(&funding),
        NOW,
    )
    .await
    .unwrap();
    escrows::act(
        store,
        &Ledger,
        owner,
        escrow.id.as_str(),
        EscrowAction::Deliver,
        NOW,
    )
    .await
    .unwrap();
    let results = join_all((0..8).map(|i| {
        let action = if i % 2 == 0 {
            EscrowAction::Release
        } else {
            EscrowAction::Refund
        };
        escrows::act(store, &Ledger, owner, escrow.id.as_str(), action, NOW)
    }))
    .await;
    let applied = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(applied, 1, "{results:?}");
    for refused in results.iter().filter(|r| r.is_err()) {
        assert!(
            matches!(refused, Err(EscrowError::Transition(_))),
            "{refused:?}"
        );
    }
    let (row, moved, _) = written(store, &escrow).await;
    assert_eq!(row.unwrap().history.len(), 3);
    assert_eq!(
        moved.len(),
        2,
        "the lock and one release or refund: {moved:?}"
    );
}
