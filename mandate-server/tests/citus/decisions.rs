//! Decisions on the Citus cluster are router-only: every statement a decision runs names
//! its organization, so Citus sends it to the one worker holding that organization, and no
//! decision is a two-phase commit. A load of decisions through two stores (two processes'
//! pools and writers) for organizations on both workers leaves `pg_dist_transaction` as it
//! was; so do the writes outside the decision path that append an event (a review approved
//! and one denied, a mandate revoked, a webhook pinged).

use std::sync::Arc;

use futures_util::future::join_all;
use mandate_core::{
    AgentId, Amount, AuthorizationRequest, Category, Currency, DecisionId, Mandate, MandateDraft,
    MandateId, MandateStatus, Recipient,
};
use mandate_protocol::id::ReviewId;
use mandate_protocol::id::WebhookId;
use mandate_protocol::idempotency::NextAction;
use mandate_protocol::tlog;
use mandate_server::clock::random16;
use mandate_server::decision::agents::AgentStates;
use mandate_server::decision::modes::ModeCache;
use mandate_server::decision::service::{Decider, Input};
use mandate_server::model::Env;
use mandate_server::signing::fast::AwsLcSigner;
use mandate_server::storage::deciding::Resolution;
use mandate_server::storage::idempotency::{IdempotencyRecord, Sealed};
use mandate_server::storage::log::{LogAppend, LogStore};
use mandate_server::storage::log_entries::split_entries;
use mandate_server::storage::mandates::Revocation;
use mandate_server::storage::postgres::PostgresStore;
use mandate_server::storage::{
    AgentStore, DecidingStore, DecisionStore, MandateStore, OrgStore, Store, WebhookStore,
};
use serde_json::Value;
use time::OffsetDateTime;
use time::macros::datetime;

use crate::citus::{Share, database};
use crate::schema::{onboard, open};

const NOW: OffsetDateTime = datetime!(2026-11-25 12:00 UTC);

/// A mandate that sends what is above 200 to review (a review, its event and deliveries).
const TERMS: &str = r#"{"agent": "AGENT", "limits": {"per_transaction": 500, "per_month": 100000, "currency": "USD"},
    "categories": ["software"], "review_above": 200, "expires": "2026-12-31"}"#;

/// One process's in-memory side of the decision path, and its store.
struct Process {
    store: PostgresStore,
    agents: AgentStates,
    modes: ModeCache,
    leaves: mandate_server::model::leaves::Answered,
    news: mandate_server::model::news::News,
    signer: Arc<AwsLcSigner>,
}

impl Process {
    async fn new(db: &crate::citus::CitusDb) -> Self {
        Self::with(open(db).await)
    }

    /// A process connected to `url` (a node of the cluster, migrated already).
    async fn at(url: &str) -> Self {
        let Ok(mandate_server::storage::location::DbLocation::Postgres(url)) = url.parse() else {
            panic!("{url} is not a PostgreSQL URL");
        };
        Self::with(PostgresStore::open(&url, false).await.unwrap())
    }

    fn with(store: PostgresStore) -> Self {
        let secret = mandate_server::signing::fresh_secret().unwrap();
        Self {
            store,
            agents: AgentStates::default(),
            modes: ModeCache::default(),
            leaves: Default::default(),
            news: Default::default(),
            signer: Arc::new(AwsLcSigner::from_secret_bytes("sandbox-1", secret.expose()).unwrap()),
        }
    }

    /// Decides `amount` USD for `agent` of `org` through the real decision service; with
    /// `idempotent`, under an Idempotency-Key claimed first, its record stored with the
    /// decision.
    async fn decide(&self, org: &str, agent: &str, amount: &str, key: Option<String>) -> Value {
        let (mode, _) = self.store.mode(org, Env::Sandbox).await.unwrap();
        self.decide_in(mode, org, agent, amount, key).await
    }

