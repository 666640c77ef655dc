//! What a tool call of `mandate mcp` costs over the API calls it makes (#50 item 7; target:
//! at most 2 ms at the median). A real server (in this process on its own runtime, SQLite
//! in a temporary directory, real signing keys, the system clock, a real TCP listener) and
//! the real `mandate mcp` process over stdio, driven by rmcp's MCP client (the official Rust
//! SDK, negotiating the protocol version as any host does), side by side with the same API
//! calls made directly by a keep-alive HTTP client on the same client runtime:
//!
//! - `authorize_payment/mcp`: the tool, which makes `POST /v1/authorizations`, then reads
//!   the active mandate (`GET /v1/mandates?status=active&limit=1`, then that mandate) for
//!   `remaining`;
//! - `authorize_payment/api_post`: that POST alone, what an agent without MCP sends;
//! - `authorize_payment/api_calls`: the POST and the two reads, what the tool sends;
//! - `get_mandate/mcp` and `get_mandate/api`: the two reads of the mandate;
//! - `list_decisions/mcp` and `list_decisions/api`: one `GET /v1/decisions?limit=10` each,
//!   the overhead of the protocol alone on a call that makes one request.
//!
//! Each POST is a decision made, signed (ES256) and stored. After the agent's first ten
//! decisions of a minute the fixed velocity rule answers `deny_velocity`, which is signed
//! and stored like any other decision, on both sides alike. Reading the mandate sums the
//! month's allows from the agent's decisions of the month, so its cost grows with the
//! thousands of decisions the bench makes; the paired pass prints how many there were.
//!
//! The overhead is the `mcp` median minus the `api_*` median of the same group and run.
//! Before criterion's groups, a bench run (not the `cargo test` one) interleaves the three
//! `authorize_payment` calls for 1,000 rounds and prints their medians and the median of
//! each round's difference, which a load that changes between criterion's groups moves
//! less.
//! Run with `cargo bench -p mandate-cli --bench mcp_overhead` (docs/mcp.md has figures);
//! `cargo test -p mandate-cli --bench mcp_overhead` runs each function once (CI's smoke run).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use mandate_server::clock::SystemClock;
use mandate_server::operator;
use mandate_server::serve::{self, Config, Running};
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt as _};
use serde_json::{Value, json};
use tokio::runtime::Runtime;

/// The body both sides authorize (the tool sends the amount as this exact JSON number).
const AUTHORIZE_BODY: &str =
    r#"{"amount":12.50,"currency":"USD","recipient":"vendor:acme","category":"software"}"#;

/// A real server with one agent and its mandate, on a runtime of its own.
struct Server {
    runtime: Runtime,
    running: Option<Running>,
    api: String,
    agent_key: String,
    _db: tempfile::TempDir,
}

impl Server {
    fn start() -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let db = tempfile::tempdir().unwrap();
        let config = Config {
            db: db.path().join("mandate.db").into(),
            migrate: true,
            api_addr: "127.0.0.1:0".into(),
            public_addr: "127.0.0.1:0".into(),
            verdicts_url: None,
            docs_url: None,
            tls: None,
            api_url: None,
            console_origins: None,
            log_checkpoint_interval: mandate_server::workers::checkpoint::DEFAULT_INTERVAL,
            log_checkpoint_batch: mandate_server::workers::checkpoint::BATCH,
            log_quiet_below: mandate_server::workers::checkpoint::QUIET_BELOW,
            public_logs: false,
            x402_assets: Default::default(),
            witnesses: Vec::new(),
            limits: Default::default(),
            key_encryption: Default::default(),
        };
        let running = runtime
            .block_on(serve::start(config, Arc::new(SystemClock)))
            .unwrap();
        let api = format!("http://{}", running.api_addr);
        let agent_key = Self::seed(&running, &api);
        Self {
            runtime,
            running: Some(running),
            api,
            agent_key,
            _db: db,
        }
    }

    /// An organization in enforce mode with one agent and its mandate: the agent's key.
    fn seed(running: &Running, api: &str) -> String {
        let now = time::OffsetDateTime::now_utc();
        let org =
            operator::onboard(&*running.state.store, &running.state.api_keys, "acme", now).unwrap();
        let http = reqwest::blocking::Client::new();
        let call = |path: &str, body: Value| -> Value {
            let answer = http
                .post(format!("{api}{path}"))
                .bearer_auth(&org.sandbox_key)
                .json(&body)
                .send()
                .unwrap();
            assert!(answer.status().is_success(), "{path}: {}", answer.status());
            answer.json().unwrap()
        };
        call("/v1/enforcement", json!({"mode": "enforce"}));
        let agent = call("/v1/agents", json!({"name": "buyer"}));
        call(
            "/v1/mandates",
            json!({"agent": "agt_buyer", "principal": "role:cfo",
                "limits": {"per_transaction": 1000, "per_month": 1_000_000_000, "currency": "USD"},
                "categories": ["software"], "expires": "2099-12-31"}),
        );
        let agent_key = agent["agent_key"].as_str().unwrap().to_owned();
        // No rate limit in the way of a benchmark: the server notices the key change within
        // 250 ms (it polls the keys' generation) and reads the key's new rate.
        operator::set_rate(&*running.state.store, &agent_key, 1_000_000).unwrap();
        std::thread::sleep(Duration::from_millis(600));
        agent_key
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(running) = self.running.take() {
            let _ = self.runtime.block_on(running.shutdown());
        }
    }
}

