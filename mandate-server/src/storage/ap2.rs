//! AP2 (issue #36) at the boundary: the issuer keys each organization trusts to sign the
//! open payment mandates it imports, the SD-JWT each imported mandate was made from, and
//! where each open mandate is in force (issue #51: one organization and environment,
//! bound at its first import, in `ap2_consents`, a table keyed by the open mandate's
//! consent key that only imports read and write).
//! The engines only store: which key is acceptable and what a mandate means is decided
//! above (`operator.rs`, `routes/ap2.rs`, `mandate_core::unstable::ap2`).

use mandate_core::{AgentId, Mandate, MandateId};

use super::StoreFuture;
use super::engine::{Access, Columns, Engine, Result, Scope, Tx, env_of, first, id_of};
use super::mandates;
use super::statements::Ap2Sql;
use crate::clock::ms;
use crate::model::Env;

/// An AP2 issuer key an organization trusts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ap2Issuer {
    /// Its key id, unique in the organization (the `kid` of the SD-JWTs it signs).
    pub kid: String,
    /// The public JWK, JSON text (EC P-256, ES256; checked before it is stored).
    pub jwk: String,
    /// When it was added, unix ms.
    pub created_ms: i64,
}

/// What a mandate imported from an AP2 open payment mandate keeps of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ap2Source {
    /// The SD-JWT as presented (issuer JWT and disclosures).
    pub open_mandate: String,
    /// Its digest (`mandate_core::OpenMandate::digest`), the verdicts' `ap2_mandate`.
    pub digest: String,
}

/// What an import of an open mandate did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ap2Import {
    /// The mandate is stored: the open mandate is in force here (bound now, or already).
    Stored,
    /// Nothing is stored: the open mandate is in force in another organization or
    /// environment (which one is not said: another tenant's business).
    InForceElsewhere,
}

/// AP2's stored data. The operator's changes are in [`super::AdminStore`].
pub trait Ap2Store {
    /// The issuer keys the organization trusts, oldest first.
    fn ap2_issuers(&self, org_id: &str) -> StoreFuture<'_, Vec<Ap2Issuer>>;

    /// Stores `mandate` as its agent's current one (as `MandateStore::insert_mandate`)
    /// with the AP2 open mandate it was imported from, in one transaction, if that open
    /// mandate (named by `consent_key`) is in force in this organization and environment:
    /// bound here by this import when it is bound nowhere yet. Bound elsewhere, nothing
    /// is stored ([`Ap2Import::InForceElsewhere`]). Two imports of one open mandate into
    /// two places at once: one binds it, the other finds it bound (the key is unique).
    fn insert_ap2_mandate(
        &self,
        org_id: &str,
        env: Env,
        mandate: &Mandate,
        source: &Ap2Source,
        consent_key: &str,
    ) -> StoreFuture<'_, Ap2Import>;

    /// The AP2 sources of those of `ids` that were imported (the others are left out).
    fn ap2_sources(
        &self,
        org_id: &str,
        env: Env,
        ids: &[MandateId],
    ) -> StoreFuture<'_, Vec<(MandateId, Ap2Source)>>;

    /// The agent's current mandate's id (its newest, whatever its status) and, if it was
    /// imported from AP2, its source.
    fn current_ap2_source(
        &self,
        org_id: &str,
        env: Env,
        agent: &AgentId,
    ) -> StoreFuture<'_, Option<(MandateId, Option<Ap2Source>)>>;
}

/// Binds the open mandate named by `consent_key` to `s` unless it is bound already, and
/// says where it is bound.
async fn bind_consent<T: Tx>(
    tx: &mut T,
    s: Scope<'_>,
    consent_key: &str,
    at_ms: i64,
) -> Result<(String, Env)> {
    let params = [consent_key.into(), s.org.into(), s.env.into(), at_ms.into()];
    tx.execute(Ap2Sql::BindConsent.into(), &params).await?;
    let read = |r: &dyn Columns| Ok((r.text(0)?, env_of(&r.text(1)?)?));
    let place = tx
        .query(Ap2Sql::ConsentPlace.into(), &[consent_key.into()], read)
        .await?;
    first(place).ok_or_else(|| {
        super::StorageError::Corrupt(format!(
            "ap2_consents has no row for {consent_key} once bound"
        ))
    })
}

