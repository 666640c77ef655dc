//! The structured log (#31): one request line per request, in JSON, and no secret in any
//! line at the most verbose level.

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use mandate_server::model::Env;
use mandate_server::routes::ROUTES;
use mandate_server::signing::at_rest::{Kek, KeyEncryption};
use mandate_server::storage::keys::StoredKey;
use reqwest::Method;
use serde_json::Value;

use crate::helpers::TestDatabase;
use crate::process::{Answer, Client, Server, binary, free_port};

/// The request lines (target `mandate::request`) of a JSON log; every line must be JSON.
fn request_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|line| {
            serde_json::from_str::<Value>(line)
                .unwrap_or_else(|e| panic!("a log line is not JSON ({e}): {line}"))
        })
        .filter(|line| line["target"] == "mandate::request")
        .collect()
}

/// Every text form a secret's bytes could take in a log line.
fn forms(secret: &[u8]) -> Vec<String> {
    let mut forms = vec![
        secret
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>(),
        secret
            .iter()
            .map(|b| format!("{b:02X}"))
            .collect::<String>(),
        format!("{secret:?}"),
    ];
    for engine in [&STANDARD, &STANDARD_NO_PAD, &URL_SAFE, &URL_SAFE_NO_PAD] {
        forms.push(engine.encode(secret));
    }
    forms
}

