//! The shared application state handed to every handler, and what each layer below is
//! given of it: the HTTP layers an [`Authenticator`], [`Paging`] or [`Idempotency`], the
//! services their own narrow context ([`Mandates`], [`Authorizations`], a store), the
//! decision service a [`Deciding`]. The state imports the layers it holds; none of them
//! imports the state.

use std::sync::{Arc, RwLock};

use mandate_core::{AgentId, CursorKey, Signer};

use crate::clock::Clock;
use crate::decision::agents::{AgentSlotHandle, AgentStates};
use crate::decision::modes::ModeCache;
use crate::decision::service::Deciding;
use crate::http::auth::{AgentSlots, Authenticator};
use crate::http::cache::KeyCache;
use crate::http::cors::Cors;
use crate::http::error::ApiError;
use crate::http::idempotency::Idempotency;
use crate::http::list::Paging;
use crate::model::Env;
use crate::services::authorizations::Authorizations;
use crate::services::mandates::Mandates;
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
    /// The API host's URL as a browser reaches it (no trailing slash): the review console
    /// calls it.
    pub api_url: String,
    /// The origins allowed to call the API host from a browser (the console's).
    pub cors: Cors,
    /// Per-agent locks and state.
    pub agents: AgentStates,
    /// Callers by key hash, each with its key's request-rate window.
    pub callers: KeyCache<AgentSlotHandle>,
    /// Binds API key rows to the key-encryption key, and checks them (none without one).
    pub api_keys: crate::signing::api_keys::KeyBinder,
    /// Enforcement modes.
    pub modes: ModeCache,
    /// Committed decisions' leaf hashes, shared with the decision log's worker.
    pub leaves: Arc<crate::model::leaves::Answered>,
    /// What this process stored that its workers act on at once.
    pub news: Arc<crate::model::news::News>,
    /// `/readyz`'s probes, shared by concurrent requests.
    pub readiness: Readiness,
    /// The live settlement adapter, chosen by the operator.
    pub settlement: Arc<dyn SettlementProvider>,
    /// The decimals of the x402 assets the operator lists (`serve --x402-asset`).
    pub x402_assets: mandate_protocol::x402::ListedAssets,
    /// Every organization's decision log is readable on the public host without a key.
    pub public_logs: bool,
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

    /// What every decision is made with (`POST /v1/authorizations`, an approval).
    pub fn deciding(&self) -> Deciding<'_> {
        Deciding {
            store: self.store.as_ref(),
            agents: &self.agents,
            leaves: &self.leaves,
            news: &self.news,
            modes: &self.modes,
            keys: &self.keys,
            issuer: &self.verdicts_url,
        }
    }

    /// The authorization use case, at this moment.
    pub fn authorizations(&self) -> Authorizations<'_> {
        Authorizations {
            store: self.store.as_ref(),
            deciding: self.deciding(),
            x402_assets: &self.x402_assets,
            now: self.now(),
        }
    }

    /// The current time.
    pub fn now(&self) -> time::OffsetDateTime {
        self.clock.now()
    }

    /// What the authentication layer reads.
    pub fn authenticator(&self) -> Authenticator<'_, AgentStates> {
        Authenticator {
            store: self.store.as_ref(),
            clock: self.clock.as_ref(),
            callers: &self.callers,
            api_keys: &self.api_keys,
            verdicts_url: &self.verdicts_url,
            docs_url: &self.docs_url,
            agents: &self.agents,
        }
    }

    /// What the idempotency layer reads and writes.
    pub fn idempotency(&self) -> Idempotency {
        Idempotency {
            store: self.store.clone(),
            clock: self.clock.clone(),
        }
    }

    /// What a list's paging reads, now.
    pub fn paging(&self) -> Paging<'_> {
        Paging {
            cursors: &self.cursors,
            now: self.now(),
        }
    }

    /// The mandate service.
    pub fn mandates(&self) -> Mandates<'_> {
        Mandates {
            store: self.store.as_ref(),
            agents: &self.agents,
        }
    }
}

/// An agent key's cached slot is its agent's lock of the decision service.
impl AgentSlots for AgentStates {
    type Slot = AgentSlotHandle;

    fn slot_of(&self, org_id: &Arc<str>, env: Env, agent: &AgentId) -> AgentSlotHandle {
        self.handle(org_id, env, agent)
    }
}

/// Readiness probes shared by concurrent `/readyz` requests: a request takes the result of
/// a probe that started after it arrived, or runs one itself; one probe runs at a time.
/// Each answer is as fresh as if the request had probed alone, while a flood of anonymous
/// requests makes at most one probe write at a time instead of one each.
#[derive(Default)]
pub struct Readiness {
    last: tokio::sync::Mutex<Option<(tokio::time::Instant, Option<String>)>>,
}

impl Readiness {
    /// Why the server is not ready (`None`: ready), from `probe` run now or from a probe
    /// that started after this call did.
    pub async fn check<F>(&self, probe: F) -> Option<String>
    where
        F: std::future::Future<Output = Option<String>>,
    {
        let arrived = tokio::time::Instant::now();
        let mut last = self.last.lock().await;
        if let Some((started, found)) = &*last
            && *started >= arrived
        {
            return found.clone();
        }
        let started = tokio::time::Instant::now();
        let found = probe.await;
        *last = Some((started, found.clone()));
        found
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use super::Readiness;

    /// Concurrent checks share probes (far fewer probes than checks), each check gets the
    /// result of a probe that started after it arrived, and a check that comes after the
    /// last probe ended runs a fresh one.
    #[tokio::test]
    async fn concurrent_checks_share_probes_that_started_after_they_arrived() {
        let readiness = Arc::new(Readiness::default());
        let starts = Arc::new(Mutex::new(Vec::new()));
        let mut checks = Vec::new();
        for _ in 0..50 {
            let (readiness, starts) = (readiness.clone(), starts.clone());
            checks.push(tokio::spawn(async move {
                let arrived = tokio::time::Instant::now();
                let found = readiness
                    .check(async {
                        let n = {
                            let mut starts = starts.lock().unwrap();
                            starts.push(tokio::time::Instant::now());
                            starts.len() - 1
                        };
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        Some(n.to_string())
                    })
                    .await;
                (arrived, found.unwrap().parse::<usize>().unwrap())
            }));
        }
        let mut answers = Vec::new();
        for check in checks {
            answers.push(check.await.unwrap());
        }
        let starts = starts.lock().unwrap().clone();
        assert!(
            (1..10).contains(&starts.len()),
            "{} probes for 50 checks",
            starts.len()
        );
        for (arrived, probe) in answers {
            assert!(
                starts[probe] >= arrived,
                "a check took a probe that began before it"
            );
        }
        // A later check does not reuse an earlier probe.
        let again = readiness.check(async { Some("fresh".to_owned()) }).await;
        assert_eq!(again.as_deref(), Some("fresh"));
    }
}
