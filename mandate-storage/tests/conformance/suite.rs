//! The contracts of the storage boundary, each an async function over a fresh store. They
//! go through the traits only, never through an engine's SQL: what they assert is what
//! the layers above rely on, whatever the engine. What those layers would hand the store
//! (a signed decision, the review it opens, an escrow's step, a delivery's outcome, what a
//! timer or a revocation writes) is made here by hand ([`made`]).
//!
//! Categories: keys and organizations, agents, modes, mandates, webhooks and deliveries,
//! the event log's order, idempotency claims, decisions and their log, single-use
//! credentials, reviews and timers, escrows, health and peers; atomicity (a refused or
//! failing change writes nothing) and claims under concurrency run through all of them.

mod decisions;
mod escrows;
mod log;
mod made;
mod resources;
mod reviews;
mod webhooks;

pub use decisions::*;
pub use escrows::*;
pub use log::*;
pub use resources::*;
pub use reviews::*;
pub use webhooks::*;

use std::any::Any;
use std::sync::Arc;

use futures_util::future::join_all;
use mandate_core::{
    AgentId, Amount, DecisionId, Mandate, MandateDraft, MandateId, MandateStatus, Mode, Verdict,
};
use mandate_protocol::{
    escrow::EscrowAction, escrow::HistoryEntry, id::EscrowId, id::ReviewId, id::WebhookId,
    idempotency::NextAction, review::Review, review::ReviewStatus,
};
use mandate_storage::Store;
use mandate_storage::admin::{NewOrg, SecretChange};
use mandate_storage::clock::{ms, random16};
use mandate_storage::deciding::{NewDecision, Recorded, Resolution};
use mandate_storage::decisions::Filters as DecisionFilters;
use mandate_storage::deliveries::{Attempt, DeliveryChange, DeliveryState};
use mandate_storage::events::{EventRow, NewEvent};
use mandate_storage::idempotency::{IdempotencyRecord, Sealed};
use mandate_storage::keys::CallerRow;
use mandate_storage::mandates::{Filters as MandateFilters, Revocation};
use mandate_storage::model::decision::Decision;
use mandate_storage::model::{Env, KeyClass};
use mandate_storage::timers::{DueItem, ReviewExpiry};
use serde_json::{Value, json};
use time::macros::datetime;
use time::{Duration, OffsetDateTime};

use made::{decided, expiring_event, review_expiry, revocation, stored};

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
            the_log_keeps_its_entries_with_its_strips_and_never_rewrites_them,
            many_logs_are_read_and_written_as_each_alone,
            a_quiet_log_waits_with_only_its_head_read,
            a_failing_decision_writes_nothing,
            a_decision_on_a_stale_agent_is_given_back_unstored,
            a_single_use_credential_is_accepted_once_even_at_once,
            a_decision_not_stored_leaves_its_credential_unused,
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

/// The stored decision `id` of the sandbox.
async fn decision(store: &dyn Store, id: &DecisionId) -> Decision {
    store
        .decision(ORG, Env::Sandbox, None, id)
        .await
        .unwrap()
        .expect("the decision is stored")
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
