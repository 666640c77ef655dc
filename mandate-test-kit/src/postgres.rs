//! A throwaway PostgreSQL for tests: one cluster per test process, a fresh database per test.
//!
//! `MANDATE_TEST_POSTGRES_URL`, when set, names a server to use (its user must be allowed to
//! create databases). Otherwise the installed `initdb` and `postgres` (on PATH, then under
//! /usr/lib/postgresql/*/bin) start a cluster in a temporary directory, on a free port of
//! 127.0.0.1 with its socket in that directory. PostgreSQL refuses to run as root: as root,
//! the directory is given to the `postgres` user and the cluster runs as that user.
//!
//! The cluster runs under a guardian shell whose standard input is a pipe from the test
//! process: when the test process exits, however it exits (a panic, an abort, SIGKILL), the
//! pipe closes, and the guardian stops PostgreSQL and removes the directory.
//!
//! `MANDATE_TEST_POSTGRES_BIN` names the directory of `initdb` and `postgres` instead.
//!
//! Without PostgreSQL, [`database`] says so once on stderr and returns `None` (the test
//! passes without running), unless `MANDATE_REQUIRE_POSTGRES=1`, where it panics (CI).
#![allow(dead_code)]
// Compiled into several test targets, which each use a part of it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How the throwaway cluster is tuned: the first caller's choice holds for the process (each
/// test target asks for one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// `fsync=off` and no full-page writes: commits are not forced to disk. For tests that
    /// never lose the machine, where only speed matters.
    Fast,
    /// PostgreSQL's defaults (`fsync=on`): for tests about durability.
    Durable,
}

/// A database of its own for one test, dropped (with its connections) when this is.
pub struct TestDb {
    /// `postgres://…` naming the database: what `--db` takes.
    pub url: String,
    /// The database's name.
    pub name: String,
    admin_url: String,
}

impl TestDb {
    /// Opens a connection to this database (its connection task runs on the caller's runtime).
    pub async fn connect(&self) -> tokio_postgres::Client {
        connect(&self.url)
            .await
            .unwrap_or_else(|e| panic!("cannot connect to the test database {}: {e}", self.name))
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        // On a thread with a runtime of its own: this may run inside the test's runtime,
        // which cannot be blocked on. WITH (FORCE) ends the connections still open to it
        // (a server of the test that was not stopped).
        let admin = self.admin_url.clone();
        let sql = format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.name);
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            runtime.block_on(async {
                let client = connect(&admin).await.ok()?;
                client.batch_execute(&sql).await.ok()
            })
        })
        .join();
        if !matches!(dropped, Ok(Some(()))) {
            eprintln!("could not drop the test database {}", self.name);
        }
    }
}

/// The PostgreSQL server the tests of this process use.
struct Cluster {
    /// A URL of its maintenance database (`postgres`), as a user that creates databases.
    admin_url: String,
    /// The directory and port of a cluster started here (`None` for
    /// `MANDATE_TEST_POSTGRES_URL`).
    local: Option<(PathBuf, u16)>,
    /// The guardian of a cluster started here: kept, with the pipe to its input, for the
    /// life of the process; never written.
    guardian: Option<Mutex<Child>>,
}

static CLUSTER: OnceLock<Result<Cluster, Absent>> = OnceLock::new();
static SAID_SKIPPED: AtomicBool = AtomicBool::new(false);
static NEXT_DB: AtomicU32 = AtomicU32::new(0);

/// Why there is no PostgreSQL to test against.
#[derive(Debug, Clone)]
pub(crate) struct Absent(pub(crate) String);

