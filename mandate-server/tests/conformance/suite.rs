//! The contracts of the storage boundary, each an async function over a fresh store. They
//! go through the traits only (and, for decisions, through the real decision service that
//! calls them), never through an engine's SQL: what they assert is what the server relies
//! on, whatever the engine.
//!
//! Categories: keys and organizations, agents, modes, mandates, webhooks and deliveries,
//! the event log's order, idempotency claims, decisions and their log, reviews and timers,
//! escrows, health and peers; atomicity (a refused or failing change writes nothing) and
//! claims under concurrency run through all of them.

mod decisions;
mod escrows;
mod resources;
mod webhooks;

pub use decisions::*;
pub use escrows::*;
pub use resources::*;
pub use webhooks::*;

use std::any::Any;
use std::sync::Arc;

use futures_util::future::join_all;
use mandate_core::{
    AgentId, Amount, AuthorizationRequest, Category, Currency, DecisionId, Mandate, MandateDraft,
    MandateId, MandateStatus, Mode, Nonce, Recipient, Verdict,
};
use mandate_protocol::{
    delivery::NextStep, escrow::EscrowAction, escrow::HistoryEntry, funding::FundingRequest,
    id::EscrowId, id::WebhookId, idempotency::NextAction, review::Review, review::ReviewStatus,
};
use mandate_server::clock::{ms, random16};
use mandate_server::decision::agents::AgentStates;
use mandate_server::decision::mandates::revocation;
use mandate_server::decision::modes::ModeCache;
use mandate_server::decision::service::{Credential, Decider, DecisionError, Input};
use mandate_server::model::decision::Decision;
use mandate_server::model::{Env, KeyClass};
use mandate_server::signing::fast::AwsLcSigner;
use mandate_server::storage::Store;
use mandate_server::storage::admin::{NewOrg, SecretChange};
use mandate_server::storage::deciding::{NewDecision, Recorded, Resolution};
use mandate_server::storage::decisions::Filters as DecisionFilters;
use mandate_server::storage::deliveries::{Attempt, DeliveryState};
use mandate_server::storage::events::{EventRow, NewEvent};
use mandate_server::storage::idempotency::{IdempotencyRecord, Sealed};
use mandate_server::storage::keys::CallerRow;
use mandate_server::storage::mandates::{Filters as MandateFilters, Revocation};
use mandate_server::storage::timers::{DueItem, ReviewExpiry};
use mandate_server::workers::delivery::{attempted, given_up};
use mandate_server::workers::timers::{expiring_event, review_expiry};
use serde_json::{Value, json};
use time::macros::datetime;
use time::{Duration, OffsetDateTime};

/// What an engine can do beyond the common contract; tests of a capability an engine lacks
/// are skipped for it.
#[derive(Debug, Clone, Copy)]
pub struct Capabilities {
    /// Several server processes share the database: a decision is stored only if the agent
    /// did not change since its state was read (`Recorded::Changed` otherwise).
    pub shared_by_processes: bool,
}

/// A fresh, empty, migrated store, and what must live as long as it (its file, its
/// database).
pub struct Fresh {
    /// The store under test.
    pub store: Arc<dyn Store>,
    /// Dropped after the test: removes what the store was made on (held, never read).
    #[allow(dead_code)]
    pub keep: Box<dyn Any + Send>,
    /// What the engine can do.
    pub capabilities: Capabilities,
}

