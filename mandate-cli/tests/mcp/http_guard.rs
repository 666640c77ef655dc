//! `mandate mcp --http` as an attacker meets it (#50): raw HTTP from this test against the
//! real process: foreign origins refused, the bearer token required when set, bad JSON a
//! JSON-RPC parse error, `DELETE` answered as the specification says, sessions capped and
//! closed when idle, and 5,000 sessions leaving its memory where it started.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use reqwest::blocking::{Client, Response};
use serde_json::{Value, json};

use super::{McpChild, Server};

/// The initialize request of a 2025-11-25 client.
fn initialize() -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "attacker", "version": "1"}}})
    .to_string()
}

/// POSTs `body` to `url` as an MCP client does, with `headers`.
fn post(client: &Client, url: &str, body: &str, headers: &[(&str, &str)]) -> Response {
    let mut request = client
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_owned());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().unwrap()
}

/// The JSON-RPC error code of an answer's body.
fn error_code(answer: Response) -> i64 {
    let body: Value = answer.json().unwrap();
    body["error"]["code"].as_i64().unwrap()
}

/// The process's resident set, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Opens a session; its id.
fn open_session(client: &Client, url: &str) -> String {
    let answer = post(client, url, &initialize(), &[]);
    assert_eq!(answer.status(), StatusCode::OK);
    let id = answer.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    answer.text().unwrap();
    id
}

#[test]
fn foreign_origins_are_refused_and_loopback_or_configured_ones_served() {
    let server = Server::start();
    let home = tempfile::tempdir().unwrap();
    let (mut child, url) = McpChild::http(
        &server,
        home.path(),
        &["--allow-origin", "https://console.example.com"],
    );
    let client = Client::new();
    for (origin, allowed) in [
        ("https://evil.example.com", false),
        ("http://127.0.0.1.evil.example.com", false),
        ("null", false),
        ("http://localhost:3000", true),
        ("http://127.0.0.1:9", true),
        ("https://console.example.com", true),
    ] {
        let answer = post(&client, &url, &initialize(), &[("origin", origin)]);
        assert_eq!(
            answer.status() == StatusCode::OK,
            allowed,
            "{origin}: {}",
            answer.status()
        );
        if !allowed {
            assert_eq!(answer.status(), StatusCode::FORBIDDEN, "{origin}");
            assert!(!answer.headers().contains_key("mcp-session-id"), "{origin}");
        }
    }
    // Without Origin (not a browser): served.
    assert_eq!(
        post(&client, &url, &initialize(), &[]).status(),
        StatusCode::OK
    );
    child.stop();
}

#[test]
fn the_bearer_token_is_required_when_set() {
    let server = Server::start();
    let home = tempfile::tempdir().unwrap();
    let (mut child, url) = McpChild::http(&server, home.path(), &["--http-token", "s3cret-tok"]);
    let client = Client::new();
    for given in [
        None,
        Some("Bearer wrong"),
        Some("Bearer s3cret-to"),
        Some("s3cret-tok"),
    ] {
        let headers: Vec<(&str, &str)> = given.map(|g| ("authorization", g)).into_iter().collect();
        let answer = post(&client, &url, &initialize(), &headers);
        assert_eq!(answer.status(), StatusCode::UNAUTHORIZED, "{given:?}");
        assert_eq!(answer.headers()["www-authenticate"], "Bearer");
        assert!(!answer.headers().contains_key("mcp-session-id"));
        let text = answer.text().unwrap();
        assert!(!text.contains("s3cret"), "{text}");
    }
    let answer = post(
        &client,
        &url,
        &initialize(),
        &[("authorization", "Bearer s3cret-tok")],
    );
    assert_eq!(answer.status(), StatusCode::OK);
    let rest = child.stop();
    assert!(!rest.contains("s3cret"), "{rest}");
}

