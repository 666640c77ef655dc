//! Small server-side vocabulary shared by storage and handlers: environments, key classes,
//! the authenticated caller, and the stored decision with its API shape ([`decision`]).

pub mod decision;
pub mod leaves;
pub mod news;

use std::sync::Arc;

use mandate_core::AgentId;

/// An organization's environment. Sandbox keys act on the sandbox only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Env {
    /// Test environment; starts in enforce.
    Sandbox,
    /// Production; starts in observe.
    Live,
}

impl Env {
    /// The stored and printed form.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sandbox => "sandbox",
            Self::Live => "live",
        }
    }

    /// Parses the stored form.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "sandbox" => Some(Self::Sandbox),
            "live" => Some(Self::Live),
            _ => None,
        }
    }
}

/// The two key classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyClass {
    /// `sk_sandbox_…`, `sk_live_…`.
    Org,
    /// `ak_sandbox_…`, `ak_live_…`.
    Agent,
}

impl KeyClass {
    /// The stored form.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Org => "org",
            Self::Agent => "agent",
        }
    }

    /// The prefix of a key of this class in `env`.
    pub fn key_prefix(self, env: Env) -> &'static str {
        match (self, env) {
            (Self::Org, Env::Sandbox) => "sk_sandbox_",
            (Self::Org, Env::Live) => "sk_live_",
            (Self::Agent, Env::Sandbox) => "ak_sandbox_",
            (Self::Agent, Env::Live) => "ak_live_",
        }
    }
}

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
