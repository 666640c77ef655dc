//! Idempotent answers at rest in SQLite: no agent key in any table or byte of the database's
//! files, and records stored in plaintext before its migration 8 are dealt with.

use crate::helpers::{TestApp, spawn_app};
use crate::idempotency::{BODY, post_with_key};

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
