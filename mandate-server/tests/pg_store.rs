//! The decision path on PostgreSQL across processes, below HTTP: two "processes" are two
//! [`PostgresStore`]s (two pools) on one database, each with its own agent locks, cached
//! agent states and cached modes, deciding through the real decision service. Each test
//! makes its own database on `MANDATE_TEST_POSTGRES_URL` (skipped, with a note, without it).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines,
    missing_docs
)]

use std::sync::Arc;

use futures_util::future::join_all;
use mandate_core::{
    AgentId, Amount, AuthorizationRequest, Category, Currency, Mandate, MandateDraft, MandateId,
    MandateStatus, Mode, Recipient,
};
use mandate_protocol::id::ReviewId;
use mandate_server::clock::{ms, random16};
use mandate_server::decision::agents::AgentStates;
use mandate_server::decision::mandates;
use mandate_server::decision::modes::ModeCache;
use mandate_server::decision::service::{Credential, Decider, DecisionError, Input};
use mandate_server::model::Env;
use mandate_server::signing::fast::AwsLcSigner;
use mandate_server::storage::admin::NewOrg;
use mandate_server::storage::ap2::Ap2Store;
use mandate_server::storage::mandates::Revocation;
use mandate_server::storage::postgres::PostgresStore;
use mandate_server::storage::{
    AdminStore, AgentStore, DbLocation, DecidingStore, DecisionStore, OrgStore, Store,
};
use mandate_test_kit::test_db::TestDb;
use serde_json::Value;
use time::OffsetDateTime;
use time::macros::datetime;

const NOW: OffsetDateTime = datetime!(2026-11-22 12:00 UTC);

macro_rules! database {
    ($test:expr) => {
        match TestDb::create($test) {
            Some(db) => db,
            None => return,
        }
    };
}

/// One server process: its store (its own pool) and its in-memory state.
struct Process {
    store: Arc<PostgresStore>,
    agents: AgentStates,
    modes: ModeCache,
    leaves: mandate_server::model::leaves::Answered,
    news: mandate_server::model::news::News,
    signer: Arc<AwsLcSigner>,
}

const ORG: &str = "org_acme";

impl Process {
    async fn start(db: &TestDb) -> Self {
        Self::start_at(&db.url).await
    }