/// The API run at `MANDATE_LOG=trace` (with `RUST_LOG=off`, which it overrides) and
/// `--log-format json`: every line is JSON, each request has exactly one request line with
/// its id, method, route template, status, latency and organization, and neither a key,
/// a verdict token, a signing key (sealed or opened), the key-encryption key nor a request
/// body appears anywhere in the log.
#[mandate_test_macros::on_each_engine]
async fn json_request_lines_and_no_secret_at_trace() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDatabase::new(dir.path(), "logs.db").await;
    let log = dir.path().join("server.log");
    let mut kek = [0u8; 32];
    mandate_server::clock::fill_random(&mut kek);
    let kek_text = STANDARD.encode(kek);
    let out = Command::new(binary())
        .args(["onboard", "--org", "loggers", "--db"])
        .arg(db.arg())
        .env("MANDATE_KEY_ENCRYPTION_KEY", &kek_text)
        .output()
        .unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    let key_of = |prefix: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap()
            .trim()
            .to_owned()
    };
    let (org, live) = (key_of("sandbox key:"), key_of("live key:"));
    // "organization loggers (org_…) onboarded, …"
    let org_id = stdout
        .split_once('(')
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(id, _)| id.to_owned())
        .unwrap();
    assert!(org_id.starts_with("org_"), "{stdout}");
    let server = Server::start_with_env(
        db.arg(),
        free_port(),
        &["--log-format", "json"],
        Stdio::from(std::fs::File::create(&log).unwrap()),
        &[
            ("MANDATE_LOG", "trace"),
            ("RUST_LOG", "off"),
            ("MANDATE_KEY_ENCRYPTION_KEY", &kek_text),
        ],
    );
    let client = Client::new(&server.api);
    // (method, route template, status) of every request sent, in order.
    let mut sent: Vec<(&str, &str, u16)> = Vec::new();
    let mut expect = |method, route, answer: &Answer, status| {
        assert_eq!(answer.status, status, "{method} {route}: {}", answer.text);
        sent.push((method, route, status));
    };

    let agent = client
        .post(&org, "/v1/agents", r#"{"name": "talker"}"#)
        .await;
    expect("POST", "/v1/agents", &agent, 201);
    let agent_key = agent.body["agent_key"].as_str().unwrap().to_owned();
    let agent_id = agent.body["id"].as_str().unwrap().to_owned();
    let got = client.get(&org, &format!("/v1/agents/{agent_id}")).await;
    expect("GET", "/v1/agents/{id}", &got, 200);
    let mandate = crate::helpers::standard_mandate("talker").replace("2026-12-31", "2099-12-31");
    let created = client.post(&org, "/v1/mandates", &mandate).await;
    expect("POST", "/v1/mandates", &created, 201);

    let body = r#"{"amount": 7, "currency": "USD", "recipient": "vendor:secretive-vendor", "category": "software"}"#;
    let allowed = client.post(&agent_key, "/v1/authorizations", body).await;
    expect("POST", "/v1/authorizations", &allowed, 201);
    let big = r#"{"amount": 75, "currency": "USD", "recipient": "vendor:secretive-reviewed", "category": "software"}"#;
    let reviewed = client.post(&agent_key, "/v1/authorizations", big).await;
    expect("POST", "/v1/authorizations", &reviewed, 201);
    assert_eq!(reviewed.body["verdict"], "review", "{}", reviewed.text);
    let review = reviewed.body["review"]["id"].as_str().unwrap().to_owned();
    let approved = client
        .send(
            Method::POST,
            &org,
            &format!("/v1/reviews/{review}/approve"),
            None,
            None,
        )
        .await
        .unwrap();
    expect("POST", "/v1/reviews/{id}/approve", &approved, 201);

    // An Idempotency-Key, then its replay.
    let idem_body = r#"{"amount": 8, "currency": "USD", "recipient": "vendor:secretive-idem", "category": "software"}"#;
    let mut idem = Vec::new();
    for _ in 0..2 {
        let answer = client
            .send(
                Method::POST,
                &agent_key,
                "/v1/authorizations",
                Some(idem_body),
                Some("idem-secretive"),
            )
            .await
            .unwrap();
        expect("POST", "/v1/authorizations", &answer, 201);
        idem.push(answer);
    }
    assert!(idem[1].replayed, "{}", idem[1].text);

    let hook = r#"{"url": "http://127.0.0.1:9/secretive-path", "events": ["ping"]}"#;
    let hook = client.post(&org, "/v1/webhooks", hook).await;
    expect("POST", "/v1/webhooks", &hook, 201);
    let hook_secret = hook.body["secret"].as_str().map(str::to_owned);
    // A ping to a closed port: the delivery's client logs at debug and trace, and its
    // failure is logged.
    let hook_id = hook.body["webhook"].as_str().unwrap().to_owned();
    let ping = client
        .post(&org, &format!("/v1/webhooks/{hook_id}/ping"), "")
        .await;
    expect("POST", "/v1/webhooks/{id}/ping", &ping, 202);

    let bad_key = client
        .post(&format!("{org}x"), "/v1/agents", r#"{"name": "nope"}"#)
        .await;
    expect("POST", "unmatched", &bad_key, 401);
    let bad_body = client
        .post(&org, "/v1/agents", r#"{"name": "Secretive Name"}"#)
        .await;
    expect("POST", "/v1/agents", &bad_body, 400);
    let nowhere = client.get(&org, "/v1/secretive-nowhere").await;
    expect("GET", "unmatched", &nowhere, 404);
    let listed = client.get(&live, "/v1/agents").await;
    expect("GET", "/v1/agents", &listed, 200);

    // The lines are written by a thread of their own: wait for them, then a moment more
    // for any extra line.
    for _ in 0..100 {
        // A line may be half written here: count, do not parse.
        let text = std::fs::read_to_string(&log).unwrap();
        let written = text.matches(r#""target":"mandate::request""#).count();
        if written >= sent.len() && text.contains("delivery attempt failed") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(server);
    let text = std::fs::read_to_string(&log).unwrap();
    // MANDATE_LOG=trace is in force, not RUST_LOG=off.
    assert!(
        text.contains(r#""level":"TRACE""#) || text.contains(r#""level":"DEBUG""#),
        "nothing below info in the log: {text}"
    );

    let lines = request_lines(&text);
    assert_eq!(
        lines.len(),
        sent.len(),
        "one request line per request: {text}"
    );
    let templates: BTreeSet<&str> = ROUTES.iter().map(|(_, path)| *path).collect();
    let mut ids = BTreeSet::new();
    for (line, (method, route, status)) in lines.iter().zip(&sent) {
        let fields = &line["fields"];
        assert_eq!(line["level"], "INFO", "{line}");
        assert_eq!(fields["method"], *method, "{line}");
        assert_eq!(fields["route"], *route, "{line}");
        assert!(
            *route == "unmatched" || templates.contains(route),
            "not a route template: {line}"
        );
        assert_eq!(fields["status"], *status, "{line}");
        assert!(fields["latency_us"].is_u64(), "{line}");
        let id = fields["request_id"].as_str().unwrap();
        assert!(id.starts_with("req_"), "{line}");
        assert!(
            ids.insert(id.to_owned()),
            "a request id logged twice: {line}"
        );
        if *status == 401 {
            assert!(fields.get("org").is_none(), "{line}");
        } else {
            assert_eq!(fields["org"], org_id.as_str(), "{line}");
        }
    }
    // The errors' request ids are the ones their lines name.
    for answer in [&bad_key, &bad_body, &nowhere] {
        let id = answer.body["error"]["request_id"].as_str().unwrap();
        assert!(ids.contains(id), "no line for {id}");
    }

    let mut secrets = vec![
        org.clone(),
        live.clone(),
        agent_key.clone(),
        "secretive".to_owned(),
        "Secretive".to_owned(),
        "Bearer".to_owned(),
    ];
    for answer in [&allowed, &reviewed, &approved, &idem[0]] {
        if let Some(token) = answer.body["verdict_token"].as_str() {
            secrets.push(token.to_owned());
        }
    }
    assert!(secrets.len() >= 10, "expected four verdict tokens");
    secrets.extend(hook_secret);
    let keys = KeyEncryption::new(Kek::from_bytes(&kek), None);
    let kids = db.query("SELECT kid, env FROM signing_keys ORDER BY kid", &[]);
    let secrets_stored = db.query_bytes("SELECT secret FROM signing_keys ORDER BY kid", &[]);
    let signing: Vec<StoredKey> = kids
        .into_iter()
        .zip(secrets_stored)
        .map(|(row, secret)| StoredKey {
            kid: row[0].clone().unwrap(),
            env: Env::parse(row[1].as_deref().unwrap()).unwrap(),
            secret,
            retired_ms: None,
        })
        .collect();
    assert!(signing.len() >= 2, "a signing key per environment");
    for key in &signing {
        // The sealed bytes, and the scalar they open to.
        secrets.extend(forms(&key.secret));
        secrets.extend(forms(keys.open(key).unwrap().expose()));
    }
    secrets.extend(forms(&kek));
    secrets.push(kek_text.clone());
    for secret in &secrets {
        assert!(!text.contains(secret.as_str()), "the log holds {secret:?}");
    }
    let others: BTreeSet<String> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|l| format!("{} {}", l["level"], l["target"]))
        .collect();
    eprintln!(
        "log: {} lines, {} bytes, {} request lines, no secret; {others:?}",
        text.lines().count(),
        text.len(),
        lines.len()
    );
}

/// In the default text format, at `RUST_LOG=info`: the gate's 503 (no route, no caller)
/// and a rate limit's 429 (with the caller's organization) each get a request line.
#[mandate_test_macros::on_each_engine]
async fn text_request_lines_for_shed_and_rate_limited_requests() {
    use tokio::io::AsyncWriteExt;
    let dir = tempfile::tempdir().unwrap();
    let db = TestDatabase::new(dir.path(), "text.db").await;
    let log = dir.path().join("server.log");
    let out = Command::new(binary())
        .args(["onboard", "--org", "texters", "--db"])
        .arg(db.arg())
        .envs(db.env())
        .output()
        .unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    let key_of = |prefix: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap()
            .trim()
            .to_owned()
    };
    // The sandbox key is held to one request a second; the live key holds the gate.
    let (org, live) = (key_of("sandbox key:"), key_of("live key:"));
    let out = Command::new(binary())
        .args(["set-rate", &org, "--per-second", "1", "--db"])
        .arg(db.arg())
        .envs(db.env())
        .output()
        .unwrap();
    assert!(out.status.success());
    let server = Server::start_with_env(
        db.arg(),
        free_port(),
        &["--max-in-flight", "1"],
        Stdio::from(std::fs::File::create(&log).unwrap()),
        &[("RUST_LOG", "info")],
    );
    let client = Client::new(&server.api);
    // A request whose body never comes holds the one place in flight; the probe (by the
    // live key, whose rate is not limited) is shed. Retried if the probe came first.
    let addr = server.api.trim_start_matches("http://").to_owned();
    let head = format!(
        "POST /v1/agents HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {live}\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{{"
    );
    let mut shed = None;
    for _ in 0..50 {
        let mut held = tokio::net::TcpStream::connect(&addr).await.unwrap();
        held.write_all(head.as_bytes()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let answer = client.get(&live, "/v1/decisions").await;
        if answer.status == 503 {
            shed = Some(answer);
            break;
        }
    }
    let shed = shed.unwrap_or_else(|| {
        panic!(
            "no 503 while the one place is held: {}",
            std::fs::read_to_string(&log).unwrap()
        )
    });
    let shed_id = shed.body["error"]["request_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut limited = None;
    for _ in 0..100 {
        let answer = client.get(&org, "/v1/decisions").await;
        if answer.status == 429 {
            limited = Some(answer);
            break;
        }
    }
    let limited = limited.expect("no 429 at one request a second");
    let limited_id = limited.body["error"]["request_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let line_of = |text: &str, id: &str| {
        text.lines()
            .find(|l| l.contains("mandate::request") && l.contains(id))
            .map(str::to_owned)
    };
    let mut text = String::new();
    for _ in 0..100 {
        text = std::fs::read_to_string(&log).unwrap();
        if line_of(&text, &limited_id).is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(server);
    let shed_line =
        line_of(&text, &shed_id).unwrap_or_else(|| panic!("no line for the 503: {text}"));
    assert!(shed_line.contains("INFO"), "{shed_line}");
    assert!(shed_line.contains("status=503"), "{shed_line}");
    assert!(shed_line.contains("route=\"unmatched\""), "{shed_line}");
    assert!(!shed_line.contains("org="), "{shed_line}");
    let limited_line = line_of(&text, &limited_id).unwrap();
    assert!(limited_line.contains("status=429"), "{limited_line}");
    assert!(limited_line.contains("org=\"org_"), "{limited_line}");
    assert!(
        !text.contains(&org) && !text.contains(&live),
        "the log holds a key"
    );
    assert!(
        !text.contains('\x1b'),
        "colour codes in a log that is not a terminal"
    );
    eprintln!("{shed_line}\n{limited_line}");
}
