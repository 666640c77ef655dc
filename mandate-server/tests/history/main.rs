//! A history checker, Jepsen-style (issue #40): clients send authorizations with
//! Idempotency-Keys to real `mandate-server serve` processes while faults happen; every
//! attempt is recorded (sent, answered, dropped by the client, unanswered, with times),
//! then the checker (`checker.rs`) reads the history and the final decision log: every
//! `201` in the log exactly once with its answered claims, no day, week or month window
//! and no minute over its limit in commit order, one outcome per Idempotency-Key (dropped
//! and stalled attempts included), no decision that no request caused; and each review
//! (requests over the mandate's review threshold) resolved once, though racers approve and
//! deny it at once, on different processes (`reviews.rs`).
//!
//! - SQLite: one process, killed with SIGKILL and restarted, round after round.
//! - PostgreSQL: three processes on one database; faults one after another: a process
//!   killed (SIGKILL) and restarted, a process paused (SIGSTOP) past the request deadline
//!   and resumed, PostgreSQL restarted fast and immediate, PostgreSQL paused past the
//!   request deadline. Then the same run without faults but with the planted bug (a
//!   switch that drops the agent-version check): the checker must report an
//!   overspend.
//! - Citus (a coordinator and two workers, mandate-test-kit/src/citus.rs): the same run with the
//!   processes' faults, its organizations on both workers; skipped
//!   without Citus (said on stderr), unless `MANDATE_REQUIRE_CITUS=1`.
//! - The planted review bug (a switch that writes a resolution whatever the review's
//!   state), SQLite: the checker must report a review resolved more than once.
//!
//! The planted bugs' switches (`MANDATE_TEST_PLANT_*`) are compiled into the server only
//! with its `test-faults` feature, which `cargo test` turns on (mandate-server's
//! dev-dependency on itself) and no other build does.
//!
//! Bounded (about a minute each), seeded (`MANDATE_HISTORY_SEED`, printed), in this
//! target of its own so that its cluster's restarts and pauses touch no other test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines,
    missing_docs
)]

use mandate_test_kit::citus;
use mandate_test_kit::onboard;
use mandate_test_kit::postgres;

mod checker;
mod driver;
mod reviews;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use checker::{Attempt, Limits, Outcome, check};
use driver::{Agent, Cluster, Run, Server};

