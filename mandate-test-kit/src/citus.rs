//! A throwaway Citus cluster for tests: a coordinator and two workers, one cluster per test
//! process, a database of its own per test (the same name on every node, `citus` created in
//! each, the workers added), dropped on every node when the test ends.
//!
//! `MANDATE_TEST_CITUS_URL`, when set, names the coordinator of a running cluster instead: a
//! database on it that has the `citus` extension and its workers added (`citus_add_node`),
//! as a user that may create databases on every node with the same credentials. Each test's
//! database is then created on the coordinator and on each worker its `pg_dist_node` names.
//! Its nodes need the two settings below that counting relies on (`citus.recover_2pc_interval
//! = -1`, `citus.enable_stat_counters = on`); the tests that stop a worker do not run on it.
//!
//! Otherwise the cluster is started here from the installed PostgreSQL whose library
//! directory holds `citus.so` (`MANDATE_TEST_POSTGRES_BIN`, else PATH, else the newest
//! /usr/lib/postgresql/*/bin that has it): three `initdb` directories with
//! `shared_preload_libraries = 'citus'` on free ports of 127.0.0.1, run as the `postgres`
//! user when this process is root (PostgreSQL refuses root). A guardian shell whose standard
//! input is a pipe from the test process stops the three servers and removes their directory
//! when the test process exits, however it exits (a panic, an abort, SIGKILL), as the
//! PostgreSQL harness beside this file does.
//!
//! Each test's database is a copy of a template made once per process (`citus` created and
//! the workers added on every node), so a test pays a `CREATE DATABASE` per node, not the
//! extension and the node metadata.
//!
//! Without Citus, [`database`] says `Citus tests skipped: …` once on stderr, with how to run
//! them, and returns `None` (the test passes without running), unless
//! `MANDATE_REQUIRE_CITUS=1`, where it panics (CI).
//!
//! The cluster is tuned for tests: `fsync` off (tests never lose the machine), the two-phase
//! commit recovery off (`citus.recover_2pc_interval = -1`) so that `pg_dist_transaction`
//! keeps a row for every two-phase commit and [`CitusDb::two_phase_commits`] counts them all,
//! Citus's statistic counters on ([`CitusDb::multi_shard_queries`]), `wal_level = logical`
//! (shard moves in every transfer mode) and enough background workers for a maintenance
//! daemon per database.
#![allow(dead_code)]
// Compiled into several test targets, which each use a part of it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, LazyLock, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::{OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock};

/// Whether a test shares the cluster with the other tests of its process or has it alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Share {
    /// Tests run side by side, each in its database.
    WithOthers,
    /// The test waits until no other test of this process holds a database, and the others
    /// wait for it: what a test that stops a worker needs ([`CitusDb::stop_worker`]). Only
    /// on the cluster the tests start: on MANDATE_TEST_CITUS_URL's, [`database`] says the
    /// test is skipped and returns `None`.
    Alone,
}

/// A worker of the cluster, as the coordinator's `pg_dist_node` names it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Worker {
    pub host: String,
    pub port: u16,
}

impl std::fmt::Display for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// A database of its own for one test, on every node of the cluster, dropped (with its
/// connections) on every node when this is.
pub struct CitusDb {
    /// `postgres://…` naming the database on the coordinator: what `--db` takes.
    pub url: String,
    /// The database's name, the same on every node.
    pub name: String,
    cluster: &'static Cluster,
    turn: Turn,
}

/// The test's turn on the cluster, held while its database lives.
enum Turn {
    Shared(OwnedRwLockReadGuard<()>),
    Alone(OwnedRwLockWriteGuard<()>),
}

impl CitusDb {
    /// Opens a connection to this database on the coordinator (its connection task runs on
    /// the caller's runtime).
    pub async fn connect(&self) -> tokio_postgres::Client {
        connect(&self.url)
            .await
            .unwrap_or_else(|e| panic!("cannot connect to the test database {}: {e}", self.name))
    }

    /// The workers, in the order of their ports.
    pub fn workers(&self) -> &[Worker] {
        &self.cluster.workers
    }

    /// `postgres://…` naming this database on `worker` (Citus 11+ routes a distributed
    /// table's statements from any node, so a server may connect to a worker too).
    pub fn worker_url(&self, worker: &Worker) -> String {
        let mut url = url::Url::parse(&self.url).expect("the test database's URL");
        url.set_host(Some(&worker.host)).expect("the worker's host");
        url.set_port(Some(worker.port)).expect("the worker's port");
        url.to_string()
    }

    /// The shard of distributed table `table` that holds distribution value `org_id`.
    pub async fn shard_of(&self, table: &str, org_id: &str) -> i64 {
        let c = self.connect().await;
        c.query_one(
            "SELECT get_shard_id_for_distribution_column($1::TEXT::REGCLASS, $2::TEXT)",
            &[&table, &org_id],
        )
        .await
        .unwrap_or_else(|e| panic!("the shard of {table} for {org_id:?}: {e}"))
        .get(0)
    }

