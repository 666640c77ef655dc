//! Agents at the boundary: what a handler stores and reads about them.

use mandate_core::id::AgentId;

use super::StoreFuture;
use crate::model::Env;

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
