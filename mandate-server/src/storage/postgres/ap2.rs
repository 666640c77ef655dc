//! AP2 on PostgreSQL: trusted issuer keys (`ap2_issuers`) and the open mandate an imported
//! mandate keeps (`mandates.ap2_open_mandate`, `mandates.ap2_digest`), as on SQLite.

use deadpool_postgres::GenericClient;
use mandate_core::id::MandateId;

use super::Result;
use crate::storage::StorageError;
use crate::storage::ap2::{Ap2Issuer, Ap2Source};

/// Adds an issuer key; `false` when the organization has this kid already.
pub async fn add_issuer(
    c: &impl GenericClient,
    org_id: &str,
    kid: &str,
    jwk: &str,
    now_ms: i64,
) -> Result<bool> {
    Ok(c.execute(
        "INSERT INTO ap2_issuers (org_id, kid, jwk, created_ms) VALUES ($1, $2, $3, $4)
         ON CONFLICT (org_id, kid) DO NOTHING",
        &[&org_id, &kid, &jwk, &now_ms],
    )
    .await?
        == 1)
}

/// The organization's issuer keys, oldest first.
pub async fn issuers(c: &impl GenericClient, org_id: &str) -> Result<Vec<Ap2Issuer>> {
    let stmt = c
        .prepare_cached(
            "SELECT kid, jwk, created_ms FROM ap2_issuers WHERE org_id = $1 ORDER BY created_ms, kid",
        )
        .await?;
    Ok(c.query(&stmt, &[&org_id])
        .await?
        .iter()
        .map(|r| Ap2Issuer {
            kid: r.get(0),
            jwk: r.get(1),
            created_ms: r.get(2),
        })
        .collect())
}

/// Removes an issuer key; `false` when there was none with this kid.
pub async fn remove_issuer(c: &impl GenericClient, org_id: &str, kid: &str) -> Result<bool> {
    Ok(c.execute(
        "DELETE FROM ap2_issuers WHERE org_id = $1 AND kid = $2",
        &[&org_id, &kid],
    )
    .await?
        == 1)
}

/// The source of a mandate row from its two AP2 columns (`None` for a plain mandate).
pub fn source_of(open: Option<String>, digest: Option<String>) -> Option<Ap2Source> {
    match (open, digest) {
        (Some(open_mandate), Some(digest)) => Some(Ap2Source {
            open_mandate,
            digest,
        }),
        _ => None,
    }
}

/// A stored mandate id, parsed.
pub fn mandate_id(text: &str) -> Result<MandateId> {
    MandateId::parse(text).map_err(|e| StorageError::Corrupt(format!("mandate {text}: {e}")))
}