    /// The worker that holds shard `shard` (its active placement).
    pub async fn placement(&self, shard: i64) -> Worker {
        let c = self.connect().await;
        let rows = c
            .query(
                "SELECT n.nodename, n.nodeport FROM pg_dist_placement p
                 JOIN pg_dist_node n ON n.groupid = p.groupid
                 WHERE p.shardid = $1 AND p.shardstate = 1 AND n.noderole = 'primary'",
                &[&shard],
            )
            .await
            .unwrap_or_else(|e| panic!("the placement of shard {shard}: {e}"));
        match rows.as_slice() {
            [row] => Worker {
                host: row.get(0),
                port: u16::try_from(row.get::<_, i32>(1)).expect("a port"),
            },
            other => panic!(
                "shard {shard} has {} active placements, not one",
                other.len()
            ),
        }
    }

    /// The worker that holds organization `org_id`'s rows of distributed table `table`.
    pub async fn worker_of(&self, table: &str, org_id: &str) -> Worker {
        let shard = self.shard_of(table, org_id).await;
        self.placement(shard).await
    }

    /// Moves shard `shard` (and the shards co-located with it) to worker `to`, writes to
    /// them blocked while it copies (`block_writes`); returns when the move is done.
    pub async fn move_shard(&self, shard: i64, to: &Worker) {
        let from = self.placement(shard).await;
        let c = self.connect().await;
        c.execute(
            "SELECT citus_move_shard_placement($1, $2, $3, $4, $5,
                        shard_transfer_mode => 'block_writes')",
            &[
                &shard,
                &from.host,
                &i32::from(from.port),
                &to.host,
                &i32::from(to.port),
            ],
        )
        .await
        .unwrap_or_else(|e| panic!("moving shard {shard} from {from} to {to}: {e}"));
    }

    /// The two-phase commits made in this database since it was created: the rows of
    /// `pg_dist_transaction` (one a worker a transaction prepared on it) on every node
    /// (with connections to workers, a worker coordinates transactions too). Exact only
    /// while two-phase commit recovery is off, which deletes the rows of committed ones:
    /// panics on a cluster where it is on.
    pub async fn two_phase_commits(&self) -> i64 {
        let mut total = 0;
        for url in self.node_urls() {
            let c = connect(&url)
                .await
                .unwrap_or_else(|e| panic!("connecting to {url}: {e}"));
            let interval: String = c
                .query_one("SHOW citus.recover_2pc_interval", &[])
                .await
                .expect("citus.recover_2pc_interval")
                .get(0);
            assert!(
                interval.starts_with('-'),
                "citus.recover_2pc_interval is {interval} on {url}: recovery deletes the rows of \
                 committed two-phase commits, so they cannot be counted (set it to -1)"
            );
            let n: i64 = c
                .query_one("SELECT COUNT(*) FROM pg_dist_transaction", &[])
                .await
                .expect("pg_dist_transaction")
                .get(0);
            total += n;
        }
        total
    }

    /// The statements that ran on more than one shard in this database since its nodes
    /// started (Citus's `query_execution_multi_shard`, summed over the nodes): a
    /// router-executed statement counts under `query_execution_single_shard` instead.
    /// Citus sums its backends' slots and the saved counts of exited ones, and may count a
    /// backend that exits meanwhile twice or not at all ("the next call ... will see the
    /// correct values", stats/stat_counters.c): the sum is read until two reads agree.
    pub async fn multi_shard_queries(&self) -> i64 {
        self.counter("query_execution_multi_shard", &self.node_urls())
            .await
    }

    /// The statements the coordinator executed on one shard in this database since it
    /// started (Citus's `query_execution_single_shard` there): each statement it routed to
    /// one worker, or delegated whole to it (a distributed function's call), counts once;
    /// what it runs only on its own tables (Citus's metadata) does not.
    pub async fn coordinator_single_shard_queries(&self) -> i64 {
        self.counter(
            "query_execution_single_shard",
            std::slice::from_ref(&self.url),
        )
        .await
    }

    /// The statements the workers planned and executed on one shard through Citus in this
    /// database since they started (Citus's `query_execution_single_shard` there, summed):
    /// each statement of a distributed table run on a worker, locally or routed on; what a
    /// worker runs on its shard tables directly, or is sent by another node as a shard's
    /// statement, does not count.
    pub async fn workers_single_shard_queries(&self) -> i64 {
        let urls: Vec<String> = self.workers().iter().map(|w| self.worker_url(w)).collect();
        self.counter("query_execution_single_shard", &urls).await
    }

    /// Citus's counter `column` in this database, summed over the nodes `urls`. Citus sums
    /// its backends' slots and the saved counts of exited ones, and may count a backend that
    /// exits meanwhile twice or not at all ("the next call ... will see the correct values",
    /// stats/stat_counters.c): the sum is read until two reads agree.
    async fn counter(&self, column: &str, urls: &[String]) -> i64 {
        let mut last = Self::counter_once(column, urls).await;
        for _ in 0..20 {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            let now = Self::counter_once(column, urls).await;
            if now == last {
                return now;
            }
            last = now;
        }
        panic!("citus_stat_counters did not settle in 2 s (last read of {column}: {last})");
    }

    /// One read of [`Self::counter`]'s sum.
    async fn counter_once(column: &str, urls: &[String]) -> i64 {
        let mut total = 0;
        for url in urls {
            let c = connect(url)
                .await
                .unwrap_or_else(|e| panic!("connecting to {url}: {e}"));
            let on: String = c
                .query_one("SHOW citus.enable_stat_counters", &[])
                .await
                .expect("citus.enable_stat_counters")
                .get(0);
            assert_eq!(on, "on", "citus.enable_stat_counters is off on {url}");
            let n: i64 = c
                .query_one(
                    &format!(
                        "SELECT {column} FROM citus_stat_counters WHERE name = current_database()"
                    ),
                    &[],
                )
                .await
                .expect("citus_stat_counters")
                .get(0);
            total += n;
        }
        total
    }

    /// Finishes the two-phase commits left prepared on the workers (a worker stopped
    /// between its PREPARE and its COMMIT PREPARED): what the recovery, off in this cluster,
    /// would do. Returns how many it finished.
    pub async fn recover_prepared_transactions(&self) -> i64 {
        let mut total = 0;
        for url in self.node_urls() {
            let c = connect(&url)
                .await
                .unwrap_or_else(|e| panic!("connecting to {url}: {e}"));
            let n: i32 = c
                .query_one("SELECT recover_prepared_transactions()", &[])
                .await
                .unwrap_or_else(|e| panic!("recover_prepared_transactions on {url}: {e}"))
                .get(0);
            total += i64::from(n);
        }
        total
    }

    /// Stops `worker` at once (`pg_ctl stop -m immediate`: as if its machine went away);
    /// the coordinator's connections to it break. Only on a cluster started here, by a test
    /// that has it alone ([`Share::Alone`]): the other tests of the process would lose the
    /// worker too.
    pub async fn stop_worker(&self, worker: &Worker) {
        let (local, node) = self.own_node(worker);
        let data = node.data.clone();
        tokio::task::spawn_blocking(move || local.stop(&data))
            .await
            .expect("stopping a worker");
        local.stopped.lock().unwrap().insert(worker.port);
    }

    /// Starts `worker` again after [`CitusDb::stop_worker`] and waits until it accepts
    /// connections.
    pub async fn start_worker(&self, worker: &Worker) {
        let (local, node) = self.own_node(worker);
        let node = node.clone();
        tokio::task::spawn_blocking(move || local.start(&node))
            .await
            .expect("starting a worker")
            .unwrap_or_else(|log| panic!("the worker did not start again; its log:\n{log}"));
        local.stopped.lock().unwrap().remove(&worker.port);
    }

    /// Freezes `worker`: `SIGSTOP` to its postmaster and every process it started, as a
    /// machine that stops answering without closing its connections (a network cut, a
    /// hung host). [`CitusDb::thaw_worker`] lets it go on. Only for a test that has the
    /// cluster alone.
    pub fn freeze_worker(&self, worker: &Worker) {
        self.signal_worker(worker, "STOP");
    }

    /// Lets a frozen `worker` go on (`SIGCONT`).
    pub fn thaw_worker(&self, worker: &Worker) {
        self.signal_worker(worker, "CONT");
    }

    /// Sends `signal` to `worker`'s postmaster, then to each of its children.
    fn signal_worker(&self, worker: &Worker, signal: &str) {
        let (_, node) = self.own_node(worker);
        let postmaster = std::fs::read_to_string(node.data.join("postmaster.pid"))
            .ok()
            .and_then(|pid| pid.lines().next()?.trim().parse::<u32>().ok())
            .unwrap_or_else(|| panic!("{worker} has no postmaster.pid"));
        let mut pids = vec![postmaster];
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            // /proc/PID/stat: "PID (NAME) STATE PPID …"; NAME may hold spaces.
            let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            let parent = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
            if parent == Some(postmaster) {
                pids.push(pid);
            }
        }
        // Every process in one `kill`, so that the worker stops (or goes on) at once, not
        // process by process over the time it takes to start a `kill` for each (long on a
        // busy machine, and a test times the freeze). A child may have exited since it was
        // listed (a backend whose client went away), which fails that `kill` for it alone:
        // then each process still there is signalled again, and must take it.
        let all = Command::new("kill")
            .arg(format!("-{signal}"))
            .args(pids.iter().map(u32::to_string))
            .stderr(std::process::Stdio::null())
            .status()
            .expect("kill runs");
        if !all.success() {
            for (n, pid) in pids.iter().enumerate() {
                let gone = !std::path::Path::new(&format!("/proc/{pid}")).exists();
                if gone && n > 0 {
                    continue;
                }
                let status = Command::new("kill")
                    .arg(format!("-{signal}"))
                    .arg(pid.to_string())
                    .status()
                    .expect("kill runs");
                let gone = !std::path::Path::new(&format!("/proc/{pid}")).exists();
                assert!(
                    status.success() || (n > 0 && gone),
                    "kill -{signal} {pid} ({worker}'s {}) failed",
                    if n == 0 { "postmaster" } else { "backend" }
                );
            }
        }
    }

    /// The cluster's own node of `worker`, for a test that has the cluster alone.
    fn own_node(&self, worker: &Worker) -> (&'static Local, &'static Node) {
        assert!(
            matches!(self.turn, Turn::Alone(_)),
            "a worker is stopped or started only by a test that has the cluster alone \
             (database(Share::Alone))"
        );
        let local = self.cluster.local.as_ref().unwrap_or_else(|| {
            panic!(
                "workers are stopped and started only on the cluster the tests start, not on \
                 MANDATE_TEST_CITUS_URL's"
            )
        });
        let node = local
            .nodes
            .iter()
            .find(|node| node.port == worker.port)
            .unwrap_or_else(|| panic!("{worker} is not a worker of this cluster"));
        (local, node)
    }

    /// This database on every node: the coordinator first.
    /// Copies this database to `name` on every node (its users must have disconnected:
    /// Citus's own maintenance connections are ended): a backup of the whole cluster's
    /// data, as an operator restoring every node from one point would have.
    pub async fn copy_to(&self, name: &str) {
        copy_everywhere(self.cluster, &self.name, name).await;
    }

    /// Replaces this database on every node with a copy of `name` ([`CitusDb::copy_to`]'s).
    pub async fn restore_from(&self, name: &str) {
        drop_everywhere(&self.admins(), &self.name);
        copy_everywhere(self.cluster, name, &self.name).await;
    }

    /// Drops database `name` on every node (a copy [`CitusDb::copy_to`] made).
    pub fn drop_copy(&self, name: &str) {
        drop_everywhere(&self.admins(), name);
    }

    /// The maintenance database of each node, the coordinator first.
    fn admins(&self) -> Vec<String> {
        let mut admins = vec![self.cluster.coordinator.clone()];
        admins.extend(self.cluster.worker_admins.iter().cloned());
        admins
    }

    fn node_urls(&self) -> Vec<String> {
        std::iter::once(self.url.clone())
            .chain(self.workers().iter().map(|w| self.worker_url(w)))
            .collect()
    }
}