fn seed() -> u64 {
    let seed = std::env::var("MANDATE_HISTORY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40);
    eprintln!("history seed: {seed} (MANDATE_HISTORY_SEED)");
    seed
}

fn limits() -> Limits {
    Limits {
        per_day: driver::PER_DAY,
        per_week: driver::PER_WEEK,
        per_month: driver::PER_MONTH,
        per_minute: mandate_protocol::history::VELOCITY_LIMIT,
    }
}

/// Every anomaly of a run: the requests' and the reviews'.
fn check_all(
    history: &[Attempt],
    resolves: &[reviews::Resolve],
    log: &[checker::Logged],
) -> Vec<String> {
    let mut anomalies = check(history, log, limits());
    anomalies.extend(reviews::check(resolves, log));
    anomalies
}

/// The review figures of a run, printed for docs/security.md.
fn report_reviews(engine: &str, resolves: &[reviews::Resolve], log: &[checker::Logged]) {
    let opened = log.iter().filter(|d| d.review.is_some()).count();
    let approvals = log.iter().filter(|d| d.supersedes.is_some()).count();
    let answered = |wanted: fn(u16) -> bool| {
        resolves
            .iter()
            .filter(|r| matches!(r.answered, reviews::Answered::Status { status, .. } if wanted(status)))
            .count()
    };
    let mut per_process = std::collections::BTreeMap::new();
    for r in resolves {
        *per_process.entry(r.process).or_insert(0usize) += 1;
    }
    eprintln!("  resolution attempts by process {per_process:?}");
    eprintln!(
        "history {engine} reviews: {opened} opened, {} resolved, {approvals} decisions made by approving, {} resolution attempts: {} answered 2xx, {} 400 (no longer pending), {} 5xx, {} dropped or unanswered",
        reviews::resolved(log),
        resolves.len(),
        answered(|s| (200..300).contains(&s)),
        answered(|s| s == 400),
        answered(|s| s >= 500),
        resolves
            .iter()
            .filter(|r| !matches!(r.answered, reviews::Answered::Status { .. }))
            .count()
    );
}

/// The figures of a run, printed for docs/security.md.
fn report(engine: &str, history: &[Attempt], faults: &[String], anomalies: &[String]) {
    let answered = history
        .iter()
        .filter(|a| matches!(a.outcome, Outcome::Answer { status: 201, .. }))
        .count();
    let dropped = history
        .iter()
        .filter(|a| a.outcome == Outcome::Dropped)
        .count();
    let unanswered = history
        .iter()
        .filter(|a| a.outcome == Outcome::NoAnswer)
        .count();
    let errors = history
        .iter()
        .filter(|a| matches!(a.outcome, Outcome::Answer { status, .. } if status >= 500))
        .count();
    let keys: std::collections::BTreeSet<&str> = history.iter().map(|a| a.key.as_str()).collect();
    let slowest = history
        .iter()
        .map(|a| a.ended_ms.saturating_sub(a.sent_ms))
        .max()
        .unwrap_or(0);
    let mut per_process = std::collections::BTreeMap::new();
    for a in history {
        *per_process.entry(a.process).or_insert(0usize) += 1;
    }
    eprintln!("  requests by process {per_process:?}; slowest answer {slowest} ms");
    eprintln!(
        "history {engine}: {} requests over {} keys, {} faults, {answered} answered decisions, \
         {dropped} dropped by the client, {unanswered} unanswered, {errors} 5xx, {} anomalies",
        history.len(),
        keys.len(),
        faults.len(),
        anomalies.len()
    );
    for fault in faults {
        eprintln!("  fault: {fault}");
    }
    for anomaly in anomalies.iter().take(20) {
        eprintln!("  anomaly: {anomaly}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_history_under_kill_rounds_has_no_anomaly() {
    let seed = seed();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("history.db");
    let db = db.to_str().unwrap().to_owned();
    let log = dir.path().join("serve.log");
    let org = driver::onboard(&db, &[]);
    let server = Server::start(&db, &[], &log);
    let client = reqwest::Client::new();
    let agents = driver::agents(&client, &server.api, &org, (0, 6), true).await;
    let urls: driver::Urls = Arc::new(vec![Mutex::new(server.api.clone())]);
    let opened = reviews::Opened::default();
    let run = Run {
        seed,
        workers: 6,
        agents: agents.clone(),
        urls: urls.clone(),
        started: Instant::now(),
        opened: opened.clone(),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let racing = tokio::spawn(reviews::race(seed, urls.clone(), opened, 3, stop.clone()));
    let driving = {
        let stop = stop.clone();
        async move { driver::drive(&run, stop).await }
    };
    let faults = {
        let (stop, db, log) = (stop.clone(), db.clone(), log.clone());
        tokio::task::spawn_blocking(move || {
            let mut rng = StdRng::seed_from_u64(seed);
            let mut server = server;
            let mut faults = Vec::new();
            for round in 0..8 {
                std::thread::sleep(Duration::from_millis(rng.random_range(1000..2500)));
                server.kill9();
                faults.push(format!(
                    "round {round}: serve killed (SIGKILL) and restarted"
                ));
                std::thread::sleep(Duration::from_millis(rng.random_range(0..300)));
                server = Server::start(&db, &[], &log);
                *urls[0].lock().unwrap() = server.api.clone();
            }
            std::thread::sleep(Duration::from_secs(1));
            stop.store(true, Ordering::Relaxed);
            (faults, server)
        })
    };
    let (history, faults) = tokio::join!(driving, faults);
    let (faults, server) = faults.unwrap();
    let resolves = racing.await.unwrap();
    let log = driver::final_log(&server.api, &agents).await;
    let anomalies = check_all(&history, &resolves, &log);
    report("sqlite", &history, &faults, &anomalies);
    report_reviews("sqlite", &resolves, &log);
    assert!(anomalies.is_empty(), "{anomalies:#?}");
    assert!(history.len() > 100, "too few requests to mean anything");
    assert!(
        reviews::resolved(&log) > 10,
        "too few reviews resolved to mean anything"
    );
}

/// The planted bug of the reviews: a resolution written whether or not its review is still
/// pending (a `test-faults` switch). One process, no faults: racers approving and denying
/// the same reviews all succeed, and the checker must say so.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_history_catches_a_review_resolved_twice_when_the_check_is_planted_away() {
    let seed = seed();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("planted.db");
    let db = db.to_str().unwrap().to_owned();
    let log = dir.path().join("serve.log");
    let org = driver::onboard(&db, &[]);
    let env = [("MANDATE_TEST_PLANT_UNCHECKED_RESOLUTION", "1".to_owned())];
    let server = Server::start(&db, &env, &log);
    let client = reqwest::Client::new();
    let agents = driver::agents(&client, &server.api, &org, (0, 3), true).await;
    let urls: driver::Urls = Arc::new(vec![Mutex::new(server.api.clone())]);
    let opened = reviews::Opened::default();
    let run = Run {
        seed,
        workers: 6,
        agents: agents.clone(),
        urls: urls.clone(),
        started: Instant::now(),
        opened: opened.clone(),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let racing = tokio::spawn(reviews::race(seed, urls, opened, 3, stop.clone()));
    let stopper = {
        let stop = stop.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(6)).await;
            stop.store(true, Ordering::Relaxed);
        })
    };
    let history = driver::drive(&run, stop).await;
    stopper.await.unwrap();
    let resolves = racing.await.unwrap();
    let log = driver::final_log(&server.api, &agents).await;
    let anomalies = check_all(&history, &resolves, &log);
    report("sqlite, planted review bug", &history, &[], &anomalies);
    report_reviews("sqlite, planted review bug", &resolves, &log);
    assert!(
        anomalies
            .iter()
            .any(|a| a.contains("resolved more than once")),
        "the checker missed the planted bug: {anomalies:#?}"
    );
}

/// The database of a run of three processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    /// One PostgreSQL server, durable (mandate-test-kit/src/postgres.rs).
    Postgres,
    /// A Citus coordinator and two workers (mandate-test-kit/src/citus.rs); the processes
    /// connect to the coordinator.
    Citus,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Postgres => "postgres",
            Backend::Citus => "citus",
        }
    }
}

