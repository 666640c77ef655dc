//! Agents at the boundary: what a handler stores and reads about them, the statements
//! that do it, and the use cases, written once for every engine.

use mandate_core::AgentId;

use super::engine::{Access, Columns, Engine, Result, Scope, Tx, first};
use super::keys::{self, NewKey};
use super::statements::AgentSql;
use super::{StorageError, StoreFuture};
use crate::model::{Env, KeyClass};

/// A stored agent.
#[derive(Debug, Clone)]
pub struct AgentRow {
    /// List position.
    pub seq: i64,
    /// `agt_<name>`.
    pub id: String,
    /// Creation time, unix ms.
    pub created_ms: i64,
}

/// Agents and their keys.
pub trait AgentStore {
    /// Registers agent `id` with its key (by hash, with its binding to the key-encryption
    /// key), in one transaction. `None` when the
    /// name is taken in this organization and environment (nothing is written then).
    fn create_agent(
        &self,
        org_id: &str,
        env: Env,
        id: &AgentId,
        key_hash: [u8; 32],
        key_binding: Option<Vec<u8>>,
        now_ms: i64,
    ) -> StoreFuture<'_, Option<AgentRow>>;

    /// One agent of this organization and environment.
    fn agent(&self, org_id: &str, env: Env, id: &AgentId) -> StoreFuture<'_, Option<AgentRow>>;

    /// A page of agents, newest first, strictly before seq `before`, at most `limit`;
    /// with `only`, that agent alone.
    fn agents_page(
        &self,
        org_id: &str,
        env: Env,
        only: Option<&AgentId>,
        before: i64,
        limit: i64,
    ) -> StoreFuture<'_, Vec<AgentRow>>;
}

/// The columns of an agent's reads.
pub const COLUMNS: &str = "seq, id, created_ms";

fn read(r: &dyn Columns) -> Result<AgentRow> {
    Ok(AgentRow {
        seq: r.int(0)?,
        id: r.text(1)?,
        created_ms: r.int(2)?,
    })
}

/// One agent of `scope`.
async fn get<T: Tx>(tx: &mut T, s: Scope<'_>, id: &AgentId) -> Result<Option<AgentRow>> {
    let params = [s.org.into(), s.env.into(), id.as_str().into()];
    Ok(first(tx.query(AgentSql::Get.into(), &params, read).await?))
}

/// Marks a change `agent`'s next decision depends on ([`AgentSql::Changed`]).
pub(super) async fn changed<T: Tx>(tx: &mut T, s: Scope<'_>, agent: &str) -> Result<()> {
    let params = [s.org.into(), s.env.into(), agent.into()];
    tx.execute(AgentSql::Changed.into(), &params).await?;
    Ok(())
}

/// Registers an agent with its key; `None` when its name is taken (nothing written).
async fn create<T: Tx>(
    tx: &mut T,
    s: Scope<'_>,
    id: &AgentId,
    key: NewKey<'_>,
    now_ms: i64,
) -> Result<Option<AgentRow>> {
    let params = [
        s.org.into(),
        s.env.into(),
        id.as_str().into(),
        now_ms.into(),
    ];
    if tx.execute(AgentSql::Insert.into(), &params).await? == 0 {
        return Ok(None);
    }
    keys::insert(tx, s, key, KeyClass::Agent, Some(id.as_str()), now_ms).await?;
    let row = get(tx, s, id).await?;
    row.map(Some)
        .ok_or_else(|| StorageError::Corrupt(format!("agent {id} vanished after insert")))
}

impl<E: Engine> AgentStore for E {
    fn create_agent(
        &self,
        org_id: &str,
        env: Env,
        id: &AgentId,
        key_hash: [u8; 32],
        key_binding: Option<Vec<u8>>,
        now_ms: i64,
    ) -> StoreFuture<'_, Option<AgentRow>> {
        let args = (org_id.to_owned(), env, id.clone(), key_hash, key_binding);
        Box::pin(self.run(
            Access::Write,
            args,
            move |tx, (org, env, id, hash, binding)| {
                let key = NewKey {
                    hash,
                    binding: binding.as_deref(),
                };
                Box::pin(create(tx, Scope::new(org, *env), id, key, now_ms))
            },
        ))
    }

    fn agent(&self, org_id: &str, env: Env, id: &AgentId) -> StoreFuture<'_, Option<AgentRow>> {
        let args = (org_id.to_owned(), env, id.clone());
        Box::pin(self.run(Access::Read, args, |tx, (org, env, id)| {
            Box::pin(get(tx, Scope::new(org, *env), id))
        }))
    }

    fn agents_page(
        &self,
        org_id: &str,
        env: Env,
        only: Option<&AgentId>,
        before: i64,
        limit: i64,
    ) -> StoreFuture<'_, Vec<AgentRow>> {
        let args = (org_id.to_owned(), env, only.cloned());
        Box::pin(self.run(Access::Read, args, move |tx, (org, env, only)| {
            Box::pin(async move {
                let only = only.as_ref().map(AgentId::as_str);
                let params = [
                    org.into(),
                    (*env).into(),
                    only.into(),
                    before.into(),
                    limit.into(),
                ];
                let page = AgentSql::Page {
                    only: only.is_some(),
                };
                tx.query(page.into(), &params, read).await
            })
        }))
    }
}