/// Every contract of the suite, run against the engine whose fresh store `$fresh()` makes
/// (an async fn returning `Option<Fresh>`: `None` skips, an engine not available here).
macro_rules! conformance {
    ($fresh:path) => {
        conformance!(@tests $fresh;
            orgs_are_unique_by_name_and_a_refused_org_writes_nothing,
            keys_are_callers_until_revoked_and_each_change_moves_the_generation,
            agents_are_unique_in_their_environment_and_listed_newest_first,
            setting_the_mode_in_force_changes_nothing,
            a_new_mandate_supersedes_the_active_one_and_revoking_fires_once,
            webhooks_ping_into_deliveries_and_deleting_ends_them,
            a_delivery_is_retried_delivered_or_given_up_as_recorded,
            the_event_log_pages_newest_first_without_gaps_or_repeats,
            an_idempotency_key_is_claimed_once_even_at_once,
            decisions_are_logged_with_their_idempotency_record_in_order,
            a_failing_decision_writes_nothing,
            a_decision_on_a_stale_agent_is_given_back_unstored,
            a_single_use_credential_is_accepted_once_even_at_once,
            a_credential_checked_under_a_replaced_mandate_is_not_accepted,
            a_review_is_resolved_once_and_expires_once,
            an_agents_withdrawal_reads_back_withdrawn_and_ends_the_review,
            a_mandates_expiring_event_fires_once,
            an_escrow_is_funded_once_and_moves_only_from_where_it_stands,
            every_escrow_step_writes_its_movement_and_a_refused_step_nothing,
            of_two_escrow_steps_at_once_exactly_one_applies,
            the_store_is_ready_and_counts_its_processes,
            signing_keys_rotate_and_their_secrets_change_only_as_read,
            org_keys_and_policy_versions_change_what_callers_carry,
            api_key_bindings_are_stored_as_given_and_replaced_only_as_read,
        );
    };
    (@tests $fresh:path; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let Some(fresh) = $fresh().await else { return };
                crate::suite::$name(&fresh).await;
            }
        )*
    };
}

const NOW: OffsetDateTime = datetime!(2026-11-22 12:00 UTC);
const ORG: &str = "org_conformance";
const ORG_KEY: [u8; 32] = [1; 32];
const LIVE_KEY: [u8; 32] = [2; 32];

async fn onboard(store: &dyn Store) -> String {
    store
        .create_org(&NewOrg {
            id: ORG.into(),
            name: "acme".into(),
            policy_prefix: "pol_2026-11-22.".into(),
            keys: vec![(ORG_KEY, Env::Sandbox, None), (LIVE_KEY, Env::Live, None)],
            now_ms: ms(NOW),
        })
        .unwrap()
        .expect("a fresh store has no organization of that name")
}

fn agent_id(name: &str) -> AgentId {
    AgentId::parse(name).unwrap()
}

async fn agent(store: &dyn Store, name: &str, key: u8) {
    store
        .create_agent(ORG, Env::Sandbox, &agent_id(name), [key; 32], None, ms(NOW))
        .await
        .unwrap()
        .expect("a fresh agent name");
}

const TERMS: &str = r#"{"agent": "AGENT", "limits": {"per_transaction": 500, "per_month": 2000, "currency": "USD"},
    "categories": ["software"], "review_above": 200, "expires": "2026-12-31"}"#;

fn mandate_of(agent: &str, terms: &str, at: OffsetDateTime) -> Mandate {
    let value: Value = serde_json::from_str(&terms.replace("AGENT", agent)).unwrap();
    Mandate {
        id: MandateId::from_random(random16()),
        terms: MandateDraft::from_json(&value).unwrap(),
        status: MandateStatus::Active,
        created_at: at,
    }
}

async fn mandate(store: &dyn Store, agent: &str) -> Mandate {
    let mandate = mandate_of(agent, TERMS, NOW);
    store
        .insert_mandate(ORG, Env::Sandbox, &mandate)
        .await
        .unwrap();
    mandate
}

/// One server process's in-memory side of the decision path.
struct Deciding {
    agents: AgentStates,
    modes: ModeCache,
    leaves: mandate_server::model::leaves::LeafHashes,
    news: mandate_server::model::news::News,
    signer: Arc<AwsLcSigner>,
    org: Arc<str>,
}

impl Deciding {
    fn new() -> Self {
        let secret = mandate_server::signing::fresh_secret().unwrap();
        Self {
            agents: AgentStates::default(),
            modes: ModeCache::default(),
            leaves: Default::default(),
            news: Default::default(),
            signer: Arc::new(AwsLcSigner::from_secret_bytes("sandbox-1", secret.expose()).unwrap()),
            org: Arc::from(ORG),
        }
    }