    /// [`Self::decide`] in `mode`, read before.
    async fn decide_in(
        &self,
        mode: mandate_core::Mode,
        org: &str,
        agent: &str,
        amount: &str,
        key: Option<String>,
    ) -> Value {
        let store: &dyn Store = &self.store;
        let org: Arc<str> = Arc::from(org);
        let mut record = match key {
            Some(key) => {
                let hash = [7u8; 32];
                let claim = random16();
                let (action, _) = store
                    .claim_idempotency_key(&org, hash, &key, [1; 32], claim, NOW)
                    .await
                    .unwrap();
                assert_eq!(action, NextAction::StartProcessing);
                Some(IdempotencyRecord {
                    org_id: org.clone(),
                    key_hash: hash,
                    idem_key: key,
                    status: 201,
                    body: Sealed(b"sealed".to_vec()),
                    request_id: "req".into(),
                    claim,
                })
            }
            None => None,
        };
        let decider = self.decider(&org, mode);
        let request = AuthorizationRequest {
            agent: AgentId::parse(agent).unwrap(),
            amount: Amount::parse(amount).unwrap(),
            currency: Currency::parse("USD").unwrap(),
            recipient: Recipient::parse("vendor:acme").unwrap(),
            category: Category::parse("software").unwrap(),
        };
        let body = decider
            .run(
                Input::Request {
                    request,
                    slot: None,
                    credential: None,
                    bindings: Default::default(),
                },
                |_| Ok(record.take()),
            )
            .await
            .unwrap();
        serde_json::from_slice(&body).unwrap()
    }

    /// The decision service of this process for `org` in the sandbox.
    fn decider<'a>(&'a self, org: &'a Arc<str>, mode: mandate_core::Mode) -> Decider<'a> {
        Decider {
            store: &self.store,
            agents: &self.agents,
            leaves: &self.leaves,
            news: &self.news,
            modes: &self.modes,
            signer: self.signer.clone(),
            leaf_tag: None,
            issuer: "https://verdicts.test",
            org,
            env: Env::Sandbox,
            policy_version: "pol_2026-11-25.1",
            mode,
            now: NOW,
        }
    }

    /// Approves the review `answer` (a decision) opened, through the real decision service
    /// (its fresh decision, the review resolved, its event); returns the fresh decision.
    async fn approve(&self, org: &str, answer: &Value) -> Value {
        let org: Arc<str> = Arc::from(org);
        let review = self.review(&org, answer).await;
        let original = self
            .store
            .decision(&org, Env::Sandbox, None, &review.decision)
            .await
            .unwrap()
            .expect("the decision that opened the review");
        let approved = review
            .approve(DecisionId::from_random(random16()), NOW)
            .unwrap();
        let (mode, _) = self.store.mode(&org, Env::Sandbox).await.unwrap();
        let body = self
            .decider(&org, mode)
            .run(
                Input::Approval {
                    approved,
                    original: Box::new(original),
                },
                |_| Ok(None),
            )
            .await
            .unwrap();
        serde_json::from_slice(&body).unwrap()
    }

    /// Denies the review `answer` opened, as `POST /v1/reviews/{id}/deny` stores it.
    async fn deny(&self, org: &str, answer: &Value) {
        let org: Arc<str> = Arc::from(org);
        let review = self.review(&org, answer).await;
        let resolution = Resolution {
            org: org.clone(),
            env: Env::Sandbox,
            review: review.deny(Some("no".into()), NOW).unwrap(),
            decision: None,
            at_ms: mandate_server::clock::ms(NOW),
            hint: Default::default(),
        };
        let stored = self.store.resolve_review(resolution).await.unwrap();
        assert!(stored.is_some(), "the review was pending");
    }

    /// The review a decision's `answer` opened, as stored.
    async fn review(&self, org: &Arc<str>, answer: &Value) -> mandate_protocol::review::Review {
        let id = ReviewId::parse(answer["review"]["id"].as_str().expect("a review")).unwrap();
        let (review, _) = self
            .store
            .review(org.clone(), Env::Sandbox, id)
            .await
            .unwrap()
            .expect("the review");
        review
    }
}

