//! The contracts of the storage boundary, each an async function over a fresh store. They
//! go through the traits only (and, for decisions, through the real decision service that
//! calls them), never through an engine's SQL: what they assert is what the server relies
//! on, whatever the engine.
//!
//! Categories: keys and organizations, agents, modes, mandates, webhooks and deliveries,
//! the event log's order, idempotency claims, decisions and their log, reviews and timers,
//! escrows, health and peers; atomicity (a refused or failing change writes nothing) and
//! claims under concurrency run through all of them.

use std::any::Any;
use std::sync::Arc;

use futures_util::future::join_all;
use mandate_core::amount::Amount;
use mandate_core::delivery::NextStep;
use mandate_core::escrow::{EscrowAction, EscrowStatus, HistoryEntry};
use mandate_core::id::{AgentId, DecisionId, EscrowId, MandateId, Nonce, WebhookId};
use mandate_core::idempotency::NextAction;
use mandate_core::mandate::{Mandate, MandateDraft, MandateStatus};
use mandate_core::names::{Category, Currency, Recipient};
use mandate_core::policy::{AuthorizationRequest, Mode, Verdict};
use mandate_core::review::ReviewStatus;
use mandate_server::clock::{ms, random16};
use mandate_server::decision::agents::AgentStates;
use mandate_server::decision::modes::ModeCache;
use mandate_server::decision::service::{Decider, Input};
use mandate_server::model::Env;
use mandate_server::model::decision::Decision;
use mandate_server::signing::fast::AwsLcSigner;
use mandate_server::storage::Store;
use mandate_server::storage::admin::{NewOrg, SecretChange};
use mandate_server::storage::deciding::{NewDecision, Recorded, Resolution};
use mandate_server::storage::decisions::Filters as DecisionFilters;
use mandate_server::storage::deliveries::Attempt;
use mandate_server::storage::escrows::{EscrowChange, EscrowRow, MovementRow};
use mandate_server::storage::events::{EventRow, NewEvent};
use mandate_server::storage::idempotency::{IdempotencyRecord, Sealed};
use mandate_server::storage::mandates::{Filters as MandateFilters, Revocation};
use mandate_server::storage::timers::DueItem;
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
            a_review_is_resolved_once_and_expires_once,
            a_mandates_expiring_event_fires_once,
            an_escrow_is_funded_once_and_moves_only_from_where_it_stands,
            the_store_is_ready_and_counts_its_processes,
            signing_keys_rotate_and_their_secrets_change_only_as_read,
            org_keys_and_policy_versions_change_what_callers_carry,
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
            keys: vec![(ORG_KEY, Env::Sandbox), (LIVE_KEY, Env::Live)],
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
        .create_agent(ORG, Env::Sandbox, &agent_id(name), [key; 32], ms(NOW))
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
    signer: Arc<AwsLcSigner>,
    org: Arc<str>,
}

impl Deciding {
    fn new() -> Self {
        let secret = mandate_server::signing::fresh_secret().unwrap();
        Self {
            agents: AgentStates::default(),
            modes: ModeCache::default(),
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
        let (mode, _) = store.mode(ORG, Env::Sandbox).await.unwrap();
        let decider = Decider {
            store,
            agents: &self.agents,
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
                },
                |_| Ok(record.take()),
            )
            .await
            .unwrap();
        serde_json::from_slice(&body).unwrap()
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
        key_hash: ORG_KEY,
        idem_key: key.into(),
        status: 201,
        body: Sealed(format!("sealed {key}").into_bytes()),
        request_id: request_id.into(),
        claim: CLAIM,
    }
}

/// The token of every claim this suite makes (one request a key at a time, but for the
/// race, where one claim of sixteen wins).
const CLAIM: [u8; 16] = [1; 16];

pub async fn orgs_are_unique_by_name_and_a_refused_org_writes_nothing(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    let version = onboard(store).await;
    assert!(version.starts_with("pol_2026-11-22."), "{version}");
    assert_eq!(store.org_id_by_name("acme").unwrap().as_deref(), Some(ORG));
    assert_eq!(store.org_name(ORG).await.unwrap(), "acme");
    // The same name again, under another id and key: refused, and its key is not stored.
    let again = store
        .create_org(&NewOrg {
            id: "org_other".into(),
            name: "acme".into(),
            policy_prefix: "pol_2026-11-22.".into(),
            keys: vec![([9; 32], Env::Sandbox)],
            now_ms: ms(NOW),
        })
        .unwrap();
    assert_eq!(again, None);
    assert!(store.caller([9; 32]).await.unwrap().is_none());
    assert_eq!(store.org_id_by_name("nobody").unwrap(), None);
}

