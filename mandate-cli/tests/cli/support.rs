//! Test harness: a real server on 127.0.0.1 port 0 with a fresh database (an SQLite file,
//! or with [`start_on`] a PostgreSQL or Citus database of its own, a copy of a template
//! migrated once a process, on the throwaway clusters of
//! `mandate-test-kit/src/postgres.rs` and `citus.rs`) and the system clock, an onboarded
//! organization, and the real `mandate` binary run against it with HOME and the XDG
//! directories pointed at a temporary directory.
#![allow(dead_code)]
// Each test module uses a part of the harness; the rest is unused in any one build.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use mandate_server::clock::SystemClock;
use mandate_server::operator;
use mandate_server::serve::{self, Config, Running};
use mandate_server::signing::at_rest::{Kek, KeyEncryption};
use mandate_server::storage::location::DbLocation;
use mandate_server::workers::witness::WitnessTarget;
use serde_json::Value;
use tempfile::TempDir;

/// What one run of the binary produced.
#[derive(Debug)]
pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    /// Asserts the exit code, showing both streams when it differs.
    #[track_caller]
    pub fn code(&self, expected: i32) -> &Self {
        assert_eq!(
            self.code, expected,
            "exit code\n--- stdout\n{}\n--- stderr\n{}",
            self.stdout, self.stderr
        );
        self
    }

    /// Asserts success.
    #[track_caller]
    pub fn ok(&self) -> &Self {
        self.code(0)
    }

    /// stdout as JSON.
    #[track_caller]
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", self.stdout))
    }

    /// The value of a `name  value` line of stdout (the field lists of the table output).
    #[track_caller]
    pub fn field(&self, name: &str) -> String {
        self.stdout
            .lines()
            .find_map(|line| {
                let (first, rest) = line.split_once(char::is_whitespace)?;
                (first == name).then(|| rest.trim().to_owned())
            })
            .unwrap_or_else(|| panic!("no field {name} in stdout:\n{}", self.stdout))
    }

    /// Asserts stdout contains `needle`.
    #[track_caller]
    pub fn stdout_has(&self, needle: &str) -> &Self {
        assert!(
            self.stdout.contains(needle),
            "stdout lacks {needle:?}:\n{}",
            self.stdout
        );
        self
    }

    /// Asserts stderr contains `needle`.
    #[track_caller]
    pub fn stderr_has(&self, needle: &str) -> &Self {
        assert!(
            self.stderr.contains(needle),
            "stderr lacks {needle:?}:\n{}",
            self.stderr
        );
        self
    }
}

/// The engine a test's server stores on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// A fresh SQLite file.
    Sqlite,
    /// A fresh database on the tests' PostgreSQL (skipped without one, unless
    /// MANDATE_REQUIRE_POSTGRES=1).
    Postgres,
    /// A fresh database on the tests' Citus cluster, a coordinator and two workers, its
    /// schema distributed by `migrate` (skipped without Citus, unless
    /// MANDATE_REQUIRE_CITUS=1).
    Citus,
}

/// A fixed key-encryption key (base64 of 32 bytes): PostgreSQL requires one.
const TEST_KEK: &str = "bWFuZGF0ZS10ZXN0cy1rZXktZW5jcnlwdGlvbi1rZXk=";

/// Where the server's data lives.
pub enum Database {
    /// The directory of the SQLite file `mandate.db`.
    Sqlite(TempDir),
    /// The test's PostgreSQL database, and the name of its backup once one is taken
    /// ([`Env::back_up`]; dropped with the `Env`).
    Postgres {
        db: crate::postgres::TestDb,
        backup: Option<String>,
    },
    /// The test's database on every node of the Citus cluster, and the name of its backup
    /// (a copy on every node) once one is taken.
    Citus {
        db: crate::citus::CitusDb,
        backup: Option<String>,
    },
}

impl Database {
    fn location(&self) -> DbLocation {
        match self {
            Database::Sqlite(dir) => dir.path().join("mandate.db").into(),
            Database::Postgres { db, .. } => db.url.parse().unwrap(),
            Database::Citus { db, .. } => db.url.parse().unwrap(),
        }
    }

