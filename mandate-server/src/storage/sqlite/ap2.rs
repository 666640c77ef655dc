//! AP2 on SQLite: trusted issuer keys (`ap2_issuers`) and the open mandate an imported
//! mandate keeps (`mandates.ap2_open_mandate`, `mandates.ap2_digest`).

use mandate_core::id::MandateId;
use rusqlite::{Connection, OptionalExtension, params};

use super::StorageError;
use crate::model::Env;
use crate::storage::ap2::{Ap2Issuer, Ap2Source};

/// Adds an issuer key; `false` when the organization has this kid already.
pub fn add_issuer(
    tx: &Connection,
    org_id: &str,
    kid: &str,
    jwk: &str,
    now_ms: i64,
) -> rusqlite::Result<bool> {
    Ok(tx.execute(
        "INSERT INTO ap2_issuers (org_id, kid, jwk, created_ms) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (org_id, kid) DO NOTHING",
        params![org_id, kid, jwk, now_ms],
    )? == 1)
}

/// The organization's issuer keys, oldest first.
pub fn issuers(conn: &Connection, org_id: &str) -> rusqlite::Result<Vec<Ap2Issuer>> {
    let mut stmt = conn.prepare_cached(
        "SELECT kid, jwk, created_ms FROM ap2_issuers WHERE org_id = ?1 ORDER BY created_ms, kid",
    )?;
    let rows = stmt.query_map([org_id], |r| {
        Ok(Ap2Issuer {
            kid: r.get(0)?,
            jwk: r.get(1)?,
            created_ms: r.get(2)?,
        })
    })?;
    rows.collect()
}

/// Removes an issuer key; `false` when there was none with this kid.
pub fn remove_issuer(tx: &Connection, org_id: &str, kid: &str) -> rusqlite::Result<bool> {
    Ok(tx.execute(
        "DELETE FROM ap2_issuers WHERE org_id = ?1 AND kid = ?2",
        params![org_id, kid],
    )? == 1)
}

/// Records the AP2 source of a mandate just inserted (in the caller's transaction).
pub fn set_source(tx: &Connection, id: &MandateId, source: &Ap2Source) -> rusqlite::Result<()> {
    tx.execute(
        "UPDATE mandates SET ap2_open_mandate = ?2, ap2_digest = ?3 WHERE id = ?1",
        params![id.as_str(), source.open_mandate, source.digest],
    )?;
    Ok(())
}

fn source_of(open: Option<String>, digest: Option<String>) -> Option<Ap2Source> {
    match (open, digest) {
        (Some(open_mandate), Some(digest)) => Some(Ap2Source {
            open_mandate,
            digest,
        }),
        _ => None,
    }
}

/// The sources of those of `ids` imported from AP2.
pub fn sources(
    conn: &Connection,
    org_id: &str,
    env: Env,
    ids: &[MandateId],
) -> rusqlite::Result<Vec<(MandateId, Ap2Source)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT ap2_open_mandate, ap2_digest FROM mandates
         WHERE org_id = ?1 AND env = ?2 AND id = ?3 AND ap2_digest IS NOT NULL",
    )?;
    let mut out = Vec::new();
    for id in ids {
        let found = stmt
            .query_row(params![org_id, env, id.as_str()], |r| {
                Ok(source_of(r.get(0)?, r.get(1)?))
            })
            .optional()?
            .flatten();
        if let Some(source) = found {
            out.push((id.clone(), source));
        }
    }
    Ok(out)
}

/// The agent's newest mandate's id and AP2 source.
pub fn current_source(
    conn: &Connection,
    org_id: &str,
    env: Env,
    agent: &str,
) -> Result<Option<(MandateId, Option<Ap2Source>)>, StorageError> {
    let row = conn
        .prepare_cached(
            "SELECT id, ap2_open_mandate, ap2_digest FROM mandates
             WHERE org_id = ?1 AND env = ?2 AND agent_id = ?3 ORDER BY seq DESC LIMIT 1",
        )?
        .query_row(params![org_id, env, agent], |r| {
            Ok((r.get::<_, String>(0)?, source_of(r.get(1)?, r.get(2)?)))
        })
        .optional()?;
    row.map(|(id, source)| {
        MandateId::parse(&id)
            .map(|id| (id, source))
            .map_err(|e| StorageError::Corrupt(format!("mandate {id}: {e}")))
    })
    .transpose()
}