#[test]
fn bad_json_is_a_jsonrpc_parse_error_and_delete_ends_a_session() {
    let server = Server::start();
    let home = tempfile::tempdir().unwrap();
    let (mut child, url) = McpChild::http(&server, home.path(), &[]);
    let client = Client::new();
    for (body, code) in [
        ("{bad", -32700),
        ("", -32700),
        ("[1, 2", -32700),
        ("42", -32600),
        (r#"{"hello": "world"}"#, -32600),
    ] {
        let answer = post(&client, &url, body, &[]);
        assert_eq!(answer.status(), StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(
            answer.headers()["content-type"],
            "application/json",
            "{body}"
        );
        assert_eq!(error_code(answer), code, "{body}");
    }
    let session = open_session(&client, &url);
    let delete = |session: &str| {
        client
            .delete(&url)
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", "2025-11-25")
            .send()
            .unwrap()
            .status()
    };
    assert_eq!(delete(&session), StatusCode::NO_CONTENT);
    assert_eq!(delete(&session), StatusCode::NOT_FOUND);
    assert_eq!(delete("no-such-session"), StatusCode::NOT_FOUND);
    child.stop();
}

#[test]
fn sessions_past_the_cap_wait_until_idle_ones_close() {
    let server = Server::start();
    let home = tempfile::tempdir().unwrap();
    let (mut child, url) = McpChild::http(
        &server,
        home.path(),
        &["--max-sessions", "3", "--session-idle", "2"],
    );
    let client = Client::new();
    for _ in 0..3 {
        open_session(&client, &url);
    }
    let refused = post(&client, &url, &initialize(), &[]);
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(refused.headers().contains_key("retry-after"));
    assert!(!refused.headers().contains_key("mcp-session-id"));
    assert_eq!(error_code(refused), -32000);
    // The idle ones close, and a new session is served again.
    let start = Instant::now();
    loop {
        let answer = post(&client, &url, &initialize(), &[]);
        if answer.status() == StatusCode::OK {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the idle sessions never closed"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    child.stop();
}

/// 5,000 sessions opened (a client that never closes them, as an attacker would): the
/// memory each costs, and the resident set back near its start once they idled out. The
/// figures are printed (`cargo test -p mandate-cli --test mcp five_thousand -- --nocapture`).
#[test]
fn five_thousand_sessions_cost_bounded_memory_given_back_when_idle() {
    const SESSIONS: u64 = 5_000;
    let server = Server::start();
    let home = tempfile::tempdir().unwrap();
    let (mut child, url) = McpChild::http(
        &server,
        home.path(),
        &["--max-sessions", "5001", "--session-idle", "20"],
    );
    let pid = child.0.id();
    let client = Client::new();
    open_session(&client, &url);
    let start = rss_kib(pid);
    let started_opening = Instant::now();
    for _ in 0..SESSIONS {
        open_session(&client, &url);
    }
    let peak = rss_kib(pid);
    let per_session = (peak.saturating_sub(start)) * 1024 / SESSIONS;
    let opened = started_opening.elapsed();
    // Given back: what stays resident once the sessions idled out is at most 4 % of what
    // they took (the sessions' map and the allocator's metadata stay; each session's
    // buffers and state must not).
    let kept_at_most = start + peak.saturating_sub(start) / 25;
    let started = Instant::now();
    let mut after = peak;
    while started.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_secs(1));
        after = rss_kib(pid);
        if after <= kept_at_most {
            break;
        }
    }
    eprintln!(
        "mcp http sessions: RSS {start} KiB at start, {peak} KiB with {SESSIONS} sessions opened in {opened:?} ({per_session} bytes a session), {after} KiB after the idle timeout"
    );
    assert!(
        per_session < 128 * 1024,
        "a session costs {per_session} bytes"
    );
    assert!(
        after <= kept_at_most,
        "RSS {after} KiB after the idle timeout, {start} KiB at start, {peak} KiB at the peak: more than 4 % of the sessions' memory kept"
    );
    // And it still serves.
    open_session(&client, &url);
    child.stop();
}

/// The SDK's refusals, which it writes as plain text, answer JSON-RPC errors naming the
/// request's id, with the HTTP status kept and a message that says what to do.
#[test]
fn refusals_are_jsonrpc_errors_that_say_what_to_do() {
    let server = Server::start();
    let home = tempfile::tempdir().unwrap();
    let (mut child, url) = McpChild::http(&server, home.path(), &[]);
    let client = Client::new();
    let list = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list"}).to_string();
    let refused = |answer: Response, status: StatusCode, code: i64| -> String {
        assert_eq!(answer.status(), status);
        assert_eq!(answer.headers()["content-type"], "application/json");
        let body: Value = answer.json().unwrap();
        assert_eq!(body["jsonrpc"], "2.0", "{body}");
        assert_eq!(body["error"]["code"], code, "{body}");
        body["error"]["message"].as_str().unwrap().to_owned()
    };
    // A page of another site.
    let answer = post(
        &client,
        &url,
        &list,
        &[("origin", "https://evil.example.com")],
    );
    let message = refused(answer, StatusCode::FORBIDDEN, -32000);
    assert!(
        message.contains("Origin header is not allowed"),
        "{message}"
    );
    assert!(message.contains("--allow-origin"), "{message}");
    // A 2025-11-25 request without its session.
    let answer = post(&client, &url, &list, &[]);
    let body = answer.text().unwrap();
    let parsed: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert_eq!(parsed["id"], 7, "{body}");
    assert_eq!(parsed["error"]["code"], -32000, "{body}");
    let message = parsed["error"]["message"].as_str().unwrap();
    assert!(message.contains("Session ID is required"), "{message}");
    assert!(message.contains("Mcp-Session-Id"), "{message}");
    // A session that is not (or no longer) there.
    let answer = post(&client, &url, &list, &[("mcp-session-id", "gone")]);
    let message = refused(answer, StatusCode::NOT_FOUND, -32001);
    assert!(message.contains("initialize a new one"), "{message}");
    let answer = client
        .delete(&url)
        .header("mcp-session-id", "gone")
        .send()
        .unwrap();
    refused(answer, StatusCode::NOT_FOUND, -32001);
    // A method the transport does not take: the Allow header kept.
    let answer = client.put(&url).send().unwrap();
    assert_eq!(answer.headers()["allow"], "GET, POST, DELETE");
    refused(answer, StatusCode::METHOD_NOT_ALLOWED, -32000);
    child.stop();
}

/// The port of an `http://127.0.0.1:PORT/mcp` URL.
fn port(url: &str) -> u16 {
    url.trim_start_matches("http://127.0.0.1:")
        .trim_end_matches("/mcp")
        .parse()
        .unwrap()
}

/// A raw connection that has sent `head` (and `body`, if any) and goes on holding the
/// socket; `None` when the server closed it before everything was written.
fn raw(port: u16, head: &str, body: &[u8]) -> Option<std::net::TcpStream> {
    use std::io::Write as _;
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_write_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(head.as_bytes()).ok()?;
    stream.write_all(body).ok()?;
    Some(stream)
}

/// What the server sends on `stream` until it closes it (at most 60 s): its answer, or
/// nothing for a connection closed (or reset) without one.
fn until_closed(mut stream: std::net::TcpStream) -> String {
    use std::io::Read as _;
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!(
                "the connection was still open after 60 s ({e}); it got {}",
                String::from_utf8_lossy(&got)
            ),
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// The process's peak resident set, in KiB.
fn peak_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// 300 connections each sending most of a 256 KiB body and then nothing (an attacker's
/// slow bodies, as 2026-07-28 stateless calls): the server holds at most
/// `--max-connections` of them at once, so its memory grows by their count, not by the
/// attackers'; each one it took is answered 408 once its body is late, the others are
/// closed at once; then it serves again. A request head that never ends is cut off too.
#[test]
fn slow_heads_and_bodies_are_cut_off_and_memory_is_bounded_by_the_connection_cap() {
    const ATTACKERS: usize = 300;
    const SENT: usize = 250 * 1024;
    let server = Server::start();
    let home = tempfile::tempdir().unwrap();
    let (mut child, url) = McpChild::http(
        &server,
        home.path(),
        &["--max-connections", "16", "--read-timeout", "2"],
    );
    let pid = child.0.id();
    let port = port(&url);
    let client = Client::new();
    open_session(&client, &url);
    let start = rss_kib(pid);
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n\
         accept: application/json, text/event-stream\r\nmcp-protocol-version: 2026-07-28\r\n\
         mcp-method: tools/list\r\ncontent-length: {}\r\n\r\n",
        256 * 1024
    );
    let body = vec![b' '; SENT];
    let held: Vec<std::net::TcpStream> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..4)
            .map(|_| {
                scope.spawn(|| {
                    (0..ATTACKERS / 4)
                        .filter_map(|_| raw(port, &head, &body))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    });
    // A head that never ends, and a connection that says nothing.
    let half_head = raw(port, "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n", b"").unwrap();
    let silent = raw(port, "", b"").unwrap();
    let answers: Vec<String> = held.into_iter().map(until_closed).collect();
    assert_eq!(
        until_closed(half_head),
        "",
        "a head that never ended was answered"
    );
    assert_eq!(until_closed(silent), "");
    let late = answers.iter().filter(|a| !a.is_empty()).count();
    assert!(late >= 1, "no slow body was taken and answered");
    for answer in answers.iter().filter(|a| !a.is_empty()) {
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("\"code\":-32600"), "{answer}");
        assert!(answer.contains("did not arrive within 2 s"), "{answer}");
    }
    // At most 16 bodies (256 KiB each) were ever held: 4 MiB, where 300 would be 75 MiB.
    let grown = peak_kib(pid).saturating_sub(start);
    eprintln!(
        "mcp http slow bodies: {ATTACKERS} attackers, {late} taken and answered 408, peak RSS {grown} KiB over {start} KiB"
    );
    assert!(
        grown < 24 * 1024,
        "the peak resident set grew by {grown} KiB under {ATTACKERS} slow bodies"
    );
    open_session(&client, &url);
    child.stop();
}

/// At the connection cap, connections that say nothing make room for a client that does
/// (the longest idle are closed): silence cannot lock clients out.
#[test]
fn silent_connections_at_the_cap_make_room_for_a_client() {
    let server = Server::start();
    let home = tempfile::tempdir().unwrap();
    let (mut child, url) = McpChild::http(
        &server,
        home.path(),
        &["--max-connections", "8", "--read-timeout", "300"],
    );
    let port = port(&url);
    let silent: Vec<std::net::TcpStream> = (0..8).map(|_| raw(port, "", b"").unwrap()).collect();
    let client = Client::new();
    open_session(&client, &url);
    // The longest idle was closed for it, long before its 300 s are up.
    let first = silent.into_iter().next().unwrap();
    assert_eq!(until_closed(first), "");
    child.stop();
}

/// The initialize of a 2025-11-25 client: its session's id, or the status it got.
async fn initialize_async(client: &reqwest::Client, url: &str) -> Result<String, u16> {
    let answer = client
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(initialize())
        .send()
        .await
        .map_err(|_| 0u16)?;
    let status = answer.status().as_u16();
    let session = answer
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_owned());
    let _ = answer.bytes().await;
    match (status, session) {
        (200, Some(id)) => Ok(id),
        (status, _) => Err(status),
    }
}

/// 2,000 initializes at once against a cap of 100 sessions, three times (a fresh process
/// each): exactly 100 sessions open, every other initialize is the 503 of the cap. (Without
/// the check and the creation in one step, a burst opened 166 sessions in one run of three;
/// the guard's own test, in `http.rs`, makes the race certain.)
#[test]
fn a_burst_of_initializes_opens_exactly_the_cap() {
    const BURST: usize = 2_000;
    let server = Server::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    for round in 0..3 {
        let home = tempfile::tempdir().unwrap();
        let (mut child, url) = McpChild::http(
            &server,
            home.path(),
            &[
                "--max-sessions",
                "100",
                "--max-connections",
                "4096",
                "--session-idle",
                "600",
            ],
        );
        let outcomes: Vec<Result<String, u16>> = runtime.block_on(async {
            let client = reqwest::Client::builder()
                .pool_max_idle_per_host(0)
                .build()
                .unwrap();
            let calls = (0..BURST).map(|_| initialize_async(&client, &url));
            futures_util::future::join_all(calls).await
        });
        let mut sessions: Vec<&String> = outcomes.iter().filter_map(|o| o.as_ref().ok()).collect();
        let refused = outcomes.iter().filter(|o| **o == Err(503)).count();
        sessions.sort();
        sessions.dedup();
        let failed: Vec<_> = outcomes.iter().filter(|o| o.is_err()).take(5).collect();
        assert_eq!(
            (sessions.len(), refused),
            (100, BURST - 100),
            "round {round}: {failed:?}"
        );
        child.stop();
    }
}

/// A 2026-07-28 stateless `tools/call`, raw, with `extra` members in its `_meta`.
fn stateless_call(port: u16, tool: &str, arguments: Value, extra: Value) -> String {
    let mut meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}
    });
    meta.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments, "_meta": meta}})
    .to_string();
    format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n\
         accept: application/json, text/event-stream\r\nmcp-protocol-version: 2026-07-28\r\n\
         mcp-method: tools/call\r\nmcp-name: {tool}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Reads `stream` until `needle` has arrived (at most 60 s).
