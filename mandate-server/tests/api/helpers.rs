//! Test harness: a real server on 127.0.0.1 port 0, a fresh database of the engine under
//! test (`crate::engine`: an SQLite file, or a PostgreSQL database of the test's own), a
//! manual clock.
#![allow(dead_code)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mandate_core::JwkSet;
use mandate_server::clock::ManualClock;
use mandate_server::operator;
use mandate_server::serve::{self, Config, Running};
use mandate_server::storage::DbLocation;
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
    /// The SQLite file (in the PostgreSQL target, a path that is never created).
    pub db_path: PathBuf,
    pub running: Option<Running>,
    pub org: Org,
    /// The database, whichever the engine (dropped after the server above).
    pub db: TestDatabase,
    _dir: TempDir,
}

/// A fixed key-encryption key (base64 of 32 bytes) for the engines that require one.
pub const TEST_KEK: &str = "bWFuZGF0ZS10ZXN0cy1rZXktZW5jcnlwdGlvbi1rZXk=";

/// Where a test's data lives: an SQLite file in the test's directory, or (PostgreSQL target)
/// a database of the test's own on the throwaway cluster, dropped with this.
pub struct TestDatabase {
    /// The SQLite file (for PostgreSQL, a path in the test's directory that is never created).
    pub path: PathBuf,
    /// The test's PostgreSQL database, in the PostgreSQL target.
    pub postgres: Option<crate::postgres::TestDb>,
}

impl TestDatabase {
    /// A fresh database for the engine under test: `dir/file` for SQLite, a copy of a
    /// migrated template for PostgreSQL (whose variant of a test runs only once PostgreSQL
    /// was found: `crate::engine::postgres_available`).
    pub async fn new(dir: &Path, file: &str) -> TestDatabase {
        let path = dir.join(file);
        if !crate::engine::postgres() {
            return TestDatabase {
                path,
                postgres: None,
            };
        }
        // Each test's database starts as a copy of one migrated once.
        match crate::postgres::database_from_template(crate::postgres::Durability::Fast, migrate)
            .await
        {
            Some(db) => TestDatabase {
                path,
                postgres: Some(db),
            },
            None => panic!("PostgreSQL was found for this test, then no database could be made"),
        }
    }

    /// What `--db` is given: the file, or the `postgres://` URL.
    pub fn arg(&self) -> OsString {
        match &self.postgres {
            Some(db) => db.url.clone().into(),
            None => self.path.clone().into(),
        }
    }

    /// The location `serve::Config` takes.
    pub fn location(&self) -> DbLocation {
        match &self.postgres {
            Some(db) => db.url.parse().unwrap(),
            None => self.path.clone().into(),
        }
    }

    /// The key-encryption keys of this database's signing keys: PostgreSQL requires one
    /// (the one commands get, [`TestDatabase::env`]); the SQLite tests run without.
    pub fn key_encryption(&self) -> mandate_server::signing::at_rest::KeyEncryption {
        use mandate_server::signing::at_rest::{Kek, KeyEncryption};
        match &self.postgres {
            Some(_) => KeyEncryption::new(
                Kek::from_base64(TEST_KEK.as_bytes(), "TEST_KEK").unwrap(),
                None,
            ),
            None => KeyEncryption::default(),
        }
    }

    /// The variables a `mandate-server` command on this database needs besides `--db`
    /// (PostgreSQL requires a key-encryption key).
    pub fn env(&self) -> Vec<(&'static str, &'static str)> {
        match &self.postgres {
            Some(_) => vec![("MANDATE_KEY_ENCRYPTION_KEY", TEST_KEK)],
            None => Vec::new(),
        }
    }

    /// Runs `sql` on the database, whichever the engine, and returns every row's columns
    /// as text (`None` for NULL). Write it for both: `$1`, `$2`… for `params`, and only
    /// tables and columns both schemas have.
    pub fn query(&self, sql: &str, params: &[&str]) -> Vec<Vec<Option<String>>> {
        match &self.postgres {
            Some(db) => postgres_query(&db.url, &inline(sql, params)),
            None => sqlite_query(&self.path, sql, params),
        }
    }

