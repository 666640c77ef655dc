//! AP2 (issue #36) at the boundary: the issuer keys each organization trusts to sign the
//! open payment mandates it imports, the SD-JWT each imported mandate was made from, and
//! where each open mandate is in force (issue #51: one organization and environment,
//! bound at its first import, in `ap2_consents`, a table keyed by the open mandate's
//! consent key that only imports read and write).
//!
//! An open mandate is one running total (#67): its budget and occurrence count are spent
//! once across every mandate imported from it (its *carriers*). An import supersedes the
//! carriers still in force, whatever their agent, moves those agents' versions (a decision
//! made on one of them before is refused when stored, and made again on the mandate now
//! in force), then sums what every carrier allowed and keeps that with the new mandate
//! (`ap2_spent`), whose limits count from there. Imports of one organization take turns
//! (`MandateSql::Turn`), so each finds the carrier the one before it stored.
//! The engines only store: which key is acceptable and what a mandate means is decided
//! above (`operator.rs`, `routes/ap2.rs`, `mandate_protocol::ap2`).

use mandate_core::{AgentId, Mandate, MandateId};
use mandate_protocol::history::SpendToDate;

use super::StoreFuture;
use super::engine::{Access, Columns, Engine, Lock, Result, Scope, Tx, env_of, first, id_of};
use super::statements::{AgentSql, Ap2Sql, MandateSql};
use super::{StorageError, agents, mandates};
use crate::clock::{from_ms, ms};
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
    /// What the open mandate had spent under the mandates that carried it before this one,
    /// when this one was imported (the store computes it); `None` on its first import.
    pub spent_before: Option<SpendToDate>,
}

/// An import of an open mandate, for [`Ap2Store::insert_ap2_mandate`].
#[derive(Debug, Clone)]
pub struct NewImport {
    /// The mandate to store as its agent's current one.
    pub mandate: Mandate,
    /// What it keeps of the open mandate (`spent_before` is the store's to compute).
    pub source: Ap2Source,
    /// The open mandate's consent key (`mandate_protocol::ap2::consent_key`).
    pub consent_key: String,
    /// The agents whose locks the caller holds: a carrier in force on another agent is
    /// superseded only under that agent's lock ([`Ap2Import::Lock`] otherwise).
    pub locked: Vec<AgentId>,
    /// The consent key of a stored open mandate's SD-JWT (the core's), for the mandates
    /// imported before their key was kept (migration 0018, PostgreSQL 0016); `None` for
    /// one that no longer reads.
    pub consent_of: fn(&str) -> Option<String>,
}

/// What an import of an open mandate did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ap2Import {
    /// The mandate is stored: the open mandate is in force here (bound now, or already).
    Stored {
        /// What the open mandate had spent under the mandates that carried it before
        /// (the new mandate's spend starts from it); `None` on its first import.
        spent_before: Option<SpendToDate>,
        /// The other agents whose mandate carrying it was in force, now superseded.
        superseded: Vec<AgentId>,
    },
    /// Nothing is stored: the open mandate is in force in another organization or
    /// environment (which one is not said: another tenant's business).
    InForceElsewhere,
    /// Nothing is stored: mandates of these agents, whose locks the caller does not hold,
    /// carry the open mandate and are in force. Lock them too and import again.
    Lock(Vec<AgentId>),
}

/// AP2's stored data. The operator's changes are in [`super::AdminStore`].
pub trait Ap2Store {
    /// The issuer keys the organization trusts, oldest first.
    fn ap2_issuers(&self, org_id: &str) -> StoreFuture<'_, Vec<Ap2Issuer>>;

    /// Stores `import.mandate` as its agent's current one (as
    /// `MandateStore::insert_mandate`) with the AP2 open mandate it was imported from, in
    /// one transaction, if that open mandate (named by its consent key) is in force in this
    /// organization and environment: bound here by this import when it is bound nowhere
    /// yet. Bound elsewhere, nothing is stored ([`Ap2Import::InForceElsewhere`]). Two
    /// imports of one open mandate into two places at once: one binds it, the other finds
    /// it bound (the key is unique). Here, the mandates that carried it before are
    /// superseded where in force (their agents changed) and what they spent is kept with
    /// the new one.
    fn insert_ap2_mandate(
        &self,
        org_id: &str,
        env: Env,
        import: &NewImport,
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
        StorageError::Corrupt(format!(
            "ap2_consents has no row for {consent_key} once bound"
        ))
    })
}