fn read_until(stream: &mut std::net::TcpStream, needle: &str) {
    use std::io::Read as _;
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains(needle) {
        let n = stream.read(&mut buf).unwrap();
        assert!(
            n > 0,
            "closed before {needle}: {}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
}

/// Stateless calls (2026-07-28, no session) hold connections as any request does: with
/// every connection of the cap busy with a wait, a new call is refused (its connection
/// closed, no answer), and once a waiting client goes away a call is served again.
#[test]
fn stateless_calls_count_against_the_connection_cap() {
    let server = Server::start();
    let home = tempfile::tempdir().unwrap();
    let (mut child, url) = McpChild::http(
        &server,
        home.path(),
        &["--max-connections", "4", "--read-timeout", "300"],
    );
    let port = port(&url);
    let review = server.agent_call(
        "POST",
        "/v1/authorizations",
        json!({"amount": 60, "currency": "USD", "recipient": "vendor:acme", "category": "software"}),
    );
    assert_eq!(review["verdict"], "review", "{review}");
    let wait = |n: usize| {
        stateless_call(
            port,
            "wait_for_review",
            json!({"decision": review["id"], "timeout_seconds": 600}),
            json!({"progressToken": n}),
        )
    };
    // Four waits in flight: each has sent its first progress notification.
    let mut waits: Vec<std::net::TcpStream> = (0..4)
        .map(|n| {
            let mut stream = raw(port, &wait(n), b"").unwrap();
            read_until(&mut stream, "notifications/progress");
            stream
        })
        .collect();
    let list = stateless_call(port, "get_mandate", json!({}), json!({}));
    if let Some(refused) = raw(port, &list, b"") {
        assert!(
            !until_closed_or_seen(refused, "HTTP/1.1"),
            "a call past the cap was answered"
        );
    }
    // A waiting client goes away: its connection is given back, and a call is served.
    drop(waits.pop());
    let start = Instant::now();
    loop {
        if let Some(stream) = raw(port, &list, b"")
            && until_closed_or_seen(stream, "\"active\":true")
        {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no call served after a waiting client left"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    drop(waits);
    child.stop();
}

/// Whether `needle` arrives on `stream` before the server closes it (at most 60 s).
fn until_closed_or_seen(mut stream: std::net::TcpStream, needle: &str) -> bool {
    use std::io::Read as _;
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if String::from_utf8_lossy(&got).contains(needle) {
            return true;
        }
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return false,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// A body longer than the limit, sent whole at once, is answered 413 saying the limit; one
/// cut off before its end is not (it did not arrive whole: the slow-bodies test above).
#[test]
fn a_body_over_the_limit_is_answered_413_naming_it() {
    let server = Server::start();
    let home = tempfile::tempdir().unwrap();
    let (_child, url) = McpChild::http(&server, home.path(), &[]);
    let port = port(&url);
    let client = Client::new();
    open_session(&client, &url);
    let length = 300 * 1024;
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n\
         accept: application/json, text/event-stream\r\nmcp-protocol-version: 2026-07-28\r\n\
         mcp-method: tools/list\r\ncontent-length: {length}\r\nconnection: close\r\n\r\n"
    );
    let stream = raw(port, &head, &vec![b' '; length]).expect("the body was taken");
    let answer = until_closed(stream);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(
        answer.contains("the request body is over 262144 bytes"),
        "{answer}"
    );
}
