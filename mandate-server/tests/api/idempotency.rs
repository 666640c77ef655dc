//! Idempotency-Key on every POST: replay, conflicts, scope, window, restarts.

use std::time::Duration;

use reqwest::Method;

use crate::helpers::{TestApp, spawn_app, standard_mandate};

const BODY: &str =
    r#"{"amount": 10, "currency": "USD", "recipient": "vendor:acme", "category": "software"}"#;

async fn post_with_key(
    app: &TestApp,
    api_key: &str,
    path: &str,
    body: &str,
    idem: &str,
) -> crate::helpers::Resp {
    app.send(
        Method::POST,
        Some(api_key),
        path,
        Some(body.to_owned()),
        &[("idempotency-key", idem)],
    )
    .await
}

#[tokio::test]
async fn a_replay_returns_the_original_and_is_not_a_new_request() {
    let mut app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "retry").await;
    let first = post_with_key(&app, &agent, "/v1/authorizations", BODY, "k-1").await;
    assert_eq!(first.status, 201);
    assert_eq!(first.header("idempotency-replayed"), None);
    for _ in 0..15 {
        let again = post_with_key(&app, &agent, "/v1/authorizations", BODY, "k-1").await;
        assert_eq!(again.status, 201);
        assert_eq!(again.header("idempotency-replayed"), Some("true"));
        assert_eq!(again.body, first.body);
        assert_eq!(again.header("x-request-id"), first.header("x-request-id"));
    }
    // One decision only, and the replays did not count for velocity: 9 more are fine.
    let list = app.get(&org, "/v1/decisions").await;
    assert_eq!(list.body["data"].as_array().unwrap().len(), 1);
    for _ in 0..9 {
        assert_ne!(
            app.authorize(&agent, "1", "software").await.body["verdict"],
            "deny_velocity"
        );
    }
    // Kept across a restart.
    app.restart().await;
    let after = post_with_key(&app, &agent, "/v1/authorizations", BODY, "k-1").await;
    assert_eq!(after.header("idempotency-replayed"), Some("true"));
    assert_eq!(after.body, first.body);
}

