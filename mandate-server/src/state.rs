//! The shared application state handed to every handler.

use std::sync::{Arc, RwLock};

use mandate_core::cursor::CursorKey;
use mandate_core::jws::Signer;
use mandate_core::policy::Mode;

use crate::clock::Clock;
use crate::decision::agents::AgentStates;
use crate::decision::service::Decider;
use crate::http::cache::{KeyCache, ModeCache};
use crate::http::error::ApiError;
use crate::model::{Caller, Env};
use crate::settlement::SettlementProvider;
use crate::signing::KeyRing;
use crate::storage::Store;

/// Everything a handler may need: one shared [`Shared`], so that the clone every layer and
/// extractor makes per request is one reference count, not one per field.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl AppState {
    /// Shares `shared` with every handler.
    pub fn new(shared: Shared) -> Self {
        Self(Arc::new(shared))
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// The fields of [`AppState`].
pub struct Shared {
    /// Persistence: every read and write of stored data goes through it.
    pub store: Arc<dyn Store>,
    /// The injected clock.
    pub clock: Arc<dyn Clock>,
    /// Signing keys and the JWK Set.
    pub keys: Arc<RwLock<KeyRing>>,
    /// Signs and opens pagination cursors.
    pub cursors: Arc<CursorKey>,
    /// `iss` of every token, and where the JWK Set is published (no trailing slash).
    pub verdicts_url: String,
    /// Where the contract is published (no trailing slash); every 401 names it.
    pub docs_url: String,
    /// Per-agent locks and state.
    pub agents: AgentStates,
    /// Callers by key hash, each with its key's request-rate window.
    pub callers: KeyCache,
    /// Enforcement modes.
    pub modes: ModeCache,
    /// The live settlement adapter, chosen by the operator.
    pub settlement: Arc<dyn SettlementProvider>,
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

    /// The mode in force for (`org_id`, `env`): from memory, loaded on first use.
    pub async fn mode(&self, org_id: &str, env: Env) -> Result<Mode, ApiError> {
        if let Some(mode) = self.modes.get(org_id, env) {
            return Ok(mode);
        }
        let (mode, _) = self.store.mode(org_id, env).await?;
        Ok(self.modes.fill(org_id, env, mode))
    }

    /// The decision service for `caller`'s organization and environment, in `mode`, at
    /// `now`, with the environment's current signer.
    pub fn decider<'a>(
        &'a self,
        caller: &'a Caller,
        mode: Mode,
        now: time::OffsetDateTime,
    ) -> Result<Decider<'a>, ApiError> {
        Ok(Decider {
            store: self.store.as_ref(),
            agents: &self.agents,
            signer: self.signer(caller.env)?,
            issuer: &self.verdicts_url,
            org: &caller.org_id,
            env: caller.env,
            policy_version: &caller.policy_version,
            mode,
            now,
        })
    }

    /// The current time.
    pub fn now(&self) -> time::OffsetDateTime {
        self.clock.now()
    }
}
