//! Escrows and their public history. An escrow row holds where it stands now; its history
//! rows, one per state change, are never updated.

use deadpool_postgres::GenericClient;
use mandate_core::escrow::{EscrowStatus, HistoryEntry};
use mandate_core::id::EscrowId;
use tokio_postgres::Row;

use super::Result;
use crate::clock::ms;
use crate::model::Env;
use crate::storage::escrows::{EscrowRow, StoredEscrow, StoredStep};

/// Stores a freshly funded escrow and its first history step. `false` when its decision
/// (or that decision's nonce) has already funded an escrow: the unique keys decide, so of
/// two racing requests, on any processes, exactly one inserts.
pub async fn insert(c: &impl GenericClient, escrow: &EscrowRow, nonce: &str) -> Result<bool> {
    let inserted = c
        .execute(
            "INSERT INTO escrows (id, org_id, env, amount, currency, buyer, seller, decision_id,
                nonce, arbiter, state, disputed, created_ms)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
             ON CONFLICT DO NOTHING",
            &[
                &escrow.id.as_str(),
                &escrow.org_id,
                &escrow.env.as_str(),
                &escrow.amount.to_string(),
                &escrow.currency.as_str(),
                &escrow.buyer.as_str(),
                &escrow.seller.as_str(),
                &escrow.decision.as_str(),
                &nonce,
                &escrow.arbiter,
                &escrow.status.state.as_str(),
                &escrow.status.disputed,
                &escrow.created_ms,
            ],
        )
        .await?;
    if inserted != 1 {
        return Ok(false);
    }
    for (step, entry) in escrow.history.iter().enumerate() {
        push_history(c, escrow.id.as_str(), step, entry).await?;
    }
    Ok(true)
}

async fn push_history(
    c: &impl GenericClient,
    id: &str,
    step: usize,
    entry: &HistoryEntry,
) -> Result<()> {
    c.execute(
        "INSERT INTO escrow_history (escrow_id, step, state, disputed, at_ms, actor)
         VALUES ($1, $2, $3, $4, $5, $6)",
        &[
            &id,
            &i64::try_from(step).unwrap_or(i64::MAX),
            &entry.state.as_str(),
            &entry.disputed,
            &ms(entry.at),
            &entry.actor,
        ],
    )
    .await?;
    Ok(())
}

/// Moves an escrow of `owner` (organization and environment) from `from` to the status of
/// `entry`, appended as history step `step`.
/// `false` if the escrow no longer stands at `from` (nothing is written then).
pub async fn advance(
    c: &impl GenericClient,
    owner: (&str, Env),
    id: &EscrowId,
    from: EscrowStatus,
    entry: &HistoryEntry,
    step: usize,
) -> Result<bool> {
    let id = id.as_str();
    let changed = c
        .execute(
            "UPDATE escrows SET state = $2, disputed = $3
             WHERE id = $1 AND state = $4 AND disputed = $5 AND org_id = $6 AND env = $7",
            &[
                &id,
                &entry.state.as_str(),
                &entry.disputed,
                &from.state.as_str(),
                &from.disputed,
                &owner.0,
                &owner.1.as_str(),
            ],
        )
        .await?;
    if changed != 1 {
        return Ok(false);
    }
    push_history(c, id, step, entry).await?;
    Ok(true)
}

const COLUMNS: &str = "id, org_id, env, amount, currency, buyer, seller, decision_id, arbiter,
    state, disputed, created_ms";

async fn history(c: &impl GenericClient, id: &str) -> Result<Vec<StoredStep>> {
    let rows = c
        .query(
            "SELECT state, disputed, at_ms, actor FROM escrow_history
             WHERE escrow_id = $1 ORDER BY step",
            &[&id],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| StoredStep {
            state: r.get(0),
            disputed: r.get(1),
            at_ms: r.get(2),
            actor: r.get(3),
        })
        .collect())
}

fn stored(r: &Row) -> StoredEscrow {
    StoredEscrow {
        id: r.get(0),
        org_id: r.get(1),
        env: r.get(2),
        amount: r.get(3),
        currency: r.get(4),
        buyer: r.get(5),
        seller: r.get(6),
        decision_id: r.get(7),
        arbiter: r.get(8),
        state: r.get(9),
        disputed: r.get(10),
        created_ms: r.get(11),
    }
}

/// An escrow by id, whoever funded it; with `owner`, only if it belongs to that
/// (organization, environment).
pub async fn get(
    c: &impl GenericClient,
    id: &EscrowId,
    owner: Option<(&str, Env)>,
) -> Result<Option<EscrowRow>> {
    let (org, env) = owner.map(|(org, env)| (org, env.as_str())).unzip();
    let row = c
        .query_opt(
            &format!(
                "SELECT {COLUMNS} FROM escrows
                 WHERE id = $1 AND ($2::TEXT IS NULL OR org_id = $2) AND ($3::TEXT IS NULL OR env = $3)"
            ),
            &[&id.as_str(), &org, &env],
        )
        .await?;
    match row {
        None => Ok(None),
        Some(r) => Ok(Some(stored(&r).decode(history(c, id.as_str()).await?)?)),
    }
}
