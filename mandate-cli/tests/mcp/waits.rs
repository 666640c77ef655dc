//! Waiting without spending the agent's rate (#50 item 4): 150 `wait_for_review` calls at
//! once on one review cost the API what one does. The official Python SDK makes the calls
//! (`waits.py`); between `mandate mcp` and the real server a counting proxy tallies the
//! API calls each path received.

use std::collections::HashMap;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use serde_json::json;

use super::{McpChild, Server, client_available, python};

/// Requests per path (query left out) seen by the proxy.
type Counts = Arc<Mutex<HashMap<String, u64>>>;

/// A proxy on 127.0.0.1 in front of `upstream` that counts what it forwards; its URL.
fn counting_proxy(server: &Server, upstream: String) -> (String, Counts) {
    let counts = Counts::default();
    let state = (upstream, counts.clone(), reqwest::Client::new());
    let listener = server
        .runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new().fallback(forward).with_state(state);
    server.runtime.spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (url, counts)
}

async fn forward(
    State((upstream, counts, client)): State<(String, Counts, reqwest::Client)>,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    *counts
        .lock()
        .unwrap()
        .entry(format!("{} {}", parts.method, parts.uri.path()))
        .or_default() += 1;
    let target = format!(
        "{upstream}{}",
        parts.uri.path_and_query().map_or("", |p| p.as_str())
    );
    let body = axum::body::to_bytes(body, 1 << 20).await.unwrap();
    let mut headers = parts.headers.clone();
    headers.remove("host");
    let answer = client
        .request(parts.method, target)
        .headers(headers)
        .body(body)
        .send()
        .await
        .unwrap();
    let mut response = Response::builder().status(answer.status());
    for (name, value) in answer.headers() {
        response = response.header(name, value);
    }
    response
        .body(Body::from(answer.bytes().await.unwrap()))
        .unwrap()
}

/// Waits on one decision through `mandate mcp --http`, `count` at once, for `seconds`:
/// the API calls its decision's path received, and how long the waits took from the first
/// call's start to the last one's end.
fn waits(server: &Server, decision: &str, count: u32, seconds: u32) -> (u64, Duration) {
    let (proxy, counts) = counting_proxy(server, server.api.clone());
    let home = tempfile::tempdir().unwrap();
    let (mut child, url) = McpChild::http_via(server, home.path(), &[], &proxy);
    let script = format!(
        "{}/tests/mcp/waits.py",
        std::env::var("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_owned())
    );
    let config = json!({"url": url, "decision": decision, "count": count, "seconds": seconds});
    let started = Instant::now();
    let output = Command::new(python())
        .arg(script)
        .arg(config.to_string())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "waits.py failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let took = started.elapsed();
    child.stop();
    let counts = counts.lock().unwrap();
    let reads = counts
        .get(&format!("GET /v1/decisions/{decision}"))
        .copied()
        .unwrap_or(0);
    (reads, took)
}

#[test]
fn a_hundred_and_fifty_waits_on_one_review_cost_the_api_what_one_does() {
    if !client_available() {
        return;
    }
    let server = Server::start();
    let asked = server.agent_call(
        "POST",
        "/v1/authorizations",
        json!({"amount": 75, "currency": "USD", "recipient": "vendor:acme", "category": "travel"}),
    );
    assert_eq!(asked["verdict"], "review", "{asked}");
    let decision = asked["id"].as_str().unwrap();
    let (one, _) = waits(&server, decision, 1, 3);
    let (many, took) = waits(&server, decision, 150, 3);
    eprintln!(
        "API reads of the decision: {one} for one wait of 3 s, {many} for 150 waits of 3 s (spread over {took:?} by the client starting them)"
    );
    assert!(one >= 3, "one wait read the decision {one} times in 3 s");
    // A read answers every wait for half a second: however many waits, at most one read
    // per half second while any waits (each alone would read 6 times: 900 in all).
    let bound = (took.as_secs_f64() * 2.0).ceil() as u64 + 1;
    assert!(
        many <= bound,
        "150 waits made {many} reads in {took:?}, one wait {one}"
    );
}
