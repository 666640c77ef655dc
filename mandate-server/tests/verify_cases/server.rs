//! The tokens of the shared cases, signed by the real server: started in-process on port 0
//! with a fresh SQLite file and a manual clock, one organization, its live environment
//! switched to enforce, and the requests a counterparty's verdicts come from.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mandate_core::Signer as _;
use mandate_server::clock::{Clock as _, ManualClock};
use mandate_server::operator;
use mandate_server::serve::{self, Config, Running};
use mandate_test_kit::ap2::Ap2Keys;
use serde_json::{Value, json};
use time::format_description::well_known::Rfc3339;
use time::macros::datetime;

/// The issuer the server is configured with, so that the file does not name a port.
pub const ISSUER: &str = "https://verdicts.example.com";
/// The x402 payee of the bound verdict.
pub const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";

/// What the server signed and published, and what the bound verdicts were bound to.
pub struct Signed {
    /// The JWK Set as served on the public host.
    pub jwks: Value,
    /// Each token by name: `allow`, `review`, `deny`, `sandbox`, `x402`, `ap2`, `acp`.
    pub tokens: BTreeMap<&'static str, String>,
    /// The x402 requirements the `x402` token is bound to (20 USDC).
    pub x402: Value,
    /// The AP2 open mandate's digest the `ap2` token is bound to (its transaction `tx-1`).
    pub ap2_digest: String,
    /// The ACP allowance the `acp` token is bound to (20.00 USD, session `csn_1`).
    pub acp: Value,
    /// The `log` member of the `allow` and the `review` decisions.
    pub log_allow: Value,
    pub log_review: Value,
}

struct Server {
    running: Running,
    client: reqwest::Client,
    api: String,
    clock: Arc<ManualClock>,
    _dir: tempfile::TempDir,
}