    fn key_encryption(&self) -> KeyEncryption {
        match self {
            Database::Sqlite(_) => KeyEncryption::default(),
            Database::Postgres { .. } | Database::Citus { .. } => KeyEncryption::new(
                Kek::from_base64(TEST_KEK.as_bytes(), "TEST_KEK").unwrap(),
                None,
            ),
        }
    }
}

/// A running server with an onboarded organization, and a home for the CLI.
pub struct Env {
    runtime: tokio::runtime::Runtime,
    running: Option<Running>,
    /// The API host, `http://127.0.0.1:port`.
    pub api: String,
    /// The public host (JWK Set).
    pub public: String,
    /// The issuer of every token.
    pub issuer: String,
    /// The sandbox organization key.
    pub org_key: String,
    /// The live organization key.
    pub live_key: String,
    /// HOME, with `config/` and `cache/` for the XDG directories.
    pub home: TempDir,
    db: Database,
    /// The witnesses the server submits its checkpoints to (none at start).
    witnesses: Vec<WitnessTarget>,
    /// How often its log worker runs ([`LOG_INTERVAL`] at start).
    log_interval: std::time::Duration,
}

/// How often the test servers' log workers run, unless told otherwise.
const LOG_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

impl Drop for Env {
    fn drop(&mut self) {
        if let Some(running) = self.running.take() {
            let _ = self.runtime.block_on(running.shutdown());
        }
        if let Database::Postgres {
            db,
            backup: Some(backup),
        } = &self.db
        {
            let sql = format!("DROP DATABASE IF EXISTS \"{backup}\" WITH (FORCE)");
            let _ = self.runtime.block_on(async {
                let admin = crate::postgres::connect(&admin_url(db)).await?;
                admin.batch_execute(&sql).await
            });
        }
        if let Database::Citus {
            db,
            backup: Some(backup),
        } = &self.db
        {
            db.drop_copy(backup);
        }
    }
}

/// A URL of the maintenance database of `db`'s server.
fn admin_url(db: &crate::postgres::TestDb) -> String {
    let mut url = url::Url::parse(&db.url).unwrap();
    url.set_path("/postgres");
    url.to_string()
}

/// Starts a server on SQLite and onboards `acme`.
pub fn start() -> Env {
    start_on(Engine::Sqlite).unwrap()
}

/// Starts a server on `engine` and onboards `acme`; `None` (said once on stderr) when the
/// engine is PostgreSQL or Citus and there is none here.
pub fn start_on(engine: Engine) -> Option<Env> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let db = match engine {
        Engine::Sqlite => Database::Sqlite(tempfile::tempdir().unwrap()),
        Engine::Postgres => Database::Postgres {
            db: runtime.block_on(crate::postgres::database_from_template(
                crate::postgres::Durability::Fast,
                migrate,
            ))?,
            backup: None,
        },
        Engine::Citus => Database::Citus {
            db: runtime.block_on(crate::citus::database_from_template(
                crate::citus::Share::WithOthers,
                migrate,
            ))?,
            backup: None,
        },
    };
    let running = runtime
        .block_on(serve::start(
            config(&db, None, &[], LOG_INTERVAL, "127.0.0.1:0"),
            Arc::new(SystemClock),
        ))
        .unwrap();
    if let Database::Citus { db, .. } = &db {
        runtime.block_on(assert_distributed(db));
    }
    let onboarded = operator::onboard(
        &*running.state.store,
        &running.state.api_keys,
        "acme",
        time::OffsetDateTime::now_utc(),
    )
    .unwrap();
    Some(Env {
        api: format!("http://{}", running.api_addr),
        public: format!("http://{}", running.public_addr),
        issuer: running.state.verdicts_url.clone(),
        org_key: onboarded.sandbox_key,
        live_key: onboarded.live_key,
        running: Some(running),
        runtime,
        home: tempfile::tempdir().unwrap(),
        db,
        witnesses: Vec::new(),
        log_interval: LOG_INTERVAL,
    })
}

