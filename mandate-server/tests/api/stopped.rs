//! A server process stopped (SIGSTOP) for longer than its header timeout and resumed
//! (SIGCONT) answers the requests its clients sent meanwhile (the kernel holds them in the
//! sockets): each gets an answer, never a reset. Timeouts that ran out during the stop
//! must not close a connection whose request is already waiting in it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::helpers::TestDatabase;
use crate::process::{Client, Server, free_port, onboard};

/// Longer than the default header timeout (10 s), which ran out during the stop.
const STOP: Duration = Duration::from_secs(12);

fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {signal} {pid}");
}

/// Reads one response with a `content-length` body from a keep-alive connection.
fn read_one_response(stream: &mut TcpStream) -> String {
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "closed before the response ended");
        received.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&received).into_owned();
        let Some(end) = text.find("\r\n\r\n") else {
            continue;
        };
        let length: usize = text[..end]
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|v| v.trim().parse().unwrap())
            })
            .unwrap();
        if received.len() >= end + 4 + length {
            return text;
        }
    }
}

/// Reads until the server closes the connection: what it sent, or how the read failed
/// (a reset).
fn read_to_end(stream: &mut TcpStream) -> Result<String, std::io::Error> {
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut received = Vec::new();
    stream.read_to_end(&mut received)?;
    Ok(String::from_utf8_lossy(&received).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_sent_to_a_stopped_process_are_answered_after_it_resumes_not_reset() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDatabase::new(dir.path(), "stopped.db").await;
    let org = onboard(db.arg(), "sleepers");
    let server = Server::start(db.arg(), free_port(), &[]);
    let client = Client::new(&server.api);
    let agent = client
        .post(&org, "/v1/agents", r#"{"name": "sleeper"}"#)
        .await
        .body["agent_key"]
        .as_str()
        .unwrap()
        .to_owned();
    let mandate = r#"{"agent": "agt_sleeper", "limits": {"per_transaction": 100, "currency": "USD"},
        "categories": ["software"], "expires": "2099-12-31"}"#;
    assert_eq!(client.post(&org, "/v1/mandates", mandate).await.status, 201);
    let addr = server.api.trim_start_matches("http://").to_owned();

    // Connections accepted before the stop that have sent nothing yet, and keep-alive
    // connections that were answered once and are idle.
    let mut held: Vec<(&str, TcpStream)> = Vec::new();
    for _ in 0..4 {
        held.push(("accepted, silent", TcpStream::connect(&addr).unwrap()));
    }
    for _ in 0..4 {
        let mut stream = TcpStream::connect(&addr).unwrap();
        let read = format!(
            "GET /v1/agents/agt_sleeper HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {agent}\r\n\r\n"
        );
        stream.write_all(read.as_bytes()).unwrap();
        assert!(read_one_response(&mut stream).starts_with("HTTP/1.1 200"));
        held.push(("keep-alive, idle", stream));
    }
    // The server has accepted the silent ones (their header timer runs) before it stops.
    std::thread::sleep(Duration::from_millis(300));

    signal(server.pid(), "-STOP");
    let stopped = Instant::now();
    // Connections opened during the stop (the kernel completes them), then a request on
    // every connection, which waits in its socket.
    for _ in 0..3 {
        held.push(("opened during the stop", TcpStream::connect(&addr).unwrap()));
    }
    for (n, (_, stream)) in held.iter_mut().enumerate() {
        let body = r#"{"amount": 1, "currency": "USD", "recipient": "vendor:acme", "category": "software"}"#;
        let request = format!(
            "POST /v1/authorizations HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {agent}\r\n\
             idempotency-key: held-{n}\r\ncontent-type: application/json\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).unwrap();
    }
    std::thread::sleep(STOP.saturating_sub(stopped.elapsed()));
    signal(server.pid(), "-CONT");

    let mut failures = Vec::new();
    for (n, (kind, stream)) in held.iter_mut().enumerate() {
        match read_to_end(stream) {
            Ok(text) if text.starts_with("HTTP/1.1 201") || text.starts_with("HTTP/1.1 503") => {}
            Ok(text) => failures.push(format!("{n} ({kind}): answered {text:?}")),
            Err(e) => failures.push(format!("{n} ({kind}): {e}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} held requests were not answered:\n{}",
        failures.len(),
        held.len(),
        failures.join("\n")
    );
    // Each answered decision is stored.
    let stored = client.walk(&org, "/v1/decisions").await;
    assert_eq!(stored.len(), held.len());
    server.kill();
}