impl Server {
    async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(datetime!(2026-11-22 12:00 UTC)));
        let config = Config {
            db: dir.path().join("mandate.db").into(),
            migrate: true,
            api_addr: "127.0.0.1:0".into(),
            public_addr: "127.0.0.1:0".into(),
            verdicts_url: Some(ISSUER.into()),
            docs_url: None,
            tls: None,
            api_url: None,
            console_origins: None,
            log_checkpoint_interval: Duration::from_millis(100),
            log_checkpoint_batch: mandate_server::workers::checkpoint::BATCH,
            // A manual clock: a log waits by wall time only when a test moves it.
            log_quiet_below: 0,
            public_logs: false,
            x402_assets: Default::default(),
            witnesses: Vec::new(),
            limits: Default::default(),
            key_encryption: Default::default(),
        };
        let running = serve::start(config, clock.clone()).await.unwrap();
        Self {
            api: format!("http://{}", running.api_addr),
            running,
            client: reqwest::Client::new(),
            clock,
            _dir: dir,
        }
    }

    /// POSTs `body` (JSON text, to keep its numbers exact) with `key`; the answer's body.
    async fn post(&self, key: &str, path: &str, body: &str) -> Value {
        let r = self
            .client
            .post(format!("{}{path}", self.api))
            .bearer_auth(key)
            .header("content-type", "application/json")
            .body(body.to_owned())
            .send()
            .await
            .unwrap();
        let status = r.status();
        let text = r.text().await.unwrap();
        assert!(status.is_success(), "POST {path}: {status} {text}");
        serde_json::from_str(&text).unwrap()
    }

    async fn get(&self, key: &str, path: &str) -> Value {
        let r = self
            .client
            .get(format!("{}{path}", self.api))
            .bearer_auth(key)
            .send()
            .await
            .unwrap();
        r.json().await.unwrap()
    }

    /// An agent `name` with a mandate of 100 a transaction, review above 50, for
    /// software and travel; its key.
    async fn agent(&self, org: &str, name: &str) -> String {
        let agent = self
            .post(org, "/v1/agents", &json!({"name": name}).to_string())
            .await;
        let mandate = format!(
            r#"{{"agent": "agt_{name}", "limits": {{"per_transaction": 100, "per_month": 1000, "currency": "USD"}},
                "categories": ["software", "travel"], "review_above": 50, "expires": "2026-12-31"}}"#
        );
        self.post(org, "/v1/mandates", &mandate).await;
        agent["agent_key"].as_str().unwrap().to_owned()
    }

    /// Asks for a verdict on `body` (the request's members, JSON text); its token and
    /// decision id.
    async fn verdict(&self, agent: &str, body: &str, want: &str) -> (String, String) {
        let r = self.post(agent, "/v1/authorizations", body).await;
        assert_eq!(r["verdict"], want, "{r}");
        (
            r["verdict_token"].as_str().unwrap().to_owned(),
            r["id"].as_str().unwrap().to_owned(),
        )
    }

    /// The decision's `log` member, once a checkpoint covers it (bounded: 10 s).
    async fn logged(&self, key: &str, id: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let decision = self.get(key, &format!("/v1/decisions/{id}")).await;
            if !decision["log"].is_null() {
                return decision["log"].clone();
            }
            assert!(Instant::now() < deadline, "{id} not logged: {decision}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn plain(amount: &str, recipient: &str) -> String {
    format!(
        r#"{{"amount": {amount}, "currency": "USD", "recipient": "{recipient}", "category": "software"}}"#
    )
}

/// Every token of the cases, signed by a fresh server.
pub async fn sign_all() -> Signed {
    let server = Server::start().await;
    let state = &server.running.state;
    let org =
        operator::onboard(&*state.store, &state.api_keys, "acme", server.clock.now()).unwrap();
    let live = org.live_key.as_str();
    server
        .post(live, "/v1/enforcement", r#"{"mode": "enforce"}"#)
        .await;
    let mut tokens = BTreeMap::new();

    let buyer = server.agent(live, "buyer").await;
    let (allow, allow_id) = server
        .verdict(&buyer, &plain("42.50", "vendor:acme"), "allow")
        .await;
    let (review, review_id) = server
        .verdict(&buyer, &plain("75", "vendor:acme"), "review")
        .await;
    let (deny, _) = server
        .verdict(&buyer, &plain("150", "vendor:acme"), "deny_limit")
        .await;
    tokens.extend([("allow", allow), ("review", review), ("deny", deny)]);

    let tester = server.agent(&org.sandbox_key, "tester").await;
    let (sandbox, _) = server
        .verdict(&tester, &plain("42.50", "vendor:acme"), "allow")
        .await;
    tokens.insert("sandbox", sandbox);

    let x402 = json!({
        "scheme": "exact", "network": "eip155:84532", "amount": "20000000",
        "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e", "payTo": PAY_TO,
        "maxTimeoutSeconds": 60, "extra": {"name": "USDC", "version": "2"}
    });
    let payer = server.agent(live, "payer").await;
    let body = format!(
        r#"{{"amount": 20.00, "currency": "USD", "recipient": "vendor:{PAY_TO}", "category": "software", "x402": {x402}}}"#
    );
    tokens.insert("x402", server.verdict(&payer, &body, "allow").await.0);

    let (ap2, ap2_digest) = ap2_verdict(&server, live).await;
    tokens.insert("ap2", ap2);

    let expires = (server.clock.now() + time::Duration::hours(1))
        .format(&Rfc3339)
        .unwrap();
    let acp = json!({"reason": "one_time", "max_amount": 2000, "currency": "usd",
                     "checkout_session_id": "csn_1", "merchant_id": "acme_store",
                     "expires_at": expires});
    let shopper = server.agent(live, "shopper").await;
    let body = format!(
        r#"{{"amount": 20.00, "currency": "USD", "recipient": "vendor:acme_store", "category": "software", "acp": {{"allowance": {acp}}}}}"#
    );
    tokens.insert("acp", server.verdict(&shopper, &body, "allow").await.0);

    let jwks = server
        .client
        .get(format!(
            "http://{}/.well-known/jwks.json",
            server.running.public_addr
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    Signed {
        log_allow: server.logged(live, &allow_id).await,
        log_review: server.logged(live, &review_id).await,
        jwks,
        tokens,
        x402,
        ap2_digest,
        acp,
    }
}

/// A verdict bound to an AP2 closed mandate (transaction `tx-1`, 40 USD to `shop`) under
/// an open mandate imported for agent `ap2buyer`; the token and the open mandate's digest.
async fn ap2_verdict(server: &Server, live: &str) -> (String, String) {
    let keys = Ap2Keys::new(3);
    let now = server.clock.now();
    let state = &server.running.state;
    operator::add_ap2_issuer(&*state.store, "acme", &keys.issuer.public_jwk(), now).unwrap();
    let agent = server
        .post(live, "/v1/agents", r#"{"name": "ap2buyer"}"#)
        .await["agent_key"]
        .as_str()
        .unwrap()
        .to_owned();
    let at = now.unix_timestamp();
    let open = keys.open(
        json!([
            {"type": "payment.amount_range", "currency": "USD", "max": 10000},
            {"type": "payment.budget", "currency": "USD", "max": 150},
            {"type": "payment.allowed_payees", "allowed": [{"id": "shop", "name": "Shop"}]},
        ]),
        at - 60,
        at + 7 * 86_400,
    );
    let imported = server
        .post(
            live,
            "/v1/mandates",
            &json!({"agent": "agt_ap2buyer", "categories": ["shopping"],
                    "ap2": {"open_mandate": open}})
            .to_string(),
        )
        .await;
    let digest = imported["source"]["digest"].as_str().unwrap().to_owned();
    let closed = keys.closed(&open, "tx-1", 4000, "USD", "shop", at);
    let body = format!(
        r#"{{"amount": 40, "currency": "USD", "recipient": "vendor:shop", "category": "shopping",
            "ap2": {{"closed_mandate": "{closed}"}}}}"#
    );
    let (token, _) = server.verdict(&agent, &body, "allow").await;
    (token, digest)
}
