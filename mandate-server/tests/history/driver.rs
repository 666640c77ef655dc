//! The driver: real `mandate-server serve` processes, clients that send authorizations with
//! Idempotency-Keys (retried, some dropped by the client early), faults, and the recorded
//! history with the final log for the checker.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;

use crate::checker::{Attempt, Logged, Outcome, recipient_of};

pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_mandate-server")
}

/// The limits of every agent's mandate in a run; amounts above `REVIEW_ABOVE` (11 to 20
/// of 1 to 20) open a review while the windows allow them.
pub const REVIEW_ABOVE: i64 = 10;
pub const PER_DAY: i64 = 180;
pub const PER_WEEK: i64 = 190;
pub const PER_MONTH: i64 = 200;

/// One `serve` process.
pub struct Server {
    child: Child,
    pub api: String,
}

impl Server {
    /// Starts `serve` on `db` with `env`; returns once it printed its API address.
    pub fn start(db: &str, env: &[(&str, String)], log: &Path) -> Server {
        let mut child = Command::new(binary())
            .args(["serve", "--db", db, "--request-timeout", "2"])
            .args(["--api-addr", "127.0.0.1:0", "--public-addr", "127.0.0.1:0"])
            .args(["--verdicts-url", "http://verdicts.history.test"])
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(log)
                    .unwrap(),
            ))
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let mut api = String::new();
        for line in lines.by_ref() {
            let Ok(line) = line else { break };
            if let Some(url) = line.trim().strip_prefix("api:") {
                api = url.trim().to_owned();
                break;
            }
        }
        if api.is_empty() {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "serve did not start: {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        std::thread::spawn(move || for _ in lines.map_while(Result::ok) {});
        Server { child, api }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Sends `signal` (`-STOP`, `-CONT`, …) to `pid`.
pub fn signal(pid: u32, signal: &str) {
    let _ = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status();
}

/// The run's processes: their API URLs, replaced when one is restarted.
pub type Urls = Arc<Vec<Mutex<String>>>;

/// An agent of a run.
#[derive(Debug, Clone)]
pub struct Agent {
    /// `agt_…`, unique in the run (whichever organization it is of).
    pub id: String,
    /// Its agent key.
    pub key: String,
    /// Its organization's sandbox key: what reads its decisions and resolves its reviews.
    pub org: String,
}

/// What a run is given.
pub struct Run {
    pub seed: u64,
    pub workers: usize,
    pub agents: Vec<Agent>,
    pub urls: Urls,
    pub started: Instant,
    /// Where the reviews the clients are answered go, for the racers (reviews.rs).
    pub opened: crate::reviews::Opened,
}

/// Onboards organization `history` through the operator command; returns the sandbox key.
pub fn onboard(db: &str, env: &[(&str, String)]) -> String {
    onboard_org(db, env, "history").1
}

/// Onboards organization `name` through the operator command; returns its id (`org_…`)
/// and sandbox key.
pub fn onboard_org(db: &str, env: &[(&str, String)], name: &str) -> (String, String) {
    let out = Command::new(binary())
        .args(["onboard", "--org", name, "--db", db])
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = String::from_utf8(out.stdout).unwrap();
    (
        crate::onboard::org_id(&out),
        crate::onboard::key(&out, "sandbox key:"),
    )
}

/// Registers `n` agents of organization `org` (its sandbox key), named `h{first}`,
/// `h{first + 1}`, …, each with the run's mandate (with its review threshold if
/// `reviews`).
pub async fn agents(
    client: &reqwest::Client,
    api: &str,
    org: &str,
    (first, n): (usize, usize),
    reviews: bool,
) -> Vec<Agent> {
    let review_above = if reviews {
        format!(r#", "review_above": {REVIEW_ABOVE}"#)
    } else {
        String::new()
    };
    let mut agents = Vec::new();
    for i in first..first + n {
        let name = format!("h{i}");
        let r = client
            .post(format!("{api}/v1/agents"))
            .bearer_auth(org)
            .json(&serde_json::json!({"name": name}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        let key = r.json::<Value>().await.unwrap()["agent_key"]
            .as_str()
            .unwrap()
            .to_owned();
        let mandate = format!(
            r#"{{"agent": "agt_{name}", "limits": {{"per_transaction": 20, "per_day": {PER_DAY}, "per_week": {PER_WEEK}, "per_month": {PER_MONTH}, "currency": "USD"}}{review_above}, "categories": ["software"], "expires": "2099-12-31"}}"#
        );
        let r = client
            .post(format!("{api}/v1/mandates"))
            .bearer_auth(org)
            .header("content-type", "application/json")
            .body(mandate)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201, "{}", r.text().await.unwrap_or_default());
        agents.push(Agent {
            id: format!("agt_{name}"),
            key,
            org: org.to_owned(),
        });
    }
    agents
}

/// Runs the clients until `stop`, then lets each finish its key; returns every attempt.
pub async fn drive(run: &Run, stop: Arc<AtomicBool>) -> Vec<Attempt> {
    let history = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for w in 0..run.workers {
        let (history, stop, urls, agents, opened) = (
            history.clone(),
            stop.clone(),
            run.urls.clone(),
            run.agents.clone(),
            run.opened.clone(),
        );
        let (seed, started) = (run.seed, run.started);
        tasks.push(tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(seed.wrapping_mul(1000).wrapping_add(w as u64));
            let patient = reqwest::Client::builder()
                .timeout(Duration::from_secs(15))
                .build()
                .unwrap();
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let key = format!("w{w}-{n}");
                let agent = agents[rng.random_range(0..agents.len())].clone();
                let amount = rng.random_range(1..=20i64);
                let body = format!(
                    r#"{{"amount": {amount}, "currency": "USD", "recipient": "{}", "category": "software"}}"#,
                    recipient_of(&key)
                );
                let give_up = Instant::now() + Duration::from_secs(90);
                loop {
                    let process = rng.random_range(0..urls.len());
                    let url = urls[process].lock().unwrap().clone();
                    // One attempt in eight is dropped by the client after a few ms.
                    let drop_after = rng
                        .random_bool(0.125)
                        .then(|| Duration::from_millis(rng.random_range(1..30)));
                    let sent_ms = started.elapsed().as_millis() as u64;
                    let request = patient
                        .post(format!("{url}/v1/authorizations"))
                        .bearer_auth(&agent.key)
                        .header("content-type", "application/json")
                        .header("idempotency-key", &key)
                        .body(body.clone());
                    let request = match drop_after {
                        Some(after) => request.timeout(after),
                        None => request,
                    };
                    let outcome = match request.send().await {
                        Ok(r) => {
                            let status = r.status().as_u16();
                            let replayed = r.headers().contains_key("idempotency-replayed");
                            // An answer is what the client read whole: a body cut off (the
                            // client's own drop timing out mid-body, or the server killed while
                            // sending it) was never received, so it is recorded as such, not
                            // as a 201 without a decision.
                            match r.bytes().await {
                                Ok(bytes) => {
                                    let body: Value =
                                        serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                                    if let Some(review) = body["review"]["id"].as_str()
                                        && status == 201
                                        && !replayed
                                    {
                                        opened
                                            .lock()
                                            .unwrap()
                                            .push_back((review.to_owned(), agent.org.clone()));
                                    }
                                    let decision = (status == 201).then(|| {
                                        (
                                            body["id"].as_str().unwrap_or_default().to_owned(),
                                            body["verdict"].as_str().unwrap_or_default().to_owned(),
                                        )
                                    });
                                    Outcome::Answer {
                                        status,
                                        replayed,
                                        decision,
                                    }
                                }
                                Err(e) if e.is_timeout() && drop_after.is_some() => {
                                    Outcome::Dropped
                                }
                                Err(_) => Outcome::NoAnswer,
                            }
                        }
                        Err(e) if e.is_timeout() && drop_after.is_some() => Outcome::Dropped,
                        Err(_) => Outcome::NoAnswer,
                    };
                    let done = matches!(
                        outcome,
                        Outcome::Answer { status, .. } if status == 201 || (status != 409 && status != 429 && status < 500)
                    );
                    history.lock().unwrap().push(Attempt {
                        key: key.clone(),
                        agent: agent.id.clone(),
                        amount,
                        process,
                        sent_ms,
                        ended_ms: started.elapsed().as_millis() as u64,
                        outcome,
                    });
                    if done || Instant::now() > give_up {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(rng.random_range(50..300))).await;
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    Arc::try_unwrap(history).unwrap().into_inner().unwrap()
}

/// Every decision of every agent, oldest first (commit order per agent), read through
/// `api` with its organization's key.
pub async fn final_log(api: &str, agents: &[Agent]) -> Vec<Logged> {
    let client = reqwest::Client::new();
    let mut log = Vec::new();
    for Agent { id: agent, org, .. } in agents {
        let mut all = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut url = format!("{api}/v1/decisions?agent={agent}&limit=100");
            if let Some(c) = &cursor {
                url.push_str(&format!("&cursor={c}"));
            }
            let page = read_page(&client, &url, org).await;
            all.extend(
                page["data"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(Logged::from_json),
            );
            if page["has_more"] != true {
                break;
            }
            cursor = Some(page["next_cursor"].as_str().unwrap().to_owned());
        }
        all.reverse();
        log.extend(all);
    }
    log
}

/// One page of a list, read with `org`; over the org key's rate (a long log, read page after
/// page, can reach it), or not read within the request deadline (a 503, on a loaded
/// machine), it waits as the answer's Retry-After says and reads again.
async fn read_page(client: &reqwest::Client, url: &str, org: &str) -> Value {
    for _ in 0..60 {
        let r = client.get(url).bearer_auth(org).send().await.unwrap();
        if r.status() == 429 || r.status() == 503 {
            let wait = r
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
                .unwrap_or(1);
            tokio::time::sleep(Duration::from_secs(wait)).await;
            continue;
        }
        let status = r.status();
        let page: Value = r.json().await.unwrap();
        assert_eq!(status, 200, "{url}: {page}");
        return page;
    }
    panic!("{url}: still over the org key's rate or the deadline after 60 tries");
}

/// The guardians of the postmasters started here: kept (with the pipes to their input)
/// for the life of the test process, whose exit closes the pipes and so stops them.
static RESTARTED: Mutex<Vec<Child>> = Mutex::new(Vec::new());

/// The PostgreSQL cluster of this test process, to restart and pause: its postmaster is
/// the harness's child at first, then (after a restart) one started here under a guardian
/// of the same kind.
pub struct Cluster {
    pub dir: PathBuf,
}

impl Cluster {
    pub fn new(dir: PathBuf) -> Cluster {
        Cluster { dir }
    }

    fn postmaster(&self) -> Option<u32> {
        std::fs::read_to_string(self.dir.join("data/postmaster.pid"))
            .ok()?
            .lines()
            .next()?
            .trim()
            .parse()
            .ok()
    }

    /// Stops PostgreSQL with `signal` (`-INT`: fast, `-QUIT`: immediate) and starts it
    /// again with the same command line.
    pub fn restart(&mut self, signal_name: &str) {
        let Some(pid) = self.postmaster() else { return };
        signal(pid, signal_name);
        let deadline = Instant::now() + Duration::from_secs(30);
        while Path::new(&format!("/proc/{pid}")).exists() {
            // A zombie of the harness's guardian counts as gone.
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            if state.contains(") Z") {
                break;
            }
            assert!(Instant::now() < deadline, "PostgreSQL did not stop");
            std::thread::sleep(Duration::from_millis(20));
        }
        let data = self.dir.join("data");
        let script = format!(
            "eval \"exec $(cat '{opts}')\" >>'{log}' 2>&1 </dev/null & pid=$!; cat >/dev/null; kill -QUIT $pid; wait $pid",
            opts = data.join("postmaster.opts").display(),
            log = self.dir.join("server.log").display()
        );
        let root = Command::new("id").arg("-u").output().unwrap().stdout == b"0\n";
        let mut command = if root {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--", "sh", "-c", &script]);
            c
        } else {
            let mut c = Command::new("sh");
            c.args(["-c", &script]);
            c
        };
        let child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        RESTARTED.lock().unwrap().push(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ready = std::fs::read_to_string(data.join("postmaster.pid"))
                .is_ok_and(|f| f.lines().nth(7).is_some_and(|s| s.trim() == "ready"));
            if ready {
                return;
            }
            assert!(Instant::now() < deadline, "PostgreSQL did not come back");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Pauses every PostgreSQL process (SIGSTOP) for `pause`, then lets them go on.
    pub fn pause(&self, pause: Duration) {
        let Some(pid) = self.postmaster() else { return };
        signal(pid, "-STOP");
        let _ = Command::new("pkill")
            .args(["-STOP", "-P", &pid.to_string()])
            .status();
        std::thread::sleep(pause);
        let _ = Command::new("pkill")
            .args(["-CONT", "-P", &pid.to_string()])
            .status();
        signal(pid, "-CONT");
    }
}
