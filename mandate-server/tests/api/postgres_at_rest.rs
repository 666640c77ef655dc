//! What PostgreSQL keeps at rest (the counterpart of api/sqlite_only/idempotency.rs): an
//! agent key, answered once under an Idempotency-Key, is in no column of any table, and in
//! no byte of the database's files or of the cluster's write-ahead log; a replay still
//! answers the same bytes.

use std::path::Path;

use crate::helpers::spawn_app;
use crate::idempotency::post_with_key;

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Every file under `dir`, read as bytes, with its path.
fn files_under(dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files_under(&path, out);
        } else if let Ok(bytes) = std::fs::read(&path) {
            out.push((path.display().to_string(), bytes));
        }
    }
}

#[mandate_test_macros::on_each_engine(postgres_only)]
async fn an_agent_key_is_never_at_rest_in_postgresql_yet_a_replay_answers_the_same_bytes() {
    let mut app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let body = r#"{"name": "sealed"}"#;
    let first = post_with_key(&app, &org, "/v1/agents", body, "create-sealed").await;
    assert_eq!(first.status, 201, "{}", first.text);
    let agent_key = first.body["agent_key"].as_str().unwrap().to_owned();
    let secret = agent_key.strip_prefix("ak_sandbox_").unwrap().to_owned();
    // As PostgreSQL shows a BYTEA as text: \x and hex digits.
    let secret_hex: String = secret.bytes().map(|b| format!("{b:02x}")).collect();

    // The stored record holds a sealed body, not the answer.
    let stored = app.db.query_bytes(
        "SELECT body FROM idempotency WHERE idem_key = 'create-sealed'",
        &[],
    );
    assert_eq!(stored.len(), 1);
    assert!(!contains(&stored[0], secret.as_bytes()));
    assert!(!contains(&stored[0], b"agent_key"));
    assert!(!contains(&stored[0], first.text.as_bytes()));
    // No column of any table, read as text, holds it.
    let columns = app.db.query(
        "SELECT table_name, column_name FROM information_schema.columns
         WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position",
        &[],
    );
    assert!(columns.len() > 50, "{columns:?}");
    for column in &columns {
        let (table, name) = (column[0].clone().unwrap(), column[1].clone().unwrap());
        let values = app
            .db
            .query(&format!("SELECT \"{name}\"::TEXT FROM \"{table}\""), &[]);
        for value in values.into_iter().flatten().flatten() {
            assert!(
                !value.contains(&secret) && !value.contains(&secret_hex),
                "the agent key is in {table}.{name}"
            );
        }
    }
    // Nor any byte of the database's files or the cluster's WAL, once written out (a
    // cluster of this process's own: the files of one given by URL are not readable here).
    if let Some((dir, _)) = crate::postgres::local_cluster() {
        app.db.execute("CHECKPOINT", &[]);
        let oid = app
            .db
            .query_value(
                "SELECT oid::TEXT FROM pg_database WHERE datname = current_database()",
                &[],
            )
            .unwrap();
        let mut files = Vec::new();
        files_under(&dir.join("data/base").join(&oid), &mut files);
        files_under(&dir.join("data/pg_wal"), &mut files);
        assert!(files.len() > 10, "{} files", files.len());
        for (file, bytes) in &files {
            assert!(
                !contains(bytes, secret.as_bytes()),
                "the agent key is in {file}"
            );
        }
    }

    // A replay answers exactly what was first answered, also after a restart.
    for round in 0..2 {
        let replay = post_with_key(&app, &org, "/v1/agents", body, "create-sealed").await;
        assert_eq!(replay.status, 201, "round {round}: {}", replay.text);
        assert_eq!(replay.text, first.text, "round {round}");
        assert_eq!(replay.header("idempotency-replayed"), Some("true"));
        app.restart().await;
    }
    assert_eq!(
        app.get(&agent_key, "/v1/agents/agt_sealed").await.status,
        200
    );
}