/// An organization with an agent under [`TERMS`] (the mandate returned) and a webhook
/// subscribed to reviews, their resolutions and mandates revoked.
async fn tenant(store: &PostgresStore, org: String, n: u8) -> (String, String, Mandate, WebhookId) {
    let agent = format!("agt_load{n}");
    let id = AgentId::parse(&agent).unwrap();
    store
        .create_agent(&org, Env::Sandbox, &id, [200 + n; 32], None, 0)
        .await
        .unwrap()
        .expect("a fresh agent");
    let terms: Value = serde_json::from_str(&TERMS.replace("AGENT", &agent)).unwrap();
    let mandate = Mandate {
        id: MandateId::from_random(random16()),
        terms: MandateDraft::from_json(&terms).unwrap(),
        status: MandateStatus::Active,
        created_at: NOW,
    };
    store
        .insert_mandate(&org, Env::Sandbox, &mandate)
        .await
        .unwrap();
    let events = [
        "decision.review_pending",
        "decision.resolved",
        "mandate.revoked",
    ]
    .map(str::to_owned)
    .to_vec();
    let webhook = WebhookId::from_random(random16());
    store
        .create_webhook(
            &org,
            Env::Sandbox,
            &webhook,
            "https://hooks.example.com/",
            &events,
            0,
        )
        .await
        .unwrap();
    (org, agent, mandate, webhook)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn decisions_of_many_organizations_on_two_processes_make_no_two_phase_commit() {
    let Some(db) = database(Share::WithOthers).await else {
        return;
    };
    let (a, b) = (Process::new(&db).await, Process::new(&db).await);
    // Three organizations on each worker.
    let mut tenants = Vec::new();
    let mut on: std::collections::BTreeMap<String, usize> = Default::default();
    for n in 0..40u8 {
        let org = onboard(&a.store, &format!("load{n}"), 100 + n);
        let worker = db.worker_of("decisions", &org).await.to_string();
        let count = on.entry(worker).or_default();
        if *count < 3 {
            *count += 1;
            tenants.push(tenant(&a.store, org, n).await);
        }
        if tenants.len() == 6 {
            break;
        }
    }
    assert_eq!(
        tenants.len(),
        6,
        "three organizations on each worker: {on:?}"
    );
    let before = db.two_phase_commits().await;
    // Twelve decisions an organization, half through each process, all at once: allows,
    // reviews (with their events and deliveries), denials, some under an Idempotency-Key.
    let amounts = ["10", "250", "600", "20"];
    let answers = join_all(tenants.iter().flat_map(|(org, agent, ..)| {
        let (a, b) = (&a, &b);
        (0..12usize).map(move |i| {
            let process = if i % 2 == 0 { a } else { b };
            let key = (i % 3 == 0).then(|| format!("k-{org}-{i}"));
            process.decide(org, agent, amounts[i % amounts.len()], key)
        })
    }))
    .await;
    let verdicts: std::collections::BTreeSet<&str> = answers
        .iter()
        .map(|v| v["verdict"].as_str().unwrap())
        .collect();
    assert!(
        verdicts.contains("allow") && verdicts.contains("review"),
        "{verdicts:?}"
    );
    assert_eq!(
        db.two_phase_commits().await,
        before,
        "a decision made a two-phase commit"
    );
    let c = db.connect().await;
    let stored: i64 = c
        .query_one("SELECT COUNT(*) FROM decisions", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored, 6 * 12);
}

/// A group's writes reach the organization's worker as one call (migration 0017's
/// distributed function). With the process on the coordinator and
/// `citus_direct_writes=off`, each decision stored alone (a group of one, under an
/// Idempotency-Key or not) is one statement the coordinator sends to a worker, the call
/// delegated whole, where the build before sent two (its claim, then its store) and the one
/// before that six or more (the claim, the month's mark, the version move, the decision's
/// row, the claim settled, ...). By default the writer's lane sends it to the worker itself,
/// and the coordinator sends nothing but the Idempotency-Keys' claims.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_group_reaches_its_worker_as_one_call() {
    let Some(db) = database(Share::WithOthers).await else {
        return;
    };
    let setup = Process::new(&db).await;
    let org = onboard(&setup.store, "delegated", 220);
    let (org, agent, ..) = tenant(&setup.store, org, 50).await;
    for (params, calls) in [("?citus_direct_writes=off", 6), ("", 0)] {
        let p = Process::at(&format!("{}{params}", db.url)).await;
        // The agent's state is read and kept by the first decision; the mode is read once.
        let first = p.decide(&org, &agent, "10", None).await;
        assert!(first["id"].is_string(), "{first}");
        let (mode, _) = p.store.mode(&org, Env::Sandbox).await.unwrap();
        let before = db.coordinator_single_shard_queries().await;
        for i in 0..6 {
            let key = (i % 2 == 0).then(|| format!("k-delegated{params}-{i}"));
            let answer = p.decide_in(mode, &org, &agent, "10", key).await;
            assert!(answer["id"].is_string(), "{answer}");
        }
        let sent = db.coordinator_single_shard_queries().await - before;
        // Each decision: its one call, unless the lane writes to the worker itself; the
        // three under an Idempotency-Key, the key's claim too (the route's statement,
        // before the decision is made).
        assert_eq!(
            sent,
            calls + 3,
            "statements the coordinator sent to the workers for 6 decisions ({params})"
        );
    }
    let c = db.connect().await;
    let stored: i64 = c
        .query_one("SELECT COUNT(*) FROM decisions WHERE org_id = $1", &[&org])
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored, 14);
}