/// Brings the database at `url` to this server's schema, as the server's own start does:
/// each test's PostgreSQL or Citus database is a copy of a template migrated once a
/// process (on Citus, distributing every table is most of a fresh database's start).
fn migrate(url: &str) {
    let location: DbLocation = url.parse().unwrap();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let (store, _) = serve::open_store(&location, true)
                .await
                .unwrap_or_else(|e| panic!("migrating the template {url}: {e}"));
            drop(store);
        });
}

/// Asserts that `migrate` distributed the decisions and the log's tables by organization
/// on the Citus database (else the attacks would run on the coordinator's plain tables).
async fn assert_distributed(db: &crate::citus::CitusDb) {
    let distributed: i64 = db
        .connect()
        .await
        .query_one(
            "SELECT COUNT(*) FROM citus_tables
             WHERE table_name::TEXT IN ('decisions', 'log_strips', 'log_tiles', 'log_heads')
               AND citus_table_type = 'distributed' AND distribution_column = 'org_id'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        distributed, 4,
        "the schema is not distributed by org_id on Citus"
    );
}

/// The server's configuration: the database, the verdicts URL when it must stay what it
/// was (a restart: the API on another port), the witnesses it submits its checkpoints to,
/// how often its log worker runs, and the public host's address.
fn config(
    db: &Database,
    verdicts_url: Option<String>,
    witnesses: &[WitnessTarget],
    log_interval: std::time::Duration,
    public_addr: &str,
) -> Config {
    Config {
        db: db.location(),
        migrate: true,
        api_addr: "127.0.0.1:0".into(),
        public_addr: public_addr.into(),
        verdicts_url,
        docs_url: None,
        tls: None,
        api_url: None,
        console_origins: None,
        log_checkpoint_interval: log_interval,
        log_checkpoint_batch: mandate_server::workers::checkpoint::BATCH,
        log_quiet_below: mandate_server::workers::checkpoint::QUIET_BELOW,
        public_logs: false,
        x402_assets: Default::default(),
        witnesses: witnesses.to_vec(),
        limits: Default::default(),
        key_encryption: db.key_encryption(),
    }
}

/// The binary with HOME and XDG directories under `home` and no MANDATE_* variable but
/// those in `env`; standard streams are left to the caller.
pub fn command_in(home: &Path, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mandate"));
    command
        .args(args)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_CACHE_HOME", home.join("cache"))
        .env_remove("MANDATE_BASE_URL")
        .env_remove("MANDATE_API_KEY")
        .env_remove("MANDATE_PROFILE")
        .env_remove("MANDATE_RETRIES");
    for (name, value) in env {
        command.env(name, value);
    }
    command
}

/// Runs the binary with HOME and XDG directories under `home`, no MANDATE_* variable but
/// those in `env`, and `stdin` when given.
pub fn run_in(home: &Path, args: &[&str], env: &[(&str, &str)], stdin: Option<&str>) -> Out {
    let mut command = command_in(home, args, env);
    command
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().unwrap();
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    let output = child.wait_with_output().unwrap();
    Out {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    }
}

