//! Test harness: a real server on 127.0.0.1 port 0, a fresh SQLite file, a manual clock.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;

use mandate_core::jwk::JwkSet;
use mandate_server::clock::ManualClock;
use mandate_server::operator;
use mandate_server::serve::{self, Config, Running};
use reqwest::Method;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use tempfile::TempDir;
use time::OffsetDateTime;
use time::macros::datetime;

/// Where the manual clock starts.
pub const START: OffsetDateTime = datetime!(2026-11-22 12:00 UTC);

/// A response, read whole.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Value,
    pub text: String,
}

impl Resp {
    /// The header as text, if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Asserts this is an error envelope with `status` and `code`, whose request id matches
    /// the header; returns the message.
    #[track_caller]
    pub fn assert_error(&self, status: u16, code: &str) -> String {
        assert_eq!(self.status, status, "body: {}", self.text);
        assert_eq!(self.body["error"]["code"], code, "body: {}", self.text);
        let id = self.body["error"]["request_id"]
            .as_str()
            .unwrap_or_default();
        assert!(id.starts_with("req_"), "request id {id:?}");
        assert_eq!(self.header("x-request-id"), Some(id));
        let keys: Vec<_> = self.body["error"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        assert_eq!(keys, ["code", "message", "request_id"]);
        self.body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
}

/// An onboarded organization.
#[derive(Debug, Clone)]
pub struct Org {
    pub name: String,
    pub sandbox: String,
    pub live: String,
}

/// A running server and everything a test needs to talk to it.
pub struct TestApp {
    pub api: String,
    pub public: String,
    pub client: reqwest::Client,
    pub clock: Arc<ManualClock>,
    pub db_path: PathBuf,
    pub running: Option<Running>,
    pub org: Org,
    _dir: TempDir,
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(|_| {}).await
}

/// [`spawn_app`] with the server's configuration changed by `configure` first.
pub async fn spawn_app_with(configure: impl FnOnce(&mut Config)) -> TestApp {
    let dir = tempfile::tempdir().unwrap();
    let db_path = dir.path().join("mandate.db");
    let clock = Arc::new(ManualClock::new(START));
    let mut config = config(&db_path);
    configure(&mut config);
    let running = serve::start(config, clock.clone()).await.unwrap();
    let mut app = TestApp {
        api: format!("http://{}", running.api_addr),
        public: format!("http://{}", running.public_addr),
        client: reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap(),
        clock,
        db_path,
        running: Some(running),
        org: Org {
            name: String::new(),
            sandbox: String::new(),
            live: String::new(),
        },
        _dir: dir,
    };
    app.org = app.onboard("acme").await;
    app
}

/// The configuration tests start with: port 0 on loopback, defaults elsewhere.
fn config(db: &std::path::Path) -> Config {
    Config {
        db: db.to_path_buf().into(),
        migrate: true,
        api_addr: "127.0.0.1:0".into(),
        public_addr: "127.0.0.1:0".into(),
        verdicts_url: None,
        docs_url: None,
        tls: None,
        limits: Default::default(),
    }
}

async fn start(db: &std::path::Path, clock: Arc<ManualClock>) -> Running {
    serve::start(config(db), clock).await.unwrap()
}

impl TestApp {
    /// Onboards another organization through the operator command.
    pub async fn onboard(&self, name: &str) -> Org {
        let running = self.running.as_ref().unwrap();
        let o = operator::onboard(&*running.state.store, name, self.clock_now()).unwrap();
        Org {
            name: name.into(),
            sandbox: o.sandbox_key,
            live: o.live_key,
        }
    }

    pub fn clock_now(&self) -> OffsetDateTime {
        use mandate_server::clock::Clock;
        self.clock.now()
    }

    /// Moves the clock forward.
    pub fn advance(&self, seconds: i64) {
        self.clock.advance(time::Duration::seconds(seconds));
    }

    /// Stops the server gracefully and starts a new one on the same database.
    pub async fn restart(&mut self) {
        if let Some(running) = self.running.take() {
            running.shutdown().await.unwrap();
        }
        let running = start(&self.db_path, self.clock.clone()).await;
        self.api = format!("http://{}", running.api_addr);
        self.public = format!("http://{}", running.public_addr);
        self.running = Some(running);
    }

    pub async fn send(
        &self,
        method: Method,
        key: Option<&str>,
        path: &str,
        body: Option<String>,
        headers: &[(&str, &str)],
    ) -> Resp {
        let url = if path.starts_with("http") {
            path.to_owned()
        } else {
            format!("{}{}", self.api, path)
        };
        let mut request = self.client.request(method, url);
        if let Some(key) = key {
            request = request.header("authorization", format!("Bearer {key}"));
        }
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body);
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await.unwrap();
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Resp {
            status,
            headers,
            body,
            text,
        }
    }

    pub async fn post(&self, key: &str, path: &str, body: Value) -> Resp {
        self.send(Method::POST, Some(key), path, Some(body.to_string()), &[])
            .await
    }

    /// POST with a body given as raw JSON text (to keep exact numbers).
    pub async fn post_text(&self, key: &str, path: &str, body: &str) -> Resp {
        self.send(Method::POST, Some(key), path, Some(body.to_owned()), &[])
            .await
    }

    pub async fn post_empty(&self, key: &str, path: &str) -> Resp {
        self.send(Method::POST, Some(key), path, None, &[]).await
    }

    pub async fn get(&self, key: &str, path: &str) -> Resp {
        self.send(Method::GET, Some(key), path, None, &[]).await
    }

    /// Registers an agent; returns its key.
    pub async fn agent(&self, org_key: &str, name: &str) -> String {
        let r = self
            .post(org_key, "/v1/agents", json!({ "name": name }))
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
        r.body["agent_key"].as_str().unwrap().to_owned()
    }

    /// Writes a mandate from raw JSON text; returns the mandate object.
    pub async fn mandate(&self, org_key: &str, body: &str) -> Value {
        let r = self.post_text(org_key, "/v1/mandates", body).await;
        assert_eq!(r.status, 201, "{}", r.text);
        r.body
    }

    /// An agent with the standard mandate: 100 per transaction, 450 a month, USD,
    /// software and travel, review above 50, expiring 2026-12-31. Returns the agent key.
    pub async fn standard_agent(&self, org_key: &str, name: &str) -> String {
        let key = self.agent(org_key, name).await;
        self.mandate(org_key, &standard_mandate(name)).await;
        key
    }

    /// Asks for an authorization.
    pub async fn authorize(&self, agent_key: &str, amount: &str, category: &str) -> Resp {
        self.post_text(
            agent_key,
            "/v1/authorizations",
            &format!(r#"{{"amount": {amount}, "currency": "USD", "recipient": "vendor:acme", "category": "{category}"}}"#),
        )
        .await
    }

    /// The published JWK Set.
    pub async fn jwks(&self) -> JwkSet {
        let r = self
            .client
            .get(format!("{}/.well-known/jwks.json", self.public))
            .send()
            .await
            .unwrap();
        JwkSet::from_json(&r.bytes().await.unwrap()).unwrap()
    }

    /// The issuer the server signs with.
    pub fn issuer(&self) -> String {
        self.running.as_ref().unwrap().state.verdicts_url.clone()
    }
}

/// The standard mandate body for agent `name`.
pub fn standard_mandate(name: &str) -> String {
    format!(
        r#"{{"agent": "agt_{name}", "principal": "role:cfo",
            "limits": {{"per_transaction": 100, "per_month": 450, "currency": "USD"}},
            "categories": ["software", "travel"], "review_above": 50, "expires": "2026-12-31"}}"#
    )
}