    /// The first column of the first row of [`TestDatabase::query`], if any.
    pub fn query_value(&self, sql: &str, params: &[&str]) -> Option<String> {
        self.query(sql, params)
            .into_iter()
            .next()
            .and_then(|row| row.into_iter().next().flatten())
    }

    /// [`TestDatabase::query_value`] as a number (a count).
    pub fn query_i64(&self, sql: &str, params: &[&str]) -> i64 {
        self.query_value(sql, params)
            .unwrap_or_else(|| panic!("no value from {sql}"))
            .parse()
            .unwrap()
    }

    /// The first column of every row of `sql` as bytes (a BLOB in SQLite, a BYTEA in
    /// PostgreSQL, which answers it as `\x` and hex digits).
    pub fn query_bytes(&self, sql: &str, params: &[&str]) -> Vec<Vec<u8>> {
        match &self.postgres {
            Some(db) => postgres_query(&db.url, &inline(sql, params))
                .into_iter()
                .map(|row| {
                    let text = row[0].clone().unwrap_or_default();
                    let hex = text.strip_prefix("\\x").expect("a bytea column");
                    (0..hex.len())
                        .step_by(2)
                        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                        .collect()
                })
                .collect(),
            None => {
                let conn = rusqlite::Connection::open(&self.path).unwrap();
                let sql = (1..=params.len()).rev().fold(sql.to_owned(), |s, n| {
                    s.replace(&format!("${n}"), &format!("?{n}"))
                });
                let mut stmt = conn.prepare(&sql).unwrap();
                stmt.query_map(rusqlite::params_from_iter(params.iter()), |r| r.get(0))
                    .unwrap()
                    .map(Result::unwrap)
                    .collect()
            }
        }
    }

    /// Runs statements that change the database (see [`TestDatabase::query`]).
    pub fn execute(&self, sql: &str, params: &[&str]) {
        self.query(sql, params);
    }
}

/// Brings the database at `url` to this server's schema (`mandate-server migrate`).
fn migrate(url: &str) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mandate-server"))
        .args(["migrate", "--db", url])
        .env("MANDATE_KEY_ENCRYPTION_KEY", TEST_KEK)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "migrate: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `sql` with `$N` replaced by `params[N-1]` as a quoted literal (the simple query protocol
/// of PostgreSQL, which answers every value as text, takes no parameters).
fn inline(sql: &str, params: &[&str]) -> String {
    let mut out = sql.to_owned();
    // Highest first, so that $1 does not eat the start of $10.
    for (i, value) in params.iter().enumerate().rev() {
        out = out.replace(
            &format!("${}", i + 1),
            &format!("'{}'", value.replace('\'', "''")),
        );
    }
    out
}

fn sqlite_query(path: &Path, sql: &str, params: &[&str]) -> Vec<Vec<Option<String>>> {
    // `?N` is SQLite's numbered parameter; `$N` would be a named one.
    let sql = (1..=params.len()).rev().fold(sql.to_owned(), |s, n| {
        s.replace(&format!("${n}"), &format!("?{n}"))
    });
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .unwrap();
    let mut rows = Vec::new();
    let mut batch = conn.prepare(&sql).unwrap();
    let columns = batch.column_count();
    let mut cursor = batch
        .query(rusqlite::params_from_iter(params.iter()))
        .unwrap();
    while let Some(row) = cursor.next().unwrap() {
        let mut values = Vec::with_capacity(columns);
        for i in 0..columns {
            use rusqlite::types::ValueRef;
            values.push(match row.get_ref(i).unwrap() {
                ValueRef::Null => None,
                ValueRef::Integer(n) => Some(n.to_string()),
                ValueRef::Real(x) => Some(x.to_string()),
                ValueRef::Text(t) => Some(String::from_utf8_lossy(t).into_owned()),
                ValueRef::Blob(b) => Some(String::from_utf8_lossy(b).into_owned()),
            });
        }
        rows.push(values);
    }
    rows
}