impl Drop for CitusDb {
    fn drop(&mut self) {
        // A test that stopped a worker and did not start it again (it failed midway)
        // leaves the cluster whole for the next one.
        if let (Turn::Alone(_), Some(local)) = (&self.turn, &self.cluster.local) {
            let stopped: Vec<u16> = local.stopped.lock().unwrap().iter().copied().collect();
            for port in stopped {
                if let Some(node) = local.nodes.iter().find(|n| n.port == port)
                    && local.start(node).is_ok()
                {
                    local.stopped.lock().unwrap().remove(&port);
                }
            }
        }
        drop_everywhere(&self.admins(), &self.name);
    }
}

/// Drops database `name` on each node whose maintenance database `admins` names (the
/// coordinator first, whose connections to the workers then close), on a thread with a
/// runtime of its own: this may run inside a test's runtime, which cannot be blocked on.
fn drop_everywhere(admins: &[String], name: &str) {
    let admins = admins.to_vec();
    let sql = format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)");
    let dropped = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok()?;
        runtime.block_on(async {
            let mut all = true;
            for admin in &admins {
                let done = match connect(admin).await {
                    Ok(client) => client.batch_execute(&sql).await.is_ok(),
                    Err(_) => false,
                };
                all &= done;
            }
            all.then_some(())
        })
    })
    .join();
    if !matches!(dropped, Ok(Some(()))) {
        eprintln!("could not drop the test database {name} on every Citus node");
    }
}