/// A run's database, dropped with it.
enum Database {
    Postgres(postgres::TestDb),
    Citus(citus::CitusDb),
}

impl Database {
    fn url(&self) -> &str {
        match self {
            Database::Postgres(db) => &db.url,
            Database::Citus(db) => &db.url,
        }
    }
}

/// What a deployment of three processes is: its database, the processes' environment,
/// the processes and the agents.
type Deployed = (
    Database,
    Vec<(&'static str, String)>,
    Vec<Server>,
    Vec<Agent>,
);

/// A deployment of three processes on `backend` with `n` agents (the planted version bug
/// if `plant`, reviews otherwise). On PostgreSQL the agents are of one organization; on
/// Citus of two, which land on the two workers (asserted from their shard placement), the
/// agents split between them.
async fn deployment(
    backend: Backend,
    plant: bool,
    n: usize,
    dir: &std::path::Path,
) -> Option<Deployed> {
    let db = match backend {
        Backend::Postgres => {
            Database::Postgres(postgres::database(postgres::Durability::Durable).await?)
        }
        Backend::Citus => Database::Citus(citus::database(citus::Share::WithOthers).await?),
    };
    let kek: [u8; 32] = rand::random();
    use base64::Engine as _;
    let mut env = vec![(
        "MANDATE_KEY_ENCRYPTION_KEY",
        base64::engine::general_purpose::STANDARD.encode(kek),
    )];
    if plant {
        env.push(("MANDATE_TEST_PLANT_UNCHECKED_VERSION", "1".to_owned()));
    }
    let orgs = match &db {
        Database::Postgres(_) => vec![driver::onboard(db.url(), &env)],
        Database::Citus(citus) => orgs_on_every_worker(citus, &env).await,
    };
    let servers: Vec<Server> = (0..3)
        .map(|i| Server::start(db.url(), &env, &dir.join(format!("serve-{i}.log"))))
        .collect();
    let client = reqwest::Client::new();
    let mut agents = Vec::new();
    for (i, org) in orgs.iter().enumerate() {
        // Agents h{first} to h{last - 1} are of organization i.
        let (first, last) = (i * n / orgs.len(), (i + 1) * n / orgs.len());
        let of_org = (first, last - first);
        agents.extend(driver::agents(&client, &servers[0].api, org, of_org, !plant).await);
    }
    Some((db, env, servers, agents))
}

/// Organizations `history0`, `history1`, … onboarded until every worker holds one; the
/// sandbox key of one a worker.
async fn orgs_on_every_worker(db: &citus::CitusDb, env: &[(&str, String)]) -> Vec<String> {
    let mut on = std::collections::BTreeMap::new();
    // An organization lands on a worker as its id hashes (about one in two here).
    for i in 0..64 {
        if on.len() == db.workers().len() {
            break;
        }
        let (id, key) = driver::onboard_org(&db.url, env, &format!("history{i}"));
        on.entry(db.worker_of("agents", &id).await).or_insert(key);
    }
    assert_eq!(
        on.len(),
        db.workers().len(),
        "the organizations do not land on every worker: {on:?}"
    );
    on.into_values().collect()
}

/// A run of three processes on `backend` with `rounds` faults one after another (a process
/// killed with SIGKILL and restarted, a process paused past its deadline, and on the
/// PostgreSQL cluster started here the server restarted fast and immediate and paused):
/// no anomaly.
async fn history_under_faults(backend: Backend, rounds: usize) {
    let seed = seed();
    let dir = tempfile::tempdir().unwrap();
    // Six agents: each agent's windows cap the reviews it opens (about four a run), and the
    // run must resolve more than ten of them to mean anything (four agents opened 16-17,
    // and under the faults a run resolved 10 or fewer once in three).
    let Some((db, env, servers, agents)) = deployment(backend, false, 6, dir.path()).await else {
        return;
    };
    let urls: driver::Urls = Arc::new(servers.iter().map(|s| Mutex::new(s.api.clone())).collect());
    let opened = reviews::Opened::default();
    let run = Run {
        seed,
        workers: 8,
        agents: agents.clone(),
        urls: urls.clone(),
        started: Instant::now(),
        opened: opened.clone(),
    };
    let stop = Arc::new(AtomicBool::new(false));
    // Each review raced by three on the three processes.
    let racing = tokio::spawn(reviews::race(seed, urls.clone(), opened, 3, stop.clone()));
    let driving = {
        let stop = stop.clone();
        async move { driver::drive(&run, stop).await }
    };
    let cluster = match backend {
        Backend::Postgres => postgres::local_cluster().map(|(dir, _)| Cluster::new(dir)),
        Backend::Citus => None,
    };
    let faults = {
        let (stop, url, logs) = (stop.clone(), db.url().to_owned(), dir.path().to_owned());
        tokio::task::spawn_blocking(move || {
            let mut rng = StdRng::seed_from_u64(seed);
            let mut servers = servers;
            let mut cluster = cluster;
            let mut faults = Vec::new();
            let kinds: &[&str] = match cluster {
                Some(_) => &["kill", "stall", "fast", "immediate", "pause"],
                None => &["kill", "stall"],
            };
            for round in 0..rounds {
                std::thread::sleep(Duration::from_millis(rng.random_range(1500..3000)));
                let kind = kinds[round % kinds.len()];
                let n = rng.random_range(0..servers.len());
                match (kind, cluster.as_mut()) {
                    ("kill", _) => {
                        servers[n].kill9();
                        std::thread::sleep(Duration::from_millis(200));
                        servers[n] =
                            Server::start(&url, &env, &logs.join(format!("serve-{n}.log")));
                        *urls[n].lock().unwrap() = servers[n].api.clone();
                        faults.push(format!("process {n} killed (SIGKILL) and restarted"));
                    }
                    ("stall", _) => {
                        driver::signal(servers[n].pid(), "-STOP");
                        std::thread::sleep(Duration::from_millis(3500));
                        driver::signal(servers[n].pid(), "-CONT");
                        faults.push(format!(
                            "process {n} paused 3.5 s (SIGSTOP), past its 2 s deadline"
                        ));
                    }
                    ("fast", Some(cluster)) => {
                        cluster.restart("-INT");
                        faults.push("PostgreSQL restarted (fast)".into());
                    }
                    ("immediate", Some(cluster)) => {
                        cluster.restart("-QUIT");
                        faults.push("PostgreSQL restarted (immediate)".into());
                    }
                    ("pause", Some(cluster)) => {
                        cluster.pause(Duration::from_millis(3500));
                        faults.push(
                            "PostgreSQL paused 3.5 s (SIGSTOP), past the 2 s deadline".into(),
                        );
                    }
                    _ => {}
                }
            }
            std::thread::sleep(Duration::from_secs(1));
            stop.store(true, Ordering::Relaxed);
            (faults, servers)
        })
    };
    let (history, faults) = tokio::join!(driving, faults);
    let (faults, servers) = faults.unwrap();
    let resolves = racing.await.unwrap();
    let log = driver::final_log(&servers[0].api, &agents).await;
    let anomalies = check_all(&history, &resolves, &log);
    report(backend.name(), &history, &faults, &anomalies);
    report_reviews(backend.name(), &resolves, &log);
    assert!(anomalies.is_empty(), "{anomalies:#?}");
    assert!(
        reviews::resolved(&log) > 10,
        "too few reviews resolved to mean anything"
    );
    assert!(history.len() > 100, "too few requests to mean anything");
    drop(servers);
    drop(db);
}

/// The planted bug: the agent-version check off (a `test-faults` switch). Three processes on
/// `backend` each decide on their own cached state: the checker must see an overspend.
async fn planted_version_bug_is_caught(backend: Backend) {
    let seed = seed();
    let dir = tempfile::tempdir().unwrap();
    let Some((db, _env, servers, agents)) = deployment(backend, true, 2, dir.path()).await else {
        return;
    };
    let urls: driver::Urls = Arc::new(servers.iter().map(|s| Mutex::new(s.api.clone())).collect());
    let run = Run {
        seed,
        workers: 12,
        agents: agents.clone(),
        urls,
        started: Instant::now(),
        opened: reviews::Opened::default(),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let stopper = {
        let stop = stop.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(8)).await;
            stop.store(true, Ordering::Relaxed);
        })
    };
    let history = driver::drive(&run, stop).await;
    stopper.await.unwrap();
    let log = driver::final_log(&servers[0].api, &agents).await;
    let anomalies = check(&history, &log, limits());
    let engine = format!("{}, planted bug", backend.name());
    report(&engine, &history, &[], &anomalies);
    assert!(
        anomalies.iter().any(|a| a.contains("overspend")),
        "the checker missed the planted bug: {anomalies:#?}"
    );
    drop(servers);
    drop(db);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_history_under_faults_has_no_anomaly_and_the_planted_bug_is_caught() {
    history_under_faults(Backend::Postgres, 10).await;
    planted_version_bug_is_caught(Backend::Postgres).await;
}

/// The same run on Citus, its organizations on both workers, with the processes' faults
/// (the cluster's own, a stopped worker and a moved shard, are tests/citus/faults.rs's).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn citus_history_under_process_faults_has_no_anomaly() {
    history_under_faults(Backend::Citus, 8).await;
}
