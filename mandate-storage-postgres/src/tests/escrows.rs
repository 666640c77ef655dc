//! Escrows: one decision funds one escrow whichever process is asked, and an escrow is held
//! to a decision of its own organization by the escrows' foreign key.

use super::*;

#[tokio::test]
async fn one_decision_funds_one_escrow_whichever_process_is_asked() {
    use mandate_core::{AgentId, DecisionId};
    use mandate_protocol::{
        escrow::EscrowState, escrow::EscrowStatus, escrow::HistoryEntry, id::EscrowId,
    };
    use mandate_storage::escrows::{
        EscrowFunding, EscrowRow, EscrowStore, MovementKind, MovementRow, Party,
    };
    use mandate_storage::events::NewEvent;

    let db = database!("one_decision_funds_one_escrow_whichever_process_is_asked");
    let (a, b) = (open(&db).await, open(&db).await);
    seed(&db);
    let escrow = |n: u8| EscrowRow {
        id: EscrowId::from_random([n; 16]),
        org_id: "org_1".into(),
        env: Env::Sandbox,
        amount: mandate_core::Amount::parse("10.50").unwrap(),
        currency: mandate_core::Currency::parse("USD").unwrap(),
        buyer: AgentId::parse("agt_buyer").unwrap(),
        seller: mandate_core::Recipient::parse("vendor:x").unwrap(),
        decision: DecisionId::parse("dec_1").unwrap(),
        arbiter: None,
        status: EscrowStatus {
            state: EscrowState::Funded,
            disputed: false,
        },
        history: vec![HistoryEntry {
            state: EscrowState::Funded,
            disputed: false,
            at: NOW,
            actor: "funder".into(),
        }],
        created_ms: ms(NOW),
    };
    let movement = |n: u8| MovementRow {
        escrow_id: EscrowId::from_random([n; 16]),
        kind: MovementKind::Lock,
        amount: mandate_core::Amount::parse("10.50").unwrap(),
        currency: mandate_core::Currency::parse("USD").unwrap(),
        from_party: Party::Agent(AgentId::parse("agt_buyer").unwrap()),
        to_party: Party::Escrow(EscrowId::from_random([n; 16])),
        created_ms: ms(NOW),
    };
    let funded = futures_util::future::join_all((1..=10u8).map(|n| {
        let store = if n % 2 == 0 { &a } else { &b };
        store.fund_escrow(EscrowFunding {
            escrow: escrow(n),
            nonce: "n_1".into(),
            movement: movement(n),
            event: NewEvent {
                event_type: "escrow.funded",
                data: serde_json::json!({"n": n}),
            },
        })
    }))
    .await;
    let yes = funded.iter().filter(|f| *f.as_ref().unwrap()).count();
    assert_eq!(yes, 1, "{funded:?}");
    assert_eq!(db.number("SELECT COUNT(*) FROM escrows"), 1);
    assert_eq!(db.number("SELECT COUNT(*) FROM settlement_movements"), 1);
    assert_eq!(
        db.number("SELECT COUNT(*) FROM events WHERE type = 'escrow.funded'"),
        1
    );
}

/// Migration 21: the decisions' unique key on ids leads with the id (which ascends with
/// time across organizations, so the key takes its entries at its right edge), and the
/// escrows' foreign key to `(org_id, id)` still holds on it: an escrow naming a decision of
/// another organization is refused, one naming its own organization's is stored.
#[tokio::test]
async fn the_decisions_key_on_ids_leads_with_the_id_and_still_holds_the_escrows_to_theirs() {
    let db = database!(
        "the_decisions_key_on_ids_leads_with_the_id_and_still_holds_the_escrows_to_theirs"
    );
    drop(open(&db).await);
    seed(&db);
    let key: String = db.one(
        "SELECT pg_get_constraintdef(oid) FROM pg_constraint
         WHERE conrelid = 'decisions'::regclass AND contype = 'u'",
    );
    assert_eq!(key, "UNIQUE (id, org_id)");
    db.execute(
        "INSERT INTO orgs VALUES ('org_2', 'other', 'pol_2026-11-22.1', 0);
         CREATE FUNCTION try_escrow(o TEXT, e TEXT) RETURNS TEXT LANGUAGE plpgsql AS $$
         BEGIN
             INSERT INTO escrows (org_id, id, env, amount, currency, buyer, seller,
                                  decision_id, nonce, state, disputed, created_ms)
             VALUES (o, e, 'sandbox', '10.50', 'USD', 'agt_buyer', 'vendor:x', 'dec_1',
                     'n_' || e, 'funded', false, 0);
             RETURN 'stored';
         EXCEPTION WHEN foreign_key_violation THEN
             RETURN 'refused';
         END $$;",
    );
    let other: String = db.one("SELECT try_escrow('org_2', 'esc_2')");
    assert_eq!(
        other, "refused",
        "an escrow of org_2 named org_1's decision"
    );
    let own: String = db.one("SELECT try_escrow('org_1', 'esc_1')");
    assert_eq!(own, "stored");
}