/// The Citus cluster the tests of this process use.
struct Cluster {
    /// A URL of the coordinator's maintenance database, as a user that creates databases.
    coordinator: String,
    /// The workers, in the order of their ports.
    workers: Vec<Worker>,
    /// A URL of each worker's maintenance database, in the same order.
    worker_admins: Vec<String>,
    /// The coordinator as the workers reach it.
    coordinator_node: Worker,
    /// The servers started here (`None` for `MANDATE_TEST_CITUS_URL`).
    local: Option<Local>,
}

/// A cluster started by this process.
struct Local {
    /// The directory of its data directories and logs.
    dir: PathBuf,
    /// The directory of `pg_ctl`.
    bin: PathBuf,
    /// Whether the servers run as the `postgres` user.
    as_postgres: bool,
    /// The coordinator, then the workers.
    nodes: Vec<Node>,
    /// The workers a test stopped and has not started again (by port).
    stopped: Mutex<BTreeSet<u16>>,
    /// The guardian: kept, with the pipe to its input, for the life of the process; never
    /// written.
    guardian: Mutex<Child>,
}

/// One server of a cluster started here.
#[derive(Debug, Clone)]
struct Node {
    port: u16,
    data: PathBuf,
}

impl Local {
    /// Starts `node`'s server and waits (up to 60 s) until it accepts connections; `Err`
    /// with its log if it does not.
    fn start(&self, node: &Node) -> Result<(), String> {
        let log = self.dir.join(format!("{}.log", node.port));
        let started = as_cluster_user(self.as_postgres, &self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(&node.data)
            .arg("-l")
            .arg(&log)
            .args(["-w", "-t", "60", "start"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .expect("pg_ctl runs");
        if started.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{}{}",
                String::from_utf8_lossy(&started.stderr),
                std::fs::read_to_string(&log).unwrap_or_default()
            ))
        }
    }

