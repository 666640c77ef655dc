//! `/metrics` on the admin listener of the real binary: counters scraped before and after
//! known traffic move by exactly the requests sent, under bounded labels.

use std::collections::{BTreeMap, HashMap};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::{TestDatabase, standard_mandate};
use crate::process::{Server, binary, free_port, onboard};

type Labels = BTreeMap<String, String>;

/// One scrape: every sample by name and labels. A small reader of the text format: one
/// sample a line, `name{k="v",...} value`; comments skipped.
fn parse(text: &str) -> HashMap<(String, Labels), f64> {
    let mut samples = HashMap::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("a sample line has a value");
        let value: f64 = value.parse().expect("a sample's value is a number");
        let (name, labels) = match series.split_once('{') {
            None => (series.to_owned(), Labels::new()),
            Some((name, rest)) => {
                let body = rest.strip_suffix('}').expect("labels end with }");
                let labels = body
                    .split("\",")
                    .filter(|pair| !pair.is_empty())
                    .map(|pair| {
                        let (k, v) = pair.split_once("=\"").expect("label k=\"v\"");
                        (k.to_owned(), v.trim_end_matches('"').to_owned())
                    })
                    .collect();
                (name.to_owned(), labels)
            }
        };
        samples.insert((name, labels), value);
    }
    samples
}

struct Scrape(HashMap<(String, Labels), f64>);

impl Scrape {
    /// The sample's value, 0 when the series does not exist yet.
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let labels = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        self.0
            .get(&(name.to_owned(), labels))
            .copied()
            .unwrap_or(0.0)
    }
}

async fn scrape(client: &reqwest::Client, url: &str) -> (Scrape, String) {
    let response = client.get(url).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let content_type = response.headers()["content-type"].to_str().unwrap();
    assert!(content_type.starts_with("text/plain; version=0.0.4"));
    let text = response.text().await.unwrap();
    (Scrape(parse(&text)), text)
}

