//! A deployment under test: one database (PostgreSQL, a Citus coordinator with two
//! workers, or a Patroni-managed primary with a synchronous standby: [`Backend`]), the
//! operator commands and any number of `mandate-server serve`
//! processes on it (the real binary), and an HTTP client for them.
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

use crate::citus::{self, CitusDb, Share, Worker};
use crate::onboard;
use crate::postgres::{self, Durability, TestDb};
use mandate_test_kit::patroni::PatroniSet;

/// The binary under test.
pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_mandate-server")
}

/// The issuer every process of a deployment is given, so that a token from one verifies
/// as any other's.
pub const ISSUER: &str = "http://verdicts.mandate.test";

/// The database the processes of a deployment share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// One PostgreSQL server, durable (mandate-test-kit/src/postgres.rs).
    Postgres,
    /// A Citus coordinator and two workers (mandate-test-kit/src/citus.rs), the schema distributed
    /// by Mandate's own migrations; the processes connect to the coordinator.
    Citus,
    /// Two PostgreSQL nodes under Patroni with etcd (mandate-test-kit/src/patroni.rs), a
    /// primary and a synchronous standby; the processes are given both hosts with
    /// `target_session_attrs=read-write`.
    Patroni,
    /// A Citus coordinator and two workers in Patroni's Citus mode, each a primary and a
    /// synchronous standby (mandate-test-kit/src/patroni.rs); the processes are given the
    /// coordinator's two hosts, and the coordinator's Patroni moves `pg_dist_node` to a
    /// worker's new primary after a failover.
    PatroniCitus,
}

/// A deployment's database: the URL its processes are given, and the test database that
/// holds it (dropped with it).
pub struct Database {
    /// `postgres://…`: what `--db` takes.
    pub url: String,
    held: Held,
}

enum Held {
    Postgres(TestDb),
    Citus(CitusDb),
    Patroni(PatroniSet),
}

impl Database {
    /// Opens a connection to it (on Citus, to the coordinator).
    pub async fn connect(&self) -> tokio_postgres::Client {
        match &self.held {
            Held::Postgres(db) => db.connect().await,
            Held::Citus(db) => db.connect().await,
            Held::Patroni(_) => postgres::connect(&self.url).await.unwrap(),
        }
    }

    /// The Patroni set, on a Patroni deployment.
    pub fn patroni(&self) -> Option<&PatroniSet> {
        match &self.held {
            Held::Patroni(set) => Some(set),
            _ => None,
        }
    }

    /// The Citus database, on a Citus deployment.
    pub fn citus(&self) -> Option<&CitusDb> {
        match &self.held {
            Held::Citus(db) => Some(db),
            _ => None,
        }
    }
}

/// A database and what the processes on it share: the key-encryption key and a directory
/// for their logs.
pub struct Deployment {
    /// The key that encrypts signing keys at rest (base64 of 32 random bytes).
    pub kek: String,
    pub dir: TempDir,
    started: AtomicUsize,
    // Last: the database is dropped after the processes a test holds are gone.
    pub db: Database,
}

/// An onboarded organization.
#[derive(Debug, Clone)]
pub struct Org {
    /// Its id (`org_…`): on Citus, the value its tables are distributed by.
    pub id: String,
    pub sandbox: String,
    pub live: String,
}

/// Gives a fresh [`Deployment`] on PostgreSQL (or on the [`Backend`] given), or returns
/// from the test (it passes, and the skip is said once on stderr) when there is no such
/// database to test against.
#[macro_export]
macro_rules! deployment {
    () => {
        $crate::deployment!($crate::deploy::Backend::Postgres)
    };
    ($backend:expr) => {
        match $crate::deploy::Deployment::new($backend).await {
            Some(deployment) => deployment,
            None => return,
        }
    };
}

/// Tests whose body is an `async fn NAME(backend: Backend)` of the same name, run on each
/// backend: `NAME::postgres` and `NAME::citus`; after `postgres_only:`, only
/// `NAME::postgres` (a Citus cluster's test time is kept for the tests that need it most).
#[macro_export]
macro_rules! on_each_backend {
    (postgres_only: $($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test]
                async fn postgres() {
                    super::$name($crate::deploy::Backend::Postgres).await;
                }
            }
        )*
    };
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test]
                async fn postgres() {
                    super::$name($crate::deploy::Backend::Postgres).await;
                }

                #[tokio::test]
                async fn citus() {
                    super::$name($crate::deploy::Backend::Citus).await;
                }
            }
        )*
    };
}

