//! Escrows stored by SQLite: steps written before its migration 7 read as `funder`, and
//! settlement recorded through its writer moves money once per escrow and kind.

use mandate_core::AgentId;
use mandate_protocol::id::EscrowId;
use mandate_server::settlement::{Movement, MovementKind, Party};
use mandate_server::storage::escrows::record_movement;
use mandate_server::storage::sqlite::{SqliteTx, ready};

use crate::escrows::{act, funded, movements};
use crate::helpers::spawn_app;

#[tokio::test]
async fn history_steps_stored_with_the_org_id_read_as_funder_after_the_upgrade() {
    let mut app = spawn_app().await;
    let agent = app.standard_agent(&app.org.sandbox, "buyer").await;
    let id = funded(&app, &agent).await;
    // As a server before migration 7 wrote it: the organization's id as the actor.
    app.running.take().unwrap().shutdown().await.unwrap();
    {
        let conn = rusqlite::Connection::open(&app.db_path).unwrap();
        conn.execute_batch(
            "UPDATE escrow_history SET actor = (SELECT id FROM orgs WHERE name = 'acme');
             DELETE FROM schema_migrations WHERE version = 7;",
        )
        .unwrap();
    }
    app.restart().await;
    let r = app
        .get(&app.org.sandbox, &format!("/v1/escrows/{id}"))
        .await;
    assert_eq!(r.body["history"][0]["actor"], "funder", "{}", r.text);
    assert!(!r.text.contains("org_"), "{}", r.text);
}

#[tokio::test]
async fn settlement_moves_money_once_per_escrow_and_kind() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "buyer").await;
    let id = funded(&app, &agent).await;
    assert_eq!(act(&app, &org, &id, "deliver").await.status, 200);

    // A retried release (same Idempotency-Key) replays the answer and moves nothing.
    let path = format!("/v1/escrows/{id}/release");
    let headers = [("idempotency-key", "release-1")];
    let first = app
        .send(reqwest::Method::POST, Some(&org), &path, None, &headers)
        .await;
    assert_eq!(first.status, 200, "{}", first.text);
    let retry = app
        .send(reqwest::Method::POST, Some(&org), &path, None, &headers)
        .await;
    assert_eq!(retry.status, 200);
    assert_eq!(retry.header("idempotency-replayed"), Some("true"));
    assert_eq!(retry.body, first.body);
    // A release without the key is refused by the state machine; a refund too.
    act(&app, &org, &id, "release")
        .await
        .assert_error(400, "invalid_request");
    act(&app, &org, &id, "refund")
        .await
        .assert_error(400, "invalid_request");
    let moved = movements(&app, &id).await;
    let kinds: Vec<_> = moved.iter().map(|m| m.kind.as_str()).collect();
    assert_eq!(kinds, ["lock", "release"]);
    assert_eq!(
        (moved[1].from_party.as_str(), moved[1].to_party.as_str()),
        (id.as_str(), "vendor:acme")
    );

    // Settlement is idempotent on (escrow, kind): the adapter's second record of a movement
    // moves nothing.
    let running = app.running.as_ref().unwrap();
    let provider = running.state.settlement.clone();
    let escrow = EscrowId::parse(&id).unwrap();
    let results = running
        .db
        .as_ref()
        .expect("the SQLite engine")
        .write(
            move |tx| -> Result<_, mandate_server::storage::StorageError> {
                let currency = mandate_core::Currency::parse("USD").unwrap();
                let movement = Movement {
                    escrow: &escrow,
                    kind: MovementKind::Refund,
                    amount: mandate_core::Amount::parse("42.50").unwrap(),
                    currency: &currency,
                    from: Party::Escrow(escrow.clone()),
                    to: Party::Agent(AgentId::parse("agt_buyer").unwrap()),
                };
                let record = |tx: &mut rusqlite::Connection, m| {
                    ready(record_movement(&mut SqliteTx::new(tx), "org", &m))
                };
                let first = record(tx, provider.settle(&movement, 1).unwrap())?;
                let second = record(tx, provider.settle(&movement, 2).unwrap())?;
                let release = Movement {
                    kind: MovementKind::Release,
                    ..movement.clone()
                };
                let third = record(tx, provider.settle(&release, 3).unwrap())?;
                Ok((first, second, third))
            },
        )
        .await
        .unwrap();
    assert_eq!(results, (true, false, false));
    let kinds: Vec<_> = movements(&app, &id)
        .await
        .iter()
        .map(|m| m.kind.as_str())
        .collect();
    assert_eq!(kinds, ["lock", "release", "refund"]);
}