    /// A process on `url` (a test database's, perhaps written as a host list).
    async fn start_at(url: &str) -> Self {
        let DbLocation::Postgres(url) = url.parse::<DbLocation>().unwrap() else {
            panic!("not a PostgreSQL URL");
        };
        let store = Arc::new(PostgresStore::open(&url, true).await.unwrap());
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

    fn org() -> Arc<str> {
        Arc::from(ORG)
    }

    /// The id of `agent`'s mandate in force, as a route checking a credential reads it.
    async fn current_mandate(&self, agent: &str) -> MandateId {
        let (mandate, _) = self
            .store
            .current_ap2_source(ORG, Env::Sandbox, &AgentId::parse(agent).unwrap())
            .await
            .unwrap()
            .expect("the agent has a mandate");
        mandate
    }

    /// The mode as a request finds it: cached, or read and cached.
    async fn mode(&self) -> Mode {
        if let Some(mode) = self.modes.get(ORG, Env::Sandbox) {
            return mode;
        }
        let (mode, _) = self.store.mode(ORG, Env::Sandbox).await.unwrap();
        self.modes.fill(ORG, Env::Sandbox, mode)
    }

    fn decider<'a>(&'a self, org: &'a Arc<str>, mode: Mode) -> Decider<'a> {
        Decider {
            store: self.store.as_ref(),
            agents: &self.agents,
            leaves: &self.leaves,
            news: &self.news,
            modes: &self.modes,
            signer: self.signer.clone(),
            leaf_tag: None,
            issuer: "https://verdicts.test",
            org,
            env: Env::Sandbox,
            policy_version: "pol_2026-11-22.1",
            mode,
            now: NOW,
        }
    }

    /// An authorization of `amount` USD of software by `agent`: the answer's JSON.
    async fn authorize(&self, agent: &str, amount: &str) -> Result<Value, DecisionError> {
        self.present(agent, amount, "software", None).await
    }

    /// An authorization of `amount` USD in `category` by `agent`, presenting the single-use
    /// credential `credential` if given: the answer's JSON.
    async fn present(
        &self,
        agent: &str,
        amount: &str,
        category: &str,
        credential: Option<&str>,
    ) -> Result<Value, DecisionError> {
        let org = Self::org();
        let mode = self.mode().await;
        let request = AuthorizationRequest {
            agent: AgentId::parse(agent).unwrap(),
            amount: Amount::parse(amount).unwrap(),
            currency: Currency::parse("USD").unwrap(),
            recipient: Recipient::parse("vendor:acme").unwrap(),
            category: Category::parse(category).unwrap(),
        };
        let body = self
            .decider(&org, mode)
            .run(
                Input::Request {
                    request,
                    slot: None,
                    credential: match credential {
                        Some(id) => Some(Credential {
                            id: id.to_owned(),
                            mandate: self.current_mandate(agent).await,
                        }),
                        None => None,
                    },
                    bindings: Default::default(),
                },
                |_| Ok(None),
            )
            .await?;
        Ok(serde_json::from_slice(&body).unwrap())
    }

    /// Stores a mandate for `agent` through this process (under its agent lock).
    async fn mandate(&self, agent: &str, terms: &str) -> Mandate {
        let value: Value = serde_json::from_str(&terms.replace("AGENT", agent)).unwrap();
        let mandate = Mandate {
            id: MandateId::from_random(random16()),
            terms: MandateDraft::from_json(&value).unwrap(),
            status: MandateStatus::Active,
            created_at: NOW,
        };
        let store: &dyn Store = self.store.as_ref();
        mandates::put(
            store,
            &self.agents,
            &Self::org(),
            Env::Sandbox,
            &mandate,
            NOW,
        )
        .await
        .unwrap();
        mandate
    }
}

/// An organization (sandbox in enforce) and `agents`, written through `process`.
async fn onboard(process: &Process, agents: &[&str]) {
    let org = NewOrg {
        id: ORG.into(),
        name: "acme".into(),
        policy_prefix: "pol_2026-11-22.".into(),
        keys: vec![([1; 32], Env::Sandbox, None)],
        now_ms: ms(NOW),
    };
    process.store.create_org(&org).unwrap().unwrap();
    for agent in agents {
        let mut key = [0; 32];
        key[..16].copy_from_slice(&random16());
        process
            .store
            .create_agent(
                ORG,
                Env::Sandbox,
                &AgentId::parse(agent).unwrap(),
                key,
                None,
                ms(NOW),
            )
            .await
            .unwrap()
            .unwrap();
    }
}

const LIMITED: &str = r#"{"agent": "AGENT", "limits": {"per_transaction": 100, "per_month": 450, "currency": "USD"},
    "categories": ["software"], "expires": "2026-12-31"}"#;

const REVIEWED: &str = r#"{"agent": "AGENT", "limits": {"per_transaction": 500, "per_month": 2000, "currency": "USD"},
    "categories": ["software"], "review_above": 200, "expires": "2026-12-31"}"#;

/// Approves review `id` through `process`, as `POST /v1/reviews/{id}/approve` does.
async fn approve(process: &Process, id: ReviewId) -> Result<Vec<u8>, DecisionError> {
    let org = Process::org();
    let (review, _) = process
        .store
        .review(org.clone(), Env::Sandbox, id)
        .await
        .unwrap()
        .unwrap();
    let original = process
        .store
        .decision(ORG, Env::Sandbox, None, &review.decision)
        .await
        .unwrap()
        .unwrap();
    // The other process may have resolved it before this one read it: refused here, as the
    // route refuses it, before anything is decided.
    let Ok(approved) = review.approve(mandate_core::DecisionId::from_random(random16()), NOW)
    else {
        return Err(DecisionError::AlreadyResolved(review.id.clone()));
    };
    let mode = process.mode().await;
    process
        .decider(&org, mode)
        .run(
            Input::Approval {
                approved,
                original: Box::new(original),
            },
            |_| Ok(None),
        )
        .await
}