/// The key-encryption key `migrate` runs with in the Citus template; migrating stores
/// nothing sealed, so each deployment's processes bring a key of their own.
const TEMPLATE_KEK: &str = "bWFuZGF0ZS1tdWx0aXByb2Nlc3MtdGVtcGxhdGUta2U=";

/// Migrates the Citus template (mandate-test-kit/src/citus.rs makes it once a process): the
/// numbered migrations, then the step that distributes the tables.
fn migrate_template(url: &str) {
    let out = Command::new(binary())
        .args(["migrate", "--db", url])
        .env("MANDATE_KEY_ENCRYPTION_KEY", TEMPLATE_KEK)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mandate-server migrate failed on the Citus template: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Deployment {
    /// The configuration of a server of this build started in the test's own process on
    /// this deployment's database (`serve::start`): loopback listeners on free ports,
    /// migrating, the deployment's key-encryption key.
    pub fn in_process_config(&self) -> mandate_server::serve::Config {
        use mandate_server::serve::Config;
        use mandate_server::signing::at_rest::{Kek, KeyEncryption};
        Config {
            db: self.db.url.parse().unwrap(),
            migrate: true,
            api_addr: "127.0.0.1:0".into(),
            public_addr: "127.0.0.1:0".into(),
            verdicts_url: Some(ISSUER.into()),
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
            key_encryption: KeyEncryption::new(
                Kek::from_base64(self.kek.as_bytes(), "MANDATE_KEY_ENCRYPTION_KEY").unwrap(),
                None,
            ),
        }
    }

    /// A fresh database of `backend`: on the durable PostgreSQL test cluster (`fsync` on),
    /// or on the Citus test cluster, migrated; `None` without it.
    pub async fn new(backend: Backend) -> Option<Deployment> {
        let db = match backend {
            Backend::Postgres => {
                let db = postgres::database(Durability::Durable).await?;
                Database {
                    url: db.url.clone(),
                    held: Held::Postgres(db),
                }
            }
            Backend::Citus => {
                let db = citus::database_from_template(Share::WithOthers, migrate_template).await?;
                Database {
                    url: db.url.clone(),
                    held: Held::Citus(db),
                }
            }
            Backend::Patroni | Backend::PatroniCitus => {
                let set = if backend == Backend::Patroni {
                    PatroniSet::start().await?
                } else {
                    PatroniSet::start_citus(2).await?
                };
                Database {
                    url: set.url(),
                    held: Held::Patroni(set),
                }
            }
        };
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
        Org {
            id: onboard::org_id(&out),
            sandbox: onboard::key(&out, "sandbox key:"),
            live: onboard::key(&out, "live key:"),
        }
    }

    /// `n` organizations onboarded (named `{prefix}0`, `{prefix}1`, …). On Citus they are
    /// chosen among those onboarded so that every worker holds one at least, which is
    /// asserted from their shard placement: `n` must be at least the number of workers.
    pub async fn orgs(&self, prefix: &str, n: usize) -> Vec<Org> {
        let Some(citus) = self.db.citus() else {
            return (0..n)
                .map(|i| self.onboard(&format!("{prefix}{i}")))
                .collect();
        };
        let workers = citus.workers();
        assert!(
            n >= workers.len(),
            "{n} organizations cannot cover {workers:?}"
        );
        let mut kept: Vec<(Org, Worker)> = Vec::new();
        // An organization lands on a worker as its id hashes (about one in two here): 64
        // tries leave every worker empty-handed with a chance below 2^-60.
        for i in 0..64 {
            if kept.len() == n {
                break;
            }
            let org = self.onboard(&format!("{prefix}{i}"));
            let worker = citus.worker_of("agents", &org.id).await;
            let uncovered = workers
                .iter()
                .filter(|w| !kept.iter().any(|(_, k)| k == *w))
                .count();
            let covers = !kept.iter().any(|(_, k)| *k == worker);
            if covers || n - kept.len() > uncovered {
                kept.push((org, worker));
            }
        }
        let on: std::collections::BTreeSet<&Worker> = kept.iter().map(|(_, w)| w).collect();
        assert_eq!(kept.len(), n, "{kept:?}");
        assert_eq!(
            on.len(),
            workers.len(),
            "the organizations do not land on every worker: {kept:?}"
        );
        kept.into_iter().map(|(org, _)| org).collect()
    }

    /// The two-phase commits made in the database so far (Citus: `pg_dist_transaction` on
    /// every node); `None` on plain PostgreSQL, which makes none.
    pub async fn two_phase_commits(&self) -> Option<i64> {
        Some(self.db.citus()?.two_phase_commits().await)
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