impl Env {
    /// Stops the server, hands its database to `change` (an attacker with the database,
    /// or its operator), and starts it again on the same database and issuer, the public
    /// host on the same port (the verdicts URL, where the logs' tiles are read, stays
    /// live), the API on a new one.
    fn restart_after(&mut self, change: impl FnOnce(&mut Database, &tokio::runtime::Runtime)) {
        let running = self.running.take().unwrap();
        let public_addr = running.public_addr.to_string();
        self.runtime.block_on(running.shutdown()).unwrap();
        change(&mut self.db, &self.runtime);
        // The stopped server's public port may take a moment to be free again.
        let mut tries = 0;
        let running = loop {
            let started = self.runtime.block_on(serve::start(
                config(
                    &self.db,
                    Some(self.issuer.clone()),
                    &self.witnesses,
                    self.log_interval,
                    &public_addr,
                ),
                Arc::new(SystemClock),
            ));
            match started {
                Ok(running) => break running,
                Err(e) if tries < 50 => {
                    tries += 1;
                    eprintln!("restarting on {public_addr}: {e}; again in 100 ms");
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                Err(e) => panic!("cannot restart the server on {public_addr}: {e}"),
            }
        };
        self.api = format!("http://{}", running.api_addr);
        self.public = format!("http://{}", running.public_addr);
        self.running = Some(running);
    }

    /// Stops the server and starts it again on the same database, submitting its
    /// checkpoints to `witnesses` from then on (also across later restarts).
    pub fn set_witnesses(&mut self, witnesses: Vec<WitnessTarget>) {
        self.witnesses = witnesses;
        self.restart_after(|_, _| {});
    }

    /// Has the log worker run every `interval` from the next start on (an hour: the
    /// decisions made meanwhile wait, not logged, as if the worker were behind).
    pub fn log_every(&mut self, interval: std::time::Duration) {
        self.log_interval = interval;
    }

    /// Stops the server and starts it again on the same database.
    pub fn restart(&mut self) {
        self.restart_after(|_, _| {});
    }

    /// The metrics of every server of this test binary, in the Prometheus text format (the
    /// recorder is process-wide: installed by the first call).
    pub fn metrics(&self) -> String {
        let handle = self
            .runtime
            .block_on(async { mandate_server::telemetry::install() })
            .unwrap();
        handle.render()
    }

    /// Stops the server, runs `sql` (statements separated by `;`) on its database as an
    /// attacker with the database would, and starts it again.
    pub fn tamper(&mut self, sql: &str) {
        self.restart_after(|db, runtime| match db {
            Database::Sqlite(dir) => rusqlite::Connection::open(dir.path().join("mandate.db"))
                .unwrap()
                .execute_batch(sql)
                .unwrap(),
            Database::Postgres { db, .. } => runtime.block_on(async {
                db.connect().await.batch_execute(sql).await.unwrap();
            }),
            Database::Citus { db, .. } => runtime.block_on(async {
                db.connect().await.batch_execute(sql).await.unwrap();
            }),
        });
    }

    /// Stops the server, takes a backup of its database (the SQLite file and its WAL
    /// files; a copy of the PostgreSQL database), and starts it again.
    pub fn back_up(&mut self) {
        self.restart_after(|db, runtime| match db {
            Database::Sqlite(dir) => copy_sqlite(dir.path(), false),
            Database::Postgres { db, backup } => {
                let name = format!("{}_backup", db.name);
                runtime.block_on(copy_postgres(db, &db.name, &name));
                *backup = Some(name);
            }
            Database::Citus { db, backup } => {
                let name = format!("{}_backup", db.name);
                runtime.block_on(db.copy_to(&name));
                *backup = Some(name);
            }
        });
    }

    /// Stops the server, puts the backup [`Env::back_up`] took in place of its database,
    /// and starts it again.
    pub fn restore(&mut self) {
        self.restart_after(|db, runtime| match db {
            Database::Sqlite(dir) => copy_sqlite(dir.path(), true),
            Database::Postgres { db, backup } => {
                let backup = backup.clone().expect("a backup was taken");
                runtime.block_on(copy_postgres(db, &backup, &db.name));
            }
            Database::Citus { db, backup } => {
                let backup = backup.clone().expect("a backup was taken");
                runtime.block_on(db.restore_from(&backup));
            }
        });
    }

    /// The engine the server stores on.
    pub fn engine(&self) -> Engine {
        match self.db {
            Database::Sqlite(_) => Engine::Sqlite,
            Database::Postgres { .. } => Engine::Postgres,
            Database::Citus { .. } => Engine::Citus,
        }
    }

    /// `mandate verify TOKEN --log FILE` for a sandbox verdict of `amount` USD to
    /// vendor:acme under the server's issuer, with `extra` arguments (`--jwks FILE`,
    /// `--witness VKEY`, ...): the one argument list every test of a logged verdict uses.
    pub fn verify_logged(&self, token: &str, amount: &str, log: &str, extra: &[&str]) -> Out {
        let mut args = vec![
            "verify",
            token,
            "--issuer",
            &self.issuer,
            "--sandbox",
            "--amount",
            amount,
            "--currency",
            "USD",
            "--recipient",
            "vendor:acme",
            "--log",
            log,
        ];
        args.extend_from_slice(extra);
        self.offline(&args)
    }

    /// Runs with exactly these variables (plus HOME and XDG).
    pub fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Out {
        run_in(self.home.path(), args, env, None)
    }

    /// Runs with stdin.
    pub fn run_stdin(&self, args: &[&str], env: &[(&str, &str)], stdin: &str) -> Out {
        run_in(self.home.path(), args, env, Some(stdin))
    }

    /// Runs against the server with the organization key.
    pub fn org(&self, args: &[&str]) -> Out {
        self.with_key(&self.org_key, args)
    }

    /// Runs against the server with `key`.
    pub fn with_key(&self, key: &str, args: &[&str]) -> Out {
        self.run(
            args,
            &[("MANDATE_BASE_URL", &self.api), ("MANDATE_API_KEY", key)],
        )
    }

    /// Runs without any server settings (offline commands).
    pub fn offline(&self, args: &[&str]) -> Out {
        self.run(args, &[])
    }

    /// Trusts the AP2 issuer key `jwk` (a JWK's JSON text) for `acme`, as the operator
    /// command `mandate-server ap2-issuer add` does.
    pub fn trust_ap2_issuer(&self, jwk: &str) {
        let running = self.running.as_ref().unwrap();
        let key = operator::read_issuer_key(jwk, None).unwrap();
        operator::add_ap2_issuer(
            &*running.state.store,
            "acme",
            &key,
            time::OffsetDateTime::now_utc(),
        )
        .unwrap();
    }

    /// Registers an agent; returns its key.
    pub fn agent(&self, name: &str) -> String {
        let out = self.org(&["agents", "create", name, "--json"]);
        out.ok();
        out.json()["agent_key"].as_str().unwrap().to_owned()
    }

    /// Writes the standard mandate for `agt_<name>`: 100 per transaction, 150 a month,
    /// USD, software and travel, review above 50.
    pub fn standard_mandate(&self, name: &str) -> Value {
        self.standard_mandate_with(&self.org_key, name)
    }

    /// An agent with the standard mandate in the live environment, which is switched to
    /// enforce (a new live environment starts in observe); returns its key.
    pub fn live_standard_agent(&self, name: &str) -> String {
        self.with_key(&self.live_key, &["enforcement", "set", "enforce"])
            .ok();
        let out = self.with_key(&self.live_key, &["agents", "create", name, "--json"]);
        out.ok();
        self.standard_mandate_with(&self.live_key, name);
        out.json()["agent_key"].as_str().unwrap().to_owned()
    }

    /// Writes the standard mandate for `agt_<name>` with the organization key `key`.
    fn standard_mandate_with(&self, key: &str, name: &str) -> Value {
        let out = self.with_key(
            key,
            &[
                "mandates",
                "create",
                "--agent",
                &format!("agt_{name}"),
                "--per-transaction",
                "100",
                "--per-month",
                "150",
                "--currency",
                "USD",
                "--category",
                "software",
                "--category",
                "travel",
                "--review-above",
                "50",
                "--expires",
                "2099-12-31",
                "--json",
            ],
        );
        out.ok();
        out.json()
    }

    /// An agent with the standard mandate; returns its key.
    pub fn standard_agent(&self, name: &str) -> String {
        let key = self.agent(name);
        self.standard_mandate(name);
        key
    }

    /// `mandate authorize … --json` with an agent key; the output (check its code).
    pub fn authorize(&self, key: &str, amount: &str, currency: &str, category: &str) -> Out {
        self.with_key(
            key,
            &[
                "authorize",
                "--amount",
                amount,
                "--currency",
                currency,
                "--recipient",
                "vendor:acme",
                "--category",
                category,
                "--json",
            ],
        )
    }

    /// Signs a webhook event with the sandbox's current key, as the server would: issued
    /// at `iat`, expiring five minutes later.
    pub fn sign_event(&self, event_type: &str, iat: i64) -> String {
        self.sign_event_as(event_type, iat, [7; 16])
    }

    /// A sandbox event of `event_type` signed at `iat` with the id made of `id` (ids sort
    /// as their bytes do: the server puts the creation time first).
    pub fn sign_event_as(&self, event_type: &str, iat: i64, id: [u8; 16]) -> String {
        use mandate_core::{EventClaims, EventId};
        let state = &self.running.as_ref().unwrap().state;
        let signer = state.signer(mandate_server::model::Env::Sandbox).unwrap();
        let claims = EventClaims {
            iss: self.issuer.clone(),
            jti: EventId::from_random(id),
            iat,
            exp: iat + mandate_protocol::claims::EVENT_LIFETIME_SECS,
            event_type: event_type.to_owned(),
            data: serde_json::json!({"webhook": "whk_test"}),
        };
        mandate_core::sign_token(signer.as_ref(), &claims).unwrap()
    }

    /// `claims` signed with the live environment's current key, as the server signs its
    /// verdicts.
    pub fn sign_live_verdict(&self, claims: &mandate_core::VerdictClaims) -> String {
        let state = &self.running.as_ref().unwrap().state;
        let signer = state.signer(mandate_server::model::Env::Live).unwrap();
        mandate_core::sign_token(signer.as_ref(), claims).unwrap()
    }

    /// A file under the temporary home.
    pub fn path(&self, name: &str) -> PathBuf {
        self.home.path().join(name)
    }

    /// Writes a file under the temporary home; returns its path as text.
    pub fn write(&self, name: &str, text: &str) -> String {
        let path = self.path(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }
}

/// Copies the SQLite file `mandate.db` of `dir` and its WAL files into `dir/backup` (or
/// back from it with `back`), leaving no WAL file the copy does not have.
fn copy_sqlite(dir: &Path, back: bool) {
    let saved = dir.join("backup");
    std::fs::create_dir_all(&saved).unwrap();
    for suffix in ["", "-wal", "-shm"] {
        let live = dir.join(format!("mandate.db{suffix}"));
        let kept = saved.join(format!("mandate.db{suffix}"));
        let (from, to) = if back { (kept, live) } else { (live, kept) };
        if from.exists() {
            std::fs::copy(&from, &to).unwrap();
        } else if to.exists() {
            std::fs::remove_file(&to).unwrap();
        }
    }
}

/// Makes the database `to` a copy of `from` on `db`'s server (`to` dropped first), as a
/// restore from a dump would; nothing may be connected to either.
async fn copy_postgres(db: &crate::postgres::TestDb, from: &str, to: &str) {
    let admin = crate::postgres::connect(&admin_url(db)).await.unwrap();
    // The stopped server's connections may still be closing.
    admin
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE datname = $1 AND pid <> pg_backend_pid()",
            &[&from],
        )
        .await
        .unwrap();
    // Each alone: neither may run in a transaction block.
    for sql in [
        format!("DROP DATABASE IF EXISTS \"{to}\" WITH (FORCE)"),
        format!("CREATE DATABASE \"{to}\" TEMPLATE \"{from}\""),
    ] {
        admin.batch_execute(&sql).await.unwrap();
    }
}

/// A loopback URL where nothing listens.
pub fn closed_port_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}")
}

/// What the servers of this test binary logged at warn level and above, from the first
/// call on (the subscriber is process-wide: a test picks its lines by its log's origin).
pub fn server_log() -> String {
    static LOG: std::sync::OnceLock<Arc<std::sync::Mutex<Vec<u8>>>> = std::sync::OnceLock::new();
    let log = LOG.get_or_init(|| {
        let log = Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = Arc::clone(&log);
        let _ = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing_subscriber::filter::LevelFilter::WARN)
            .with_writer(move || LogSink(Arc::clone(&sink)))
            .try_init();
        log
    });
    String::from_utf8_lossy(&log.lock().unwrap()).into_owned()
}

/// Where [`server_log`]'s subscriber writes.
struct LogSink(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogSink {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