/// `mandate mcp` over stdio, initialized by rmcp's client.
struct Mcp {
    client: Option<RunningService<RoleClient, ()>>,
    child: tokio::process::Child,
    _home: tempfile::TempDir,
}

impl Mcp {
    /// Must run inside the client runtime (the client's I/O tasks are spawned on it).
    async fn start(server: &Server) -> Self {
        let home = tempfile::tempdir().unwrap();
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_mandate"))
            .arg("mcp")
            .env_clear()
            .env("HOME", home.path())
            .env("MANDATE_BASE_URL", format!("{}/v1", server.api))
            .env("MANDATE_API_KEY", &server.agent_key)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let transport = (child.stdout.take().unwrap(), child.stdin.take().unwrap());
        let client = ().serve(transport).await.unwrap();
        Self {
            client: Some(client),
            child,
            _home: home,
        }
    }

    /// A tool call's structured result; a tool error fails the benchmark.
    async fn tool(&self, name: &'static str, arguments: Value) -> Value {
        let Value::Object(arguments) = arguments else {
            panic!("arguments are an object")
        };
        let call = CallToolRequestParams::new(name).with_arguments(arguments);
        let result = self.client.as_ref().unwrap().call_tool(call).await.unwrap();
        assert_ne!(result.is_error, Some(true), "{name}: {result:?}");
        result.structured_content.unwrap()
    }

    /// `authorize_payment`: a decision.
    async fn authorize(&self, arguments: &Value) -> Value {
        DECISIONS.fetch_add(1, Ordering::Relaxed);
        self.tool("authorize_payment", arguments.clone()).await
    }

    async fn stop(mut self) {
        if let Some(client) = self.client.take() {
            let _ = client.cancel().await;
        }
        let _ = self.child.kill().await;
    }
}

/// The API calls a tool makes, made directly with the agent's key.
struct Direct {
    http: reqwest::Client,
    base: String,
    key: String,
    keys: AtomicU64,
}

/// Decisions made so far, by either side.
static DECISIONS: AtomicU64 = AtomicU64::new(0);

impl Direct {
    async fn get(&self, path: &str) -> Value {
        let answer = self
            .http
            .get(format!("{}{path}", self.base))
            .bearer_auth(&self.key)
            .send()
            .await
            .unwrap();
        assert!(answer.status().is_success(), "{path}: {}", answer.status());
        answer.json().await.unwrap()
    }

    /// `POST /v1/authorizations` with a fresh Idempotency-Key: the decision.
    async fn authorize(&self) -> Value {
        let key = format!("idem_bench_{}", self.keys.fetch_add(1, Ordering::Relaxed));
        DECISIONS.fetch_add(1, Ordering::Relaxed);
        let answer = self
            .http
            .post(format!("{}/v1/authorizations", self.base))
            .bearer_auth(&self.key)
            .header("Idempotency-Key", key)
            .header("content-type", "application/json")
            .body(AUTHORIZE_BODY)
            .send()
            .await
            .unwrap();
        assert!(answer.status().is_success(), "{}", answer.status());
        answer.json().await.unwrap()
    }