#[tokio::test]
async fn a_different_body_conflicts_and_4xx_results_replay() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let bad = post_with_key(
        &app,
        &org,
        "/v1/agents",
        r#"{"name": "Bad Name"}"#,
        "agent-1",
    )
    .await;
    let message = bad.assert_error(400, "invalid_request");
    let replay = post_with_key(
        &app,
        &org,
        "/v1/agents",
        r#"{"name": "Bad Name"}"#,
        "agent-1",
    )
    .await;
    assert_eq!(replay.assert_error(400, "invalid_request"), message);
    assert_eq!(replay.header("idempotency-replayed"), Some("true"));
    assert_eq!(replay.body, bad.body);
    // Fixing the body needs a new key.
    let fixed = post_with_key(&app, &org, "/v1/agents", r#"{"name": "good"}"#, "agent-1").await;
    fixed.assert_error(409, "idempotency_conflict");
    let fresh = post_with_key(&app, &org, "/v1/agents", r#"{"name": "good"}"#, "agent-2").await;
    assert_eq!(fresh.status, 201);
    // The same path with a different body, and a different path with the same body, conflict.
    let other_path =
        post_with_key(&app, &org, "/v1/mandates", r#"{"name": "good"}"#, "agent-2").await;
    other_path.assert_error(409, "idempotency_conflict");
}

#[tokio::test]
async fn keys_are_scoped_to_the_api_key_and_expire_after_24_hours() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let a = app.standard_agent(&org, "alpha").await;
    let b = app.standard_agent(&org, "beta").await;
    let first = post_with_key(&app, &a, "/v1/authorizations", BODY, "shared").await;
    let other = post_with_key(&app, &b, "/v1/authorizations", BODY, "shared").await;
    assert_eq!(other.status, 201);
    assert_eq!(other.header("idempotency-replayed"), None);
    assert_ne!(other.body["id"], first.body["id"]);
    app.advance(24 * 3600);
    let later = post_with_key(&app, &a, "/v1/authorizations", BODY, "shared").await;
    assert_eq!(later.status, 201);
    assert_eq!(later.header("idempotency-replayed"), None);
    assert_ne!(later.body["id"], first.body["id"]);
}

#[tokio::test]
async fn a_key_in_flight_conflicts() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "inflight").await;
    // Hold the agent's lock so the first request stays in flight.
    let guard = app.hold_agent_lock("inflight").await;
    let first = tokio::spawn({
        let (api, client, key) = (app.api.clone(), app.client.clone(), agent.clone());
        async move {
            client
                .post(format!("{api}/v1/authorizations"))
                .header("authorization", format!("Bearer {key}"))
                .header("content-type", "application/json")
                .header("idempotency-key", "busy")
                .body(BODY)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    });
    // Wait until the first request has claimed the key (it then waits for the lock) ...
    let conn = rusqlite::Connection::open(&app.db_path).unwrap();
    let mut claimed = false;
    for _ in 0..250 {
        let n: i64 = conn
            .query_row(
                "SELECT COUNT(*) FROM idempotency WHERE idem_key = 'busy' AND status IS NULL",
                [],
                |r| r.get(0),
            )
            .unwrap();
        if n == 1 {
            claimed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(claimed, "the first request never claimed its key");
    // ... then the same key, while in flight, conflicts.
    let second = post_with_key(&app, &agent, "/v1/authorizations", BODY, "busy").await;
    let message = second.assert_error(409, "idempotency_conflict");
    assert!(message.contains("still being processed"), "{message}");
    drop(guard);
    assert_eq!(first.await.unwrap(), 201);
    let replay = post_with_key(&app, &agent, "/v1/authorizations", BODY, "busy").await;
    assert_eq!(replay.header("idempotency-replayed"), Some("true"));
}

#[tokio::test]
async fn bad_idempotency_keys_are_400() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let long = "k".repeat(256);
    let r = post_with_key(&app, &org, "/v1/agents", r#"{"name": "x"}"#, &long).await;
    assert_eq!(
        r.assert_error(400, "invalid_request"),
        "Idempotency-Key must be 1 to 255 visible ASCII characters"
    );
    let _ = standard_mandate("x");
}

#[tokio::test]
async fn a_repeated_idempotency_key_header_is_400_and_nothing_is_done() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    for (first, second) in [("k1", "k2"), ("same", "same")] {
        let r = app
            .send(
                Method::POST,
                Some(&org),
                "/v1/agents",
                Some(r#"{"name": "twice"}"#.to_owned()),
                &[("idempotency-key", first), ("idempotency-key", second)],
            )
            .await;
        assert_eq!(
            r.assert_error(400, "invalid_request"),
            "the Idempotency-Key header appears 2 times; send it once"
        );
        assert!(r.header("idempotency-replayed").is_none());
    }
    // No agent was created, and neither key was claimed: each works alone afterwards.
    assert_eq!(
        app.get(&org, "/v1/agents").await.body["data"],
        serde_json::json!([])
    );
    let r = post_with_key(&app, &org, "/v1/agents", r#"{"name": "twice"}"#, "k2").await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert!(r.header("idempotency-replayed").is_none());
}

/// Every file of the database (main file, WAL, shared memory), read as bytes.
fn database_bytes(app: &TestApp) -> Vec<(String, Vec<u8>)> {
    let dir = app.db_path.parent().unwrap();
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            path.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("mandate.db")
        })
        .map(|path| (path.display().to_string(), std::fs::read(&path).unwrap()))
        .collect()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[tokio::test]
async fn an_agent_key_is_never_at_rest_yet_a_replay_answers_the_same_bytes() {
    let mut app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let body = r#"{"name": "sealed"}"#;
    let first = post_with_key(&app, &org, "/v1/agents", body, "create-sealed").await;
    assert_eq!(first.status, 201, "{}", first.text);
    let agent_key = first.body["agent_key"].as_str().unwrap().to_owned();
    // The random part alone must not be there either (nor the whole key).
    let secret = agent_key.strip_prefix("ak_sandbox_").unwrap().to_owned();

    // The stored record: a sealed body, not the answer.
    let conn = rusqlite::Connection::open(&app.db_path).unwrap();
    let (status, stored): (i64, Vec<u8>) = conn
        .query_row(
            "SELECT status, body FROM idempotency WHERE idem_key = 'create-sealed'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(status, 201);
    assert!(!contains(&stored, secret.as_bytes()));
    assert!(!contains(&stored, b"agent_key"));
    assert!(!contains(&stored, first.text.as_bytes()));
    // Nowhere in any table...
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    for table in &tables {
        let mut stmt = conn.prepare(&format!("SELECT * FROM \"{table}\"")).unwrap();
        let columns = stmt.column_count();
        let mut rows = stmt.query([]).unwrap();
        while let Some(row) = rows.next().unwrap() {
            for i in 0..columns {
                let bytes: Vec<u8> = match row.get_ref(i).unwrap() {
                    rusqlite::types::ValueRef::Text(t) | rusqlite::types::ValueRef::Blob(t) => {
                        t.to_vec()
                    }
                    _ => continue,
                };
                assert!(
                    !contains(&bytes, secret.as_bytes()),
                    "the agent key is in table {table}"
                );
            }
        }
    }
    drop(conn);
    // ...nor in any byte of the database's files.
    for (file, bytes) in database_bytes(&app) {
        assert!(
            !contains(&bytes, secret.as_bytes()),
            "the agent key is in {file}"
        );
    }

    // A replay answers exactly what was first answered, also after a restart.
    for round in 0..2 {
        let replay = post_with_key(&app, &org, "/v1/agents", body, "create-sealed").await;
        assert_eq!(replay.status, 201, "round {round}: {}", replay.text);
        assert_eq!(replay.text, first.text, "round {round}");
        assert_eq!(replay.header("idempotency-replayed"), Some("true"));
        assert_eq!(replay.header("content-type"), first.header("content-type"));
        assert_eq!(replay.header("x-request-id"), first.header("x-request-id"));
        app.restart().await;
    }
    // The key still works, and there is one agent.
    assert_eq!(
        app.get(&agent_key, "/v1/agents/agt_sealed").await.status,
        200
    );
    let list = app.get(&org, "/v1/agents").await;
    assert_eq!(list.body["data"].as_array().unwrap().len(), 1);
    // Another API key of the organization does not share (or open) the record.
    let other = app.onboard("acme-too").await;
    let r = post_with_key(&app, &other.sandbox, "/v1/agents", body, "create-sealed").await;
    assert_eq!(r.status, 201);
    assert_ne!(r.body["agent_key"], first.body["agent_key"]);
}

#[tokio::test]
async fn records_stored_in_plaintext_before_sealing_replay_and_agent_keys_among_them_are_dropped() {
    let mut app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "legacy").await;
    let authorized = post_with_key(&app, &agent, "/v1/authorizations", BODY, "pay-1").await;
    assert_eq!(authorized.status, 201, "{}", authorized.text);
    let created = post_with_key(&app, &org, "/v1/agents", r#"{"name": "older"}"#, "create-1").await;
    assert_eq!(created.status, 201, "{}", created.text);
    // As a server before migration 8 stored them: the answers in plaintext.
    app.running.take().unwrap().shutdown().await.unwrap();
    {
        let conn = rusqlite::Connection::open(&app.db_path).unwrap();
        for (idem, text) in [("pay-1", &authorized.text), ("create-1", &created.text)] {
            conn.execute(
                "UPDATE idempotency SET body = ?1 WHERE idem_key = ?2",
                rusqlite::params![text.as_bytes(), idem],
            )
            .unwrap();
        }
        conn.execute("DELETE FROM schema_migrations WHERE version = 8", [])
            .unwrap();
    }
    app.restart().await;
    // The authorization's record replays as it was (no second decision)...
    let replay = post_with_key(&app, &agent, "/v1/authorizations", BODY, "pay-1").await;
    assert_eq!(replay.text, authorized.text);
    assert_eq!(replay.header("idempotency-replayed"), Some("true"));
    // ...and the one holding an agent key is gone, its bytes with it.
    let secret = created.body["agent_key"].as_str().unwrap()["ak_sandbox_".len()..].to_owned();
    let conn = rusqlite::Connection::open(&app.db_path).unwrap();
    let left: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM idempotency WHERE idem_key = 'create-1'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(left, 0);
    drop(conn);
    let retry = post_with_key(&app, &org, "/v1/agents", r#"{"name": "older"}"#, "create-1").await;
    retry.assert_error(409, "name_taken");
    app.running.take().unwrap().shutdown().await.unwrap();
    for (file, bytes) in database_bytes(&app) {
        assert!(
            !contains(&bytes, secret.as_bytes()),
            "the agent key is in {file}"
        );
    }
}