/// A fresh, empty database on this process's PostgreSQL, or `None` when there is no
/// PostgreSQL and it is not required (said once on stderr). Panics when PostgreSQL is
/// required (`MANDATE_REQUIRE_POSTGRES=1`) but absent, or installed but failing to start.
pub async fn database(durability: Durability) -> Option<TestDb> {
    let cluster = match cluster(durability) {
        Ok(cluster) => cluster,
        Err(Absent(why)) => {
            if required() {
                panic!(
                    "PostgreSQL is required (MANDATE_REQUIRE_POSTGRES=1) but {why}; install \
                     postgresql (initdb and postgres on PATH or under /usr/lib/postgresql/*/bin) \
                     or set MANDATE_TEST_POSTGRES_URL"
                );
            }
            say_skipped(&why);
            return None;
        }
    };
    let name = format!(
        "mandate_test_{}_{}_{:08x}",
        std::process::id(),
        NEXT_DB.fetch_add(1, Ordering::Relaxed),
        rand::random::<u32>()
    );
    let admin = connect(&cluster.admin_url).await.unwrap_or_else(|e| {
        panic!("cannot connect to the test PostgreSQL to create a database: {e}")
    });
    admin
        .batch_execute(&format!("CREATE DATABASE \"{name}\""))
        .await
        .unwrap_or_else(|e| panic!("cannot create the test database {name}: {e}"));
    Some(TestDb {
        url: with_database(&cluster.admin_url, &name),
        name,
        admin_url: cluster.admin_url.clone(),
    })
}

/// [`database`], as a copy of a template this process prepares once with `prepare` (given
/// the template's URL, e.g. to migrate it): each test then starts from that state without
/// paying for it. On a server named by MANDATE_TEST_POSTGRES_URL, where a template would
/// outlive the process, it is [`database`] with `prepare` run on each.
pub async fn database_from_template(durability: Durability, prepare: fn(&str)) -> Option<TestDb> {
    static TEMPLATE: tokio::sync::OnceCell<String> = tokio::sync::OnceCell::const_new();
    let cluster = cluster(durability).ok();
    if cluster.is_none_or(|c| c.local.is_none()) {
        let db = database(durability).await?;
        let url = db.url.clone();
        tokio::task::spawn_blocking(move || prepare(&url))
            .await
            .unwrap();
        return Some(db);
    }
    let cluster = cluster?;
    let template = TEMPLATE
        .get_or_init(|| async {
            let name = format!("mandate_template_{}", std::process::id());
            let admin = connect(&cluster.admin_url).await.unwrap();
            admin
                .batch_execute(&format!("CREATE DATABASE \"{name}\""))
                .await
                .unwrap_or_else(|e| panic!("cannot create the template database: {e}"));
            let url = with_database(&cluster.admin_url, &name);
            tokio::task::spawn_blocking(move || prepare(&url))
                .await
                .unwrap();
            name
        })
        .await;
    let name = format!(
        "mandate_test_{}_{}_{:08x}",
        std::process::id(),
        NEXT_DB.fetch_add(1, Ordering::Relaxed),
        rand::random::<u32>()
    );
    let admin = connect(&cluster.admin_url).await.unwrap();
    admin
        .batch_execute(&format!(
            "CREATE DATABASE \"{name}\" TEMPLATE \"{template}\""
        ))
        .await
        .unwrap_or_else(|e| panic!("cannot create the test database {name}: {e}"));
    Some(TestDb {
        url: with_database(&cluster.admin_url, &name),
        name,
        admin_url: cluster.admin_url.clone(),
    })
}

/// Whether PostgreSQL can be tested against here, without creating anything but the
/// cluster; `Err` holds why not (already said on stderr unless required).
pub fn available(durability: Durability) -> Result<(), String> {
    match cluster(durability) {
        Ok(_) => Ok(()),
        Err(Absent(why)) => {
            if required() {
                panic!("PostgreSQL is required (MANDATE_REQUIRE_POSTGRES=1) but {why}");
            }
            say_skipped(&why);
            Err(why)
        }
    }
}

/// The directory and port of the cluster this process started, once [`database`] or
/// [`available`] started one (`None` with `MANDATE_TEST_POSTGRES_URL`, or before).
pub fn local_cluster() -> Option<(PathBuf, u16)> {
    CLUSTER.get()?.as_ref().ok()?.local.clone()
}

