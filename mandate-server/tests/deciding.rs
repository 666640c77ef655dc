//! The decision service on a real store, below HTTP: what `decision::service` promises
//! about single-use credentials beyond what the store does. The storage conformance suite
//! (mandate-storage/tests/conformance) hands the store decisions made by hand, so it sees
//! that a credential is accepted once; that the service answers every other presentation
//! `deny_replay` naming it, and refuses to decide under a mandate replaced since the
//! credential was checked, is tested here, through the real `Decider`.
//!
//! Each test runs on an SQLite file and on a PostgreSQL database of the test harness's
//! throwaway cluster (mandate-test-kit/src/postgres.rs; skipped without PostgreSQL unless
//! `MANDATE_REQUIRE_POSTGRES=1`, as in CI).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines,
    missing_docs
)]

use std::any::Any;
use std::sync::Arc;

use futures_util::future::join_all;
use mandate_core::{
    AgentId, Amount, AuthorizationRequest, Category, Currency, Mandate, MandateDraft, MandateId,
    MandateStatus, Recipient,
};
use mandate_server::clock::{ms, random16};
use mandate_server::decision::agents::AgentStates;
use mandate_server::decision::modes::ModeCache;
use mandate_server::decision::service::{Credential, Decider, DecisionError, Input};
use mandate_server::model::Env;
use mandate_server::signing::fast::AwsLcSigner;
use mandate_server::storage::admin::NewOrg;
use mandate_server::storage::open::open_store;
use mandate_server::storage::{DbLocation, Store};
use mandate_test_kit::postgres::{Durability, database};
use serde_json::Value;
use time::OffsetDateTime;
use time::macros::datetime;

/// Each test as `NAME::sqlite` and `NAME::postgres`, on a fresh store of that engine.
macro_rules! on_each_engine {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    let (store, _keep) = super::sqlite().await;
                    super::$name(store.as_ref()).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    let Some((store, _keep)) = super::postgres().await else {
                        return;
                    };
                    super::$name(store.as_ref()).await;
                }
            }
        )*
    };
}

on_each_engine!(
    a_single_use_credential_is_accepted_once_even_at_once,
    a_credential_checked_under_a_replaced_mandate_is_not_accepted,
);

/// A store, and what must live as long as it (its file, its database).
type Opened = (Arc<dyn Store>, Box<dyn Any + Send>);

/// A fresh SQLite file's store.
async fn sqlite() -> Opened {
    let dir = tempfile::tempdir().unwrap();
    let location = DbLocation::Sqlite(dir.path().join("deciding.db"));
    let (store, _) = open_store(&location, true).await.unwrap();
    (store, Box::new(dir))
}

/// A fresh PostgreSQL database's store; `None` without PostgreSQL here.
async fn postgres() -> Option<Opened> {
    let db = database(Durability::Fast).await?;
    let location = db.url.parse::<DbLocation>().unwrap();
    let (store, _) = open_store(&location, true).await.unwrap();
    Some((store, Box::new(db)))
}

const NOW: OffsetDateTime = datetime!(2026-11-22 12:00 UTC);
const ORG: &str = "org_deciding";

fn agent_id(name: &str) -> AgentId {
    AgentId::parse(name).unwrap()
}

/// The organization (its sandbox in enforce) and `agent`, with a mandate of 500 a
/// payment, reviewed above 200.
async fn onboard(store: &dyn Store, agent: &str) {
    store
        .create_org(&NewOrg {
            id: ORG.into(),
            name: "acme".into(),
            policy_prefix: "pol_2026-11-22.".into(),
            keys: vec![([1; 32], Env::Sandbox, None)],
            now_ms: ms(NOW),
        })
        .unwrap()
        .unwrap();
    store
        .create_agent(ORG, Env::Sandbox, &agent_id(agent), [10; 32], None, ms(NOW))
        .await
        .unwrap()
        .unwrap();
    mandate(store, agent).await;
}