    /// Decides `amount` USD of software for `agent` through the real decision service, with
    /// `record` kept as the request's idempotency record; the answer's JSON.
    async fn authorize(
        &self,
        store: &dyn Store,
        agent: &str,
        amount: &str,
        record: Option<IdempotencyRecord>,
    ) -> Value {
        self.decide(store, agent, amount, record, None).await
    }

    /// As [`Deciding::authorize`], presenting the single-use credential `credential`.
    async fn present(
        &self,
        store: &dyn Store,
        agent: &str,
        amount: &str,
        credential: &str,
    ) -> Value {
        self.decide(store, agent, amount, None, Some(credential.to_owned()))
            .await
    }

    async fn decide(
        &self,
        store: &dyn Store,
        agent: &str,
        amount: &str,
        record: Option<IdempotencyRecord>,
        credential: Option<String>,
    ) -> Value {
        // A credential is checked against the agent's mandate in force, as the route does.
        let credential = match credential {
            Some(id) => {
                let (mandate, _) = store
                    .current_ap2_source(ORG, Env::Sandbox, &agent_id(agent))
                    .await
                    .unwrap()
                    .expect("the agent has a mandate");
                Some(Credential { id, mandate })
            }
            None => None,
        };
        self.try_decide(store, agent, amount, record, credential)
            .await
            .unwrap()
    }

    async fn try_decide(
        &self,
        store: &dyn Store,
        agent: &str,
        amount: &str,
        record: Option<IdempotencyRecord>,
        credential: Option<Credential>,
    ) -> Result<Value, DecisionError> {
        let (mode, _) = store.mode(ORG, Env::Sandbox).await.unwrap();
        let decider = Decider {
            store,
            agents: &self.agents,
            leaves: &self.leaves,
            news: &self.news,
            modes: &self.modes,
            signer: self.signer.clone(),
            issuer: "https://verdicts.test",
            org: &self.org,
            env: Env::Sandbox,
            policy_version: "pol_2026-11-22.1",
            mode,
            now: NOW,
        };
        let request = AuthorizationRequest {
            agent: agent_id(agent),
            amount: Amount::parse(amount).unwrap(),
            currency: Currency::parse("USD").unwrap(),
            recipient: Recipient::parse("vendor:acme").unwrap(),
            category: Category::parse("software").unwrap(),
        };
        let mut record = record;
        let body = decider
            .run(
                Input::Request {
                    request,
                    slot: None,
                    credential,
                    bindings: Default::default(),
                },
                |_| Ok(record.take()),
            )
            .await?;
        Ok(serde_json::from_slice(&body).unwrap())
    }
}

async fn decision(store: &dyn Store, answer: &Value) -> Decision {
    let id = DecisionId::parse(answer["id"].as_str().unwrap()).unwrap();
    store
        .decision(ORG, Env::Sandbox, None, &id)
        .await
        .unwrap()
        .expect("the answered decision is stored")
}

/// The whole event log of the sandbox, newest first, read page by page.
async fn all_events(store: &dyn Store, event_type: Option<&str>) -> Vec<EventRow> {
    let mut out: Vec<EventRow> = Vec::new();
    let mut before = i64::MAX;
    loop {
        let page = store
            .events_page(ORG, Env::Sandbox, event_type, before, 2)
            .await
            .unwrap();
        let Some(last) = page.last() else {
            return out;
        };
        before = last.seq;
        out.extend(page);
    }
}

async fn event_types(store: &dyn Store) -> Vec<String> {
    all_events(store, None)
        .await
        .into_iter()
        .map(|e| e.event_type)
        .collect()
}

fn record(key: &str, request_id: &str) -> IdempotencyRecord {
    IdempotencyRecord {
        org_id: ORG.into(),
        key_hash: ORG_KEY,
        idem_key: key.into(),
        status: 201,
        body: Sealed(format!("sealed {key}").into_bytes()),
        request_id: request_id.into(),
        claim: CLAIM,
    }
}

/// The claim token of the tests' idempotency claims.
const CLAIM: [u8; 16] = [7; 16];