/// The organization's issuer keys, oldest first.
pub(super) async fn issuers<T: Tx>(tx: &mut T, org: &str) -> Result<Vec<Ap2Issuer>> {
    let read = |r: &dyn Columns| {
        Ok(Ap2Issuer {
            kid: r.text(0)?,
            jwk: r.text(1)?,
            created_ms: r.int(2)?,
        })
    };
    tx.query(Ap2Sql::Issuers.into(), &[org.into()], read).await
}

/// A mandate's id and its source, from the columns id, open mandate, digest.
fn read_source(r: &dyn Columns) -> Result<(MandateId, Option<Ap2Source>)> {
    let id = id_of(&r.text(0)?, "mandate", MandateId::parse)?;
    let source = match (r.opt_text(1)?, r.opt_text(2)?) {
        (Some(open_mandate), Some(digest)) => Some(Ap2Source {
            open_mandate,
            digest,
        }),
        _ => None,
    };
    Ok((id, source))
}

/// The sources of those of `ids` imported from AP2, in the order of `ids`.
async fn sources<T: Tx>(
    tx: &mut T,
    s: Scope<'_>,
    ids: &[String],
) -> Result<Vec<(MandateId, Ap2Source)>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let params = [s.org.into(), s.env.into(), super::engine::Param::Texts(ids)];
    let rows = tx
        .query(Ap2Sql::Sources.into(), &params, read_source)
        .await?;
    let mut found: Vec<(MandateId, Ap2Source)> = rows
        .into_iter()
        .filter_map(|(id, source)| source.map(|source| (id, source)))
        .collect();
    found.sort_by_key(|(id, _)| ids.iter().position(|wanted| wanted == id.as_str()));
    Ok(found)
}

impl<E: Engine> Ap2Store for E {
    fn ap2_issuers(&self, org_id: &str) -> StoreFuture<'_, Vec<Ap2Issuer>> {
        Box::pin(self.run(Access::Read, org_id.to_owned(), |tx, org| {
            Box::pin(issuers(tx, org))
        }))
    }

    fn insert_ap2_mandate(
        &self,
        org_id: &str,
        env: Env,
        mandate: &Mandate,
        source: &Ap2Source,
        consent_key: &str,
    ) -> StoreFuture<'_, Ap2Import> {
        let args = (
            org_id.to_owned(),
            env,
            mandate.clone(),
            source.clone(),
            consent_key.to_owned(),
        );
        Box::pin(self.run(
            Access::Write,
            args,
            |tx, (org, env, mandate, source, key)| {
                Box::pin(async move {
                    let s = Scope::new(org, *env);
                    let at_ms = ms(mandate.created_at);
                    let (bound_org, bound_env) = bind_consent(tx, s, key, at_ms).await?;
                    if bound_org != s.org || bound_env != *env {
                        return Ok(Ap2Import::InForceElsewhere);
                    }
                    mandates::insert(tx, s, mandate).await?;
                    let params = [
                        s.org.into(),
                        s.env.into(),
                        mandate.id.as_str().into(),
                        source.open_mandate.as_str().into(),
                        source.digest.as_str().into(),
                    ];
                    tx.execute(Ap2Sql::SetSource.into(), &params).await?;
                    Ok(Ap2Import::Stored)
                })
            },
        ))
    }

    fn ap2_sources(
        &self,
        org_id: &str,
        env: Env,
        ids: &[MandateId],
    ) -> StoreFuture<'_, Vec<(MandateId, Ap2Source)>> {
        let ids: Vec<String> = ids.iter().map(|id| id.as_str().to_owned()).collect();
        Box::pin(self.run(
            Access::Read,
            (org_id.to_owned(), env, ids),
            |tx, (org, env, ids)| Box::pin(sources(tx, Scope::new(org, *env), ids)),
        ))
    }

    fn current_ap2_source(
        &self,
        org_id: &str,
        env: Env,
        agent: &AgentId,
    ) -> StoreFuture<'_, Option<(MandateId, Option<Ap2Source>)>> {
        let args = (org_id.to_owned(), env, agent.clone());
        Box::pin(self.run(Access::Read, args, |tx, (org, env, agent)| {
            Box::pin(async move {
                let params = [org.into(), (*env).into(), agent.as_str().into()];
                let rows = tx
                    .query(Ap2Sql::CurrentSource.into(), &params, read_source)
                    .await?;
                Ok(first(rows))
            })
        }))
    }
}
