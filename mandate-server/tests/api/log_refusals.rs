//! Verify before append, against the real binary (docs/audit.md): a decision whose row was
//! changed before it was logged is refused by the log's worker, logged at error level and
//! counted in `mandate_log_refused_total`; the log waits before it (nothing after it is
//! appended or checkpointed) and moves on once the row is restored.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::helpers::{TestDatabase, standard_mandate};
use crate::process::{Client, Server, free_port, onboard};

/// The value of `mandate_log_refused_total{env="sandbox"}` in a scrape (0 before any).
fn refused(scrape: &str) -> f64 {
    scrape
        .lines()
        .find_map(|l| l.strip_prefix("mandate_log_refused_total{env=\"sandbox\"} "))
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

/// The address of the admin host the server printed.
async fn admin_of(server: &Server) -> String {
    for _ in 0..200 {
        let printed = server
            .output
            .lock()
            .unwrap()
            .iter()
            .find_map(|l| l.trim().strip_prefix("admin:").map(|u| u.trim().to_owned()));
        if let Some(admin) = printed {
            return admin;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the server did not print its admin address");
}

/// The size in the sandbox log's checkpoint, read on the public host with `key`.
async fn checkpoint_size(http: &reqwest::Client, log: &str, key: &str) -> Option<u64> {
    let r = http
        .get(format!("{log}/checkpoint"))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    if r.status() != 200 {
        return None;
    }
    let note = r.text().await.unwrap();
    note.lines().nth(1).map(|size| size.parse().unwrap())
}

#[mandate_test_macros::on_each_engine]
async fn a_row_changed_before_logging_is_refused_and_the_log_waits_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDatabase::new(dir.path(), "refused.db").await;
    let key = onboard(db.arg(), "acme");
    let org = db
        .query_value("SELECT id FROM orgs WHERE name = $1", &["acme"])
        .unwrap();
    // A first process decides three times and stops before its worker's first round.
    let first = Server::start(
        db.arg(),
        free_port(),
        &["--log-checkpoint-interval", "600000"],
    );
    let client = Client::new(&first.api);
    let agent = client
        .post(&key, "/v1/agents", &json!({"name": "buyer"}).to_string())
        .await;
    let agent_key = agent.body["agent_key"].as_str().unwrap().to_owned();
    let mandate = standard_mandate("buyer").replace("2026-12-31", "2099-12-31");
    assert_eq!(
        client.post(&key, "/v1/mandates", &mandate).await.status,
        201
    );
    let mut decisions = Vec::new();
    for amount in [10, 11, 12] {
        let body = format!(
            r#"{{"amount": {amount}, "currency": "USD", "recipient": "vendor:acme", "category": "software"}}"#
        );
        let r = client.post(&agent_key, "/v1/authorizations", &body).await;
        assert_eq!(r.status, 201, "{}", r.text);
        let id = r.body["id"].as_str().unwrap().to_owned();
        decisions.push((id, r.body["verdict_token"].as_str().unwrap().to_owned()));
    }
    first.kill();

    // The second decision's amount is changed in the database before it is logged.
    let tampered = decisions[1].0.as_str();
    let amount = db
        .query_value("SELECT amount FROM decisions WHERE id = $1", &[tampered])
        .unwrap();
    db.execute(
        "UPDATE decisions SET amount = '99' WHERE id = $1",
        &[tampered],
    );
    let log_path = dir.path().join("server.log");
    let public = free_port();
    let second = Server::start_logging(
        db.arg(),
        public,
        &[
            "--admin-addr",
            "127.0.0.1:0",
            "--log-checkpoint-interval",
            "100",
        ],
        Some((&log_path, "error")),
    );
    let admin = admin_of(&second).await;
    let http = reqwest::Client::new();
    let log = format!("{}/log/{org}/sandbox", second.public);
    // Refused in at least two rounds: the log waits, saying so each round.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let scrape = http.get(&admin).send().await.unwrap().text().await.unwrap();
        if refused(&scrape) >= 2.0 {
            break;
        }
        assert!(Instant::now() < deadline, "no refusal counted:\n{scrape}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(checkpoint_size(&http, &log, &key).await, Some(1));
    let bundle = |width: u32| {
        http.get(format!("{log}/tile/entries/000.p/{width}"))
            .bearer_auth(&key)
            .send()
    };
    let one = bundle(1).await.unwrap();
    assert_eq!(one.status(), 200);
    let one = one.bytes().await.unwrap();
    assert_eq!(&one[2..], decisions[0].1.as_bytes());
    assert_eq!(bundle(2).await.unwrap().status(), 404);
    let logged = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        logged.contains(&format!("decision {tampered}")) && logged.contains("refused"),
        "{logged}"
    );
    assert!(logged.contains("does not verify"), "{logged}");

    // Restored, the row verifies again and the log moves past it.
    db.execute(
        "UPDATE decisions SET amount = $2 WHERE id = $1",
        &[tampered, &amount],
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while checkpoint_size(&http, &log, &key).await != Some(3) {
        assert!(
            Instant::now() < deadline,
            "the log did not move past the restored row"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    second.kill();
}
