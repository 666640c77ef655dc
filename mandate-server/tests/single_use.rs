//! Single-use credentials on SQLite, below HTTP (no request body carries one yet): the real
//! decision service on a real SQLite file accepts a credential exactly once, whatever the
//! concurrency, answers `deny_replay` to every later presentation (also after a restart,
//! from the stored decisions), and a denied presentation does not use it up.
//! `tests/pg_store.rs` holds the same on PostgreSQL with two processes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::path::Path;
use std::sync::Arc;

use futures_util::future::join_all;
use mandate_core::amount::Amount;
use mandate_core::id::{AgentId, MandateId};
use mandate_core::mandate::{Mandate, MandateDraft, MandateStatus};
use mandate_core::names::{Category, Currency, Recipient};
use mandate_core::policy::{AuthorizationRequest, Mode};
use mandate_server::clock::{ms, random16};
use mandate_server::decision::agents::AgentStates;
use mandate_server::decision::mandates;
use mandate_server::decision::modes::ModeCache;
use mandate_server::decision::service::{Decider, Input};
use mandate_server::model::Env;
use mandate_server::signing::fast::AwsLcSigner;
use mandate_server::storage::admin::NewOrg;
use mandate_server::storage::{AdminStore, AgentStore, DbLocation, Store};
use serde_json::Value;
use time::OffsetDateTime;
use time::macros::datetime;

const NOW: OffsetDateTime = datetime!(2026-11-22 12:00 UTC);
const ORG: &str = "org_acme";

/// One server: its store on `path` and its in-memory state.
struct Server {
    store: Arc<dyn Store>,
    agents: AgentStates,
    modes: ModeCache,
    signer: Arc<AwsLcSigner>,
}

impl Server {
    async fn open(path: &Path) -> Self {
        let location = DbLocation::Sqlite(path.to_owned());
        let (store, _) = mandate_server::serve::open_store(&location, true)
            .await
            .unwrap();
        let secret = mandate_server::signing::fresh_secret().unwrap();
        Self {
            store,
            agents: AgentStates::default(),
            modes: ModeCache::default(),
            signer: Arc::new(AwsLcSigner::from_secret_bytes("sandbox-1", secret.expose()).unwrap()),
        }
    }

    /// `agent` asks for 10 USD in `category`, presenting `credential`: the answer's JSON.
    async fn present(&self, agent: &str, category: &str, credential: &str) -> Value {
        let org: Arc<str> = Arc::from(ORG);
        let decider = Decider {
            store: self.store.as_ref(),
            agents: &self.agents,
            modes: &self.modes,
            signer: self.signer.clone(),
            issuer: "https://verdicts.test",
            org: &org,
            env: Env::Sandbox,
            policy_version: "pol_2026-11-22.1",
            mode: Mode::Enforce,
            now: NOW,
        };
        let request = AuthorizationRequest {
            agent: AgentId::parse(agent).unwrap(),
            amount: Amount::parse("10").unwrap(),
            currency: Currency::parse("USD").unwrap(),
            recipient: Recipient::parse("vendor:acme").unwrap(),
            category: Category::parse(category).unwrap(),
        };
        let input = Input::Request {
            request,
            slot: None,
            credential: Some(credential.to_owned()),
        };
        let body = decider.run(input, |_| Ok(None)).await.unwrap();
        serde_json::from_slice(&body).unwrap()
    }
}

async fn onboard(server: &Server, agent: &str) {
    let org = NewOrg {
        id: ORG.into(),
        name: "acme".into(),
        policy_prefix: "pol_2026-11-22.".into(),
        keys: vec![([1; 32], Env::Sandbox)],
        now_ms: ms(NOW),
    };
    server.store.create_org(&org).unwrap().unwrap();
    let mut key = [0; 32];
    key[..16].copy_from_slice(&random16());
    let id = AgentId::parse(agent).unwrap();
    server
        .store
        .create_agent(ORG, Env::Sandbox, &id, key, ms(NOW))
        .await
        .unwrap()
        .unwrap();
    let terms: Value = serde_json::from_str(&format!(
        r#"{{"agent": "{agent}", "limits": {{"per_transaction": 100, "currency": "USD"}},
            "categories": ["software"], "expires": "2026-12-31"}}"#
    ))
    .unwrap();
    let mandate = Mandate {
        id: MandateId::from_random(random16()),
        terms: MandateDraft::from_json(&terms).unwrap(),
        status: MandateStatus::Active,
        created_at: NOW,
    };
    mandates::put(
        server.store.as_ref(),
        &server.agents,
        &Arc::from(ORG),
        Env::Sandbox,
        &mandate,
        NOW,
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn a_single_use_credential_is_accepted_once_and_replays_are_denied() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mandate.db");
    let server = Server::open(&path).await;
    onboard(&server, "agt_buyer").await;
    // Denied for its category: not used up.
    let denied = server.present("agt_buyer", "travel", "cred_a").await;
    assert_eq!(denied["verdict"], "deny_category");
    let answers = join_all((0..9).map(|_| server.present("agt_buyer", "software", "cred_a"))).await;
    let mut verdicts: Vec<&str> = answers
        .iter()
        .map(|a| a["verdict"].as_str().unwrap())
        .collect();
    verdicts.sort();
    assert_eq!(verdicts, [&["allow"][..], &["deny_replay"; 8][..]].concat());
    let replay = answers
        .iter()
        .find(|a| a["verdict"] == "deny_replay")
        .unwrap();
    assert_eq!(
        replay["reason"],
        "single-use credential cred_a was already accepted and cannot be presented again"
    );
    drop(server);
    // Another server on the same file (a restart): still a replay.
    let again = Server::open(&path).await;
    let replayed = again.present("agt_buyer", "software", "cred_a").await;
    assert_eq!(replayed["verdict"], "deny_replay");
}
