//! The settlement ledger: the money movements recorded by the ledger adapter
//! (the settlement module's `Ledger`), at most one of each kind per escrow.

use rusqlite::{Connection, params};

use super::StorageError;
use crate::storage::escrows::{MovementRow, StoredMovement};

/// Records a movement unless one of the same kind exists for the escrow; `Ok(true)` if this
/// call recorded it.
pub fn record(tx: &Connection, movement: &MovementRow) -> rusqlite::Result<bool> {
    let inserted = tx.execute(
        "INSERT OR IGNORE INTO settlement_movements
            (escrow_id, kind, amount, currency, from_party, to_party, created_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![
            movement.escrow_id.as_str(),
            movement.kind.as_str(),
            movement.amount.to_string(),
            movement.currency.as_str(),
            movement.from_party.as_str(),
            movement.to_party.as_str(),
            movement.created_ms,
        ],
    )?;
    Ok(inserted == 1)
}

/// The movements of an escrow, in the order they were recorded.
pub fn of_escrow(conn: &Connection, escrow_id: &str) -> Result<Vec<MovementRow>, StorageError> {
    let mut stmt = conn.prepare_cached(
        "SELECT escrow_id, kind, amount, currency, from_party, to_party, created_ms
         FROM settlement_movements WHERE escrow_id = ?1 ORDER BY id",
    )?;
    let rows = stmt.query_map([escrow_id], |r| {
        Ok(StoredMovement {
            escrow_id: r.get(0)?,
            kind: r.get(1)?,
            amount: r.get(2)?,
            currency: r.get(3)?,
            from_party: r.get(4)?,
            to_party: r.get(5)?,
            created_ms: r.get(6)?,
        })
    })?;
    rows.map(|r| r?.decode()).collect()
}
