//! The settlement ledger: the money movements recorded by the ledger adapter, at most one
//! of each kind per escrow.

use deadpool_postgres::GenericClient;

use super::Result;
use crate::storage::escrows::{MovementRow, StoredMovement};

/// Records a movement unless one of the same kind exists for the escrow; `true` if this
/// call recorded it.
pub async fn record(c: &impl GenericClient, movement: &MovementRow) -> Result<bool> {
    let inserted = c
        .execute(
            "INSERT INTO settlement_movements
                (escrow_id, kind, amount, currency, from_party, to_party, created_ms)
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (escrow_id, kind) DO NOTHING",
            &[
                &movement.escrow_id.as_str(),
                &movement.kind.as_str(),
                &movement.amount.to_string(),
                &movement.currency.as_str(),
                &movement.from_party.as_str(),
                &movement.to_party.as_str(),
                &movement.created_ms,
            ],
        )
        .await?;
    Ok(inserted == 1)
}

/// The movements of an escrow, in the order they were recorded.
pub async fn of_escrow(c: &impl GenericClient, escrow_id: &str) -> Result<Vec<MovementRow>> {
    let rows = c
        .query(
            "SELECT escrow_id, kind, amount, currency, from_party, to_party, created_ms
             FROM settlement_movements WHERE escrow_id = $1 ORDER BY id",
            &[&escrow_id],
        )
        .await?;
    rows.iter()
        .map(|r| {
            StoredMovement {
                escrow_id: r.get(0),
                kind: r.get(1),
                amount: r.get(2),
                currency: r.get(3),
                from_party: r.get(4),
                to_party: r.get(5),
                created_ms: r.get(6),
            }
            .decode()
        })
        .collect()
}
