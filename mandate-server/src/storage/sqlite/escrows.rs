//! Escrows and their public history. An escrow row holds where it stands now; its history
//! rows, one per state change, are never updated.

use mandate_core::amount::Amount;
use mandate_core::escrow::{EscrowState, EscrowStatus, HistoryEntry};
use mandate_core::id::{AgentId, DecisionId, EscrowId};
use mandate_core::names::{Currency, Recipient};
use rusqlite::{Connection, ErrorCode, OptionalExtension, params};

use super::StorageError;
use crate::clock::{from_ms, ms};

/// A stored escrow with its full history, oldest step first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EscrowRow {
    /// `esc_…`.
    pub id: EscrowId,
    /// The organization that funded it.
    pub org_id: String,
    /// Its environment.
    pub env: String,
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
            escrow.env,
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

/// Moves an escrow from `from` to the status of `entry`, appended as history step `step`.
/// `Ok(false)` if the escrow no longer stands at `from` (nothing is written then).
pub fn advance(
    tx: &Connection,
    id: &str,
    from: EscrowStatus,
    entry: &HistoryEntry,
    step: usize,
) -> Result<bool, StorageError> {
    let changed = tx.execute(
        "UPDATE escrows SET state = ?2, disputed = ?3
         WHERE id = ?1 AND state = ?4 AND disputed = ?5",
        params![
            id,
            entry.state.as_str(),
            entry.disputed,
            from.state.as_str(),
            from.disputed,
        ],
    )?;
    if changed != 1 {
        return Ok(false);
    }
    push_history(tx, id, step, entry)?;
    Ok(true)
}

type Raw = (Vec<Option<String>>, bool, i64);

const COLUMNS: &str = "id, org_id, env, amount, currency, buyer, seller, decision_id, arbiter,
    state, disputed, created_ms";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Raw> {
    let mut texts = Vec::with_capacity(10);
    for i in 0..10 {
        texts.push(r.get::<_, Option<String>>(i)?);
    }
    Ok((texts, r.get(10)?, r.get(11)?))
}

fn state_from(text: &str) -> Result<EscrowState, StorageError> {
    match text {
        "funded" => Ok(EscrowState::Funded),
        "delivered" => Ok(EscrowState::Delivered),
        "released" => Ok(EscrowState::Released),
        "refunded" => Ok(EscrowState::Refunded),
        other => Err(StorageError::Corrupt(format!("escrow state {other:?}"))),
    }
}

fn history(conn: &Connection, id: &str) -> Result<Vec<HistoryEntry>, StorageError> {
    let mut stmt = conn.prepare_cached(
        "SELECT state, disputed, at_ms, actor FROM escrow_history
         WHERE escrow_id = ?1 ORDER BY step",
    )?;
    let rows = stmt.query_map([id], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, bool>(1)?,
            r.get::<_, i64>(2)?,
            r.get::<_, String>(3)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (state, disputed, at_ms, actor) = row?;
        out.push(HistoryEntry {
            state: state_from(&state)?,
            disputed,
            at: from_ms(at_ms),
            actor,
        });
    }
    Ok(out)
}

fn decode(conn: &Connection, raw: Raw) -> Result<EscrowRow, StorageError> {
    let (t, disputed, created_ms) = raw;
    let bad = |what: &str| StorageError::Corrupt(format!("escrow column {what}"));
    let text = |i: usize, what: &str| t[i].clone().ok_or_else(|| bad(what));
    let id = EscrowId::parse(&text(0, "id")?).map_err(|_| bad("id"))?;
    let history = history(conn, id.as_str())?;
    Ok(EscrowRow {
        org_id: text(1, "org_id")?,
        env: text(2, "env")?,
        amount: Amount::parse(&text(3, "amount")?).map_err(|_| bad("amount"))?,
        currency: Currency::parse(&text(4, "currency")?).map_err(|_| bad("currency"))?,
        buyer: AgentId::parse(&text(5, "buyer")?).map_err(|_| bad("buyer"))?,
        seller: Recipient::parse(&text(6, "seller")?).map_err(|_| bad("seller"))?,
        decision: DecisionId::parse(&text(7, "decision_id")?).map_err(|_| bad("decision_id"))?,
        arbiter: t[8].clone(),
        status: EscrowStatus {
            state: state_from(&text(9, "state")?)?,
            disputed,
        },
        history,
        created_ms,
        id,
    })
}

/// An escrow by id, whoever funded it: escrows are public contracts. With `owner`, only
/// if it belongs to that (organization, environment).
pub fn get(
    conn: &Connection,
    id: &str,
    owner: Option<(&str, &str)>,
) -> Result<Option<EscrowRow>, StorageError> {
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
    raw.map(|raw| decode(conn, raw)).transpose()
}