/// On the worker, a group's statements run on the shard tables of its organizations, as
/// PostgreSQL's own statements (the Citus step's function of each shard), not through
/// Citus: six decisions (three under an Idempotency-Key) make no statement the workers plan
/// through Citus, where the routed statements made two or more a decision. An organization
/// isolated to a shard of its own since the step ran is served through Citus (its
/// decisions all stored, none lost), and through its new shard's function once `migrate`
/// ran again. Its seqs stay dense throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_groups_statements_run_on_its_shards_and_through_citus_only_after_a_split() {
    let Some(db) = database(Share::WithOthers).await else {
        return;
    };
    let p = Process::new(&db).await;
    let org = onboard(&p.store, "shards", 222);
    let (org, agent, ..) = tenant(&p.store, org, 52).await;
    // The agent's state is read and kept by the first decision; the mode is read once.
    let first = p.decide(&org, &agent, "10", None).await;
    assert_eq!(first["verdict"], "allow", "{first}");
    let (mode, _) = p.store.mode(&org, Env::Sandbox).await.unwrap();
    let six = |round: &'static str| {
        let (p, org, agent) = (&p, &org, &agent);
        async move {
            for i in 0..6 {
                let key = (i % 2 == 0).then(|| format!("k-{round}-{i}"));
                // An allow, or past the mandate's velocity a denial: a decision stored either way.
                let answer = p.decide_in(mode, org, agent, "10", key).await;
                assert!(answer["id"].is_string(), "{answer}");
            }
        }
    };
    let before = db.workers_single_shard_queries().await;
    six("fast").await;
    let fast = db.workers_single_shard_queries().await - before;
    assert_eq!(
        fast, 0,
        "statements the workers ran through Citus for 6 decisions"
    );

    // The organization on a shard of its own: no function was written for it.
    let c = db.connect().await;
    c.batch_execute(&format!(
        "SELECT isolate_tenant_to_new_shard('environments', '{org}', 'CASCADE',
             shard_transfer_mode => 'block_writes')"
    ))
    .await
    .unwrap();
    let before = db.workers_single_shard_queries().await;
    six("routed").await;
    let routed = db.workers_single_shard_queries().await - before;
    assert!(
        routed >= 6 * 2,
        "only {routed} statements through Citus for 6 decisions after the split"
    );

    // `migrate` again writes the new shard's function.
    drop(open(&db).await);
    let before = db.workers_single_shard_queries().await;
    six("migrated").await;
    let again = db.workers_single_shard_queries().await - before;
    assert_eq!(again, 0, "statements through Citus after migrating again");

    let seqs: Vec<i64> = c
        .query(
            "SELECT seq FROM decisions WHERE org_id = $1 ORDER BY seq",
            &[&org],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(seqs, (1..=19).collect::<Vec<i64>>());
}

