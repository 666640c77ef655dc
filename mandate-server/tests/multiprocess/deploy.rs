//! A deployment under test: one PostgreSQL database, the operator commands and any number of
//! `mandate-server serve` processes on it (the real binary), and an HTTP client for them.
#![allow(dead_code)]
// Shared harness: each test uses a part of it.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use reqwest::Method;
use serde_json::Value;
use tempfile::TempDir;

use crate::postgres::{self, Durability, TestDb};

/// The binary under test.
pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_mandate-server")
}

/// The issuer every process of a deployment is given, so that a token from one verifies
/// as any other's.
pub const ISSUER: &str = "http://verdicts.mandate.test";

/// A database and what the processes on it share: the key-encryption key and a directory
/// for their logs.
pub struct Deployment {
    /// The key that encrypts signing keys at rest (base64 of 32 random bytes).
    pub kek: String,
    pub dir: TempDir,
    started: AtomicUsize,
    // Last: the database is dropped after the processes a test holds are gone.
    pub db: TestDb,
}

/// An onboarded organization.
#[derive(Debug, Clone)]
pub struct Org {
    pub sandbox: String,
    pub live: String,
}

/// Gives a fresh [`Deployment`], or returns from the test (it passes, and the skip is said
/// once on stderr) when there is no PostgreSQL to test against.
#[macro_export]
macro_rules! deployment {
    () => {
        match $crate::deploy::Deployment::new().await {
            Some(deployment) => deployment,
            None => return,
        }
    };
}

impl Deployment {
    /// A fresh database on the durable test cluster (`fsync` on), or `None` without
    /// PostgreSQL.
    pub async fn new() -> Option<Deployment> {
        let db = postgres::database(Durability::Durable).await?;
        let key: [u8; 32] = rand::random();
        Some(Deployment {
            kek: base64::engine::general_purpose::STANDARD.encode(key),
            dir: tempfile::tempdir().unwrap(),
            started: AtomicUsize::new(0),
            db,
        })
    }

    /// The environment every command and process of this deployment runs with.
    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("MANDATE_KEY_ENCRYPTION_KEY", self.kek.clone()),
            ("RUST_LOG", "warn".into()),
        ]
    }

    /// Runs an operator command (`mandate-server ARGS --db URL`); returns its stdout, or
    /// panics with its stderr when it fails.
    pub fn operator(&self, args: &[&str]) -> String {
        let out = Command::new(binary())
            .args(args)
            .args(["--db", &self.db.url])
            .envs(self.env())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "mandate-server {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs an operator command that is to fail; returns its stderr.
    pub fn operator_fails(&self, args: &[&str]) -> String {
        let out = Command::new(binary())
            .args(args)
            .args(["--db", &self.db.url])
            .envs(self.env())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            !out.status.success(),
            "mandate-server {args:?} succeeded: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stderr).unwrap()
    }

    /// Onboards `org` through the operator command; returns its keys.
    pub fn onboard(&self, org: &str) -> Org {
        let out = self.operator(&["onboard", "--org", org]);
        let line = |prefix: &str| {
            out.lines()
                .find_map(|l| l.strip_prefix(prefix))
                .unwrap_or_else(|| panic!("no {prefix:?} line in {out}"))
                .trim()
                .to_owned()
        };
        Org {
            sandbox: line("sandbox key:"),
            live: line("live key:"),
        }
    }

    /// Starts `serve` on this database (port 0 for each listener); returns once it printed
    /// its addresses, or panics with its log.
    pub fn serve(&self) -> Proc {
        self.serve_with(&[])
    }

    /// `n` processes started at once.
    pub fn serve_n(&self, n: usize) -> Vec<Proc> {
        std::thread::scope(|scope| {
            let started: Vec<_> = (0..n).map(|_| scope.spawn(|| self.serve())).collect();
            started.into_iter().map(|t| t.join().unwrap()).collect()
        })
    }

    /// [`Deployment::serve`] with more arguments.
    pub fn serve_with(&self, extra: &[&str]) -> Proc {
        let n = self.started.fetch_add(1, Ordering::SeqCst);
        let log = self.dir.path().join(format!("serve-{n}.log"));
        let mut child = Command::new(binary())
            .args(["serve", "--db", &self.db.url])
            .args(["--api-addr", "127.0.0.1:0", "--public-addr", "127.0.0.1:0"])
            .args(["--verdicts-url", ISSUER])
            .args(extra)
            .envs(self.env())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let (mut api, mut public) = (String::new(), String::new());
        for line in lines.by_ref() {
            let Ok(line) = line else { break };
            let line = line.trim();
            if let Some(url) = line.strip_prefix("api:") {
                api = url.trim().to_owned();
            } else if let Some(url) = line.strip_prefix("public:") {
                public = url.trim().to_owned();
                break;
            }
        }
        if api.is_empty() || public.is_empty() {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "serve did not start: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        // Keep draining stdout so that the child never blocks on a full pipe.
        let output = Arc::new(Mutex::new(Vec::new()));
        let kept = output.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                kept.lock().unwrap().push(line);
            }
        });
        Proc {
            child,
            api,
            public,
            log,
            output,
        }
    }
}

/// A running `serve` process.
pub struct Proc {
    pub child: Child,
    /// `http://127.0.0.1:PORT` of its API host.
    pub api: String,
    /// `http://127.0.0.1:PORT` of its public host.
    pub public: String,
    pub log: PathBuf,
    pub output: Arc<Mutex<Vec<String>>>,
}

