//! Mandate's real binary on a Citus test database: `migrate`, `onboard`, and `serve`
//! processes connected to the coordinator, called over HTTP as a client would.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

/// The key that encrypts signing keys at rest, the same for every command and process of a
/// test (base64 of 32 bytes; a test database holds nothing worth keeping).
const KEK: &str = "bWFuZGF0ZS1jaXR1cy1mYXVsdC10ZXN0cy1rZWstMzI=";

/// The binary under test.
fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_mandate-server")
}

/// `mandate-server ARGS --db url`; its stdout, or a panic with its output when it fails.
fn operator(url: &str, args: &[&str]) -> String {
    let out = Command::new(binary())
        .args(args)
        .args(["--db", url])
        .env("MANDATE_KEY_ENCRYPTION_KEY", KEK)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .expect("mandate-server runs");
    assert!(
        out.status.success(),
        "mandate-server {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `mandate-server migrate`: on a coordinator, the schema and its distribution.
pub fn migrate(url: &str) {
    operator(url, &["migrate"]);
}

/// An organization onboarded by `mandate-server onboard`.
#[derive(Debug, Clone)]
pub struct Onboarded {
    /// Its id (`org_…`): the value its tables are distributed by.
    pub id: String,
    /// Its sandbox organization key.
    pub key: String,
}

/// Onboards organization `name`.
pub fn onboard(url: &str, name: &str) -> Onboarded {
    let out = operator(url, &["onboard", "--org", name]);
    Onboarded {
        id: crate::onboard::org_id(&out),
        key: crate::onboard::key(&out, "sandbox key:"),
    }
}

/// A running `serve --no-migrate` connected to the coordinator, killed when dropped.
pub struct Serve {
    child: Child,
    /// `http://127.0.0.1:PORT` of its API host.
    pub api: String,
    log: tempfile::NamedTempFile,
}

impl Serve {
    /// Starts `serve` on `url` with a request deadline of `deadline_secs`; returns once it
    /// printed its addresses, or panics with its log.
    pub fn start(url: &str, deadline_secs: u64) -> Serve {
        Self::start_with(url, deadline_secs, &["--no-migrate"])
    }

    /// [`Serve::start`] migrating first, as `serve` does by default.
    pub fn start_migrating(url: &str, deadline_secs: u64) -> Serve {
        Self::start_with(url, deadline_secs, &[])
    }

    fn start_with(url: &str, deadline_secs: u64, extra: &[&str]) -> Serve {
        let log = tempfile::NamedTempFile::new().unwrap();
        let mut child = Command::new(binary())
            .args(["serve", "--db", url])
            .args(extra)
            .args(["--api-addr", "127.0.0.1:0", "--public-addr", "127.0.0.1:0"])
            .args(["--request-timeout", &deadline_secs.to_string()])
            .env("MANDATE_KEY_ENCRYPTION_KEY", KEK)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log.reopen().unwrap()))
            .spawn()
            .expect("mandate-server serve starts");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut api = String::new();
        for line in lines.by_ref() {
            let Ok(line) = line else { break };
            if let Some(url) = line.trim().strip_prefix("api:") {
                api = url.trim().to_owned();
            } else if line.trim().starts_with("public:") {
                break;
            }
        }
        // Drained so that the server never blocks on a full pipe.
        std::thread::spawn(move || lines.map_while(Result::ok).for_each(drop));
        let serve = Serve { child, api, log };
        assert!(
            !serve.api.is_empty(),
            "serve did not start: {}",
            serve.log()
        );
        serve
    }

    /// What it wrote to stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A response, read whole.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub replayed: bool,
    pub retry_after: Option<String>,
    pub body: Value,
    pub text: String,
}

impl Resp {
    /// The decision's id (`dec_…`) of a `201`; panics on anything else.
    #[track_caller]
    pub fn decision_id(&self) -> String {
        assert_eq!(self.status, 201, "{}", self.text);
        self.body["id"].as_str().unwrap().to_owned()
    }