/// A process connected to one worker writes the groups of an organization on the other
/// straight to that worker (its lane's own connection, from `pg_dist_node`): the worker it
/// is connected to hands on no call. With `citus_direct_writes=off` each group goes through
/// the worker of the URL, which delegates it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_process_on_one_worker_writes_to_the_other_worker_directly() {
    let Some(db) = database(Share::WithOthers).await else {
        return;
    };
    let setup = Process::new(&db).await;
    let org = onboard(&setup.store, "direct", 223);
    let (org, agent, ..) = tenant(&setup.store, org, 53).await;
    let (_, other) = holder_and_other(&db, "environments", &org).await;
    let connected = db.worker_url(&other);
    let single_shard = single_shard_queries;
    for (params, handed_on) in [("", false), ("?citus_direct_writes=off", true)] {
        let p = Process::at(&format!("{connected}{params}")).await;
        let first = p.decide(&org, &agent, "10", None).await;
        assert!(first["id"].is_string(), "{first}");
        let (mode, _) = p.store.mode(&org, Env::Sandbox).await.unwrap();
        let before = single_shard(connected.clone()).await;
        for _ in 0..4 {
            let answer = p.decide_in(mode, &org, &agent, "10", None).await;
            assert!(answer["id"].is_string(), "{answer}");
        }
        let sent = single_shard(connected.clone()).await - before;
        if handed_on {
            assert!(
                sent >= 4,
                "with citus_direct_writes=off the connected worker delegated {sent} calls for 4 decisions"
            );
        } else {
            assert_eq!(sent, 0, "the connected worker handed on calls");
        }
    }
}

/// The worker that holds `org`'s rows of `table`, and the other worker.
async fn holder_and_other(
    db: &crate::citus::CitusDb,
    table: &str,
    org: &str,
) -> (
    mandate_test_kit::citus::Worker,
    mandate_test_kit::citus::Worker,
) {
    let holder = db.worker_of(table, org).await;
    let other = db
        .workers()
        .iter()
        .find(|w| **w != holder)
        .expect("two workers")
        .clone();
    (holder, other)
}

/// The statements the node at `url` ran on one shard through Citus in this database
/// (Citus's `query_execution_single_shard` there): each statement of a distributed table it
/// planned, run locally or handed on to the worker that holds the shard.
async fn single_shard_queries(url: String) -> i64 {
    let c = crate::citus::connect(&url).await.unwrap();
    c.query_one(
        "SELECT query_execution_single_shard FROM citus_stat_counters
         WHERE name = current_database()",
        &[],
    )
    .await
    .unwrap()
    .get(0)
}

/// An append of the tokens `<name><from>`..`<name><to>` (seqs from 1000) to the sandbox log
/// of `org` after `from` leaves.
fn log_append(org: &str, from: u64, to: u64, name: &str) -> LogAppend {
    let tokens: Vec<String> = (from..to)
        .map(|i| format!("{name}{i}.payload.sig"))
        .collect();
    let leaves = (from..to)
        .zip(&tokens)
        .map(|(i, t)| (i, 1000 + i as i64, tlog::leaf_hash(t.as_bytes())))
        .collect();
    let seq = |n: u64| if n == 0 { 0 } else { 999 + n as i64 };
    LogAppend {
        org: org.to_owned(),
        env: Env::Sandbox,
        from: (from, seq(from)),
        size: to,
        scanned_seq: seq(to),
        leaves,
        tokens,
        tiles: Vec::new(),
        checkpoint: None,
        signed_ms: 0,
    }
}

/// A log's append runs on the worker that holds its organization, and a strip's entries go
/// to that organization's shard of `log_entries` by its name: a process connected to the
/// other worker appends with nothing handed on by the worker it is connected to (Citus
/// would write each statement out as text, a strip's tokens as a hex literal), where with
/// `citus_direct_writes=off` that worker hands each of the append's statements on. On the
/// worker that holds the shard, `mandate_log_put_entries` plans no statement through Citus;
/// on the other it stores through Citus. Every append's entries are read back whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_logs_append_runs_on_its_worker_and_stores_its_entries_in_the_shard() {
    let Some(db) = database(Share::WithOthers).await else {
        return;
    };
    let setup = Process::new(&db).await;
    let org = onboard(&setup.store, "logged", 224);
    let (holder, other) = holder_and_other(&db, "log_entries", &org).await;
    let connected = db.worker_url(&other);
    let mut size = 0;
    for (params, handed_on) in [("", false), ("?citus_direct_writes=off", true)] {
        let p = Process::at(&format!("{connected}{params}")).await;
        let before = single_shard_queries(connected.clone()).await;
        assert!(
            p.store
                .append_log(log_append(&org, size, size + 3, "t"))
                .await
                .unwrap()
        );
        let sent = single_shard_queries(connected.clone()).await - before;
        if handed_on {
            assert!(
                sent >= 4,
                "with citus_direct_writes=off the connected worker handed on {sent} statements of an append"
            );
        } else {
            assert_eq!(
                sent, 0,
                "the connected worker handed on the append's statements"
            );
        }
        size += 3;
    }

    // The function itself, on the shard's worker and on the other.
    for (at, through_citus) in [(&holder, false), (&other, true)] {
        let url = db.worker_url(at);
        let c = crate::citus::connect(&url).await.unwrap();
        let before = single_shard_queries(url.clone()).await;
        c.execute(
            "SELECT mandate_log_put_entries($1, 'sandbox', $2, $3)",
            &[&org, &(size as i64), &b"bytes".to_vec()],
        )
        .await
        .unwrap();
        let planned = single_shard_queries(url).await - before;
        assert_eq!(
            planned > 0,
            through_citus,
            "{planned} statements through Citus"
        );
        size += 256;
    }

    let c = db.connect().await;
    let rows: Vec<(i64, Vec<u8>)> = c
        .query(
            "SELECT start, entries FROM log_entries WHERE org_id = $1 ORDER BY start",
            &[&org],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let starts: Vec<i64> = rows.iter().map(|(start, _)| *start).collect();
    assert_eq!(starts, [0, 3, 6, 262]);
    let tokens = split_entries(&rows[1].1, usize::MAX).unwrap();
    assert_eq!(
        tokens,
        [&b"t3.payload.sig"[..], b"t4.payload.sig", b"t5.payload.sig"]
    );
    assert_eq!(rows[2].1, b"bytes");
}

