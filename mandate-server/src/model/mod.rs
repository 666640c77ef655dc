//! Small server-side vocabulary: the authenticated caller; environments, key classes and
//! the stored decision (defined with storage, in `mandate_storage::model`); and what the
//! decision service hands the workers ([`leaves`], [`news`]).

use std::sync::Arc;

use mandate_core::AgentId;
use mandate_storage::keys::CallerRow;
pub use mandate_storage::model::{Env, KeyClass, decision};

pub mod leaves;
pub mod news;

/// Who is calling: resolved from the bearer key by the auth middleware.
#[derive(Clone)]
pub struct Caller {
    /// SHA-256 of the key: scopes idempotency keys and rate limits.
    pub key_hash: [u8; 32],
    /// The organization.
    pub org_id: Arc<str>,
    /// The environment the key acts on.
    pub env: Env,
    /// The agent, for an agent key.
    pub agent: Option<AgentId>,
    /// Requests per second allowed for this key.
    pub rate_per_sec: u32,
    /// The organization's policy version, stamped on decisions.
    pub policy_version: Arc<str>,
}

/// Everything but the key's hash, which has no place in a log line.
impl std::fmt::Debug for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caller")
            .field("org_id", &self.org_id)
            .field("env", &self.env)
            .field("agent", &self.agent)
            .field("rate_per_sec", &self.rate_per_sec)
            .field("policy_version", &self.policy_version)
            .finish_non_exhaustive()
    }
}

/// An operation called with the other class of key (a 403).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WrongKeyClass {
    /// An agent key called an organization's operation.
    #[error(
        "this operation needs an organization key (sk_…); agent keys may request authorizations and read their own objects"
    )]
    NeedsOrgKey,
    /// An organization key asked for an authorization.
    #[error(
        "this operation needs an agent key (ak_…); organization keys cannot request authorizations"
    )]
    NeedsAgentKey,
}

impl Caller {
    /// Fails with 403 unless this is an organization key.
    pub fn require_org(&self) -> Result<(), WrongKeyClass> {
        match self.agent {
            None => Ok(()),
            Some(_) => Err(WrongKeyClass::NeedsOrgKey),
        }
    }

    /// The agent of an agent key, or 403 for an organization key.
    pub fn require_agent(&self) -> Result<&AgentId, WrongKeyClass> {
        self.agent.as_ref().ok_or(WrongKeyClass::NeedsAgentKey)
    }

    /// The scope a cursor is bound to: the key class and whose view it is.
    pub fn cursor_scope(&self) -> String {
        match &self.agent {
            None => format!("org:{}:{}", self.org_id, self.env.as_str()),
            Some(agent) => format!("agent:{}:{}:{}", self.org_id, self.env.as_str(), agent),
        }
    }
}

/// The caller an API key's row makes (an unrevoked key's: see `CallerRow::of_key`).
impl From<CallerRow> for Caller {
    fn from(row: CallerRow) -> Self {
        Self {
            key_hash: row.key_hash,
            org_id: row.org_id,
            env: row.env,
            agent: row.agent,
            rate_per_sec: row.rate_per_sec,
            policy_version: row.policy_version,
        }
    }
}