    #[track_caller]
    pub fn verdict(&self) -> &str {
        assert_eq!(self.status, 201, "{}", self.text);
        self.body["verdict"].as_str().unwrap()
    }
}

/// An HTTP client for the `serve` processes of a test.
#[derive(Clone)]
pub struct Http {
    client: reqwest::Client,
}

impl Default for Http {
    fn default() -> Self {
        Http {
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .unwrap(),
        }
    }
}

impl Http {
    /// `method path` on `base` with `key`.
    pub async fn send(
        &self,
        method: reqwest::Method,
        base: &str,
        key: &str,
        path: &str,
        body: Option<&str>,
        idempotency_key: Option<&str>,
    ) -> Resp {
        let mut request = self
            .client
            .request(method.clone(), format!("{base}{path}"))
            .bearer_auth(key);
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_owned());
        }
        if let Some(k) = idempotency_key {
            request = request.header("idempotency-key", k);
        }
        let response = request
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method} {base}{path}: {e}"));
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let status = response.status().as_u16();
        let replayed = header("idempotency-replayed").is_some_and(|v| v == "true");
        let retry_after = header("retry-after");
        let text = response.text().await.unwrap();
        Resp {
            status,
            replayed,
            retry_after,
            body: serde_json::from_str(&text).unwrap_or(Value::Null),
            text,
        }
    }

    async fn post(&self, base: &str, key: &str, path: &str, body: &str) -> Resp {
        self.send(reqwest::Method::POST, base, key, path, Some(body), None)
            .await
    }

    /// Registers agent `agt_<name>` with a mandate for software in USD of `per_transaction`
    /// and `per_month`; returns its key.
    pub async fn agent(
        &self,
        base: &str,
        org_key: &str,
        name: &str,
        per_transaction: &str,
        per_month: &str,
    ) -> String {
        let r = self
            .post(
                base,
                org_key,
                "/v1/agents",
                &format!(r#"{{"name": "{name}"}}"#),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
        let key = r.body["agent_key"].as_str().unwrap().to_owned();
        let mandate = format!(
            r#"{{"agent": "agt_{name}", "limits": {{"per_transaction": {per_transaction},
                "per_month": {per_month}, "currency": "USD"}}, "categories": ["software"],
                "expires": "2099-12-31"}}"#
        );
        let r = self.post(base, org_key, "/v1/mandates", &mandate).await;
        assert_eq!(r.status, 201, "{}", r.text);
        key
    }

    /// Asks for an authorization of `amount` USD for software.
    pub async fn authorize(
        &self,
        base: &str,
        agent_key: &str,
        amount: &str,
        idempotency_key: Option<&str>,
    ) -> Resp {
        let body = format!(
            r#"{{"amount": {amount}, "currency": "USD", "recipient": "vendor:acme", "category": "software"}}"#
        );
        self.send(
            reqwest::Method::POST,
            base,
            agent_key,
            "/v1/authorizations",
            Some(&body),
            idempotency_key,
        )
        .await
    }

    /// Every decision of the key's environment, walking the list's cursor (newest first).
    pub async fn list(&self, base: &str, key: &str) -> Vec<Value> {
        let mut all = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let path = match &cursor {
                Some(c) => format!("/v1/decisions?limit=100&cursor={c}"),
                None => "/v1/decisions?limit=100".to_owned(),
            };
            let page = self
                .send(reqwest::Method::GET, base, key, &path, None, None)
                .await;
            assert_eq!(page.status, 200, "GET {path}: {}", page.text);
            all.extend(page.body["data"].as_array().unwrap().iter().cloned());
            if page.body["has_more"] != true {
                return all;
            }
            cursor = Some(page.body["next_cursor"].as_str().unwrap().to_owned());
        }
    }

    /// The export of every decision of the key's environment (oldest first).
    pub async fn export(&self, base: &str, key: &str) -> Vec<Value> {
        let r = self
            .send(
                reqwest::Method::GET,
                base,
                key,
                "/v1/exports/decisions",
                None,
                None,
            )
            .await;
        assert_eq!(r.status, 200, "GET /v1/exports/decisions: {}", r.text);
        r.text
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }
}
