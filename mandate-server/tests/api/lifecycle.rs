//! Starting and stopping: graceful shutdown lets in-flight requests finish, SIGTERM stops
//! the binary cleanly, and `serve --demo` gives a new user a working session.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::helpers::{TestDatabase, spawn_app};
use crate::process::{Server, binary, free_port};

#[tokio::test]
async fn graceful_shutdown_finishes_the_request_in_flight() {
    let mut app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "inflight").await;
    // Hold the agent's lock so that its next request stays in flight.
    let guard = app.hold_agent_lock("inflight").await;
    let in_flight = tokio::spawn({
        let (api, key) = (app.api.clone(), agent.clone());
        async move {
            reqwest::Client::new()
                .post(format!("{api}/v1/authorizations"))
                .header("authorization", format!("Bearer {key}"))
                .header("content-type", "application/json")
                .body(r#"{"amount": 1, "currency": "USD", "recipient": "vendor:a", "category": "software"}"#)
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!in_flight.is_finished());

    let running = app.running.take().unwrap();
    let stopping = tokio::spawn(running.shutdown());
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The server does not stop under the request, and takes no new connection.
    assert!(
        !stopping.is_finished(),
        "shutdown must wait for the request in flight"
    );
    let fresh = reqwest::Client::new()
        .get(format!("{}/v1/agents", app.api))
        .send()
        .await;
    assert!(
        fresh.is_err(),
        "a stopping server must not accept new connections"
    );

    drop(guard);
    let body = tokio::time::timeout(Duration::from_secs(10), in_flight)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(body["verdict"], "allow");
    tokio::time::timeout(Duration::from_secs(10), stopping)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    // What it answered was committed.
    let stored: i64 = app.db.query_i64(
        "SELECT COUNT(*) FROM decisions WHERE id = $1",
        &[body["id"].as_str().unwrap()],
    );
    assert_eq!(stored, 1);
}

#[tokio::test]
async fn sigterm_stops_the_binary_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDatabase::new(dir.path(), "term.db").await;
    let server = Server::start(db.arg(), free_port(), &[]);
    let anonymous = reqwest::get(format!("{}/v1/agents", server.api))
        .await
        .unwrap();
    assert_eq!(anonymous.status().as_u16(), 401);
    let status = Command::new("kill")
        .args(["-TERM", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let mut server = server;
    let mut exited = None;
    for _ in 0..200 {
        if let Some(code) = server.child.try_wait().unwrap() {
            exited = Some(code);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let code = exited.expect("the server did not stop within 10 s of SIGTERM");
    assert!(code.success(), "exit status {code:?}");
}

#[tokio::test]
async fn demo_mode_prints_a_session_that_shows_allow_review_and_a_denial() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDatabase::new(dir.path(), "demo.db").await;
    let mut child = Command::new(binary())
        .args([
            "serve",
            "--demo",
            "--api-addr",
            "127.0.0.1:0",
            "--public-addr",
            "127.0.0.1:0",
            "--db",
        ])
        .arg(db.arg())
        .envs(db.env())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let (mut api, mut org, mut agent) = (String::new(), String::new(), String::new());
    let (mut public, mut console) = (String::new(), String::new());
    for line in lines.by_ref() {
        let line = line.unwrap();
        let line = line.trim();
        if let Some(url) = line.strip_prefix("api:") {
            api = url.trim().to_owned();
        } else if let Some(url) = line.strip_prefix("public:") {
            public = url.trim().to_owned();
        } else if let Some(text) = line.strip_prefix("review console:") {
            console = text
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_owned();
        } else if let Some(key) = line.strip_prefix("export ORG=") {
            org = key.to_owned();
        } else if let Some(key) = line.strip_prefix("export AGENT=") {
            agent = key.to_owned();
            break;
        }
    }
    std::thread::spawn(move || for _ in lines {});
    assert!(
        org.starts_with("sk_sandbox_") && agent.starts_with("ak_sandbox_"),
        "{org} {agent}"
    );
    let client = reqwest::Client::new();
    let mut verdicts = Vec::new();
    for body in [
        r#"{"amount": 49.99, "currency": "USD", "recipient": "vendor:acme", "category": "software"}"#,
        r#"{"amount": 350, "currency": "USD", "recipient": "vendor:airline", "category": "travel"}"#,
        r#"{"amount": 12, "currency": "USD", "recipient": "vendor:deli", "category": "food"}"#,
    ] {
        let r: Value = client
            .post(format!("{api}/v1/authorizations"))
            .header("authorization", format!("Bearer {agent}"))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        verdicts.push(r["verdict"].as_str().unwrap().to_owned());
    }
    assert_eq!(verdicts, ["allow", "review", "deny_category"]);
    let decisions: Value = client
        .get(format!("{api}/v1/decisions"))
        .header("authorization", format!("Bearer {org}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(decisions["data"].as_array().unwrap().len(), 3);
    // The review console is printed next to the keys, on the public host.
    assert_eq!(console, format!("{public}/console/"));
    let page = client.get(&console).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("app.js"));
    let _ = child.kill();
    let _ = child.wait();
}
