//! The review console in a real browser: headless Chromium driven through WebDriver
//! against a real server (in process, on port 0, a fresh database, the system clock so that
//! tokens verify in the browser as they would for a person).
//!
//! Without Chromium and chromedriver the tests say they were skipped and pass, unless
//! `MANDATE_REQUIRE_BROWSER=1` (CI), where they fail. With
//! `MANDATE_CONSOLE_SCREENSHOTS=<dir>` they save the screenshots `docs/console.md` shows.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines,
    missing_docs
)]

mod flows;
mod webdriver;

use std::sync::Arc;

use mandate_server::clock::{Clock, SystemClock};
use mandate_server::operator;
use mandate_server::serve::{self, Config, Running};
use serde_json::{Value, json};

/// One browser at a time: the machine has two cores.
pub static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A running server with an organization, an agent and its mandate.
pub struct Console {
    pub running: Running,
    pub api: String,
    pub public: String,
    pub sandbox: String,
    pub live: String,
    pub agent: String,
    pub http: reqwest::Client,
    _dir: tempfile::TempDir,
}

impl Console {
    /// The server, the organization `acme`, and agent `shopper` with a mandate of 500 USD a
    /// transaction, 2000 a month, review above 200.
    pub async fn start() -> Console {
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            db: dir.path().join("console.db").into(),
            migrate: true,
            api_addr: "127.0.0.1:0".into(),
            public_addr: "127.0.0.1:0".into(),
            verdicts_url: None,
            docs_url: None,
            tls: None,
            limits: Default::default(),
            api_url: None,
            console_origins: None,
            log_checkpoint_interval: mandate_server::workers::checkpoint::DEFAULT_INTERVAL,
            log_checkpoint_batch: mandate_server::workers::checkpoint::BATCH,
            log_quiet_below: mandate_server::workers::checkpoint::QUIET_BELOW,
            public_logs: false,
            x402_assets: Default::default(),
            witnesses: Vec::new(),
            key_encryption: Default::default(),
        };
        let running = serve::start(config, Arc::new(SystemClock)).await.unwrap();
        let keys = operator::onboard(
            &*running.state.store,
            &running.state.api_keys,
            "acme",
            SystemClock.now(),
        )
        .unwrap();
        let mut console = Console {
            api: format!("http://{}", running.api_addr),
            public: format!("http://{}", running.public_addr),
            running,
            sandbox: keys.sandbox_key,
            live: keys.live_key,
            agent: String::new(),
            http: reqwest::Client::new(),
            _dir: dir,
        };
        let agent = console
            .call(
                "POST",
                &console.sandbox,
                "/v1/agents",
                Some(json!({"name": "shopper"})),
            )
            .await;
        console.agent = agent["agent_key"].as_str().unwrap().to_owned();
        let expires = (SystemClock.now() + time::Duration::days(90)).date();
        let mandate = console
            .call(
                "POST",
                &console.sandbox,
                "/v1/mandates",
                Some(json!({
                    "agent": "agt_shopper", "principal": "role:finance",
                    "limits": {"per_transaction": 500, "per_month": 2000, "currency": "USD"},
                    "categories": ["software", "travel"], "review_above": 200,
                    "expires": mandate_protocol::mandate::format_date(expires),
                })),
            )
            .await;
        assert!(mandate["id"].is_string(), "{mandate}");
        console
    }

    /// The console's address.
    pub fn url(&self) -> String {
        format!("{}/console/", self.public)
    }

    /// An API call; returns the body (any status).
    pub async fn call(&self, method: &str, key: &str, path: &str, body: Option<Value>) -> Value {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.api))
            .bearer_auth(key);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let text = request.send().await.unwrap().text().await.unwrap();
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }

    /// The agent asks for `amount` USD to `recipient` in `category`.
    pub async fn ask(&self, amount: &str, recipient: &str, category: &str) -> Value {
        let body = format!(
            r#"{{"amount": {amount}, "currency": "USD", "recipient": "{recipient}", "category": "{category}"}}"#
        );
        let text = self
            .http
            .post(format!("{}/v1/authorizations", self.api))
            .bearer_auth(&self.agent)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        serde_json::from_str(&text).unwrap()
    }
}