/// A new mandate of `agent`, stored: the one in force from now on.
async fn mandate(store: &dyn Store, agent: &str) -> Mandate {
    let terms = r#"{"agent": "AGENT", "limits": {"per_transaction": 500, "per_month": 2000,
        "currency": "USD"}, "categories": ["software"], "review_above": 200,
        "expires": "2026-12-31"}"#;
    let value: Value = serde_json::from_str(&terms.replace("AGENT", agent)).unwrap();
    let mandate = Mandate {
        id: MandateId::from_random(random16()),
        terms: MandateDraft::from_json(&value).unwrap(),
        status: MandateStatus::Active,
        created_at: NOW,
    };
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
    leaves: mandate_server::model::leaves::Answered,
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

    /// Decides `amount` USD of software for `agent`, presenting the single-use credential
    /// `id` as the route checked it: against the agent's mandate in force. The answer's
    /// JSON.
    async fn present(&self, store: &dyn Store, agent: &str, amount: &str, id: &str) -> Value {
        let (mandate, _) = store
            .current_ap2_source(ORG, Env::Sandbox, &agent_id(agent))
            .await
            .unwrap()
            .expect("the agent has a mandate");
        let credential = Credential {
            id: id.to_owned(),
            mandate,
        };
        self.decide(store, agent, amount, credential).await.unwrap()
    }

    /// Decides `amount` USD of software for `agent` with `credential` through the real
    /// decision service: the answer's JSON, or why nothing was decided.
    async fn decide(
        &self,
        store: &dyn Store,
        agent: &str,
        amount: &str,
        credential: Credential,
    ) -> Result<Value, DecisionError> {
        let (mode, _) = store.mode(ORG, Env::Sandbox).await.unwrap();
        let decider = Decider {
            store,
            agents: &self.agents,
            leaves: &self.leaves,
            news: &self.news,
            modes: &self.modes,
            signer: self.signer.clone(),
            leaf_tag: None,
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
        let input = Input::Request {
            request,
            slot: None,
            credential: Some(credential),
            bindings: Default::default(),
        };
        let body = decider.run(input, |_| Ok(None)).await?;
        Ok(serde_json::from_slice(&body).unwrap())
    }
}

/// A single-use credential presented five times at once is accepted by exactly one
/// decision (an allow; a `review` accepts one too, a denial does not); every other
/// presentation, at once or later, through this process's state or another's (rebuilt
/// from the store, as after a restart), is `deny_replay` naming it.
async fn a_single_use_credential_is_accepted_once_even_at_once(store: &dyn Store) {
    onboard(store, "agt_c").await;
    let one = Deciding::new();
    // Denied (over per_transaction 500): the credential is not used up.
    let denied = one.present(store, "agt_c", "600", "cred_1").await;
    assert_eq!(denied["verdict"], "deny_limit");
    let answers = join_all((0..5).map(|_| one.present(store, "agt_c", "10", "cred_1"))).await;
    let mut verdicts: Vec<&str> = answers
        .iter()
        .map(|a| a["verdict"].as_str().unwrap())
        .collect();
    verdicts.sort();
    assert_eq!(
        verdicts,
        [
            "allow",
            "deny_replay",
            "deny_replay",
            "deny_replay",
            "deny_replay"
        ]
    );
    let replay = answers
        .iter()
        .find(|a| a["verdict"] == "deny_replay")
        .unwrap();
    assert_eq!(
        replay["reason"],
        "single-use credential cred_1 was already accepted and cannot be presented again"
    );
    let other = Deciding::new();
    let again = other.present(store, "agt_c", "10", "cred_1").await;
    assert_eq!(again["verdict"], "deny_replay");
    // Another credential is its own; a review accepts it.
    let reviewed = other.present(store, "agt_c", "300", "cred_2").await;
    assert_eq!(reviewed["verdict"], "review");
    let again = one.present(store, "agt_c", "300", "cred_2").await;
    assert_eq!(again["verdict"], "deny_replay");
}

/// A credential checked against a mandate that another replaced before the decision held
/// the agent's lock is refused (`MandateReplaced`): nothing is stored and the credential
/// stays unused, so the same credential is accepted under the mandate now in force.
async fn a_credential_checked_under_a_replaced_mandate_is_not_accepted(store: &dyn Store) {
    onboard(store, "agt_m").await;
    let (first, _) = store
        .current_ap2_source(ORG, Env::Sandbox, &agent_id("agt_m"))
        .await
        .unwrap()
        .unwrap();
    // The route checked the credential under `first`; `second` replaced it meanwhile.
    let second = mandate(store, "agt_m").await;
    assert_ne!(first, second.id);
    let deciding = Deciding::new();
    let credential = |mandate: &MandateId| Credential {
        id: "cred_m".to_owned(),
        mandate: mandate.clone(),
    };
    let stale = deciding
        .decide(store, "agt_m", "10", credential(&first))
        .await;
    match stale {
        Err(DecisionError::MandateReplaced { checked, .. }) => assert_eq!(checked, first),
        other => panic!("expected MandateReplaced, got {other:?}"),
    }
    assert!(
        !store
            .credential_accepted(Arc::from(ORG), Env::Sandbox, "cred_m".to_owned())
            .await
            .unwrap()
    );
    let page = store
        .decisions_page(ORG, Env::Sandbox, &Default::default(), i64::MAX, 10)
        .await
        .unwrap();
    assert!(page.is_empty(), "nothing stored: {page:?}");
    let answer = deciding
        .decide(store, "agt_m", "10", credential(&second.id))
        .await
        .unwrap();
    assert_eq!(answer["verdict"], "allow");
    assert_eq!(answer["mandate"], second.id.as_str());
}