/// The writers' function plans each statement afresh on every call, on every node: called
/// 1,500 times on one connection to the worker that holds the organization (as a process
/// connected to that worker calls it), `mandate_record` leaves the connection's memory
/// where it was. Under a generic plan, Citus 13.2 keeps one more copy of a statement's local
/// shard plan on every execution whose organization is a parameter, and a writer's
/// connection grew without end.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_writers_function_does_not_grow_a_workers_connection() {
    let Some(db) = database(Share::WithOthers).await else {
        return;
    };
    let p = Process::new(&db).await;
    let org = onboard(&p.store, "kept", 221);
    let (org, agent, ..) = tenant(&p.store, org, 51).await;
    let worker = db.worker_of("environments", &org).await;
    let c = crate::citus::connect(&db.worker_url(&worker))
        .await
        .unwrap();
    let agent_seq: i64 = c
        .query_one(
            "SELECT seq FROM agents WHERE org_id = $1 AND id = $2",
            &[&org, &agent],
        )
        .await
        .unwrap()
        .get(0);
    let used = "SELECT SUM(total_bytes)::BIGINT FROM pg_backend_memory_contexts";
    // One decision a call, stored whatever the agent's version (the planted switch), as the
    // writers store a group of one: its version move, its seq, its month, its row.
    let record = c
        .prepare(
            "SELECT mandate_record($1, true, false, ARRAY[$1], ARRAY[24322::BIGINT],
                ARRAY[$1], ARRAY['sandbox'], ARRAY[$3::BIGINT], ARRAY[0::BIGINT],
                ARRAY['enforce'], ARRAY[$2], ARRAY[$4], ARRAY[NULL::TEXT], ARRAY['allow'],
                ARRAY['allow'], ARRAY[NULL::TEXT], ARRAY['1.00'], ARRAY['USD'],
                ARRAY['vendor:x'], ARRAY['software'], ARRAY['n_' || $2], ARRAY['pol'],
                ARRAY['iss'], ARRAY[0::BIGINT], ARRAY[300::BIGINT], ARRAY[0::BIGINT],
                ARRAY[NULL::TEXT], ARRAY[NULL::TEXT], ARRAY[true], ARRAY[NULL::TEXT],
                ARRAY[NULL::BYTEA], ARRAY[NULL::TEXT], ARRAY[NULL::BYTEA],
                ARRAY[NULL::BYTEA], ARRAY[NULL::TEXT], ARRAY[NULL::BYTEA], ARRAY[NULL::INT],
                ARRAY[NULL::BYTEA], ARRAY[NULL::TEXT], ARRAY[NULL::TEXT], ARRAY[NULL::TEXT],
                ARRAY[NULL::TEXT], ARRAY[NULL::BIGINT], ARRAY[NULL::BIGINT], ARRAY[NULL::TEXT],
                ARRAY[NULL::TEXT])",
        )
        .await
        .unwrap();
    let mut n = 0;
    let mut call = || {
        n += 1;
        let (c, record, org, agent) = (&c, &record, org.clone(), agent.clone());
        let id = format!("dec_memory{n:06}");
        async move {
            let row = c
                .query_one(record, &[&org, &id, &agent_seq, &agent])
                .await
                .unwrap();
            row.get::<_, Vec<i32>>(0)
        }
    };
    // Past PostgreSQL's five custom plans, when a generic one may be chosen.
    for _ in 0..10 {
        assert_eq!(call().await, vec![1]);
    }
    let before: i64 = c.query_one(used, &[]).await.unwrap().get(0);
    for _ in 0..1_500 {
        assert_eq!(call().await, vec![1], "each call stores its decision");
    }
    let after: i64 = c.query_one(used, &[]).await.unwrap().get(0);
    assert!(
        after - before < 16 << 20,
        "the connection grew by {} bytes in 1,500 calls",
        after - before
    );
    let stored: i64 = c
        .query_one(
            "SELECT COUNT(*) FROM decisions WHERE org_id = $1 AND id LIKE 'dec_memory%'",
            &[&org],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored, 1_510);
}