impl Proc {
    /// `kill -9`, and reap.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// What it wrote to stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
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
    /// Asserts this is the error envelope with `status` and `code`; returns its message.
    #[track_caller]
    pub fn assert_error(&self, status: u16, code: &str) -> String {
        assert_eq!(self.status, status, "{}", self.text);
        assert_eq!(self.body["error"]["code"], code, "{}", self.text);
        assert!(
            self.body["error"]["request_id"]
                .as_str()
                .is_some_and(|id| id.starts_with("req_")),
            "{}",
            self.text
        );
        self.body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
}

/// An HTTP client for the processes of a deployment (one connection pool for all of them).
#[derive(Clone)]
pub struct Http {
    pub client: reqwest::Client,
}

impl Default for Http {
    fn default() -> Self {
        Http {
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
        }
    }
}

impl Http {
    /// Sends a request to `base` (a process's API URL); `Err` when the connection failed
    /// or was cut.
    pub async fn try_send(
        &self,
        method: Method,
        base: &str,
        key: &str,
        path: &str,
        body: Option<&str>,
        idempotency_key: Option<&str>,
    ) -> Result<Resp, reqwest::Error> {
        let mut request = self
            .client
            .request(method, format!("{base}{path}"))
            .header("authorization", format!("Bearer {key}"));
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_owned());
        }
        if let Some(k) = idempotency_key {
            request = request.header("idempotency-key", k);
        }
        let response = request.send().await?;
        let status = response.status().as_u16();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let replayed = header("idempotency-replayed").is_some_and(|v| v == "true");
        let retry_after = header("retry-after");
        let text = response.text().await?;
        Ok(Resp {
            status,
            replayed,
            retry_after,
            body: serde_json::from_str(&text).unwrap_or(Value::Null),
            text,
        })
    }

    pub async fn post(&self, base: &str, key: &str, path: &str, body: &str) -> Resp {
        self.try_send(Method::POST, base, key, path, Some(body), None)
            .await
            .unwrap()
    }

    pub async fn post_empty(&self, base: &str, key: &str, path: &str) -> Resp {
        self.try_send(Method::POST, base, key, path, None, None)
            .await
            .unwrap()
    }

    pub async fn get(&self, base: &str, key: &str, path: &str) -> Resp {
        self.try_send(Method::GET, base, key, path, None, None)
            .await
            .unwrap()
    }

    /// Registers agent `name`; returns its key.
    pub async fn agent(&self, base: &str, org_key: &str, name: &str) -> String {
        let r = self
            .post(
                base,
                org_key,
                "/v1/agents",
                &format!(r#"{{"name": "{name}"}}"#),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
        r.body["agent_key"].as_str().unwrap().to_owned()
    }

    /// Writes a mandate; returns it.
    pub async fn mandate(&self, base: &str, org_key: &str, body: &str) -> Value {
        let r = self.post(base, org_key, "/v1/mandates", body).await;
        assert_eq!(r.status, 201, "{}", r.text);
        r.body
    }

    /// Asks for an authorization of `amount` USD to vendor:acme in `category`.
    pub async fn authorize(
        &self,
        base: &str,
        agent_key: &str,
        amount: &str,
        category: &str,
    ) -> Resp {
        self.post(
            base,
            agent_key,
            "/v1/authorizations",
            &request(amount, category),
        )
        .await
    }

    /// Every object of a list, walking its cursor.
    pub async fn walk(&self, base: &str, key: &str, path: &str) -> Vec<Value> {
        let mut all = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let sep = if path.contains('?') { '&' } else { '?' };
            let url = match &cursor {
                Some(c) => format!("{path}{sep}limit=100&cursor={c}"),
                None => format!("{path}{sep}limit=100"),
            };
            let page = self.get(base, key, &url).await;
            assert_eq!(page.status, 200, "{}", page.text);
            all.extend(page.body["data"].as_array().unwrap().iter().cloned());
            if page.body["has_more"] != true {
                return all;
            }
            cursor = Some(page.body["next_cursor"].as_str().unwrap().to_owned());
        }
    }
}

/// An authorization request body: `amount` USD to vendor:acme in `category`.
pub fn request(amount: &str, category: &str) -> String {
    format!(
        r#"{{"amount": {amount}, "currency": "USD", "recipient": "vendor:acme", "category": "{category}"}}"#
    )
}

/// A mandate for `agt_<name>`: software only, USD, `per_transaction` and `per_month` as
/// given, no review threshold unless `review_above` is given, expiring in 2099.
pub fn mandate(
    name: &str,
    per_transaction: &str,
    per_month: &str,
    review_above: Option<&str>,
) -> String {
    let review = review_above
        .map(|r| format!(r#", "review_above": {r}"#))
        .unwrap_or_default();
    format!(
        r#"{{"agent": "agt_{name}", "limits": {{"per_transaction": {per_transaction}, "per_month": {per_month}, "currency": "USD"}},
            "categories": ["software"], "expires": "2099-12-31"{review}}}"#
    )
}

/// Polls `f` every 20 ms until it gives a value or `limit` has passed.
pub async fn eventually<T, F, Fut>(what: &str, limit: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(value) = f().await {
            return value;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
