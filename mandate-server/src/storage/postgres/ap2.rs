//! AP2 on PostgreSQL: trusted issuer keys (`ap2_issuers`) and the open mandate an imported
//! mandate keeps (`mandates.ap2_open_mandate`, `mandates.ap2_digest`), as on SQLite.

use deadpool_postgres::GenericClient;
use mandate_core::id::{AgentId, MandateId};
use mandate_core::mandate::Mandate;

use super::{PostgresStore, Result, mandates};
use crate::model::Env;
use crate::storage::ap2::{Ap2Issuer, Ap2Source, Ap2Store};
use crate::storage::{StorageError, StoreFuture};

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

fn source_of(open: Option<String>, digest: Option<String>) -> Option<Ap2Source> {
    match (open, digest) {
        (Some(open_mandate), Some(digest)) => Some(Ap2Source {
            open_mandate,
            digest,
        }),
        _ => None,
    }
}

fn mandate_id(text: &str) -> Result<MandateId> {
    MandateId::parse(text).map_err(|e| StorageError::Corrupt(format!("mandate {text}: {e}")))
}

impl Ap2Store for PostgresStore {
    fn ap2_issuers(&self, org_id: &str) -> StoreFuture<'_, Vec<Ap2Issuer>> {
        let org = org_id.to_owned();
        Box::pin(async move { issuers(&self.client().await?, &org).await })
    }

    fn insert_ap2_mandate(
        &self,
        org_id: &str,
        env: Env,
        mandate: &Mandate,
        source: &Ap2Source,
    ) -> StoreFuture<'_, ()> {
        let (org, mandate, source) = (org_id.to_owned(), mandate.clone(), source.clone());
        Box::pin(async move {
            let mut c = self.client().await?;
            let tx = c.transaction().await?;
            mandates::insert(&tx, &org, env, &mandate).await?;
            tx.execute(
                "UPDATE mandates SET ap2_open_mandate = $2, ap2_digest = $3 WHERE id = $1",
                &[&mandate.id.as_str(), &source.open_mandate, &source.digest],
            )
            .await?;
            Ok(tx.commit().await?)
        })
    }

    fn ap2_sources(
        &self,
        org_id: &str,
        env: Env,
        ids: &[MandateId],
    ) -> StoreFuture<'_, Vec<(MandateId, Ap2Source)>> {
        let org = org_id.to_owned();
        let ids: Vec<String> = ids.iter().map(|id| id.as_str().to_owned()).collect();
        Box::pin(async move {
            if ids.is_empty() {
                return Ok(Vec::new());
            }
            let c = self.client().await?;
            let stmt = c
                .prepare_cached(
                    "SELECT id, ap2_open_mandate, ap2_digest FROM mandates
                     WHERE org_id = $1 AND env = $2 AND id = ANY($3) AND ap2_digest IS NOT NULL",
                )
                .await?;
            let mut out = Vec::new();
            for r in c.query(&stmt, &[&org, &env.as_str(), &ids]).await? {
                if let Some(source) = source_of(r.get(1), r.get(2)) {
                    out.push((mandate_id(r.get(0))?, source));
                }
            }
            Ok(out)
        })
    }

    fn current_ap2_source(
        &self,
        org_id: &str,
        env: Env,
        agent: &AgentId,
    ) -> StoreFuture<'_, Option<(MandateId, Option<Ap2Source>)>> {
        let (org, agent) = (org_id.to_owned(), agent.clone());
        Box::pin(async move {
            let c = self.client().await?;
            let stmt = c
                .prepare_cached(
                    "SELECT id, ap2_open_mandate, ap2_digest FROM mandates
                     WHERE org_id = $1 AND env = $2 AND agent_id = $3 ORDER BY seq DESC LIMIT 1",
                )
                .await?;
            let row = c
                .query_opt(&stmt, &[&org, &env.as_str(), &agent.as_str()])
                .await?;
            row.map(|r| Ok((mandate_id(r.get(0))?, source_of(r.get(1), r.get(2)))))
                .transpose()
        })
    }
}