/// A mandate that carries an open mandate.
struct Carrier {
    id: MandateId,
    agent: AgentId,
    active: bool,
    created_ms: i64,
}

/// Keeps the consent key of the mandates of `s` imported before keys were kept, as
/// `consent_of` reads it from their SD-JWT (their digest when it no longer reads).
async fn key_unkeyed<T: Tx>(
    tx: &mut T,
    s: Scope<'_>,
    consent_of: fn(&str) -> Option<String>,
) -> Result<()> {
    let read = |r: &dyn Columns| Ok((r.text(0)?, r.text(1)?, r.text(2)?));
    let unkeyed = tx
        .query(Ap2Sql::Unkeyed.into(), &[s.org.into(), s.env.into()], read)
        .await?;
    for (id, open_mandate, digest) in unkeyed {
        let key = consent_of(&open_mandate).unwrap_or(digest);
        let params = [s.org.into(), s.env.into(), id.as_str().into(), key.into()];
        tx.execute(Ap2Sql::SetConsent.into(), &params).await?;
    }
    Ok(())
}

/// The mandates of `s` carrying the open mandate of `consent_key`, oldest first, their
/// rows held.
async fn carriers<T: Tx>(tx: &mut T, s: Scope<'_>, consent_key: &str) -> Result<Vec<Carrier>> {
    let read = |r: &dyn Columns| {
        Ok(Carrier {
            id: id_of(&r.text(0)?, "mandate", MandateId::parse)?,
            agent: id_of(&r.text(1)?, "agent", AgentId::parse)?,
            active: r.text(2)? == "active",
            created_ms: r.int(3)?,
        })
    };
    let params = [s.org.into(), s.env.into(), consent_key.into()];
    let stmt = Ap2Sql::Carriers { lock: Lock::Wait };
    tx.query(stmt.into(), &params, read).await
}

/// Marks `agents` changed, in the order of their keys (`agents.seq`), the order the
/// decision writer takes their rows in: a decision under way on one of them is committed
/// (or refused) before anything below reads what it spent.
async fn change_in_key_order<T: Tx>(tx: &mut T, s: Scope<'_>, agents: &[&AgentId]) -> Result<()> {
    let mut keyed = Vec::with_capacity(agents.len());
    for agent in agents {
        let params = [s.org.into(), s.env.into(), agent.as_str().into()];
        let seq = first(
            tx.query(AgentSql::Get.into(), &params, |r| r.int(0))
                .await?,
        );
        keyed.push((seq.unwrap_or(i64::MAX), *agent));
    }
    keyed.sort();
    keyed.dedup();
    for (_, agent) in keyed {
        agents::changed(tx, s, agent.as_str()).await?;
    }
    Ok(())
}

/// What `carriers` allowed, summed as the engine sums an agent's spend (each allow at its
/// time: the day, week and month it fell in, and the whole life).
async fn spent<T: Tx>(tx: &mut T, s: Scope<'_>, carriers: &[Carrier]) -> Result<SpendToDate> {
    let mut allows = Vec::new();
    for c in carriers {
        allows.extend(tx.allowed_since(s, &c.agent, &c.id, c.created_ms).await?);
    }
    allows.sort_by_key(|(_, at)| *at);
    let mut spend = SpendToDate::default();
    for (amount, at) in allows {
        spend.add(amount, from_ms(at));
    }
    Ok(spend)
}