impl TestApp {
    /// Waits (bounded, 5 s) until the server has noticed an operator change to `key` and
    /// refuses it: running servers pick up operator key changes within 250 ms.
    pub async fn until_refused(&self, key: &str) {
        for _ in 0..200 {
            if self.get(key, "/v1/decisions").await.status == 401 {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
        panic!("the server still accepts a revoked key after 5 s");
    }
}

impl TestApp {
    /// Takes the lock of sandbox agent `agt_<name>` of the organization `acme`, as a long
    /// request of that agent would: the agent's next requests wait until it is dropped.
    pub async fn hold_agent_lock(
        &self,
        name: &str,
    ) -> tokio::sync::OwnedMutexGuard<mandate_server::decision::agents::Slot> {
        let state = self.running.as_ref().unwrap().state.clone();
        let org_id = {
            let conn = rusqlite::Connection::open(&self.db_path).unwrap();
            conn.query_row("SELECT id FROM orgs WHERE name = 'acme'", [], |r| {
                r.get::<_, String>(0)
            })
            .unwrap()
        };
        let agent = mandate_core::id::AgentId::parse(&format!("agt_{name}")).unwrap();
        state
            .agents
            .lock(
                state.store.as_ref(),
                &std::sync::Arc::from(org_id.as_str()),
                mandate_server::model::Env::Sandbox,
                &agent,
                self.clock_now(),
            )
            .await
            .unwrap()
    }
}