    /// `GET /v1/mandates?status=active&limit=1`, then that mandate: what the tool reads
    /// after the decision for `remaining`.
    async fn mandate(&self) -> Value {
        let page = self.get("/v1/mandates?status=active&limit=1").await;
        let id = page["data"][0]["id"].as_str().unwrap().to_owned();
        self.get(&format!("/v1/mandates/{id}")).await
    }
}

fn bench_overhead(c: &mut Criterion) {
    let server = Server::start();
    // One thread drives both sides, so neither pays a hop between threads the other does not.
    let client = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mcp = client.block_on(Mcp::start(&server));
    let direct = Direct {
        http: reqwest::Client::new(),
        base: server.api.clone(),
        key: server.agent_key.clone(),
        keys: AtomicU64::new(0),
    };
    // A few decisions to list, and both sides' connections opened.
    client.block_on(async {
        for _ in 0..5 {
            direct.authorize().await;
        }
        mcp.tool("list_decisions", json!({"limit": 1})).await;
    });
    let authorize_args = json!({"amount": "12.50", "currency": "USD",
        "recipient": "vendor:acme", "category": "software"});
    // First, while the agent has few decisions (criterion's groups make thousands more).
    if std::env::args().any(|arg| arg == "--bench") {
        client.block_on(paired(&direct, &mcp, &authorize_args));
    }

    let mut group = c.benchmark_group("authorize_payment");
    group.bench_function("api_post", |b| {
        b.iter(|| client.block_on(direct.authorize()))
    });
    group.bench_function("api_calls", |b| {
        b.iter(|| {
            client.block_on(async {
                direct.authorize().await;
                direct.mandate().await
            })
        })
    });
    group.bench_function("mcp", |b| {
        b.iter(|| client.block_on(mcp.authorize(&authorize_args)))
    });
    group.finish();

    let mut group = c.benchmark_group("get_mandate");
    group.bench_function("api", |b| b.iter(|| client.block_on(direct.mandate())));
    group.bench_function("mcp", |b| {
        b.iter(|| client.block_on(mcp.tool("get_mandate", json!({}))))
    });
    group.finish();

    let mut group = c.benchmark_group("list_decisions");
    group.bench_function("api", |b| {
        b.iter(|| client.block_on(direct.get("/v1/decisions?limit=10")))
    });
    group.bench_function("mcp", |b| {
        b.iter(|| client.block_on(mcp.tool("list_decisions", json!({"limit": 10}))))
    });
    group.finish();

    client.block_on(mcp.stop());
    drop(server);
}

/// Calls of each kind interleaved (the order turned each round), so that the three see the
/// same load on a shared machine: their medians, and the median of each round's difference.
async fn paired(direct: &Direct, mcp: &Mcp, authorize_args: &Value) {
    const ROUNDS: usize = 1_000;
    let before = DECISIONS.load(Ordering::Relaxed);
    let mut times: [Vec<f64>; 3] = Default::default();
    for round in 0..ROUNDS {
        for step in 0..3 {
            let kind = (round + step) % 3;
            let start = std::time::Instant::now();
            match kind {
                0 => drop(direct.authorize().await),
                1 => drop((direct.authorize().await, direct.mandate().await)),
                _ => drop(mcp.authorize(authorize_args).await),
            }
            times[kind].push(start.elapsed().as_secs_f64() * 1e3);
        }
    }
    let [post, calls, tool] = &times;
    let differences = |base: &[f64]| median(tool.iter().zip(base).map(|(t, b)| t - b).collect());
    println!(
        "authorize_payment, {ROUNDS} interleaved rounds (ms, medians): api_post {:.3}, \
         api_calls {:.3}, mcp {:.3}; mcp - api_post {:.3}, mcp - api_calls {:.3} (per round); \
         the agent's decisions {before} before, {} after",
        median(post.clone()),
        median(calls.clone()),
        median(tool.clone()),
        differences(post),
        differences(calls),
        DECISIONS.load(Ordering::Relaxed),
    );
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

criterion_group! {
    name = benches;
    // Calls take milliseconds: 100 samples need more than criterion's default 5 s.
    config = Criterion::default().measurement_time(Duration::from_secs(10));
    targets = bench_overhead
}
criterion_main!(benches);
