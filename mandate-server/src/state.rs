//! The shared application state handed to every handler.

use std::sync::{Arc, RwLock};

use mandate_core::cursor::CursorKey;
use mandate_core::jws::Signer;

use crate::agent_state::AgentStates;
use crate::clock::Clock;
use crate::error::ApiError;
use crate::model::Env;
use crate::rate_limit::RateLimiter;
use crate::signing::KeyRing;
use crate::storage::Db;

/// Everything a handler may need.
#[derive(Clone)]
pub struct AppState {
    /// The database.
    pub db: Db,
    /// The injected clock.
    pub clock: Arc<dyn Clock>,
    /// Signing keys and the JWK Set.
    pub keys: Arc<RwLock<KeyRing>>,
    /// Signs and opens pagination cursors.
    pub cursors: Arc<CursorKey>,
    /// `iss` of every token, and where the JWK Set is published.
    pub verdicts_url: String,
    /// Where the contract is published.
    pub docs_url: String,
    /// Per-agent locks and state.
    pub agents: AgentStates,
    /// Per-key request rates.
    pub rates: RateLimiter,
}

impl AppState {
    /// The current signer of `env`.
    pub fn signer(&self, env: Env) -> Result<Arc<dyn Signer>, ApiError> {
        self.keys
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .signer(env)
            .ok_or_else(|| ApiError::Server(format!("no signing key for {}", env.as_str())))
    }

    /// The current time.
    pub fn now(&self) -> time::OffsetDateTime {
        self.clock.now()
    }
}