#[mandate_test_macros::on_each_engine]
async fn metrics_counters_move_by_exactly_the_requests_sent() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDatabase::new(dir.path(), "metrics.db").await;
    let org_key = onboard(db.arg(), "acme");
    // A second organization whose key allows one request a second: its burst meets 429s.
    let slow_key = onboard(db.arg(), "slow");
    let out = Command::new(binary())
        .args(["set-rate", &slow_key, "--per-second", "1", "--db"])
        .arg(db.arg())
        .envs(db.env())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let (server, admin) = start_with_admin(&db, &[]).await;
    assert!(admin.starts_with("http://127.0.0.1:") && admin.ends_with("/metrics"));
    let client = reqwest::Client::new();
    let api = server.api.clone();
    let post = |key: &str, path: &str, body: String| {
        client
            .post(format!("{api}{path}"))
            .header("authorization", format!("Bearer {key}"))
            .header("content-type", "application/json")
            .body(body)
            .send()
    };

    let agent: Value = post(&org_key, "/v1/agents", json!({"name": "buyer"}).to_string())
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let agent_key = agent["agent_key"].as_str().unwrap().to_owned();
    let mandate = post(
        &org_key,
        "/v1/mandates",
        standard_mandate("buyer").replace("2026-12-31", "2099-12-31"),
    )
    .await
    .unwrap();
    assert_eq!(mandate.status().as_u16(), 201);

    let (before, _) = scrape(&client, &admin).await;

    // Three allows, one review, two denials (category, per-transaction limit).
    let amounts = [
        (10, "software"),
        (11, "software"),
        (12, "travel"),
        (60, "software"),
        (10, "food"),
        (200, "software"),
    ];
    let mut statuses: HashMap<u16, f64> = HashMap::new();
    let mut verdicts: HashMap<(String, String), f64> = HashMap::new();
    for (amount, category) in amounts {
        let body = format!(
            r#"{{"amount": {amount}, "currency": "USD", "recipient": "vendor:acme", "category": "{category}"}}"#
        );
        let response = post(&agent_key, "/v1/authorizations", body).await.unwrap();
        *statuses.entry(response.status().as_u16()).or_default() += 1.0;
        let decision: Value = response.json().await.unwrap();
        let verdict = decision["verdict"].as_str().unwrap().to_owned();
        let policy = decision["policy_verdict"].as_str().unwrap().to_owned();
        *verdicts.entry((verdict, policy)).or_default() += 1.0;
    }
    let allows = verdicts
        .iter()
        .filter(|((v, _), _)| v == "allow")
        .map(|(_, n)| n)
        .sum::<f64>();
    let denials = verdicts
        .iter()
        .filter(|((v, _), _)| v.starts_with("deny_"))
        .map(|(_, n)| n)
        .sum::<f64>();
    assert_eq!((allows, denials), (3.0, 2.0), "{verdicts:?}");

    // One unauthenticated request, two lookups of absent agents (one route template).
    let unauthenticated = client
        .get(format!("{api}/v1/agents"))
        .header("authorization", "Bearer sk_sandbox_nope")
        .send()
        .await
        .unwrap();
    assert_eq!(unauthenticated.status().as_u16(), 401);
    for id in ["agt_nobody", "agt_noone"] {
        let missing = client
            .get(format!("{api}/v1/agents/{id}"))
            .header("authorization", format!("Bearer {org_key}"))
            .send()
            .await
            .unwrap();
        assert_eq!(missing.status().as_u16(), 404);
    }
    // A burst on the slow key: at least one 429, each counted.
    let mut limited = 0.0;
    let mut slow_ok = 0.0;
    for _ in 0..5 {
        let response = client
            .get(format!("{api}/v1/agents"))
            .header("authorization", format!("Bearer {slow_key}"))
            .send()
            .await
            .unwrap();
        match response.status().as_u16() {
            429 => limited += 1.0,
            200 => slow_ok += 1.0,
            other => panic!("unexpected status {other}"),
        }
    }
    assert!(
        limited >= 1.0,
        "no 429 from a key allowed one request a second"
    );

    let (after, text) = scrape(&client, &admin).await;
    let delta =
        |name: &str, labels: &[(&str, &str)]| after.get(name, labels) - before.get(name, labels);

    for ((verdict, policy), n) in &verdicts {
        let labels = [
            ("env", "sandbox"),
            ("verdict", verdict.as_str()),
            ("policy_verdict", policy.as_str()),
        ];
        assert_eq!(
            delta("mandate_decisions_total", &labels),
            *n,
            "{labels:?}\n{text}"
        );
    }
    for (status, n) in &statuses {
        let status = status.to_string();
        let labels = [("route", "/v1/authorizations"), ("status", status.as_str())];
        assert_eq!(delta("mandate_http_requests_total", &labels), *n, "{text}");
    }
    let labels = [("route", "/v1/authorizations")];
    assert_eq!(
        delta("mandate_http_request_duration_seconds_count", &labels),
        amounts.len() as f64
    );
    let inf = [("route", "/v1/authorizations"), ("le", "+Inf")];
    assert_eq!(
        delta("mandate_http_request_duration_seconds_bucket", &inf),
        amounts.len() as f64
    );
    let labels = [("route", "unmatched"), ("status", "401")];
    assert_eq!(delta("mandate_http_requests_total", &labels), 1.0, "{text}");
    // Routed by template: no raw path (and no id) is ever a label value.
    let labels = [("route", "/v1/agents/{id}"), ("status", "404")];
    assert_eq!(delta("mandate_http_requests_total", &labels), 2.0, "{text}");
    assert!(
        !text.contains("agt_nobody") && !text.contains("acme"),
        "{text}"
    );
    let labels = [("route", "unmatched"), ("status", "429")];
    assert_eq!(delta("mandate_http_requests_total", &labels), limited);
    assert_eq!(delta("mandate_rate_limited_total", &[]), limited);
    let labels = [("route", "/v1/agents"), ("status", "200")];
    assert_eq!(delta("mandate_http_requests_total", &labels), slow_ok);
    assert_eq!(delta("mandate_overload_shed_total", &[]), 0.0);

    // The writer committed the decisions: at least one job per decision, in groups (on
    // PostgreSQL the decisions' group commit; the WAL sync of its own is SQLite's).
    assert!(delta("mandate_writer_group_size_sum", &[]) >= amounts.len() as f64);
    assert!(delta("mandate_writer_commit_seconds_count", &[]) >= 1.0);
    if !crate::engine::postgres() {
        assert!(delta("mandate_writer_sync_seconds_count", &[]) >= 1.0);
    }

    // Webhooks: one ping to a receiver that answers 204, one to a closed port.
    let receiver = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = format!("http://{}/hook", receiver.local_addr().unwrap());
    let router = axum::Router::new().route(
        "/hook",
        axum::routing::post(|| async { axum::http::StatusCode::NO_CONTENT }),
    );
    tokio::spawn(async move { axum::serve(receiver, router).await });
    for url in [hook.as_str(), "http://127.0.0.1:9/hook"] {
        let created = post(
            &org_key,
            "/v1/webhooks",
            json!({"url": url, "events": ["ping"]}).to_string(),
        )
        .await
        .unwrap();
        assert_eq!(created.status().as_u16(), 201);
        let webhook: Value = created.json().await.unwrap();
        let id = webhook["webhook"].as_str().unwrap();
        let pinged = post(&org_key, &format!("/v1/webhooks/{id}/ping"), String::new())
            .await
            .unwrap();
        assert_eq!(pinged.status().as_u16(), 202);
    }
    // The worker acts on its own tick and counts the backlog once a second: poll (bounded).
    let mut last = String::new();
    let mut settled = false;
    for _ in 0..100 {
        let (now, text) = scrape(&client, &admin).await;
        let outcome = |o: &str| {
            now.get("mandate_webhook_deliveries_total", &[("outcome", o)])
                - after.get("mandate_webhook_deliveries_total", &[("outcome", o)])
        };
        // The review opened above is pending; so is the delivery to the closed port.
        if outcome("delivered") == 1.0
            && outcome("retry") >= 1.0
            && outcome("gave_up") == 0.0
            && now.get("mandate_webhook_deliveries_pending", &[]) == 1.0
            && now.get("mandate_reviews_pending", &[]) == 1.0
        {
            settled = true;
            break;
        }
        last = text;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(settled, "deliveries and backlog never showed up:\n{last}");

    // The admin host serves /metrics and nothing else.
    let base = admin.trim_end_matches("/metrics");
    let other = client
        .get(format!("{base}/v1/agents"))
        .send()
        .await
        .unwrap();
    assert_eq!(other.status().as_u16(), 404);
    server.kill();
}

