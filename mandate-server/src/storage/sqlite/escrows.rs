//! Escrows and their public history. An escrow row holds where it stands now; its history
//! rows, one per state change, are never updated.

use mandate_core::escrow::{EscrowStatus, HistoryEntry};
use mandate_core::id::EscrowId;
use rusqlite::{Connection, ErrorCode, OptionalExtension, params};

use super::StorageError;
use crate::clock::ms;
use crate::model::Env;
use crate::storage::escrows::{EscrowRow, StoredEscrow, StoredStep};

/// Stores a freshly funded escrow and its first history step. `Ok(false)` when its decision
/// (or that decision's nonce) has already funded an escrow: the unique keys decide, so of
/// two racing requests exactly one inserts.
pub fn insert(tx: &Connection, escrow: &EscrowRow, nonce: &str) -> Result<bool, StorageError> {
    let inserted = tx.execute(
        "INSERT INTO escrows (id, org_id, env, amount, currency, buyer, seller, decision_id,
            nonce, arbiter, state, disputed, created_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
        params![
            escrow.id.as_str(),
            escrow.org_id,
            escrow.env.as_str(),
            escrow.amount.to_string(),
            escrow.currency.as_str(),
            escrow.buyer.as_str(),
            escrow.seller.as_str(),
            escrow.decision.as_str(),
            nonce,
            escrow.arbiter,
            escrow.status.state.as_str(),
            escrow.status.disputed,
            escrow.created_ms,
        ],
    );
    match inserted {
        Ok(_) => {}
        Err(rusqlite::Error::SqliteFailure(e, _))
            if e.code == ErrorCode::ConstraintViolation
                && e.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE =>
        {
            return Ok(false);
        }
        Err(e) => return Err(e.into()),
    }
    for (step, entry) in escrow.history.iter().enumerate() {
        push_history(tx, escrow.id.as_str(), step, entry)?;
    }
    Ok(true)
}

fn push_history(
    tx: &Connection,
    id: &str,
    step: usize,
    entry: &HistoryEntry,
) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO escrow_history (escrow_id, step, state, disputed, at_ms, actor)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![
            id,
            i64::try_from(step).unwrap_or(i64::MAX),
            entry.state.as_str(),
            entry.disputed,
            ms(entry.at),
            entry.actor,
        ],
    )?;
    Ok(())
}

/// Moves an escrow of `owner` (organization and environment) from `from` to the status of
/// `entry`, appended as history step `step`.
/// `Ok(false)` if the escrow no longer stands at `from` (nothing is written then).
pub fn advance(
    tx: &Connection,
    owner: (&str, Env),
    id: &EscrowId,
    from: EscrowStatus,
    entry: &HistoryEntry,
    step: usize,
) -> Result<bool, StorageError> {
    let id = id.as_str();
    let changed = tx.execute(
        "UPDATE escrows SET state = ?2, disputed = ?3
         WHERE id = ?1 AND state = ?4 AND disputed = ?5 AND org_id = ?6 AND env = ?7",
        params![
            id,
            entry.state.as_str(),
            entry.disputed,
            from.state.as_str(),
            from.disputed,
            owner.0,
            owner.1.as_str(),
        ],
    )?;
    if changed != 1 {
        return Ok(false);
    }
    push_history(tx, id, step, entry)?;
    Ok(true)
}

const COLUMNS: &str = "id, org_id, env, amount, currency, buyer, seller, decision_id, arbiter,
    state, disputed, created_ms";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<StoredEscrow> {
    Ok(StoredEscrow {
        id: r.get(0)?,
        org_id: r.get(1)?,
        env: r.get(2)?,
        amount: r.get(3)?,
        currency: r.get(4)?,
        buyer: r.get(5)?,
        seller: r.get(6)?,
        decision_id: r.get(7)?,
        arbiter: r.get(8)?,
        state: r.get(9)?,
        disputed: r.get(10)?,
        created_ms: r.get(11)?,
    })
}

fn history(conn: &Connection, id: &str) -> Result<Vec<StoredStep>, StorageError> {
    let mut stmt = conn.prepare_cached(
        "SELECT state, disputed, at_ms, actor FROM escrow_history
         WHERE escrow_id = ?1 ORDER BY step",
    )?;
    let rows = stmt.query_map([id], |r| {
        Ok(StoredStep {
            state: r.get(0)?,
            disputed: r.get(1)?,
            at_ms: r.get(2)?,
            actor: r.get(3)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// An escrow by id, whoever funded it: escrows are public contracts. With `owner`, only
/// if it belongs to that (organization, environment).
pub fn get(
    conn: &Connection,
    id: &EscrowId,
    owner: Option<(&str, Env)>,
) -> Result<Option<EscrowRow>, StorageError> {
    let id = id.as_str();
    let owner = owner.map(|(org, env)| (org, env.as_str()));
    let (org, env) = owner.unzip();
    let raw = conn
        .query_row(
            &format!(
                "SELECT {COLUMNS} FROM escrows
                 WHERE id = ?1 AND (?2 IS NULL OR org_id = ?2) AND (?3 IS NULL OR env = ?3)"
            ),
            params![id, org, env],
            row,
        )
        .optional()?;
    raw.map(|raw| raw.decode(history(conn, id)?)).transpose()
}