fn verdicts(answers: &[Result<Value, DecisionError>]) -> Vec<String> {
    let mut out: Vec<String> = answers
        .iter()
        .map(|a| match a {
            Ok(v) => v["verdict"].as_str().unwrap().to_owned(),
            Err(e) => format!("error: {e}"),
        })
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn racing_on_one_agents_month_across_two_processes_allows_exactly_what_fits() {
    let db = database!("racing_on_one_agents_month_across_two_processes_allows_exactly_what_fits");
    let (one, two) = (Process::start(&db).await, Process::start(&db).await);
    onboard(&one, &["agt_racer"]).await;
    one.mandate("agt_racer", LIMITED).await;
    // Both processes have the agent's state cached before the race.
    assert_eq!(
        one.authorize("agt_racer", "1").await.unwrap()["verdict"],
        "allow"
    );
    assert_eq!(
        two.authorize("agt_racer", "1").await.unwrap()["verdict"],
        "allow"
    );
    // 448 left of 450: four of eight hundreds fit, whichever process answers.
    let answers = join_all((0..8).map(|i| {
        let process = if i % 2 == 0 { &one } else { &two };
        process.authorize("agt_racer", "100")
    }))
    .await;
    let verdicts = verdicts(&answers);
    assert_eq!(
        verdicts.iter().filter(|v| *v == "allow").count(),
        4,
        "{verdicts:?}"
    );
    assert_eq!(
        verdicts.iter().filter(|v| *v == "deny_limit").count(),
        4,
        "{verdicts:?}"
    );
    // The log agrees: ten decisions, 402 allowed in all.
    assert_eq!(db.number("SELECT COUNT(*) FROM decisions"), 10);
    assert_eq!(
        db.number("SELECT SUM(amount::NUMERIC)::BIGINT FROM decisions WHERE verdict = 'allow'"),
        402
    );
}

#[tokio::test]
async fn a_burst_across_two_processes_lets_exactly_ten_through_velocity() {
    let db = database!("a_burst_across_two_processes_lets_exactly_ten_through_velocity");
    let (one, two) = (Process::start(&db).await, Process::start(&db).await);
    onboard(&one, &["agt_burst"]).await;
    one.mandate("agt_burst", LIMITED).await;
    let answers = join_all((0..20).map(|i| {
        let process = if i % 2 == 0 { &one } else { &two };
        process.authorize("agt_burst", "1")
    }))
    .await;
    let verdicts = verdicts(&answers);
    assert_eq!(
        verdicts.iter().filter(|v| *v == "allow").count(),
        10,
        "{verdicts:?}"
    );
    assert_eq!(
        verdicts.iter().filter(|v| *v == "deny_velocity").count(),
        10,
        "{verdicts:?}"
    );
    assert_eq!(db.number("SELECT COUNT(*) FROM decisions"), 20);
}

#[tokio::test]
async fn a_revoke_through_one_process_denies_the_next_request_on_the_other() {
    let db = database!("a_revoke_through_one_process_denies_the_next_request_on_the_other");
    let (one, two) = (Process::start(&db).await, Process::start(&db).await);
    onboard(&one, &["agt_spender"]).await;
    let mandate = one.mandate("agt_spender", LIMITED).await;
    // Process two has the agent cached with its mandate active.
    assert_eq!(
        two.authorize("agt_spender", "5").await.unwrap()["verdict"],
        "allow"
    );
    let store: &dyn Store = one.store.as_ref();
    let revoked = mandates::revoke(
        store,
        &one.agents,
        &Process::org(),
        Env::Sandbox,
        &mandate,
        NOW,
    )
    .await
    .unwrap();
    assert!(matches!(revoked, Revocation::Revoked(_)), "{revoked:?}");
    let after = two.authorize("agt_spender", "5").await.unwrap();
    let verdict = after["verdict"].as_str().unwrap();
    assert!(verdict.starts_with("deny"), "{after}");
}

#[tokio::test]
async fn a_new_mandate_through_one_process_is_used_by_the_next_request_on_the_other() {
    let db =
        database!("a_new_mandate_through_one_process_is_used_by_the_next_request_on_the_other");
    let (one, two) = (Process::start(&db).await, Process::start(&db).await);
    onboard(&one, &["agt_switcher"]).await;
    one.mandate("agt_switcher", LIMITED).await;
    // Two has the first mandate cached: 150 is over its per-transaction limit.
    assert_eq!(
        two.authorize("agt_switcher", "150").await.unwrap()["verdict"],
        "deny_limit"
    );
    let second = one.mandate("agt_switcher", REVIEWED).await;
    let after = two.authorize("agt_switcher", "150").await.unwrap();
    assert_eq!(after["verdict"], "allow", "{after}");
    assert_eq!(after["mandate"], second.id.as_str());
}

#[tokio::test]
async fn a_mode_switch_through_one_process_is_seen_by_the_next_decision_on_the_other() {
    let db =
        database!("a_mode_switch_through_one_process_is_seen_by_the_next_decision_on_the_other");
    let (one, two) = (Process::start(&db).await, Process::start(&db).await);
    onboard(&one, &["agt_watched"]).await;
    one.mandate("agt_watched", LIMITED).await;
    // Two decides in enforce (its cache says so): over the limit is denied.
    let before = two.authorize("agt_watched", "150").await.unwrap();
    assert_eq!(
        (&before["verdict"], &before["mode"]),
        (&"deny_limit".into(), &"enforce".into())
    );
    // One switches the sandbox to observe, as POST /v1/enforcement does there.
    let (mode, _) = one
        .store
        .set_mode(ORG, Env::Sandbox, Mode::Observe, ms(NOW))
        .await
        .unwrap();
    one.modes.set(ORG, Env::Sandbox, mode);
    // Two's next decision is made in observe, and its cache follows.
    let after = two.authorize("agt_watched", "150").await.unwrap();
    assert_eq!(after["mode"], "observe", "{after}");
    assert_eq!(after["verdict"], "allow", "{after}");
    assert_eq!(after["policy_verdict"], "deny_limit", "{after}");
    assert_eq!(two.modes.get(ORG, Env::Sandbox), Some(Mode::Observe));
}

#[tokio::test]
async fn an_approval_made_on_two_processes_at_once_resolves_once() {
    let db = database!("an_approval_made_on_two_processes_at_once_resolves_once");
    let (one, two) = (Process::start(&db).await, Process::start(&db).await);
    onboard(&one, &["agt_big"]).await;
    one.mandate("agt_big", REVIEWED).await;
    let opened = one.authorize("agt_big", "300").await.unwrap();
    assert_eq!(opened["verdict"], "review", "{opened}");
    let review_id = ReviewId::parse(opened["review"]["id"].as_str().unwrap()).unwrap();
    let (a, b) = tokio::join!(approve(&one, review_id.clone()), approve(&two, review_id));
    let results = [a, b];
    assert_eq!(
        results.iter().filter(|r| r.is_ok()).count(),
        1,
        "{results:?}"
    );
    assert!(
        results
            .iter()
            .any(|r| matches!(r, Err(DecisionError::AlreadyResolved(_)))),
        "{results:?}"
    );
    assert_eq!(
        db.number("SELECT COUNT(*) FROM decisions WHERE supersedes IS NOT NULL"),
        1
    );
    assert_eq!(
        db.number("SELECT COUNT(*) FROM events WHERE type = 'decision.resolved'"),
        1
    );
    // The approval moved the agent's spend: 300 of 2000 is counted on both processes.
    let after = two.authorize("agt_big", "190").await.unwrap();
    assert_eq!(after["verdict"], "allow");
    assert_eq!(
        db.number("SELECT SUM(amount::NUMERIC)::BIGINT FROM decisions WHERE verdict = 'allow'"),
        490
    );
}

/// A single-use credential presented ten times at once, five times to each of two
/// processes: accepted exactly once (one allow), the nine others `deny_replay`, all ten
/// stored; presented again later to either process, `deny_replay`. A presentation that is
/// denied (a category the mandate does not allow) does not use it up.
#[tokio::test]
async fn a_single_use_credential_is_accepted_once_across_two_processes() {
    let db = database!("a_single_use_credential_is_accepted_once_across_two_processes");
    let (one, two) = (Process::start(&db).await, Process::start(&db).await);
    onboard(&one, &["agt_racer"]).await;
    one.mandate("agt_racer", LIMITED).await;
    let denied = one
        .present("agt_racer", "10", "travel", Some("cred_a"))
        .await
        .unwrap();
    assert_eq!(denied["verdict"], "deny_category");
    let answers = join_all((0..10).map(|i| {
        let process = if i % 2 == 0 { &one } else { &two };
        process.present("agt_racer", "10", "software", Some("cred_a"))
    }))
    .await;
    let verdicts = verdicts(&answers);
    let mut expected = vec!["allow".to_owned()];
    expected.extend(std::iter::repeat_n("deny_replay".to_owned(), 9));
    expected.sort();
    assert_eq!(verdicts, expected);
    for answer in answers.iter().flatten() {
        if answer["verdict"] == "deny_replay" {
            assert_eq!(
                answer["reason"],
                "single-use credential cred_a was already accepted and cannot be presented again"
            );
        }
    }
    for process in [&one, &two] {
        let again = process
            .present("agt_racer", "10", "software", Some("cred_a"))
            .await
            .unwrap();
        assert_eq!(again["verdict"], "deny_replay");
    }
    // The log holds every decision (thirteen requests at one instant: the replays come
    // before the velocity rule) and one use of the credential, by the allow.
    assert_eq!(
        db.number("SELECT COUNT(*) FROM decisions WHERE agent_id = 'agt_racer'"),
        1 + 10 + 2
    );
    assert_eq!(
        db.number(
            "SELECT COUNT(*) FROM accepted_credentials c JOIN decisions d ON d.id = c.decision_id
             WHERE c.id = 'cred_a' AND d.verdict = 'allow'"
        ),
        1
    );
}

/// A `--db` host list whose first host is down (a closed port stands for the lost machine of
/// a failover) connects to the next one, as libpq does, and decides there: the form a
/// failover manager hands out, `HOST1:PORT1,HOST2:PORT2/DB?target_session_attrs=read-write`.
#[tokio::test]
async fn a_host_list_whose_first_host_is_down_decides_on_the_next() {
    let db = database!("a_host_list_whose_first_host_is_down_decides_on_the_next");
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // postgres://[USER@]HOST:PORT/DB → postgres://[USER@]127.0.0.1:CLOSED,HOST:PORT/DB
    let (scheme, rest) = db.url.split_once("://").unwrap();
    let authority_end = rest.find('/').unwrap();
    let at = rest[..authority_end].rfind('@').map_or(0, |i| i + 1);
    let separator = if rest.contains('?') { '&' } else { '?' };
    let url = format!(
        "{scheme}://{}127.0.0.1:{closed},{}{separator}target_session_attrs=read-write",
        &rest[..at],
        &rest[at..]
    );
    let process = Process::start_at(&url).await;
    onboard(&process, &["agt_listed"]).await;
    process.mandate("agt_listed", LIMITED).await;
    let answer = process.authorize("agt_listed", "10").await.unwrap();
    assert_eq!(answer["verdict"], "allow");
    assert_eq!(db.number("SELECT COUNT(*) FROM decisions"), 1);
}