pub async fn keys_are_callers_until_revoked_and_each_change_moves_the_generation(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    let version = onboard(store).await;
    let caller = store.caller(ORG_KEY).await.unwrap().expect("an org key");
    assert_eq!(&*caller.org_id, ORG);
    assert_eq!(caller.env, Env::Sandbox);
    assert_eq!(caller.agent, None);
    assert_eq!(&*caller.policy_version, version.as_str());
    assert_eq!(
        store.caller(LIVE_KEY).await.unwrap().unwrap().env,
        Env::Live
    );
    assert!(store.caller([7; 32]).await.unwrap().is_none());
    // An agent key is its agent's caller.
    agent(store, "agt_keyed", 30).await;
    let agent_caller = store.caller([30; 32]).await.unwrap().unwrap();
    assert_eq!(agent_caller.agent, Some(agent_id("agt_keyed")));
    // Each operator change moves the generation that running servers reload on.
    let generation = store.key_generation().await.unwrap();
    assert!(store.set_key_rate(&ORG_KEY, 7).unwrap());
    assert!(!store.set_key_rate(&[7; 32], 7).unwrap(), "an unknown key");
    assert_eq!(
        store.caller(ORG_KEY).await.unwrap().unwrap().rate_per_sec,
        7
    );
    let after_rate = store.key_generation().await.unwrap();
    assert!(after_rate > generation);
    assert!(store.revoke_key(&ORG_KEY, ms(NOW)).unwrap());
    assert!(
        !store.revoke_key(&ORG_KEY, ms(NOW)).unwrap(),
        "revoked already"
    );
    assert!(store.caller(ORG_KEY).await.unwrap().is_none());
    assert!(store.key_generation().await.unwrap() > after_rate);
    assert_eq!(
        store.key_generation_now().unwrap(),
        store.key_generation().await.unwrap()
    );
    // Operators see keys by fingerprint, never the key.
    let keys = store.list_keys(ORG).unwrap();
    assert_eq!(keys.iter().filter(|k| k.revoked).count(), 1, "{keys:?}");
    let fingerprint = mandate_server::storage::keys::fingerprint(&LIVE_KEY);
    assert_eq!(
        store.key_hash_by_fingerprint(&fingerprint).unwrap(),
        Some(LIVE_KEY.to_vec())
    );
}

