//! SQLite's crash safety through the real binary: every 201 survives `kill -9`, and the file
//! passes `PRAGMA integrity_check` (tests/multiprocess covers PostgreSQL's).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use futures_util::future::join_all;
use mandate_core::{VerifyOptions, verify_verdict};
use serde_json::{Value, json};

use crate::helpers::standard_mandate;

/// A server process started from the real binary.
struct Proc {
    child: Child,
    api: String,
}

fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_mandate-server")
}

fn start_binary(db: &Path, public_port: u16) -> Proc {
    let mut child = Command::new(binary())
        .args(["serve", "--api-addr", "127.0.0.1:0", "--public-addr"])
        .arg(format!("127.0.0.1:{public_port}"))
        .arg("--db")
        .arg(db)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let mut api = String::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(url) = line.trim().strip_prefix("api:") {
            api = url.trim().to_owned();
            break;
        }
    }
    assert!(
        api.starts_with("http://127.0.0.1:"),
        "server did not print its address"
    );
    // Keep draining stdout so the child never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Proc { child, api }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test]
async fn every_201_survives_kill_minus_nine() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("crash.db");
    let out = Command::new(binary())
        .args(["onboard", "--org", "crashers", "--db"])
        .arg(&db)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let org_key = text
        .lines()
        .find_map(|l| l.strip_prefix("sandbox key: "))
        .unwrap()
        .trim()
        .to_owned();
    let public_port = free_port();
    let mut server = start_binary(&db, public_port);
    let client = reqwest::Client::new();
    let post = |api: String, key: String, path: &'static str, body: String| {
        let client = client.clone();
        async move {
            client
                .post(format!("{api}{path}"))
                .header("authorization", format!("Bearer {key}"))
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
        }
    };

    let mut agent_keys = Vec::new();
    for i in 0..6 {
        let name = format!("crash{i}");
        let r = post(
            server.api.clone(),
            org_key.clone(),
            "/v1/agents",
            json!({ "name": name }).to_string(),
        )
        .await
        .unwrap();
        let body: Value = r.json().await.unwrap();
        agent_keys.push(body["agent_key"].as_str().unwrap().to_owned());
        let m = post(
            server.api.clone(),
            org_key.clone(),
            "/v1/mandates",
            standard_mandate(&name)
                .replace("2026-12-31", "2099-12-31")
                .replace("450", "100000"),
        )
        .await
        .unwrap();
        assert_eq!(m.status().as_u16(), 201);
    }

    // Fire requests from every agent at once and kill the server while they are in flight:
    // as soon as a few have been answered.
    let api = server.api.clone();
    let answered = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let requests = agent_keys.iter().flat_map(|key| {
        (0..8).map(|i| {
            let answered = answered.clone();
            let sent = post(
                api.clone(),
                key.clone(),
                "/v1/authorizations",
                format!(r#"{{"amount": {}.25, "currency": "USD", "recipient": "vendor:acme", "category": "software"}}"#, 10 + i),
            );
            async move {
                let result = sent.await;
                answered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                result
            }
        })
    });
    let killer = async {
        while answered.load(std::sync::atomic::Ordering::SeqCst) < 5 {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        server.child.kill().unwrap();
    };
    let (results, ()) = tokio::join!(join_all(requests), killer);
    server.child.wait().unwrap();
    let mut told = Vec::new();
    let mut cut = 0;
    for result in results {
        if result.is_err() {
            cut += 1;
        }
        if let Ok(response) = result
            && response.status().as_u16() == 201
            && let Ok(body) = response.json::<Value>().await
        {
            told.push(body);
        }
    }

    eprintln!(
        "201s received: {}, requests cut by the kill: {cut}",
        told.len()
    );
    assert!(!told.is_empty(), "no request completed before the kill");
    let server = start_binary(&db, public_port);
    let conn = rusqlite::Connection::open(&db).unwrap();
    let integrity: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(integrity, "ok");
    let jwks = {
        let r = reqwest::get(format!(
            "http://127.0.0.1:{public_port}/.well-known/jwks.json"
        ))
        .await
        .unwrap();
        mandate_core::JwkSet::from_json(&r.bytes().await.unwrap()).unwrap()
    };
    for body in &told {
        let id = body["id"].as_str().unwrap();
        let stored: Value = client
            .get(format!("{}/v1/decisions/{id}", server.api))
            .header("authorization", format!("Bearer {org_key}"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        // Read from the log, it is the answer, its token byte for byte.
        let mut expected = body.clone();
        expected.as_object_mut().unwrap().remove("review");
        let mut got = stored.clone();
        got.as_object_mut().unwrap().remove("review");
        // Its place in the decision log is read beside it, not answered with it.
        got.as_object_mut().unwrap().remove("log");
        assert_eq!(got, expected, "decision {id} changed or was lost");
        // The token the client holds verifies against the keys after the restart.
        let claims = verify_verdict(
            body["verdict_token"].as_str().unwrap(),
            &jwks,
            &VerifyOptions {
                issuer: format!("http://127.0.0.1:{public_port}"),
                now: time::OffsetDateTime::from_unix_timestamp(body["iat"].as_i64().unwrap())
                    .unwrap(),
                leeway_secs: 0,
            },
        )
        .unwrap();
        assert_eq!(claims.jti.as_str(), id);
    }
    let mut server = server;
    server.child.kill().unwrap();
    server.child.wait().unwrap();
}