/// Runs `sql` on PostgreSQL from a thread of its own (this may be called from synchronous
/// code inside the test's runtime, which cannot be blocked on).
fn postgres_query(url: &str, sql: &str) -> Vec<Vec<Option<String>>> {
    let (url, sql) = (url.to_owned(), sql.to_owned());
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let client = crate::postgres::connect(&url).await.unwrap();
            let messages = client
                .simple_query(&sql)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
            messages
                .into_iter()
                .filter_map(|m| match m {
                    tokio_postgres::SimpleQueryMessage::Row(row) => Some(
                        (0..row.len())
                            .map(|i| row.get(i).map(str::to_owned))
                            .collect(),
                    ),
                    _ => None,
                })
                .collect()
        })
    })
    .join()
    .unwrap()
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(|_| {}).await
}

/// [`spawn_app`] with the server's configuration changed by `configure` first.
pub async fn spawn_app_with(configure: impl FnOnce(&mut Config)) -> TestApp {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDatabase::new(dir.path(), "mandate.db").await;
    let db_path = db.path.clone();
    let clock = Arc::new(ManualClock::new(START));
    let mut config = config(&db);
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
        db,
        _dir: dir,
    };
    app.org = app.onboard("acme").await;
    app
}

/// The configuration tests start with: the test's database, port 0 on loopback, defaults
/// elsewhere.
pub fn config(db: &TestDatabase) -> Config {
    Config {
        db: db.location(),
        migrate: true,
        api_addr: "127.0.0.1:0".into(),
        public_addr: "127.0.0.1:0".into(),
        verdicts_url: None,
        docs_url: None,
        tls: None,
        api_url: None,
        console_origins: None,
        log_checkpoint_interval: std::time::Duration::from_millis(100),
        log_checkpoint_batch: mandate_server::workers::checkpoint::BATCH,
        // A manual clock: a log waits by wall time only when a test moves it.
        log_quiet_below: 0,
        public_logs: false,
        x402_assets: Default::default(),
        witnesses: Vec::new(),
        limits: Default::default(),
        key_encryption: db.key_encryption(),
    }
}

async fn start(db: &TestDatabase, clock: Arc<ManualClock>) -> Running {
    serve::start(config(db), clock).await.unwrap()
}

impl TestApp {
    /// Onboards another organization through the operator command.
    pub async fn onboard(&self, name: &str) -> Org {
        let running = self.running.as_ref().unwrap();
        let o = operator::onboard(
            &*running.state.store,
            &running.state.api_keys,
            name,
            self.clock_now(),
        )
        .unwrap();
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
        let running = start(&self.db, self.clock.clone()).await;
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

impl TestApp {
    /// The stored events of organization `org` in `env` (`sandbox` or `live`), oldest first,
    /// as (type, data), read from the database whichever the engine.
    pub fn stored_events(&self, org: &str, env: &str) -> Vec<(String, Value)> {
        self.db
            .query(
                "SELECT e.type, e.data FROM events e JOIN orgs o ON o.id = e.org_id
                 WHERE o.name = $1 AND e.env = $2 ORDER BY e.seq",
                &[org, env],
            )
            .into_iter()
            .map(|row| {
                let data = row[1].as_deref().unwrap_or_default();
                (
                    row[0].clone().unwrap_or_default(),
                    serde_json::from_str(data).unwrap_or(Value::Null),
                )
            })
            .collect()
    }

    /// The id of organization `name`, read from the database.
    pub fn org_id(&self, name: &str) -> String {
        self.db
            .query_value("SELECT id FROM orgs WHERE name = $1", &[name])
            .unwrap()
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
    /// refuses it: running servers pick up operator key changes at their key cache's refresh.
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
        let org_id = self.org_id("acme");
        let agent = mandate_core::AgentId::parse(&format!("agt_{name}")).unwrap();
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