pub async fn agents_are_unique_in_their_environment_and_listed_newest_first(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    onboard(store).await;
    for (i, name) in ["agt_a", "agt_b", "agt_c"].iter().enumerate() {
        agent(store, name, 10 + i as u8).await;
    }
    // The name again with another key: refused, and the key is not stored.
    let again = store
        .create_agent(ORG, Env::Sandbox, &agent_id("agt_a"), [20; 32], ms(NOW))
        .await
        .unwrap();
    assert!(again.is_none());
    assert!(store.caller([20; 32]).await.unwrap().is_none());
    // The same name in the other environment is another agent.
    assert!(
        store
            .create_agent(ORG, Env::Live, &agent_id("agt_a"), [21; 32], ms(NOW))
            .await
            .unwrap()
            .is_some()
    );
    let page = store
        .agents_page(ORG, Env::Sandbox, None, i64::MAX, 2)
        .await
        .unwrap();
    let ids: Vec<&str> = page.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(ids, ["agt_c", "agt_b"]);
    let rest = store
        .agents_page(ORG, Env::Sandbox, None, page[1].seq, 2)
        .await
        .unwrap();
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].id, "agt_a");
    let only = store
        .agents_page(ORG, Env::Sandbox, Some(&agent_id("agt_b")), i64::MAX, 10)
        .await
        .unwrap();
    assert_eq!(only.len(), 1);
    let one = store
        .agent(ORG, Env::Sandbox, &agent_id("agt_b"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((one.id.as_str(), one.created_ms), ("agt_b", ms(NOW)));
    assert!(
        store
            .agent("org_other", Env::Sandbox, &agent_id("agt_b"))
            .await
            .unwrap()
            .is_none()
    );
}

pub async fn setting_the_mode_in_force_changes_nothing(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    onboard(store).await;
    let (mode, since) = store.mode(ORG, Env::Sandbox).await.unwrap();
    let other = match mode {
        Mode::Enforce => Mode::Observe,
        Mode::Observe => Mode::Enforce,
    };
    let later = ms(NOW) + 60_000;
    assert_eq!(
        store
            .set_mode(ORG, Env::Sandbox, mode, later)
            .await
            .unwrap(),
        (mode, since)
    );
    assert_eq!(
        store
            .set_mode(ORG, Env::Sandbox, other, later)
            .await
            .unwrap(),
        (other, later)
    );
    assert_eq!(store.mode(ORG, Env::Sandbox).await.unwrap(), (other, later));
    // One environment's mode is its own.
    let live = store.mode(ORG, Env::Live).await.unwrap();
    store
        .set_mode(ORG, Env::Sandbox, mode, later + 1)
        .await
        .unwrap();
    assert_eq!(store.mode(ORG, Env::Live).await.unwrap(), live);
}

pub async fn a_new_mandate_supersedes_the_active_one_and_revoking_fires_once(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    onboard(store).await;
    agent(store, "agt_m", 10).await;
    let first = mandate(store, "agt_m").await;
    let second = mandate(store, "agt_m").await;
    let read = |id: MandateId| async move {
        store
            .mandate(ORG, Env::Sandbox, &id)
            .await
            .unwrap()
            .unwrap()
    };
    assert_eq!(
        read(first.id.clone()).await.status,
        MandateStatus::Superseded
    );
    assert_eq!(read(second.id.clone()).await, second);
    let page = store
        .mandates_page(
            ORG,
            Env::Sandbox,
            &MandateFilters::default(),
            "2026-11-22",
            i64::MAX,
            10,
        )
        .await
        .unwrap();
    let ids: Vec<&MandateId> = page.iter().map(|(_, m)| &m.id).collect();
    assert_eq!(ids, [&second.id, &first.id], "newest first");
    let active = store
        .mandates_page(
            ORG,
            Env::Sandbox,
            &MandateFilters {
                agent: Some("agt_m".into()),
                status: Some(MandateStatus::Active),
            },
            "2026-11-22",
            i64::MAX,
            10,
        )
        .await
        .unwrap();
    assert_eq!(active.len(), 1);
    // Revoking: once, with its event; again, nothing.
    let at = NOW + Duration::minutes(5);
    let Revocation::Revoked(revoked) = store
        .revoke_mandate(ORG, Env::Sandbox, &second.id, at)
        .await
        .unwrap()
    else {
        panic!("an active mandate is revoked");
    };
    assert_eq!(revoked.status, MandateStatus::Revoked);
    assert_eq!(
        store
            .revoke_mandate(ORG, Env::Sandbox, &second.id, at)
            .await
            .unwrap(),
        Revocation::NotActive(MandateStatus::Revoked)
    );
    assert_eq!(
        store
            .revoke_mandate(ORG, Env::Sandbox, &MandateId::from_random([3; 16]), at)
            .await
            .unwrap(),
        Revocation::Missing
    );
    let revocations = all_events(store, Some("mandate.revoked")).await;
    assert_eq!(revocations.len(), 1, "{revocations:?}");
    assert_eq!(revocations[0].data["id"], second.id.as_str());
    assert_eq!(revocations[0].created_ms, ms(at));
}

async fn webhook(store: &dyn Store, events: &[&str]) -> WebhookId {
    let id = WebhookId::from_random(random16());
    let events: Vec<String> = events.iter().map(|e| (*e).to_owned()).collect();
    let row = store
        .create_webhook(
            ORG,
            Env::Sandbox,
            &id,
            "https://hooks.example/in",
            &events,
            ms(NOW),
        )
        .await
        .unwrap();
    assert_eq!(
        (row.id.as_str(), row.status.as_str()),
        (id.as_str(), "active")
    );
    assert_eq!(row.events, events);
    id
}

pub async fn webhooks_ping_into_deliveries_and_deleting_ends_them(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    onboard(store).await;
    let first = webhook(store, &["mandate.revoked"]).await;
    let second = webhook(store, &["escrow.funded"]).await;
    let page = store
        .webhooks_page(ORG, Env::Sandbox, i64::MAX, 10)
        .await
        .unwrap();
    let ids: Vec<&str> = page.iter().map(|w| w.id.as_str()).collect();
    assert_eq!(ids, [second.as_str(), first.as_str()], "newest first");
    // A ping is an event delivered to that endpoint alone.
    let ping = store
        .ping_webhook(ORG, Env::Sandbox, &first, json!({"hello": 1}), ms(NOW))
        .await
        .unwrap()
        .expect("an active endpoint is pinged");
    let event = store
        .event(ORG, Env::Sandbox, ping.as_str())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(event.data, json!({"hello": 1}));
    let deliveries = store.deliveries_of(ping.as_str()).await.unwrap();
    assert_eq!(deliveries.len(), 1, "{deliveries:?}");
    assert_eq!(deliveries[0].webhook_id, first.as_str());
    assert_eq!(deliveries[0].state, "pending");
    // An event is delivered to every endpoint subscribed to its type, in its transaction.
    agent(store, "agt_w", 10).await;
    let mandate = mandate(store, "agt_w").await;
    store
        .revoke_mandate(ORG, Env::Sandbox, &mandate.id, NOW)
        .await
        .unwrap();
    let revoked = &all_events(store, Some("mandate.revoked")).await[0];
    let to = store.deliveries_of(&revoked.id).await.unwrap();
    assert_eq!(to.len(), 1);
    assert_eq!(to[0].webhook_id, first.as_str());
    // Deleting: the endpoint is gone, its pending deliveries end, and it is not pinged.
    let deleted = store
        .delete_webhook(ORG, Env::Sandbox, &first, ms(NOW) + 1)
        .await
        .unwrap()
        .expect("an active endpoint");
    assert_eq!(deleted.status, "deleted");
    assert!(
        store
            .webhook(ORG, Env::Sandbox, &first)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .delete_webhook(ORG, Env::Sandbox, &first, ms(NOW) + 2)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .ping_webhook(ORG, Env::Sandbox, &first, json!({}), ms(NOW) + 3)
            .await
            .unwrap()
            .is_none()
    );
    for delivery in store.deliveries_of(ping.as_str()).await.unwrap() {
        assert_ne!(delivery.state, "pending", "{delivery:?}");
    }
    assert!(
        store
            .due_deliveries(ms(NOW) + 10_000, 10, 100)
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn a_delivery_is_retried_delivered_or_given_up_as_recorded(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    onboard(store).await;
    let hook = webhook(store, &["mandate.revoked"]).await;
    let mut pings = Vec::new();
    for i in 0..3 {
        let id = store
            .ping_webhook(ORG, Env::Sandbox, &hook, json!({"n": i}), ms(NOW) + i)
            .await
            .unwrap()
            .unwrap();
        pings.push(id);
    }
    assert_eq!(store.backlog().await.unwrap().deliveries, 3);
    // Due now: oldest first, at most `per_webhook` of one endpoint.
    let due = store.due_deliveries(ms(NOW) + 10, 2, 10).await.unwrap();
    assert_eq!(due.len(), 2, "{due:?}");
    assert_eq!(due[0].event_id, pings[0].as_str());
    assert_eq!(due[1].event_id, pings[1].as_str());
    assert_eq!(
        (
            due[0].webhook_id.as_str(),
            due[0].env.as_str(),
            due[0].attempts
        ),
        (hook.as_str(), "sandbox", 0)
    );
    assert_eq!(due[0].data, json!({"n": 0}));
    store
        .release_deliveries(due.iter().map(|d| d.id).collect())
        .await
        .unwrap();
    let at = ms(NOW) + 20;
    let attempt = |status, error: Option<&str>| Attempt {
        attempt: 1,
        at_ms: at,
        status,
        latency_ms: 5,
        error: error.map(str::to_owned),
    };
    // Delivered, retried later, given up: each as recorded.
    store
        .record_attempt(due[0].id, attempt(Some(200), None), NextStep::Delivered, at)
        .await
        .unwrap();
    store
        .record_attempt(
            due[1].id,
            attempt(Some(500), Some("HTTP 500")),
            NextStep::RetryAt(at + 60_000),
            at,
        )
        .await
        .unwrap();
    let third = store.deliveries_of(pings[2].as_str()).await.unwrap()[0].id;
    store
        .give_up_delivery(third, "the endpoint's URL is refused", at)
        .await
        .unwrap();
    let delivered = &store.deliveries_of(pings[0].as_str()).await.unwrap()[0];
    assert_eq!(
        (delivered.state.as_str(), delivered.attempts),
        ("delivered", 1)
    );
    assert_eq!(delivered.tried, vec![attempt(Some(200), None)]);
    let retried = &store.deliveries_of(pings[1].as_str()).await.unwrap()[0];
    assert_eq!(retried.state, "pending");
    assert_eq!(retried.next_attempt_ms, Some(at + 60_000));
    assert_eq!(retried.last_error.as_deref(), Some("HTTP 500"));
    let failed = &store.deliveries_of(pings[2].as_str()).await.unwrap()[0];
    assert_eq!(failed.state, "failed");
    assert_eq!(
        failed.last_error.as_deref(),
        Some("the endpoint's URL is refused")
    );
    assert_eq!(store.backlog().await.unwrap().deliveries, 1);
    // The retry is not due before its time, and is at it.
    assert!(
        store
            .due_deliveries(at + 59_999, 10, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let again = store.due_deliveries(at + 60_000, 10, 10).await.unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].attempts, 1);
}

pub async fn the_event_log_pages_newest_first_without_gaps_or_repeats(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    onboard(store).await;
    let hook = webhook(store, &[]).await;
    let mut written = Vec::new();
    for i in 0..5 {
        written.push(
            store
                .ping_webhook(ORG, Env::Sandbox, &hook, json!({"n": i}), ms(NOW) + i)
                .await
                .unwrap()
                .unwrap(),
        );
    }
    agent(store, "agt_e", 10).await;
    let mandate = mandate(store, "agt_e").await;
    store
        .revoke_mandate(ORG, Env::Sandbox, &mandate.id, NOW)
        .await
        .unwrap();
    let events = all_events(store, None).await;
    assert_eq!(events.len(), 6);
    assert!(
        events.windows(2).all(|w| w[0].seq > w[1].seq),
        "newest first"
    );
    assert_eq!(events[0].event_type, "mandate.revoked");
    let pinged: Vec<&str> = events[1..].iter().rev().map(|e| e.id.as_str()).collect();
    let expected: Vec<&str> = written.iter().map(|e| e.as_str()).collect();
    assert_eq!(pinged, expected, "in the order written");
    assert_eq!(all_events(store, Some("mandate.revoked")).await.len(), 1);
    // One organization and environment's log: the other sees none of it.
    assert!(
        store
            .events_page(ORG, Env::Live, None, i64::MAX, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .event("org_other", Env::Sandbox, &events[0].id)
            .await
            .unwrap()
            .is_none()
    );
}

pub async fn an_idempotency_key_is_claimed_once_even_at_once(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    let (digest, other) = ([1u8; 32], [2u8; 32]);
    let claims = join_all(
        (0..16).map(|_| store.claim_idempotency_key(ORG_KEY, "k-race", digest, CLAIM, NOW)),
    )
    .await;
    let actions: Vec<NextAction> = claims.into_iter().map(|c| c.unwrap().0).collect();
    let started = actions
        .iter()
        .filter(|a| matches!(a, NextAction::StartProcessing))
        .count();
    assert_eq!(started, 1, "{actions:?}");
    assert!(actions.iter().all(|a| matches!(
        a,
        NextAction::StartProcessing | NextAction::ConflictInFlight
    )));
    let (action, _) = store
        .claim_idempotency_key(ORG_KEY, "k-race", other, CLAIM, NOW)
        .await
        .unwrap();
    assert_eq!(action, NextAction::ConflictDifferentRequest);
    // The key is scoped to the API key: another caller's same key is its own.
    let (action, _) = store
        .claim_idempotency_key(LIVE_KEY, "k-race", digest, CLAIM, NOW)
        .await
        .unwrap();
    assert_eq!(action, NextAction::StartProcessing);
    // Released, a retry runs the request again.
    store
        .finish_idempotency(LIVE_KEY, "k-race", CLAIM, None)
        .await
        .unwrap();
    let (action, _) = store
        .claim_idempotency_key(LIVE_KEY, "k-race", digest, CLAIM, NOW)
        .await
        .unwrap();
    assert_eq!(action, NextAction::StartProcessing);
    // Finished, the answer is replayed with the id of the request it answered.
    store
        .finish_idempotency(
            ORG_KEY,
            "k-race",
            CLAIM,
            Some(record("k-race", "req_first")),
        )
        .await
        .unwrap();
    let (action, original) = store
        .claim_idempotency_key(ORG_KEY, "k-race", digest, CLAIM, NOW + Duration::seconds(1))
        .await
        .unwrap();
    assert!(
        matches!(&action, NextAction::ReturnSavedResponse(r) if r.status == 201 && r.body == b"sealed k-race"),
        "{action:?}"
    );
    assert_eq!(original.as_deref(), Some("req_first"));
    // A sweep at start releases the unfinished claim (the live key's) and keeps records
    // newer than its bound: the finished answer is still replayed.
    assert_eq!(store.sweep_idempotency(ms(NOW) - 1).await.unwrap(), 1);
    let (action, _) = store
        .claim_idempotency_key(LIVE_KEY, "k-race", digest, CLAIM, NOW)
        .await
        .unwrap();
    assert_eq!(action, NextAction::StartProcessing, "released by the sweep");
    let (action, _) = store
        .claim_idempotency_key(ORG_KEY, "k-race", digest, CLAIM, NOW)
        .await
        .unwrap();
    assert!(matches!(action, NextAction::ReturnSavedResponse(_)));
}

pub async fn decisions_are_logged_with_their_idempotency_record_in_order(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    onboard(store).await;
    agent(store, "agt_d", 10).await;
    agent(store, "agt_other", 11).await;
    let mandate = mandate(store, "agt_d").await;
    let deciding = Deciding::new();
    let before = store.last_decision_seq().await.unwrap();
    let (claimed, _) = store
        .claim_idempotency_key(ORG_KEY, "k-decide", [5; 32], CLAIM, NOW)
        .await
        .unwrap();
    assert_eq!(claimed, NextAction::StartProcessing);
    let first = deciding
        .authorize(store, "agt_d", "10", Some(record("k-decide", "req_d1")))
        .await;
    assert_eq!(first["verdict"], "allow");
    // The idempotency record was stored with the decision.
    let (action, original) = store
        .claim_idempotency_key(ORG_KEY, "k-decide", [5; 32], CLAIM, NOW)
        .await
        .unwrap();
    assert!(
        matches!(action, NextAction::ReturnSavedResponse(_)),
        "{action:?}"
    );
    assert_eq!(original.as_deref(), Some("req_d1"));
    let second = deciding.authorize(store, "agt_d", "600", None).await;
    assert_eq!(second["verdict"], "deny_limit");
    let third = deciding.authorize(store, "agt_d", "20", None).await;
    assert_eq!(third["verdict"], "allow");
    let unmandated = deciding.authorize(store, "agt_other", "1", None).await;
    assert_eq!(unmandated["verdict"], "deny_no_mandate");
    // The log: newest first, paged by seq, filtered.
    let page = store
        .decisions_page(ORG, Env::Sandbox, &DecisionFilters::default(), i64::MAX, 3)
        .await
        .unwrap();
    let ids: Vec<&str> = page.iter().map(|(_, d)| d.claims.jti.as_str()).collect();
    let answered = |v: &Value| v["id"].as_str().unwrap().to_owned();
    assert_eq!(
        ids,
        [answered(&unmandated), answered(&third), answered(&second)]
    );
    assert!(page.windows(2).all(|w| w[0].0 > w[1].0));
    assert_eq!(store.last_decision_seq().await.unwrap(), page[0].0);
    assert!(page[0].0 > before);
    let allows = store
        .decisions_page(
            ORG,
            Env::Sandbox,
            &DecisionFilters {
                agent: Some("agt_d".into()),
                verdict: Some(Verdict::Allow),
                ..DecisionFilters::default()
            },
            i64::MAX,
            10,
        )
        .await
        .unwrap();
    assert_eq!(allows.len(), 2);
    // The export: oldest first, in (after, upto].
    let export = store
        .decisions_export_page(
            ORG,
            Env::Sandbox,
            &DecisionFilters::default(),
            before,
            page[1].0,
            10,
        )
        .await
        .unwrap();
    let exported: Vec<&str> = export.iter().map(|(_, d)| d.claims.jti.as_str()).collect();
    assert_eq!(
        exported,
        [answered(&first), answered(&second), answered(&third)]
    );
    // A decision read back is the one answered; `only` scopes it to its agent.
    let stored = decision(store, &third).await;
    assert_eq!(stored.claims.request.amount, Amount::parse("20").unwrap());
    assert_eq!(stored.claims.mandate.as_ref(), Some(&mandate.id));
    assert!(stored.is_request);
    assert!(
        store
            .decision(
                ORG,
                Env::Sandbox,
                Some(&agent_id("agt_other")),
                &stored.claims.jti
            )
            .await
            .unwrap()
            .is_none()
    );
    // What the agent's next decision is made on: its mandate, requests newest first, and
    // the allows under the mandate since the asked instant.
    let record = store
        .agent_record(
            Arc::from(ORG),
            Env::Sandbox,
            agent_id("agt_d"),
            2,
            ms(NOW) - 1,
        )
        .await
        .unwrap();
    assert_eq!(record.mandate.map(|m| m.id), Some(mandate.id.clone()));
    assert_eq!(record.recent_requests, vec![ms(NOW), ms(NOW)]);
    let allowed: Vec<Amount> = record.allowed_since.iter().map(|(a, _)| *a).collect();
    assert_eq!(
        allowed,
        [Amount::parse("10").unwrap(), Amount::parse("20").unwrap()]
    );
    let summed = store
        .mandate_allows_since(
            ORG,
            Env::Sandbox,
            &agent_id("agt_d"),
            &mandate.id,
            ms(NOW) - 1,
        )
        .await
        .unwrap();
    assert_eq!(summed, record.allowed_since);
}

pub async fn a_failing_decision_writes_nothing(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    onboard(store).await;
    agent(store, "agt_f", 10).await;
    mandate(store, "agt_f").await;
    let deciding = Deciding::new();
    let answer = deciding.authorize(store, "agt_f", "10", None).await;
    let stored = decision(store, &answer).await;
    let last = store.last_decision_seq().await.unwrap();
    let events = event_types(store).await;
    // The same decision again (its id taken) with an idempotency record: the decision's
    // insert fails, so the record is not stored either.
    let (claimed, _) = store
        .claim_idempotency_key(ORG_KEY, "k-fail", [6; 32], CLAIM, NOW)
        .await
        .unwrap();
    assert_eq!(claimed, NextAction::StartProcessing);
    let fresh_record = store
        .agent_record(Arc::from(ORG), Env::Sandbox, agent_id("agt_f"), 10, 0)
        .await
        .unwrap();
    let outcome = store
        .record_decision(NewDecision {
            org: Arc::from(ORG),
            env: Env::Sandbox,
            decision: stored,
            review: None,
            idempotency: Some(record("k-fail", "req_fail")),
            hint: fresh_record.hint,
        })
        .await;
    assert!(
        !matches!(outcome, Ok(Recorded::Stored(_))),
        "a decision whose id is taken is not stored: {outcome:?}"
    );
    assert_eq!(store.last_decision_seq().await.unwrap(), last);
    assert_eq!(event_types(store).await, events);
    let (action, _) = store
        .claim_idempotency_key(ORG_KEY, "k-fail", [6; 32], CLAIM, NOW)
        .await
        .unwrap();
    assert_eq!(
        action,
        NextAction::ConflictInFlight,
        "the claim stands, with no record"
    );
}

pub async fn a_decision_on_a_stale_agent_is_given_back_unstored(fresh: &Fresh) {
    if !fresh.capabilities.shared_by_processes {
        return;
    }
    let store = fresh.store.as_ref();
    onboard(store).await;
    agent(store, "agt_s", 10).await;
    mandate(store, "agt_s").await;
    let stale = store
        .agent_record(Arc::from(ORG), Env::Sandbox, agent_id("agt_s"), 10, 0)
        .await
        .unwrap();
    // Another process decides first: the agent moves on.
    let answer = Deciding::new().authorize(store, "agt_s", "10", None).await;
    let mut again = decision(store, &answer).await;
    again.claims.jti = DecisionId::from_random(random16());
    again.claims.nonce = Nonce::from_random(random16());
    let last = store.last_decision_seq().await.unwrap();
    let outcome = store
        .record_decision(NewDecision {
            org: Arc::from(ORG),
            env: Env::Sandbox,
            decision: again,
            review: None,
            idempotency: None,
            hint: stale.hint,
        })
        .await
        .unwrap();
    assert!(matches!(outcome, Recorded::Changed(_)), "{outcome:?}");
    assert_eq!(store.last_decision_seq().await.unwrap(), last);
}

pub async fn a_review_is_resolved_once_and_expires_once(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    onboard(store).await;
    agent(store, "agt_r", 10).await;
    mandate(store, "agt_r").await;
    let deciding = Deciding::new();
    let reviewed = deciding.authorize(store, "agt_r", "300", None).await;
    assert_eq!(reviewed["verdict"], "review");
    let other = deciding.authorize(store, "agt_r", "250", None).await;
    assert_eq!(store.backlog().await.unwrap().reviews, 2);
    let pending = event_types(store).await;
    assert_eq!(
        pending,
        ["decision.review_pending", "decision.review_pending"]
    );
    let review_id =
        mandate_core::id::ReviewId::parse(reviewed["review"]["id"].as_str().unwrap()).unwrap();
    let (review, agent_of) = store
        .review(Arc::from(ORG), Env::Sandbox, review_id.clone())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (review.status, agent_of),
        (ReviewStatus::Pending, agent_id("agt_r"))
    );
    // Denied once; a second resolution finds it resolved and writes nothing.
    let denied = review.deny(Some("no".into()), NOW).unwrap();
    let resolution = Resolution {
        org: Arc::from(ORG),
        env: Env::Sandbox,
        review: denied,
        decision: None,
        at_ms: ms(NOW),
        hint: Default::default(),
    };
    assert!(
        store
            .resolve_review(resolution.clone())
            .await
            .unwrap()
            .is_some()
    );
    assert!(store.resolve_review(resolution).await.unwrap().is_none());
    assert_eq!(all_events(store, Some("decision.resolved")).await.len(), 1);
    let stored = decision(store, &reviewed).await;
    assert_eq!(
        stored.review_state.map(|s| s.status),
        Some(ReviewStatus::Denied)
    );
    // The other expires when its deadline passes: once, with its event.
    let late = NOW + mandate_core::review::REVIEW_LIFETIME + Duration::seconds(1);
    assert!(
        store
            .due_timers(ms(NOW), "2026-11-22", "2026-11-29", 10)
            .await
            .unwrap()
            .0
            .is_empty(),
        "not due before its deadline"
    );
    let (reviews, _) = store
        .due_timers(ms(late), "2026-11-23", "2026-11-30", 10)
        .await
        .unwrap();
    let other_review = other["review"]["id"].as_str().unwrap();
    assert_eq!(
        reviews,
        [DueItem {
            id: other_review.to_owned(),
            org_id: ORG.to_owned(),
            env: Env::Sandbox
        }]
    );
    store.expire_review(&reviews[0], late).await.unwrap();
    store.expire_review(&reviews[0], late).await.unwrap();
    let resolved = all_events(store, Some("decision.resolved")).await;
    assert_eq!(resolved.len(), 2, "{resolved:?}");
    assert_eq!(resolved[0].created_ms, ms(late));
    assert_eq!(store.backlog().await.unwrap().reviews, 0);
    let (expired, _) = store
        .review(
            Arc::from(ORG),
            Env::Sandbox,
            mandate_core::id::ReviewId::parse(other_review).unwrap(),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(expired.status, ReviewStatus::Expired);
    assert!(
        store
            .due_timers(ms(late), "2026-11-23", "2026-11-30", 10)
            .await
            .unwrap()
            .0
            .is_empty()
    );
}

pub async fn a_mandates_expiring_event_fires_once(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    onboard(store).await;
    agent(store, "agt_x", 10).await;
    let soon = mandate_of("agt_x", &TERMS.replace("2026-12-31", "2026-11-25"), NOW);
    store
        .insert_mandate(ORG, Env::Sandbox, &soon)
        .await
        .unwrap();
    let fires_at = |date: time::Date| date.midnight().assume_utc() - Duration::days(7);
    let (_, mandates) = store
        .due_timers(ms(NOW), "2026-11-22", "2026-11-29", 10)
        .await
        .unwrap();
    assert_eq!(mandates.len(), 1);
    assert_eq!(mandates[0].id, soon.id.as_str());
    store
        .fire_expiring(&mandates[0], NOW, fires_at)
        .await
        .unwrap();
    store
        .fire_expiring(&mandates[0], NOW, fires_at)
        .await
        .unwrap();
    let fired = all_events(store, Some("mandate.expiring")).await;
    assert_eq!(fired.len(), 1, "{fired:?}");
    assert_eq!(fired[0].data["id"], soon.id.as_str());
    assert!(
        store
            .due_timers(ms(NOW), "2026-11-22", "2026-11-29", 10)
            .await
            .unwrap()
            .1
            .is_empty(),
        "fired once, not due again"
    );
    // Not due yet: nothing fires.
    let later = mandate_of("agt_x", &TERMS.replace("2026-12-31", "2027-01-31"), NOW);
    store
        .insert_mandate(ORG, Env::Sandbox, &later)
        .await
        .unwrap();
    let item = DueItem {
        id: later.id.as_str().to_owned(),
        org_id: ORG.to_owned(),
        env: Env::Sandbox,
    };
    store.fire_expiring(&item, NOW, fires_at).await.unwrap();
    assert_eq!(all_events(store, Some("mandate.expiring")).await.len(), 1);
}

fn movement(escrow: &EscrowRow, kind: &str, from: &str, to: &str, at: i64) -> MovementRow {
    MovementRow {
        escrow_id: escrow.id.as_str().to_owned(),
        kind: kind.into(),
        amount: escrow.amount.to_string(),
        currency: escrow.currency.as_str().to_owned(),
        from_party: from.into(),
        to_party: to.into(),
        created_ms: at,
    }
}

fn change(escrow: &EscrowRow, action: EscrowAction, movement: Option<MovementRow>) -> EscrowChange {
    let to = escrow.status.apply(action).unwrap();
    EscrowChange {
        from: escrow.status,
        entry: HistoryEntry::new(to, NOW, "funder"),
        step: escrow.history.len(),
        movement,
        event: NewEvent {
            event_type: "escrow.changed",
            data: json!({"to": format!("{to:?}")}),
        },
    }
}

pub async fn an_escrow_is_funded_once_and_moves_only_from_where_it_stands(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    onboard(store).await;
    agent(store, "agt_buyer", 10).await;
    mandate(store, "agt_buyer").await;
    let answer = Deciding::new()
        .authorize(store, "agt_buyer", "42", None)
        .await;
    let funding = decision(store, &answer).await;
    let escrow_for = |id: EscrowId| EscrowRow {
        id,
        org_id: ORG.into(),
        env: "sandbox".into(),
        amount: funding.claims.request.amount,
        currency: funding.claims.request.currency.clone(),
        buyer: funding.claims.request.agent.clone(),
        seller: funding.claims.request.recipient.clone(),
        decision: funding.claims.jti.clone(),
        arbiter: None,
        status: EscrowStatus::FUNDED,
        history: vec![HistoryEntry::new(EscrowStatus::FUNDED, NOW, "funder")],
        created_ms: ms(NOW),
    };
    // Two fundings of one decision at once: exactly one is stored, with one lock and one
    // event; the other writes nothing.
    let (a, b) = (
        escrow_for(EscrowId::from_random(random16())),
        escrow_for(EscrowId::from_random(random16())),
    );
    let fund = |escrow: EscrowRow| {
        let lock = movement(&escrow, "lock", "agt_buyer", escrow.id.as_str(), ms(NOW));
        let event = NewEvent {
            event_type: "escrow.funded",
            data: json!({"id": escrow.id.as_str()}),
        };
        store.fund_escrow(escrow, funding.claims.nonce.as_str(), lock, event)
    };
    let (fa, fb) = tokio::join!(fund(a.clone()), fund(b.clone()));
    let (fa, fb) = (fa.unwrap(), fb.unwrap());
    assert!(fa ^ fb, "one of two fundings of a decision: {fa} {fb}");
    let (funded, refused) = if fa { (a, b) } else { (b, a) };
    assert!(store.escrow(&refused.id, None).await.unwrap().is_none());
    assert!(
        store
            .escrow_movements(&refused.id)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(all_events(store, Some("escrow.funded")).await.len(), 1);
    assert_eq!(
        store.escrow(&funded.id, None).await.unwrap(),
        Some(funded.clone())
    );
    // Public by id; with an owner, only the funding organization's.
    assert!(
        store
            .escrow(&funded.id, Some((ORG, Env::Live)))
            .await
            .unwrap()
            .is_none()
    );
    // Deliver, then release with its movement; a change from where it no longer stands
    // writes nothing.
    let deliver = change(&funded, EscrowAction::Deliver, None);
    assert!(
        store
            .advance_escrow(ORG, Env::Sandbox, &funded.id, deliver.clone())
            .await
            .unwrap()
    );
    let events = event_types(store).await;
    assert!(
        !store
            .advance_escrow(ORG, Env::Sandbox, &funded.id, deliver)
            .await
            .unwrap(),
        "it no longer stands where the change was made from"
    );
    assert_eq!(event_types(store).await, events);
    let delivered = store.escrow(&funded.id, None).await.unwrap().unwrap();
    assert_eq!(delivered.history.len(), 2);
    let release = change(
        &delivered,
        EscrowAction::Release,
        Some(movement(
            &delivered,
            "release",
            delivered.id.as_str(),
            delivered.seller.as_str(),
            ms(NOW) + 1,
        )),
    );
    assert!(
        !store
            .advance_escrow("org_other", Env::Sandbox, &funded.id, release.clone())
            .await
            .unwrap(),
        "only the funding organization moves it"
    );
    assert!(
        store
            .advance_escrow(ORG, Env::Sandbox, &funded.id, release)
            .await
            .unwrap()
    );
    let released = store.escrow(&funded.id, None).await.unwrap().unwrap();
    assert_eq!(
        released.status,
        EscrowStatus::FUNDED
            .apply(EscrowAction::Deliver)
            .unwrap()
            .apply(EscrowAction::Release)
            .unwrap()
    );
    assert_eq!(released.history.len(), 3);
    let kinds: Vec<String> = store
        .escrow_movements(&funded.id)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.kind)
        .collect();
    assert_eq!(kinds, ["lock", "release"], "in the order recorded");
    assert_eq!(all_events(store, Some("escrow.changed")).await.len(), 2);
}

pub async fn the_store_is_ready_and_counts_its_processes(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    let schema = store.readiness().await.unwrap();
    assert_eq!(schema.applied, schema.latest);
    assert!(schema.latest > 0);
    assert!(store.heartbeat("proc_a").await.unwrap() >= 1);
    store.leave("proc_a").await.unwrap();
    // The cursor secret is made once and kept.
    let secret = store.prepare_start(0, &[4; 32]).unwrap();
    assert_eq!(store.prepare_start(0, &[5; 32]).unwrap(), secret);
}

pub async fn signing_keys_rotate_and_their_secrets_change_only_as_read(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    let seal = |kid: &str| Ok(format!("secret of {kid}").into_bytes());
    store
        .ensure_signing_key(Env::Sandbox, &seal, ms(NOW))
        .unwrap();
    store
        .ensure_signing_key(Env::Sandbox, &seal, ms(NOW))
        .unwrap();
    let first = store.signing_keys_now(0).unwrap();
    assert_eq!(first.len(), 1, "ensured once: {first:?}");
    assert_eq!(
        first[0].secret,
        format!("secret of {}", first[0].kid).into_bytes()
    );
    let generation = store.key_generation_now().unwrap();
    let rotated_at = ms(NOW) + 1_000;
    let kid = store
        .rotate_signing_key(Env::Sandbox, &seal, rotated_at)
        .unwrap();
    assert_ne!(kid, first[0].kid);
    assert!(store.key_generation_now().unwrap() > generation);
    // The retired key is still published after `published_after_ms` before its retirement.
    let published = store.signing_keys(rotated_at - 1).await.unwrap();
    assert_eq!(published.len(), 2, "{published:?}");
    let retired = published.iter().find(|k| k.kid == first[0].kid).unwrap();
    assert_eq!(retired.retired_ms, Some(rotated_at));
    let current = store.signing_keys(rotated_at).await.unwrap();
    assert_eq!(current.len(), 1);
    assert_eq!(
        (current[0].kid.as_str(), current[0].retired_ms),
        (kid.as_str(), None)
    );
    // A refused key's seal aborts the rotation: nothing is written.
    let failing = |_: &str| Err(mandate_server::storage::StorageError::Corrupt("no".into()));
    assert!(
        store
            .rotate_signing_key(Env::Sandbox, &failing, rotated_at + 1)
            .is_err()
    );
    assert_eq!(store.all_signing_keys().unwrap().len(), 2);
    // Secrets are replaced only if the stored keys are exactly those read.
    let all = store.all_signing_keys().unwrap();
    let changes: Vec<SecretChange> = all
        .iter()
        .map(|k| SecretChange {
            kid: k.kid.clone(),
            from: k.secret.clone(),
            to: [b"resealed ".as_slice(), &k.secret].concat(),
        })
        .collect();
    assert!(
        !store.replace_signing_key_secrets(&changes[..1]).unwrap(),
        "a key left out"
    );
    assert!(store.replace_signing_key_secrets(&changes).unwrap());
    assert!(
        !store.replace_signing_key_secrets(&changes).unwrap(),
        "they changed since"
    );
    for key in store.all_signing_keys().unwrap() {
        assert!(key.secret.starts_with(b"resealed "), "{key:?}");
    }
}

pub async fn org_keys_and_policy_versions_change_what_callers_carry(fresh: &Fresh) {
    let store = fresh.store.as_ref();
    onboard(store).await;
    let generation = store.key_generation_now().unwrap();
    let fingerprint = store
        .insert_org_key(ORG, Env::Live, &[40; 32], ms(NOW))
        .unwrap();
    assert_eq!(
        fingerprint,
        mandate_server::storage::keys::fingerprint(&[40; 32])
    );
    assert_eq!(
        store.caller([40; 32]).await.unwrap().unwrap().env,
        Env::Live
    );
    store.set_policy_version(ORG, "pol_2026-11-23.2").unwrap();
    assert!(store.key_generation_now().unwrap() > generation);
    for key in [ORG_KEY, [40; 32]] {
        let caller = store.caller(key).await.unwrap().unwrap();
        assert_eq!(&*caller.policy_version, "pol_2026-11-23.2");
    }
    assert_eq!(store.list_keys(ORG).unwrap().len(), 3);
}