/// Stores an import in `s` (bound here already): [`Ap2Store::insert_ap2_mandate`].
async fn store_import<T: Tx>(tx: &mut T, s: Scope<'_>, new: &NewImport) -> Result<Ap2Import> {
    tx.execute(MandateSql::Turn.into(), &[s.org.into()]).await?;
    key_unkeyed(tx, s, new.consent_of).await?;
    let carriers = carriers(tx, s, &new.consent_key).await?;
    let agent = &new.mandate.terms.agent;
    let mut elsewhere: Vec<AgentId> = carriers
        .iter()
        .filter(|c| c.active && &c.agent != agent)
        .map(|c| c.agent.clone())
        .collect();
    elsewhere.sort();
    elsewhere.dedup();
    let unlocked: Vec<AgentId> = elsewhere
        .iter()
        .filter(|a| !new.locked.contains(a))
        .cloned()
        .collect();
    if !unlocked.is_empty() {
        return Ok(Ap2Import::Lock(unlocked));
    }
    // Mandates' rows first, then agents' (as a revocation takes them).
    for c in carriers.iter().filter(|c| c.active && &c.agent != agent) {
        let params = [s.org.into(), s.env.into(), c.id.as_str().into()];
        tx.execute(Ap2Sql::SupersedeCarrier.into(), &params).await?;
    }
    let params = [s.org.into(), s.env.into(), agent.as_str().into()];
    tx.execute(MandateSql::Supersede.into(), &params).await?;
    let changed: Vec<&AgentId> = elsewhere.iter().chain([agent]).collect();
    change_in_key_order(tx, s, &changed).await?;
    let spent_before = if carriers.is_empty() {
        None
    } else {
        Some(spent(tx, s, &carriers).await?)
    };
    mandates::insert(tx, s, &new.mandate).await?;
    let spent_json = spent_before
        .as_ref()
        .map(serde_json::to_string)
        .transpose()
        .map_err(|e| StorageError::Corrupt(format!("encoding what an AP2 mandate spent: {e}")))?;
    let params = [
        s.org.into(),
        s.env.into(),
        new.mandate.id.as_str().into(),
        new.source.open_mandate.as_str().into(),
        new.source.digest.as_str().into(),
        new.consent_key.as_str().into(),
        spent_json.into(),
    ];
    tx.execute(Ap2Sql::SetSource.into(), &params).await?;
    Ok(Ap2Import::Stored {
        spent_before,
        superseded: elsewhere,
    })
}

/// What an open mandate had spent before mandate `id` of `s` was imported from it (`None`
/// for its first import, a mandate of plain terms, or no such mandate).
pub(super) async fn spent_before<T: Tx>(
    tx: &mut T,
    s: Scope<'_>,
    id: &MandateId,
) -> Result<Option<SpendToDate>> {
    let params = [s.org.into(), s.env.into(), id.as_str().into()];
    let rows = tx
        .query(Ap2Sql::SpentBefore.into(), &params, |r| r.opt_text(0))
        .await?;
    first(rows)
        .flatten()
        .as_deref()
        .map(decode_spent)
        .transpose()
}

/// A stored `ap2_spent`.
fn decode_spent(text: &str) -> Result<SpendToDate> {
    serde_json::from_str(text)
        .map_err(|e| StorageError::Corrupt(format!("an AP2 mandate's spend before: {e}")))
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

/// A mandate's id and its source, from the columns id, open mandate, digest, spent before.
fn read_source(r: &dyn Columns) -> Result<(MandateId, Option<Ap2Source>)> {
    let id = id_of(&r.text(0)?, "mandate", MandateId::parse)?;
    let source = match (r.opt_text(1)?, r.opt_text(2)?) {
        (Some(open_mandate), Some(digest)) => Some(Ap2Source {
            open_mandate,
            digest,
            spent_before: r.opt_text(3)?.as_deref().map(decode_spent).transpose()?,
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
        import: &NewImport,
    ) -> StoreFuture<'_, Ap2Import> {
        let args = (org_id.to_owned(), env, import.clone());
        Box::pin(self.run(Access::Write, args, |tx, (org, env, new)| {
            Box::pin(async move {
                let s = Scope::new(org, *env);
                let at_ms = ms(new.mandate.created_at);
                let (bound_org, bound_env) = bind_consent(tx, s, &new.consent_key, at_ms).await?;
                if bound_org != s.org || bound_env != *env {
                    return Ok(Ap2Import::InForceElsewhere);
                }
                store_import(tx, s, new).await
            })
        }))
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