fn required() -> bool {
    std::env::var("MANDATE_REQUIRE_POSTGRES").is_ok_and(|v| v == "1")
}

/// Prints the skip notice once per process, on stderr itself: `eprintln!` in a test is
/// captured, and shown only if the test fails.
pub fn say_skipped(why: &str) {
    use std::io::Write;
    if !SAID_SKIPPED.swap(true, Ordering::SeqCst) {
        let _ = writeln!(
            std::io::stderr(),
            "PostgreSQL tests skipped: {why}; install postgresql or set MANDATE_TEST_POSTGRES_URL \
             (MANDATE_REQUIRE_POSTGRES=1 makes a missing PostgreSQL fail the tests)"
        );
    }
}

/// Connects to `url` without TLS (a local test server) and drives the connection on the
/// caller's runtime.
pub async fn connect(url: &str) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// `url` naming database `name` instead of its own.
fn with_database(url: &str, name: &str) -> String {
    let mut parsed = url::Url::parse(url).expect("MANDATE_TEST_POSTGRES_URL is a valid URL");
    parsed.set_path(&format!("/{name}"));
    parsed.to_string()
}

fn cluster(durability: Durability) -> Result<&'static Cluster, Absent> {
    CLUSTER
        .get_or_init(|| {
            if let Ok(url) = std::env::var("MANDATE_TEST_POSTGRES_URL")
                && !url.trim().is_empty()
            {
                return Ok(Cluster {
                    admin_url: url.trim().to_owned(),
                    local: None,
                    guardian: None,
                });
            }
            let bin = find_binaries()?;
            Ok(start_cluster(&bin, durability))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// The directory holding `initdb` and `postgres`: `MANDATE_TEST_POSTGRES_BIN` when set
/// (and only it), else PATH first, then the newest /usr/lib/postgresql/*/bin.
pub(crate) fn find_binaries() -> Result<PathBuf, Absent> {
    let has_both = |dir: &Path| dir.join("initdb").is_file() && dir.join("postgres").is_file();
    if let Some(dir) = std::env::var_os("MANDATE_TEST_POSTGRES_BIN") {
        let dir = PathBuf::from(dir);
        return if has_both(&dir) {
            Ok(dir)
        } else {
            Err(Absent(format!(
                "MANDATE_TEST_POSTGRES_BIN ({}) holds no initdb and postgres",
                dir.display()
            )))
        };
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if has_both(&dir) {
                return Ok(dir);
            }
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, bin)| has_both(bin))
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin).ok_or_else(|| {
        Absent(
            "initdb and postgres were found neither on PATH nor under /usr/lib/postgresql/*/bin"
                .into(),
        )
    })
}

/// Whether this process runs as root (PostgreSQL then has to run as another user).
pub(crate) fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .is_some_and(|uid| uid.trim() == "0")
}

/// The uid and gid of user `name`.
pub(crate) fn user_ids(name: &str) -> Option<(u32, u32)> {
    let id = |flag: &str| -> Option<u32> {
        let out = Command::new("id").args([flag, name]).output().ok()?;
        if !out.status.success() {
            return None;
        }
        String::from_utf8(out.stdout).ok()?.trim().parse().ok()
    };
    Some((id("-u")?, id("-g")?))
}

