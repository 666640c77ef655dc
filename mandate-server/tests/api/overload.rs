//! Overload and slow clients: far beyond capacity the server sheds load with 503 (and 429
//! per key) in the envelope and keeps answering, its memory stays bounded, and it serves
//! normally once the flood is over; clients that send headers or a body too slowly
//! (slowloris) are cut off after the timeout; connections that send nothing are closed
//! after the header timeout, counted from accept; at the connection cap the longest idle
//! connections make room for newcomers, and a newcomer is closed only when every
//! connection has a request in flight.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use mandate_server::clock::ManualClock;
use mandate_server::http::limits::Limits;
use mandate_server::operator;
use mandate_server::serve::{self, Config, Running};
use serde_json::Value;

use crate::helpers::{START, TestDatabase};
use crate::process::{Client, Server, assert_envelope, free_port, onboard};

const FLOOD: usize = 2000;

/// The flood's size: 2000 connections, fewer if this process may not open that many files.
fn flood_size() -> usize {
    let soft = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|l| {
            l.lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| {
                    l.split_whitespace()
                        .nth(3)
                        .and_then(|n| n.parse::<usize>().ok())
                })
        })
        .unwrap_or(FLOOD * 4);
    FLOOD.min(soft / 4)
}
/// Peak resident memory allowed to the server through the flood.
const MAX_RSS_MIB: u64 = 128;

