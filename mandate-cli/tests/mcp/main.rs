//! `mandate mcp` driven by a real MCP client, the official Python SDK (`mcp` on PyPI), over
//! stdio and over streamable HTTP, against a real server on a manual clock (issue #35). The
//! scenario is `client.py`; this side owns the server and does what the script asks
//! ({"need": ...} lines): approve, deny or expire a review while `wait_for_review` waits,
//! move the clock, change the agent key's rate, revoke the mandate, stop the server.
//!
//! The client is the Python in `MANDATE_MCP_PYTHON` (default `python3`) with `mcp`, `PyJWT`
//! and `jsonschema` importable. Without it the tests say they were skipped, unless
//! `MANDATE_REQUIRE_MCP_CLIENT=1` (CI, which installs it into `.ci/venv`): then they fail.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines,
    missing_docs
)]

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod http_guard;
mod waits;

use mandate_server::clock::ManualClock;
use mandate_server::operator;
use mandate_server::serve::{self, Config, Running};
use serde_json::{Value, json};

/// How long one run of the scenario may take before the test fails.
const DEADLINE: Duration = Duration::from_secs(240);

fn python() -> String {
    std::env::var("MANDATE_MCP_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// Whether the client can run here; panics when it cannot and CI requires it.
fn client_available() -> bool {
    let ok = Command::new(python())
        .args(["-c", "import mcp, jwt, jsonschema"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        if std::env::var("MANDATE_REQUIRE_MCP_CLIENT").as_deref() == Ok("1") {
            panic!(
                "MANDATE_REQUIRE_MCP_CLIENT=1 but {} cannot import mcp, jwt and jsonschema (pip install mcp PyJWT jsonschema)",
                python()
            );
        }
        mandate_test_kit::skip::say(&format!(
            "the MCP client tests need the official Python SDK ({} -c 'import mcp' failed; set MANDATE_MCP_PYTHON)",
            python()
        ));
    }
    ok
}

/// The server, its clock, and the organization and agent it was set up with.
struct Server {
    runtime: tokio::runtime::Runtime,
    running: Option<Running>,
    clock: Arc<ManualClock>,
    api: String,
    public: String,
    issuer: String,
    org_key: String,
    agent_key: String,
    mandate: String,
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
        // A minute behind this machine, so a fresh token is valid by the real clock that
        // verify_verdict reads (the scenario verifies before moving the clock).
        let now = time::OffsetDateTime::now_utc() - time::Duration::seconds(60);
        let clock = Arc::new(ManualClock::new(now.replace_nanosecond(0).unwrap()));
        let running = runtime
            .block_on(serve::start(
                Config {
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
                    // A manual clock: a log waits by wall time only when a test moves it.
                    log_quiet_below: 0,
                    public_logs: false,
                    x402_assets: Default::default(),
                    witnesses: Vec::new(),
                    limits: Default::default(),
                    key_encryption: Default::default(),
                },
                clock.clone(),
            ))
            .unwrap();
        let org =
            operator::onboard(&*running.state.store, &running.state.api_keys, "acme", now).unwrap();
        let mut server = Server {
            api: format!("http://{}", running.api_addr),
            public: format!("http://{}", running.public_addr),
            issuer: running.state.verdicts_url.clone(),
            running: Some(running),
            runtime,
            clock,
            org_key: org.sandbox_key,
            agent_key: String::new(),
            mandate: String::new(),
            _db: db,
        };
        let agent = server.call("POST", "/v1/agents", Some(json!({"name": "buyer"})));
        server.agent_key = agent["agent_key"].as_str().unwrap().to_owned();
        let mandate = server.call(
            "POST",
            "/v1/mandates",
            Some(json!({"agent": "agt_buyer", "principal": "role:cfo",
                "limits": {"per_transaction": 100, "per_month": 450, "currency": "USD"},
                "categories": ["software", "travel"], "review_above": 50,
                "expires": "2099-12-31"})),
        );
        server.mandate = mandate["id"].as_str().unwrap().to_owned();
        server
    }

    /// An API call with the organization key; the answer's body (a 2xx is required).
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let client = reqwest::blocking::Client::new();
        let mut request = client
            .request(method.parse().unwrap(), format!("{}{path}", self.api))
            .bearer_auth(&self.org_key);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let answer = request.send().unwrap();
        let status = answer.status();
        let text = answer.text().unwrap();
        assert!(status.is_success(), "{method} {path}: {status} {text}");
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }

    /// An API call with the agent's key; the answer's body (a 2xx is required).
    fn agent_call(&self, method: &str, path: &str, body: Value) -> Value {
        let answer = reqwest::blocking::Client::new()
            .request(method.parse().unwrap(), format!("{}{path}", self.api))
            .bearer_auth(&self.agent_key)
            .json(&body)
            .send()
            .unwrap();
        let status = answer.status();
        let text = answer.text().unwrap();
        assert!(status.is_success(), "{method} {path}: {status} {text}");
        serde_json::from_str(&text).unwrap()
    }

    fn advance(&self, seconds: i64) {
        self.clock.advance(time::Duration::seconds(seconds));
    }

    fn stop(&mut self) {
        if let Some(running) = self.running.take() {
            self.runtime.block_on(running.shutdown()).unwrap();
        }
    }

    /// Does what the script asked; whether the script waits for "done".
    fn act(&mut self, need: &Value) -> bool {
        match need["need"].as_str().unwrap() {
            "advance" => self.advance(need["seconds"].as_i64().unwrap()),
            "approve" | "deny" => {
                let review = need["review"].as_str().unwrap();
                let action = need["need"].as_str().unwrap();
                let body = need.get("reason").map(|reason| json!({"reason": reason}));
                self.call("POST", &format!("/v1/reviews/{review}/{action}"), body);
                return false;
            }
            "approve_refused" => {
                // The review of a cancelled task: the client withdrew it, so a person's
                // approval is refused and no allow is made.
                let review = need["review"].as_str().unwrap();
                let answer = reqwest::blocking::Client::new()
                    .post(format!("{}/v1/reviews/{review}/approve", self.api))
                    .bearer_auth(&self.org_key)
                    .send()
                    .unwrap();
                let status = answer.status();
                let body: Value = answer.json().unwrap();
                assert_eq!(status, 409, "approving a withdrawn review: {body}");
                assert_eq!(body["error"]["code"], "review_withdrawn", "{body}");
            }
            "expire" => {
                // Past the review's 24 hours: the timers expire it.
                self.advance(24 * 3600 + 1);
                return false;
            }
            "rate" => {
                let store = &*self.running.as_ref().unwrap().state.store;
                let per_sec = u32::try_from(need["per_sec"].as_u64().unwrap()).unwrap();
                operator::set_rate(store, &self.agent_key, per_sec).unwrap();
                // Running servers pick up a key's new rate at their key cache's next refresh.
                std::thread::sleep(Duration::from_millis(600));
            }
            "revoke" => {
                self.call(
                    "POST",
                    &format!("/v1/mandates/{}/revoke", self.mandate),
                    None,
                );
            }
            "stop" => self.stop(),
            other => panic!("unknown need {other}"),
        }
        true
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `mandate mcp` as the agent, with HOME in a temporary directory.
fn mcp_command(server: &Server, home: &std::path::Path) -> (Vec<String>, Vec<(String, String)>) {
    let command = vec![
        env!("CARGO_BIN_EXE_mandate").to_owned(),
        "mcp".to_owned(),
        "--issuer".to_owned(),
        server.issuer.clone(),
        // The test organization's tokens are sandbox tokens.
        "--sandbox".to_owned(),
        "--console-url".to_owned(),
        console(server),
    ];
    let env = vec![
        ("HOME".to_owned(), home.display().to_string()),
        (
            "XDG_CONFIG_HOME".to_owned(),
            home.join("config").display().to_string(),
        ),
        ("MANDATE_BASE_URL".to_owned(), server.api.clone()),
        ("MANDATE_API_KEY".to_owned(), server.agent_key.clone()),
    ];
    (command, env)
}

/// The review console's URL, which `mandate mcp` is told.
fn console(server: &Server) -> String {
    format!("{}/console/", server.public)
}

/// Runs client.py with `config`, doing what it asks, until it ends; panics on its failure.
fn drive(server: &mut Server, mut config: Value) {
    config["jwks_url"] = json!(format!("{}/.well-known/jwks.json", server.public));
    config["issuer"] = json!(server.issuer);
    config["mandate"] = json!(server.mandate);
    config["agent_key"] = json!(server.agent_key);
    config["console"] = json!(console(server));
    // A `mandate mcp` of the same agent as on another host: another HOME, so nothing on
    // this machine's disk is shared with the one the client talks to.
    let elsewhere = tempfile::tempdir().unwrap();
    let (command, env) = mcp_command(server, elsewhere.path());
    let env: serde_json::Map<String, Value> = env
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    config["elsewhere"] = json!({"command": command, "env": env});
    let script = format!(
        "{}/tests/mcp/client.py",
        std::env::var("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_owned())
    );
    let mut child = Command::new(python())
        .arg(script)
        .arg(config.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let mut stdin = child.stdin.take().unwrap();
    let watchdog = Watchdog::start(child.id());
    let mut done = false;
    let mut seen = Vec::new();
    for line in stdout.lines() {
        let line = line.unwrap();
        seen.push(line.clone());
        let Ok(message) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if message["done"] == true {
            done = true;
        } else if message.get("need").is_some() && server.act(&message) {
            writeln!(stdin, "done").unwrap();
            stdin.flush().unwrap();
        }
    }
    let output = child.wait_with_output().unwrap();
    drop(watchdog);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        done && output.status.success(),
        "the MCP client failed ({}):\n--- stdout\n{}\n--- stderr\n{stderr}",
        output.status,
        seen.join("\n")
    );
    // Every step that needed the server side ran.
    let needs: Vec<String> = seen
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|m| m["need"].as_str().map(str::to_owned))
        .collect();
    for step in [
        "approve",
        "approve_refused",
        "deny",
        "expire",
        "rate",
        "revoke",
        "stop",
    ] {
        assert!(
            needs.iter().any(|n| n == step),
            "{step} never asked: {needs:?}"
        );
    }
    // The SDK closed its session without a complaint (a DELETE answered 202 made it warn).
    assert!(!stderr.contains("Session termination failed"), "{stderr}");
    // The key never reached the client's output, not even in an error.
    assert!(!seen.join("\n").contains(&server.agent_key));
    assert!(!stderr.contains(&server.agent_key));
}

/// Kills the client if the scenario runs past [`DEADLINE`].
struct Watchdog(Arc<std::sync::atomic::AtomicBool>);

impl Watchdog {
    fn start(pid: u32) -> Self {
        let finished = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = finished.clone();
        std::thread::spawn(move || {
            let start = Instant::now();
            while start.elapsed() < DEADLINE {
                if flag.load(std::sync::atomic::Ordering::SeqCst) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            let _ = Command::new("kill").arg(pid.to_string()).status();
        });
        Self(finished)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The scenario over stdio, the client negotiating with `mode` ("legacy": the initialize
/// handshake of 2025-11-25; "auto": the SDK's discover probe, 2026-07-28).
fn over_stdio(mode: &str) {
    if !client_available() {
        return;
    }
    let mut server = Server::start();
    let home = tempfile::tempdir().unwrap();
    let (command, env) = mcp_command(&server, home.path());
    let env: serde_json::Map<String, Value> = env
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    drive(
        &mut server,
        json!({"transport": "stdio", "mode": mode, "command": command, "env": env}),
    );
}

/// The scenario over streamable HTTP, the client negotiating with `mode`.
fn over_http(mode: &str) {
    if !client_available() {
        return;
    }
    let mut server = Server::start();
    let home = tempfile::tempdir().unwrap();
    let (mut child, url) = McpChild::http(&server, home.path(), &[]);
    drive(
        &mut server,
        json!({"transport": "http", "mode": mode, "url": url}),
    );
    // Nothing it printed names the key.
    let rest = child.stop();
    assert!(!rest.contains(&server.agent_key), "{rest}");
}

#[test]
fn the_official_client_pays_only_with_mandates_tokens_over_stdio_2025_11_25() {
    over_stdio("legacy");
}

#[test]
fn the_official_client_pays_only_with_mandates_tokens_over_stdio_2026_07_28() {
    over_stdio("auto");
}

#[test]
fn the_official_client_pays_only_with_mandates_tokens_over_http_2025_11_25() {
    over_http("legacy");
}

#[test]
fn the_official_client_pays_only_with_mandates_tokens_over_http_2026_07_28() {
    over_http("auto");
}

/// The HTTP server process, killed when the test ends however it ends.
struct McpChild(Child, Option<BufReader<std::process::ChildStderr>>);

impl McpChild {
    /// `mandate mcp --http 127.0.0.1:0` with `extra` options; its URL, read from the
    /// line it prints.
    fn http(server: &Server, home: &std::path::Path, extra: &[&str]) -> (Self, String) {
        Self::http_via(server, home, extra, &server.api)
    }

    /// As [`McpChild::http`], calling the API at `base` (a proxy in front of the server).
    fn http_via(
        server: &Server,
        home: &std::path::Path,
        extra: &[&str],
        base: &str,
    ) -> (Self, String) {
        let (command, mut env) = mcp_command(server, home);
        for (name, value) in &mut env {
            if name == "MANDATE_BASE_URL" {
                *value = base.to_owned();
            }
        }
        let mut mcp = Command::new(&command[0]);
        mcp.args(&command[1..])
            .args(["--http", "127.0.0.1:0"])
            .args(extra)
            .env_clear()
            .envs(env)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = mcp.spawn().unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        stderr.read_line(&mut line).unwrap();
        let url = line
            .trim()
            .strip_prefix("mandate mcp: listening on ")
            .unwrap_or_else(|| panic!("unexpected first line: {line}"))
            .to_owned();
        assert!(url.starts_with("http://127.0.0.1:"), "{url}");
        (Self(child, Some(stderr)), url)
    }

    /// Kills it; what it printed on stderr after its first line.
    fn stop(&mut self) -> String {
        let _ = self.0.kill();
        let mut rest = String::new();
        if let Some(mut stderr) = self.1.take() {
            std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
        }
        rest
    }
}

impl Drop for McpChild {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
