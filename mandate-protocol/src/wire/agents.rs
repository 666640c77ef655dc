//! Agents: `POST /v1/agents`, `GET /v1/agents`, `GET /v1/agents/{id}`.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::id::AgentId;
use crate::names::AgentName;

/// An agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Agent {
    /// When it was registered.
    #[serde(with = "crate::timefmt")]
    pub created_at: OffsetDateTime,
    /// `agt_<name>`.
    pub id: AgentId,
    /// Its name, unique in its organization.
    pub name: AgentName,
}

/// The answer to `POST /v1/agents`: the agent and its key, shown this once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatedAgent {
    /// The agent's API key (`ak_…`); never shown again.
    pub agent_key: String,
    /// When it was registered.
    #[serde(with = "crate::timefmt")]
    pub created_at: OffsetDateTime,
    /// `agt_<name>`.
    pub id: AgentId,
    /// Its name.
    pub name: AgentName,
}

impl CreatedAgent {
    /// The agent with its one-time key.
    pub fn new(agent: Agent, agent_key: String) -> Self {
        Self {
            agent_key,
            created_at: agent.created_at,
            id: agent.id,
            name: agent.name,
        }
    }
}

/// The body of `POST /v1/agents`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateAgent {
    /// The agent's name; its id is `agt_<name>`.
    pub name: AgentName,
}