    /// Stops the server of data directory `data` at once.
    fn stop(&self, data: &Path) {
        let _ = as_cluster_user(self.as_postgres, &self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(data)
            .args(["-m", "immediate", "-w", "stop"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

static CLUSTER: OnceLock<Result<Cluster, Absent>> = OnceLock::new();
static SAID_SKIPPED: AtomicBool = AtomicBool::new(false);
static SAID_ALONE_SKIPPED: AtomicBool = AtomicBool::new(false);
static NEXT_DB: AtomicU32 = AtomicU32::new(0);
/// Turns on the cluster: shared by the tests that run side by side, taken alone by a test
/// that stops workers.
static TURNS: LazyLock<Arc<RwLock<()>>> = LazyLock::new(|| Arc::new(RwLock::new(())));

/// The template every database of a cluster started here is copied from, made by the
/// first caller of the process: `citus` created and the workers added on every node.
async fn base_template(cluster: &Cluster) -> &'static str {
    static TEMPLATE: tokio::sync::OnceCell<String> = tokio::sync::OnceCell::const_new();
    TEMPLATE
        .get_or_init(|| async {
            let name = format!("mandate_citus_template_{}", std::process::id());
            create_citus_database(cluster, &name).await;
            close_template(cluster, &name).await;
            name
        })
        .await
}

/// Why there is no Citus to test against.
#[derive(Debug, Clone)]
struct Absent(String);

fn required() -> bool {
    std::env::var("MANDATE_REQUIRE_CITUS").is_ok_and(|v| v == "1")
}

/// How to run the Citus tests, for the skip notice and the failure of a required cluster.
const HOW: &str = "install Citus 13 into PostgreSQL 15 (from this repository's checkout, \
    where ../shared/vendor/citus/ is beside it: `sudo ../shared/vendor/citus/build.sh`; \
    elsewhere Citus's packages or its source, github.com/citusdata/citus) so that citus.so is \
    in the library directory of the PostgreSQL whose initdb the tests find, or set \
    MANDATE_TEST_CITUS_URL to a coordinator's database with citus and its workers added";

/// Prints the skip notice once per process.
pub fn say_skipped(why: &str) {
    say_once(
        &SAID_SKIPPED,
        &format!(
            "Citus tests skipped: {why}; to run them, {HOW} (MANDATE_REQUIRE_CITUS=1 makes a \
             missing Citus fail the tests)"
        ),
    );
}

/// Prints `notice` once per process (`said` remembers), on stderr itself: `eprintln!` in a
/// test is captured, and shown only if the test fails.
fn say_once(said: &AtomicBool, notice: &str) {
    use std::io::Write;
    if !said.swap(true, Ordering::SeqCst) {
        let _ = writeln!(std::io::stderr(), "{notice}");
    }
}

/// The cluster, or `None` when there is none and it is not required (said once on stderr);
/// panics when it is required but absent.
fn cluster_or_skip() -> Option<&'static Cluster> {
    match cluster() {
        Ok(cluster) => Some(cluster),
        Err(Absent(why)) => {
            if required() {
                panic!("Citus is required (MANDATE_REQUIRE_CITUS=1) but {why}; {HOW}");
            }
            say_skipped(&why);
            None
        }
    }
}

/// Whether Citus can be tested against here, without creating anything but the cluster;
/// `Err` holds why not (already said on stderr unless required).
pub fn available() -> Result<(), String> {
    cluster_or_skip()
        .map(|_| ())
        .ok_or_else(|| match cluster() {
            Err(Absent(why)) => why,
            Ok(_) => String::new(),
        })
}

/// A fresh database on every node of this process's Citus cluster, with `citus` and the
/// workers added, or `None` when there is no Citus and it is not required (said once on
/// stderr). Panics when Citus is required (`MANDATE_REQUIRE_CITUS=1`) but absent, or
/// installed but failing to start.
pub async fn database(share: Share) -> Option<CitusDb> {
    let cluster = cluster_or_skip()?;
    if share == Share::Alone && cluster.local.is_none() {
        say_once(
            &SAID_ALONE_SKIPPED,
            "Citus tests that stop a worker skipped: they run only on the cluster the tests \
             start, not on MANDATE_TEST_CITUS_URL's",
        );
        return None;
    }
    let turn = take_turn(share).await;
    let name = fresh_name();
    match &cluster.local {
        Some(_) => copy_everywhere(cluster, base_template(cluster).await, &name).await,
        None => create_citus_database(cluster, &name).await,
    }
    Some(cluster.database(name, turn))
}

/// [`database`], as a copy of a template this process prepares once with `prepare` (given
/// the template's URL on the coordinator, e.g. to migrate it: its distributed tables' shards
/// are made on the workers' copies, and every test database copies them all). On
/// MANDATE_TEST_CITUS_URL's cluster, where a template would outlive the process, it is
/// [`database`] with `prepare` run on each.
pub async fn database_from_template(share: Share, prepare: fn(&str)) -> Option<CitusDb> {
    let cluster = cluster_or_skip()?;
    if cluster.local.is_none() {
        let db = database(share).await?;
        let url = db.url.clone();
        tokio::task::spawn_blocking(move || prepare(&url))
            .await
            .unwrap();
        return Some(db);
    }
    static PREPARED: tokio::sync::OnceCell<String> = tokio::sync::OnceCell::const_new();
    let template = PREPARED
        .get_or_init(|| async {
            let name = format!("mandate_citus_prepared_{}", std::process::id());
            copy_everywhere(cluster, base_template(cluster).await, &name).await;
            let url = with_database(&cluster.coordinator, &name);
            tokio::task::spawn_blocking(move || prepare(&url))
                .await
                .unwrap();
            close_template(cluster, &name).await;
            name
        })
        .await;
    let turn = take_turn(share).await;
    let name = fresh_name();
    copy_everywhere(cluster, template, &name).await;
    Some(cluster.database(name, turn))
}

impl Cluster {
    fn database(&'static self, name: String, turn: Turn) -> CitusDb {
        CitusDb {
            url: with_database(&self.coordinator, &name),
            name,
            cluster: self,
            turn,
        }
    }
}

async fn take_turn(share: Share) -> Turn {
    match share {
        Share::WithOthers => Turn::Shared(TURNS.clone().read_owned().await),
        Share::Alone => Turn::Alone(TURNS.clone().write_owned().await),
    }
}

fn fresh_name() -> String {
    format!(
        "mandate_citus_{}_{}_{:08x}",
        std::process::id(),
        NEXT_DB.fetch_add(1, Ordering::Relaxed),
        rand::random::<u32>()
    )
}

/// Creates database `name` on every node with `citus` in it, then adds the coordinator and
/// the workers to its metadata (which Citus copies to the workers).
async fn create_citus_database(cluster: &Cluster, name: &str) {
    let mut admins = vec![cluster.coordinator.clone()];
    admins.extend(cluster.worker_admins.iter().cloned());
    for admin in &admins {
        let c = connect(admin)
            .await
            .unwrap_or_else(|e| panic!("cannot connect to a Citus node ({admin}): {e}"));
        c.batch_execute(&format!("CREATE DATABASE \"{name}\""))
            .await
            .unwrap_or_else(|e| panic!("cannot create the test database {name} on {admin}: {e}"));
        let db = connect(&with_database(admin, name)).await.unwrap();
        db.batch_execute("CREATE EXTENSION citus")
            .await
            .unwrap_or_else(|e| panic!("CREATE EXTENSION citus on {admin}: {e}"));
    }
    let c = connect(&with_database(&cluster.coordinator, name))
        .await
        .unwrap();
    let coordinator = &cluster.coordinator_node;
    c.execute(
        "SELECT citus_set_coordinator_host($1, $2)",
        &[&coordinator.host, &i32::from(coordinator.port)],
    )
    .await
    .unwrap_or_else(|e| panic!("citus_set_coordinator_host: {e}"));
    for worker in &cluster.workers {
        c.execute(
            "SELECT citus_add_node($1, $2)",
            &[&worker.host, &i32::from(worker.port)],
        )
        .await
        .unwrap_or_else(|e| panic!("citus_add_node({worker}): {e}"));
    }
}

/// Makes database `name` a template on every node: no connection may be open to a database
/// being copied, and Citus's maintenance daemon keeps one to each database that uses it.
async fn close_template(cluster: &Cluster, name: &str) {
    let mut admins = vec![cluster.coordinator.clone()];
    admins.extend(cluster.worker_admins.iter().cloned());
    for admin in &admins {
        let c = connect(admin).await.unwrap();
        c.batch_execute(&format!(
            "ALTER DATABASE \"{name}\" WITH ALLOW_CONNECTIONS false"
        ))
        .await
        .unwrap_or_else(|e| panic!("closing the template {name} on {admin}: {e}"));
        terminate_connections(&c, name).await;
    }
}

async fn terminate_connections(c: &tokio_postgres::Client, name: &str) {
    c.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE datname = $1 AND pid <> pg_backend_pid()",
        &[&name],
    )
    .await
    .unwrap_or_else(|e| panic!("ending the connections to {name}: {e}"));
}

/// Creates database `name` as a copy of `template` on every node.
async fn copy_everywhere(cluster: &Cluster, template: &str, name: &str) {
    let mut admins = vec![cluster.coordinator.clone()];
    admins.extend(cluster.worker_admins.iter().cloned());
    for admin in &admins {
        let c = connect(admin).await.unwrap();
        let sql = format!("CREATE DATABASE \"{name}\" TEMPLATE \"{template}\"");
        let mut tries = 0;
        loop {
            match c.batch_execute(&sql).await {
                Ok(()) => break,
                // A connection to the template (a maintenance daemon that had not ended
                // yet): end it and copy again.
                Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::OBJECT_IN_USE) => {
                    tries += 1;
                    assert!(tries < 20, "the template {template} stays in use: {e}");
                    terminate_connections(&c, template).await;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("cannot create the test database {name} on {admin}: {e}"),
            }
        }
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
    let mut parsed = url::Url::parse(url).expect("MANDATE_TEST_CITUS_URL is a valid URL");
    parsed.set_path(&format!("/{name}"));
    parsed.to_string()
}

fn cluster() -> Result<&'static Cluster, Absent> {
    CLUSTER
        .get_or_init(|| {
            if let Ok(url) = std::env::var("MANDATE_TEST_CITUS_URL")
                && !url.trim().is_empty()
            {
                return Ok(existing_cluster(url.trim()));
            }
            let bin = find_binaries()?;
            Ok(start_cluster(&bin))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// The cluster MANDATE_TEST_CITUS_URL's coordinator names: its workers and its own entry
/// from `pg_dist_node`, each worker reached with the URL's credentials.
fn existing_cluster(url: &str) -> Cluster {
    let url = url.to_owned();
    let nodes = std::thread::spawn({
        let url = url.clone();
        move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let c = connect(&url)
                    .await
                    .unwrap_or_else(|e| panic!("connecting to MANDATE_TEST_CITUS_URL: {e}"));
                c.query(
                    "SELECT groupid, nodename, nodeport FROM pg_dist_node
                     WHERE noderole = 'primary' AND isactive ORDER BY groupid, nodeport",
                    &[],
                )
                .await
                .unwrap_or_else(|e| {
                    panic!(
                        "MANDATE_TEST_CITUS_URL's database has no Citus metadata \
                         (CREATE EXTENSION citus, then citus_add_node for each worker): {e}"
                    )
                })
                .iter()
                .map(|r| {
                    (
                        r.get::<_, i32>(0),
                        Worker {
                            host: r.get(1),
                            port: u16::try_from(r.get::<_, i32>(2)).unwrap(),
                        },
                    )
                })
                .collect::<Vec<_>>()
            })
        }
    })
    .join()
    .unwrap_or_else(|_| panic!("reading MANDATE_TEST_CITUS_URL's nodes failed"));
    let parsed = url::Url::parse(&url).expect("MANDATE_TEST_CITUS_URL is a valid URL");
    let coordinator_node = nodes
        .iter()
        .find(|(group, _)| *group == 0)
        .map(|(_, node)| node.clone())
        .unwrap_or_else(|| Worker {
            host: parsed.host_str().unwrap_or("127.0.0.1").to_owned(),
            port: parsed.port().unwrap_or(5432),
        });
    let workers: Vec<Worker> = nodes
        .into_iter()
        .filter(|(group, _)| *group != 0)
        .map(|(_, node)| node)
        .collect();
    assert!(
        !workers.is_empty(),
        "MANDATE_TEST_CITUS_URL's coordinator has no workers (citus_add_node)"
    );
    let worker_admins = workers
        .iter()
        .map(|w| {
            let mut admin = parsed.clone();
            admin.set_host(Some(&w.host)).unwrap();
            admin.set_port(Some(w.port)).unwrap();
            admin.to_string()
        })
        .collect();
    Cluster {
        coordinator: url,
        workers,
        worker_admins,
        coordinator_node,
        local: None,
    }
}

/// The directory holding `initdb`, `pg_ctl` and `postgres` of a PostgreSQL whose library
/// directory has `citus.so`: `MANDATE_TEST_POSTGRES_BIN` when set (and only it), else the
/// first on PATH, then the newest /usr/lib/postgresql/*/bin.
fn find_binaries() -> Result<PathBuf, Absent> {
    let has_all = |dir: &Path| {
        ["initdb", "pg_ctl", "postgres"]
            .iter()
            .all(|tool| dir.join(tool).is_file())
    };
    let mut candidates = Vec::new();
    if let Some(dir) = std::env::var_os("MANDATE_TEST_POSTGRES_BIN") {
        candidates.push(PathBuf::from(dir));
    } else {
        if let Some(path) = std::env::var_os("PATH") {
            candidates.extend(std::env::split_paths(&path));
        }
        let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| {
                let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
                Some((version, entry.path().join("bin")))
            })
            .collect();
        versions.sort();
        candidates.extend(versions.into_iter().rev().map(|(_, bin)| bin));
    }
    let installed: Vec<PathBuf> = candidates.into_iter().filter(|d| has_all(d)).collect();
    if installed.is_empty() {
        return Err(Absent(
            "no PostgreSQL was found (initdb, pg_ctl and postgres neither on PATH nor under \
             /usr/lib/postgresql/*/bin)"
                .into(),
        ));
    }
    for bin in &installed {
        if library_dir(bin).join("citus.so").is_file() {
            return Ok(bin.clone());
        }
    }
    Err(Absent(format!(
        "citus.so is not installed in the library directory of the PostgreSQL found ({})",
        installed
            .iter()
            .map(|bin| library_dir(bin).display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )))
}

/// The library directory of the PostgreSQL in `bin` (where its `postgres` is, symbolic
/// links followed): what its `pg_config --pkglibdir` says, else `bin/../lib` (Debian's
/// layout).
fn library_dir(bin: &Path) -> PathBuf {
    let bin = std::fs::canonicalize(bin.join("postgres"))
        .ok()
        .and_then(|postgres| postgres.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| bin.to_path_buf());
    let said = Command::new(bin.join("pg_config"))
        .arg("--pkglibdir")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map(|dir| PathBuf::from(dir.trim()));
    said.unwrap_or_else(|| bin.join("../lib"))
}

/// Whether this process runs as root (PostgreSQL then has to run as another user).
fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .is_some_and(|uid| uid.trim() == "0")
}

/// The uid and gid of user `name`.
fn user_ids(name: &str) -> Option<(u32, u32)> {
    let id = |flag: &str| -> Option<u32> {
        let out = Command::new("id").args([flag, name]).output().ok()?;
        if !out.status.success() {
            return None;
        }
        String::from_utf8(out.stdout).ok()?.trim().parse().ok()
    };
    Some((id("-u")?, id("-g")?))
}

/// Runs `program`, as the `postgres` user when `as_postgres`.
fn as_cluster_user(as_postgres: bool, program: &Path) -> Command {
    if as_postgres {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

/// What the guardian runs: it waits for its standard input to close (the test process is
/// gone), then stops every server of the cluster at once (those a test stopped and started
/// again included: it stops by data directory) and removes the cluster's directory.
const GUARDIAN: &str = r#"
dir=$1; pg_ctl=$2; shift 2
cat >/dev/null
for data in "$@"; do
    "$pg_ctl" -D "$data" -m immediate -w stop >/dev/null 2>&1
done
rm -rf "$dir"
"#;

/// The settings of every node (docs at the top of this file).
const SETTINGS: &str = "
listen_addresses = '127.0.0.1'
shared_preload_libraries = 'citus'
max_connections = 400
shared_buffers = 64MB
fsync = off
full_page_writes = off
wal_level = logical
max_worker_processes = 64
log_min_messages = warning
citus.recover_2pc_interval = -1
citus.enable_stat_counters = on
";

/// Starts a cluster: a coordinator and two workers, each from initdb in a fresh directory
/// (tried again on other ports if one chosen was taken meanwhile). Panics with the logs if
/// it does not come up.
fn start_cluster(bin: &Path) -> Cluster {
    let as_postgres = is_root();
    let ids = if as_postgres {
        Some(user_ids("postgres").unwrap_or_else(|| {
            panic!(
                "PostgreSQL refuses to run as root and there is no `postgres` user to run it as \
                 (create one, or set MANDATE_TEST_CITUS_URL)"
            )
        }))
    } else {
        None
    };
    let mut last_log = String::new();
    for _ in 0..3 {
        match try_start(bin, as_postgres, ids) {
            Ok(cluster) => return cluster,
            Err(log) => last_log = log,
        }
    }
    panic!("the Citus cluster did not start (three tries); its logs:\n{last_log}");
}

/// One try of [`start_cluster`].
fn try_start(bin: &Path, as_postgres: bool, ids: Option<(u32, u32)>) -> Result<Cluster, String> {
    // The guardian removes the directory; Rust must not (it may be gone first).
    let dir = tempfile::Builder::new()
        .prefix("mandate-citus-")
        .tempdir()
        .expect("a temporary directory for Citus")
        .keep();
    if let Some((uid, gid)) = ids {
        std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
            .expect("the Citus directory given to the postgres user");
    }
    let nodes: Vec<Node> = ["coordinator", "worker1", "worker2"]
        .iter()
        .map(|name| Node {
            port: free_port(),
            data: dir.join(name),
        })
        .collect();
    // Started first, so that whatever happens next, the directory goes when the process
    // does (a panic below drops the pipe to its input).
    let guardian = {
        let mut sh = as_cluster_user(as_postgres, Path::new("sh"));
        sh.arg("-c")
            .arg(GUARDIAN)
            .arg("sh")
            .arg(&dir)
            .arg(bin.join("pg_ctl"))
            .args(nodes.iter().map(|n| &n.data))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // A process group of its own: a Ctrl-C at the terminal reaches the tests, whose
        // exit then stops the cluster in order, not the cluster directly.
        std::os::unix::process::CommandExt::process_group(&mut sh, 0);
        sh.spawn().expect("the Citus guardian starts")
    };
    let local = Local {
        dir: dir.clone(),
        bin: bin.to_owned(),
        as_postgres,
        nodes,
        stopped: Mutex::new(BTreeSet::new()),
        guardian: Mutex::new(guardian),
    };
    init_nodes(&local.nodes, bin, as_postgres, &dir);
    let mut logs = String::new();
    for node in &local.nodes {
        if let Err(log) = local.start(node) {
            logs.push_str(&log);
        }
    }
    if !logs.is_empty() {
        // Closing its input makes the guardian stop what started and remove the directory.
        let mut guardian = local.guardian.into_inner().unwrap();
        drop(guardian.stdin.take());
        let _ = guardian.wait();
        return Err(logs);
    }
    let admin = |port: u16| format!("postgres://postgres@127.0.0.1:{port}/postgres");
    let node = |port: u16| Worker {
        host: "127.0.0.1".into(),
        port,
    };
    Ok(Cluster {
        coordinator: admin(local.nodes[0].port),
        coordinator_node: node(local.nodes[0].port),
        workers: local.nodes[1..].iter().map(|n| node(n.port)).collect(),
        worker_admins: local.nodes[1..].iter().map(|n| admin(n.port)).collect(),
        local: Some(local),
    })
}

/// Makes each node's data directory (initdb of the three at once) and appends its settings,
/// port and socket directory to its postgresql.conf.
fn init_nodes(nodes: &[Node], bin: &Path, as_postgres: bool, dir: &Path) {
    // initdb of the three at once.
    let inits: Vec<Child> = nodes
        .iter()
        .map(|node| {
            as_cluster_user(as_postgres, &bin.join("initdb"))
                .arg("-D")
                .arg(&node.data)
                // --no-sync: the new files are not forced to disk (only a machine crash
                // right after initdb could lose them).
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
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("initdb runs")
        })
        .collect();
    for init in inits {
        let out = init.wait_with_output().expect("initdb ends");
        if !out.status.success() {
            panic!(
                "initdb failed:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    for node in nodes {
        let conf = format!(
            "{SETTINGS}port = {}\nunix_socket_directories = '{}'\n",
            node.port,
            dir.display()
        );
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(node.data.join("postgresql.conf"))
            .expect("postgresql.conf");
        std::io::Write::write_all(&mut file, conf.as_bytes()).expect("postgresql.conf written");
    }
}

/// A free port on 127.0.0.1.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}