#[mandate_test_macros::on_each_engine(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_is_shed_with_503_in_the_envelope_memory_stays_bounded_and_service_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDatabase::new(dir.path(), "flood.db").await;
    let org = onboard(db.arg(), "flooders");
    // The per-key rate is not what is tested here: lift it so that the gate does the work.
    let out = std::process::Command::new(crate::process::binary())
        .args(["set-rate", "--per-second", "1000000", "--db"])
        .arg(db.arg())
        .envs(db.env())
        .arg(&org)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let server = Server::start(db.arg(), free_port(), &["--max-in-flight", "8"]);
    let client = Client::new(&server.api);
    let mut agents = Vec::new();
    for i in 0..4 {
        let name = format!("flood{i}");
        let r = client
            .post(&org, "/v1/agents", &format!(r#"{{"name": "{name}"}}"#))
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
        agents.push(r.body["agent_key"].as_str().unwrap().to_owned());
        let m = crate::helpers::standard_mandate(&name).replace("2026-12-31", "2099-12-31");
        assert_eq!(client.post(&org, "/v1/mandates", &m).await.status, 201);
    }
    let (rss_before, _) = server.memory_kib();

    // Many connections at once, each with one request.
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let started = Instant::now();
    let flood = flood_size();
    let requests = (0..flood).map(|i| {
        let http = http.clone();
        let (api, org) = (server.api.clone(), org.clone());
        let agent = agents[i % agents.len()].clone();
        async move {
            let request = match i % 3 {
                0 => http
                    .post(format!("{api}/v1/authorizations"))
                    .header("authorization", format!("Bearer {agent}"))
                    .header("content-type", "application/json")
                    .body(r#"{"amount": 1, "currency": "USD", "recipient": "vendor:acme", "category": "software"}"#),
                1 => http
                    .get(format!("{api}/v1/decisions?limit=100"))
                    .header("authorization", format!("Bearer {org}")),
                _ => http
                    .get(format!("{api}/v1/agents"))
                    .header("authorization", format!("Bearer {agent}")),
            };
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let retry_after = response
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap().to_owned());
            let text = response.text().await.unwrap();
            (status, retry_after, text)
        }
    });
    let answers = join_all(requests).await;
    let flood_secs = started.elapsed().as_secs_f64();
    let (_, peak_kib) = server.memory_kib();

    let mut tally = std::collections::BTreeMap::new();
    for (status, retry_after, text) in &answers {
        *tally.entry(*status).or_insert(0) += 1;
        assert!(
            [200, 201, 429, 503].contains(status),
            "unexpected {status}: {text}"
        );
        if *status >= 400 {
            let body: Value = serde_json::from_str(text).unwrap();
            let answer = crate::process::Answer {
                status: *status,
                replayed: false,
                body,
                text: text.clone(),
            };
            let code = if *status == 503 {
                "server_error"
            } else {
                "rate_limited"
            };
            let message = assert_envelope(&answer, *status, code);
            assert!(retry_after.is_some(), "{status} without Retry-After");
            if *status == 503 {
                assert!(message.contains("overloaded"), "{message}");
                assert_eq!(retry_after.as_deref(), Some("1"));
            }
        }
    }
    eprintln!(
        "flood: {flood} requests in {flood_secs:.2} s with --max-in-flight 8: {tally:?}; RSS {} MiB before, peak {} MiB",
        rss_before / 1024,
        peak_kib / 1024
    );
    assert!(
        tally.get(&503).copied().unwrap_or(0) > 0,
        "nothing was shed: {tally:?}"
    );
    assert!(
        peak_kib / 1024 < MAX_RSS_MIB,
        "peak RSS {} MiB over {MAX_RSS_MIB} MiB",
        peak_kib / 1024
    );

    // The flood is over: normal traffic is served normally.
    for _ in 0..20 {
        let r = client.get(&org, "/v1/agents").await;
        assert_eq!(r.status, 200, "{}", r.text);
    }
    let r = client
        .post(&agents[0], "/v1/authorizations", r#"{"amount": 1, "currency": "USD", "recipient": "vendor:acme", "category": "software"}"#)
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    // Every 201 of the flood is stored: shedding refused requests, it dropped none.
    let stored = client.walk(&org, "/v1/decisions").await;
    assert_eq!(stored.len(), tally.get(&201).copied().unwrap_or(0) + 1);
}

/// A server in this process with short timeouts (`timeout` for headers and bodies) and a
/// cap of 8 connections.
async fn strict_server(timeout: Duration) -> (Running, String, (tempfile::TempDir, TestDatabase)) {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDatabase::new(dir.path(), "slow.db").await;
    let clock = Arc::new(ManualClock::new(START));
    let running = serve::start(
        Config {
            limits: Limits {
                max_in_flight: 64,
                max_connections: 8,
                header_read_timeout: timeout,
                body_read_timeout: timeout,
                ..Limits::default()
            },
            ..crate::helpers::config(&db)
        },
        clock,
    )
    .await
    .unwrap();
    let key = operator::onboard(
        &*running.state.store,
        &running.state.api_keys,
        "slowpokes",
        START,
    )
    .unwrap()
    .sandbox_key;
    (running, key, (dir, db))
}

/// Reads until the server closes the connection (or `limit` passes); returns what it sent
/// and how long it took.
fn read_until_closed(stream: &mut TcpStream, limit: Duration) -> (String, Duration) {
    let started = Instant::now();
    stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    while started.elapsed() < limit {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => received.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
    (
        String::from_utf8_lossy(&received).into_owned(),
        started.elapsed(),
    )
}

#[mandate_test_macros::on_each_engine(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_sending_its_headers_byte_by_byte_is_disconnected() {
    let (running, key, _dir) = strict_server(Duration::from_millis(800)).await;
    let addr = running.api_addr;
    let request =
        format!("GET /v1/agents HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\n\r\n");
    let slow = tokio::task::spawn_blocking(move || {
        let mut stream = TcpStream::connect(addr).unwrap();
        let started = Instant::now();
        let mut cut = false;
        for byte in request.as_bytes() {
            if stream.write_all(&[*byte]).is_err() {
                cut = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
            if started.elapsed() > Duration::from_secs(5) {
                break;
            }
        }
        let (_, waited) = read_until_closed(&mut stream, Duration::from_secs(5));
        (
            cut || started.elapsed() < Duration::from_secs(5),
            started.elapsed(),
            waited,
        )
    });
    // Meanwhile others are served.
    let client = reqwest::Client::new();
    let r = client
        .get(format!("http://{addr}/v1/agents"))
        .header("authorization", format!("Bearer {key}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let (closed_early, elapsed, _) = slow.await.unwrap();
    assert!(
        closed_early,
        "a slowloris client kept its connection {elapsed:?}"
    );
    assert!(
        elapsed < Duration::from_secs(4),
        "disconnected only after {elapsed:?}"
    );
}

#[mandate_test_macros::on_each_engine(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_does_not_arrive_in_time_is_400_in_the_envelope() {
    let (running, key, _dir) = strict_server(Duration::from_millis(800)).await;
    let addr = running.api_addr;
    // Without and with an Idempotency-Key (then the idempotency layer reads the body).
    for extra in ["", "idempotency-key: slow-1\r\n"] {
        let head = format!(
            "POST /v1/agents HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\n{extra}content-type: application/json\r\ncontent-length: 100\r\n\r\n{{\"name\""
        );
        let (text, waited) = tokio::task::spawn_blocking(move || {
            let mut stream = TcpStream::connect(addr).unwrap();
            stream.write_all(head.as_bytes()).unwrap();
            read_until_closed(&mut stream, Duration::from_secs(5))
        })
        .await
        .unwrap();
        assert!(text.starts_with("HTTP/1.1 400"), "{text}");
        assert!(text.contains("\"code\":\"invalid_request\""), "{text}");
        assert!(text.contains("did not arrive in time"), "{text}");
        assert!(
            text.to_ascii_lowercase().contains("x-request-id: req_"),
            "{text}"
        );
        assert!(waited < Duration::from_secs(4), "{waited:?}");
    }
    // Nothing was created.
    let r = reqwest::Client::new()
        .get(format!("http://{addr}/v1/agents"))
        .header("authorization", format!("Bearer {key}"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.json::<Value>().await.unwrap()["data"],
        serde_json::json!([])
    );
}

/// `n` connections, each with a request in flight: a POST whose body has not all arrived.
fn busy_connections(addr: std::net::SocketAddr, key: &str, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|_| {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(
                format!(
                    "POST /v1/agents HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{{\"name\""
                )
                .as_bytes(),
            )
            .unwrap();
            s
        })
        .collect()
}

#[mandate_test_macros::on_each_engine(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_cap_are_closed_and_the_cap_frees_up() {
    let (running, key, _dir) = strict_server(Duration::from_secs(10)).await;
    let addr = running.api_addr;
    let outcome = tokio::task::spawn_blocking(move || {
        // Eight connections, each kept open by an unfinished request: with a request in
        // flight, none of them is idle, so none can be closed to make room.
        let held = busy_connections(addr, &key, 8);
        std::thread::sleep(Duration::from_millis(100));
        // The ninth is closed at once, without an answer.
        let mut ninth = TcpStream::connect(addr).unwrap();
        let _ = ninth.write_all(b"GET /v1/agents HTTP/1.1\r\nhost: x\r\n\r\n");
        let (text, waited) = read_until_closed(&mut ninth, Duration::from_secs(3));
        drop(held);
        (text, waited, key)
    })
    .await
    .unwrap();
    let (text, waited, key) = outcome;
    assert!(text.is_empty(), "the ninth connection was served: {text}");
    assert!(
        waited < Duration::from_millis(700),
        "closed only after {waited:?}"
    );
    // Once they are gone, connections are accepted again.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let r = reqwest::Client::new()
        .get(format!("http://{addr}/v1/agents"))
        .header("authorization", format!("Bearer {key}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

#[mandate_test_macros::on_each_engine(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_cannot_hold_the_cap_and_are_closed_after_the_header_timeout() {
    let timeout = Duration::from_millis(1500);
    let (running, key, _dir) = strict_server(timeout).await;
    let addr = running.api_addr;
    // Twelve sockets (the cap is eight) that connect and send nothing.
    let silent: Vec<(TcpStream, Instant)> = (0..12)
        .map(|_| (TcpStream::connect(addr).unwrap(), Instant::now()))
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // A real client is still served: its connection took the place of a silent one.
    let client = reqwest::Client::new();
    for _ in 0..3 {
        let r = client
            .get(format!("http://{addr}/v1/agents"))
            .header("authorization", format!("Bearer {key}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    // Every silent socket is closed by the server, none later than the header timeout
    // (with some slack for a loaded machine), without an answer.
    let closed = tokio::task::spawn_blocking(move || {
        silent
            .into_iter()
            .map(|(mut s, opened)| {
                let (text, _) = read_until_closed(&mut s, Duration::from_secs(6));
                (text, opened.elapsed())
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    for (text, open_for) in closed {
        assert!(text.is_empty(), "a silent socket got an answer: {text}");
        assert!(
            open_for < timeout + Duration::from_millis(1500),
            "a silent socket stayed open {open_for:?}"
        );
    }
    // A keep-alive connection that waits longer than that for its next request is closed.
    let mut kept = TcpStream::connect(addr).unwrap();
    kept.write_all(
        format!("GET /v1/agents HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\n\r\n")
            .as_bytes(),
    )
    .unwrap();
    let (text, open_for) = read_until_closed(&mut kept, Duration::from_secs(6));
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        open_for > timeout - Duration::from_millis(300)
            && open_for < timeout + Duration::from_millis(1500),
        "{open_for:?}"
    );
    // The public host is guarded the same way.
    let mut public = TcpStream::connect(running.public_addr).unwrap();
    let (text, open_for) = read_until_closed(&mut public, Duration::from_secs(6));
    assert!(text.is_empty(), "{text}");
    assert!(
        open_for < timeout + Duration::from_millis(1500),
        "{open_for:?}"
    );
}

#[mandate_test_macros::on_each_engine(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_cap_the_longest_idle_connection_makes_room_and_busy_ones_are_kept() {
    let (running, key, _dir) = strict_server(Duration::from_secs(10)).await;
    let addr = running.api_addr;
    let outcome = tokio::task::spawn_blocking(move || {
        // One keep-alive connection that was answered and is now idle: the oldest idle.
        let mut idle = TcpStream::connect(addr).unwrap();
        idle.write_all(
            format!("GET /v1/agents HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\n\r\n")
                .as_bytes(),
        )
        .unwrap();
        idle.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        // Its whole answer (a small JSON list ending in `}`) is read.
        let mut first = Vec::new();
        let mut byte = [0u8; 1];
        while !first.ends_with(b"}") {
            idle.read_exact(&mut byte).unwrap();
            first.push(byte[0]);
        }
        assert!(first.starts_with(b"HTTP/1.1 200"));
        // Seven connections with a request in flight fill the cap of eight.
        std::thread::sleep(Duration::from_millis(50));
        let mut busy = busy_connections(addr, &key, 7);
        std::thread::sleep(Duration::from_millis(200));
        // A newcomer is served: the idle connection was closed to make room.
        let mut newcomer = TcpStream::connect(addr).unwrap();
        newcomer
            .write_all(
                format!("GET /v1/agents HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\nconnection: close\r\n\r\n")
                    .as_bytes(),
            )
            .unwrap();
        let (served, _) = read_until_closed(&mut newcomer, Duration::from_secs(5));
        let (rest, _) = read_until_closed(&mut idle, Duration::from_secs(5));
        // The busy ones were kept: each finishes its body and gets its answer.
        let answers: Vec<String> = busy
            .iter_mut()
            .enumerate()
            .map(|(i, s)| {
                let name = format!(": \"busy-{i}\"}}");
                s.write_all(format!("{name:<93}").as_bytes()).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let mut head = [0u8; 12];
                s.read_exact(&mut head).unwrap();
                String::from_utf8_lossy(&head).into_owned()
            })
            .collect();
        (served, rest, answers)
    })
    .await
    .unwrap();
    let (served, rest, answers) = outcome;
    assert!(served.starts_with("HTTP/1.1 200"), "{served}");
    assert!(
        rest.is_empty(),
        "the idle connection was still served: {rest}"
    );
    assert!(answers.iter().all(|a| a == "HTTP/1.1 201"), "{answers:?}");
}