/// Runs `program` with `args`, as the `postgres` user when this process is root.
pub(crate) fn as_cluster_user(root: bool, program: &Path) -> Command {
    if root {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

/// What the guardian runs: PostgreSQL in the background, then it waits for its standard
/// input to close (the test process is gone), stops PostgreSQL at once and removes the
/// cluster's directory.
const GUARDIAN: &str = r#"
dir=$1; postgres=$2; port=$3; shift 3
"$postgres" -D "$dir/data" -p "$port" -k "$dir" -c listen_addresses=127.0.0.1 "$@" \
    >"$dir/server.log" 2>&1 </dev/null &
pid=$!
cat >/dev/null
kill -QUIT "$pid" 2>/dev/null
wait "$pid"
rm -rf "$dir"
"#;

/// Starts a cluster: initdb in a fresh directory, then PostgreSQL under a guardian (tried
/// on another port if the one chosen was taken meanwhile). Panics with the server's log if
/// it does not come up.
fn start_cluster(bin: &Path, durability: Durability) -> Cluster {
    let root = is_root();
    let ids = if root {
        Some(user_ids("postgres").unwrap_or_else(|| {
            panic!(
                "PostgreSQL refuses to run as root and there is no `postgres` user to run it as \
                 (create one, or set MANDATE_TEST_POSTGRES_URL)"
            )
        }))
    } else {
        None
    };
    let mut last_log = String::new();
    for _ in 0..3 {
        // The guardian removes the directory; Rust must not (it may be gone first).
        let dir = tempfile::Builder::new()
            .prefix("mandate-pg-")
            .tempdir()
            .expect("a temporary directory for PostgreSQL")
            .keep();
        if let Some((uid, gid)) = ids {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
                .expect("the PostgreSQL directory given to the postgres user");
        }
        let data = dir.join("data");
        let init = as_cluster_user(root, &bin.join("initdb"))
            .arg("-D")
            .arg(&data)
            // --no-sync: the new files are not forced to disk (only a machine crash right
            // after initdb could lose them); the server's own fsync setting is unaffected.
            .args([
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ])
            .stdin(Stdio::null())
            .output()
            .expect("initdb runs");
        if !init.status.success() {
            let _ = std::fs::remove_dir_all(&dir);
            panic!(
                "initdb failed:\n{}{}",
                String::from_utf8_lossy(&init.stdout),
                String::from_utf8_lossy(&init.stderr)
            );
        }
        let port = free_port();
        let mut settings = vec![
            "-c",
            "max_connections=400",
            "-c",
            "shared_buffers=64MB",
            "-c",
            "log_min_messages=warning",
        ];
        if durability == Durability::Fast {
            settings.extend(["-c", "fsync=off", "-c", "full_page_writes=off"]);
        }
        let mut guardian = {
            let mut sh = as_cluster_user(root, Path::new("sh"));
            sh.arg("-c")
                .arg(GUARDIAN)
                .arg("sh")
                .arg(&dir)
                .arg(bin.join("postgres"))
                .arg(port.to_string())
                .args(&settings)
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            // A process group of its own: a Ctrl-C at the terminal reaches the tests, whose
            // exit then stops the cluster in order, not the cluster directly.
            std::os::unix::process::CommandExt::process_group(&mut sh, 0);
            sh.spawn().expect("the PostgreSQL guardian starts")
        };
        match wait_ready(&data, &dir.join("server.log"), &mut guardian) {
            Ok(()) => {
                return Cluster {
                    admin_url: format!("postgres://postgres@127.0.0.1:{port}/postgres"),
                    local: Some((dir, port)),
                    guardian: Some(Mutex::new(guardian)),
                };
            }
            Err(log) => {
                // Closing its input makes the guardian stop PostgreSQL and remove the directory.
                drop(guardian.stdin.take());
                let _ = guardian.wait();
                last_log = log;
            }
        }
    }
    panic!("PostgreSQL did not start (three tries); its log:\n{last_log}");
}

/// Waits (up to 60 s) until PostgreSQL says it is ready in its pid file, as `pg_ctl -w`
/// does; `Err` with its log if it stopped or never got there.
fn wait_ready(data: &Path, log: &Path, guardian: &mut Child) -> Result<(), String> {
    let read_log = || std::fs::read_to_string(log).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Ok(pid_file) = std::fs::read_to_string(data.join("postmaster.pid"))
            && pid_file.lines().nth(7).is_some_and(|s| s.trim() == "ready")
        {
            return Ok(());
        }
        if guardian.try_wait().ok().flatten().is_some() {
            return Err(read_log());
        }
        let log = read_log();
        if log.contains("FATAL") || log.contains("could not bind") {
            return Err(log);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!("(not ready after 60 s)\n{}", read_log()))
}

/// A free port on 127.0.0.1.
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}