/// The writes outside the decision path that append an event, each router-only like a
/// decision: for an organization on each worker, a review approved (a fresh decision, the
/// review resolved, its `decision.resolved` event and delivery), one denied, the mandate
/// revoked (`mandate.revoked`), the webhook pinged (a delivery to it alone). None is a
/// two-phase commit, and every event has its delivery.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn events_appended_outside_the_decision_path_make_no_two_phase_commit() {
    let Some(db) = database(Share::WithOthers).await else {
        return;
    };
    let p = Process::new(&db).await;
    let mut tenants = Vec::new();
    let mut workers = std::collections::BTreeSet::new();
    // Agents' keys apart from the test above's.
    for n in 0..16u8 {
        let org = onboard(&p.store, &format!("events{n}"), 150 + n);
        let worker = db.worker_of("events", &org).await.to_string();
        if workers.insert(worker) {
            tenants.push(tenant(&p.store, org, 40 + n).await);
        }
        if tenants.len() == 2 {
            break;
        }
    }
    assert_eq!(tenants.len(), 2, "an organization on each worker");
    // The reviews to resolve, opened by decisions (router-only, tested above).
    let mut opened = Vec::new();
    for (org, agent, ..) in &tenants {
        let reviews = [
            p.decide(org, agent, "250", None).await,
            p.decide(org, agent, "260", None).await,
        ];
        for answer in &reviews {
            assert_eq!(answer["verdict"], "review", "{answer}");
        }
        opened.push(reviews);
    }
    let before = db.two_phase_commits().await;
    for ((org, _, mandate, webhook), [approve, deny]) in tenants.iter().zip(&opened) {
        let fresh = p.approve(org, approve).await;
        assert_eq!(fresh["verdict"], "allow", "{fresh}");
        p.deny(org, deny).await;
        let org: Arc<str> = Arc::from(org.as_str());
        let revoked = mandate_server::decision::mandates::revoke(
            &p.store,
            &p.agents,
            &org,
            Env::Sandbox,
            mandate,
            NOW,
        )
        .await
        .unwrap();
        assert!(matches!(revoked, Revocation::Revoked(_)), "{revoked:?}");
        let ping = p
            .store
            .ping_webhook(&org, Env::Sandbox, webhook, serde_json::json!({}), 0)
            .await
            .unwrap();
        assert!(ping.is_some(), "the webhook is active");
    }
    assert_eq!(
        db.two_phase_commits().await,
        before,
        "an event appended outside the decision path made a two-phase commit"
    );
    // Each organization's events, each with its delivery: two reviews opened, two
    // resolved, the mandate revoked, the ping.
    let c = db.connect().await;
    for (org, ..) in &tenants {
        let counts = c
            .query_one(
                "SELECT (SELECT COUNT(*) FROM events WHERE org_id = $1),
                        (SELECT COUNT(*) FROM deliveries WHERE org_id = $1)",
                &[org],
            )
            .await
            .unwrap();
        let (events, deliveries): (i64, i64) = (counts.get(0), counts.get(1));
        assert_eq!((events, deliveries), (6, 6), "{org}");
    }
}