/// Starts the binary with `extra` and the admin listener; returns it and its metrics URL.
async fn start_with_admin(db: &TestDatabase, extra: &[&str]) -> (Server, String) {
    let mut args = vec!["--admin-addr", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let server = Server::start(db.arg(), free_port(), &args);
    for _ in 0..200 {
        let admin = server
            .output
            .lock()
            .unwrap()
            .iter()
            .find_map(|l| l.trim().strip_prefix("admin:").map(|u| u.trim().to_owned()));
        if let Some(admin) = admin {
            return (server, admin);
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the server did not print its admin address");
}

#[mandate_test_macros::on_each_engine]
async fn metrics_count_each_request_shed_by_the_in_flight_gate() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let db = TestDatabase::new(dir.path(), "metrics.db").await;
    let org_key = onboard(db.arg(), "acme");
    let (server, admin) = start_with_admin(&db, &["--max-in-flight", "1"]).await;
    let client = reqwest::Client::new();
    let (before, _) = scrape(&client, &admin).await;

    // One request holds the only place: its head is in, its body never comes.
    let api = server.api.trim_start_matches("http://").to_owned();
    let mut held = std::net::TcpStream::connect(&api).unwrap();
    write!(
        held,
        "POST /v1/agents HTTP/1.1\r\nhost: {api}\r\nauthorization: Bearer {org_key}\r\n\
         content-type: application/json\r\ncontent-length: 100\r\n\r\n{{"
    )
    .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let shed = 3;
    for _ in 0..shed {
        let response = client
            .get(format!("{}/v1/agents", server.api))
            .header("authorization", format!("Bearer {org_key}"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 503);
    }
    let (after, text) = scrape(&client, &admin).await;
    let delta =
        |name: &str, labels: &[(&str, &str)]| after.get(name, labels) - before.get(name, labels);
    assert_eq!(
        delta("mandate_overload_shed_total", &[]),
        f64::from(shed),
        "{text}"
    );
    let labels = [("route", "unmatched"), ("status", "503")];
    assert_eq!(
        delta("mandate_http_requests_total", &labels),
        f64::from(shed),
        "{text}"
    );
    drop(held);
    server.kill();
}

#[mandate_test_macros::on_each_engine]
async fn without_admin_addr_there_is_no_admin_listener() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDatabase::new(dir.path(), "metrics.db").await;
    onboard(db.arg(), "acme");
    let server = Server::start(db.arg(), free_port(), &[]);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let printed = server.output.lock().unwrap().clone();
    assert!(!printed.iter().any(|l| l.contains("admin:")), "{printed:?}");
    server.kill();
}
