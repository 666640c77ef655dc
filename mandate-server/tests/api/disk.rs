//! Disk trouble: writes that the file system refuses give `5xx server_error` in the
//! envelope, leave nothing half-written (in the file or in the server's memory), and the
//! service recovers by itself once the cause is gone.
//!
//! How the trouble is made: the tests run as root, for whom `chmod` blocks nothing, so the
//! real binary's file-size limit (`RLIMIT_FSIZE`) is lowered while it runs, with
//! `prlimit --pid`, to 4 KiB (the soft limit, which is what the kernel enforces). Every write of SQLite past that offset, to the WAL or the
//! database file, then fails with `EFBIG` (the server handles `SIGXFSZ`, so the signal does
//! not kill it) exactly as a full disk fails with `ENOSPC`: SQLite reports an I/O error and
//! rolls back. Raising the limit again is the disk being freed.

use std::path::Path;
use std::process::Command;

use reqwest::Method;

use crate::process::{Client, Server, assert_envelope, free_port, onboard};

/// Sets the process's soft file-size limit to `limit` bytes or "unlimited" (the hard limit
/// stays unlimited, so that raising it again needs no privilege).
fn set_file_size_limit(pid: u32, limit: &str) {
    let out = Command::new("prlimit")
        .arg(format!("--pid={pid}"))
        .arg(format!("--fsize={limit}:unlimited"))
        .output()
        .expect("prlimit (util-linux) is needed for the disk-trouble test");
    assert!(
        out.status.success(),
        "prlimit: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn counts(db: &Path) -> Vec<(&'static str, i64)> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let integrity: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(integrity, "ok");
    [
        "agents",
        "api_keys",
        "mandates",
        "decisions",
        "reviews",
        "events",
        "idempotency",
    ]
    .into_iter()
    .map(|table| {
        let n: i64 = conn
            .query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0))
            .unwrap();
        (table, n)
    })
    .collect()
}

fn authorization(amount: &str) -> String {
    format!(
        r#"{{"amount": {amount}, "currency": "USD", "recipient": "vendor:acme", "category": "software"}}"#
    )
}

#[tokio::test]
async fn a_refused_write_is_a_5xx_leaves_nothing_behind_and_the_service_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("disk.db");
    let org = onboard(&db, "diskless");
    let server = Server::start(&db, free_port(), &[]);
    let client = Client::new(&server.api);
    let r = client
        .post(&org, "/v1/agents", r#"{"name": "spender"}"#)
        .await;
    let agent = r.body["agent_key"].as_str().unwrap().to_owned();
    let mandate = client
        .post(
            &org,
            "/v1/mandates",
            &crate::helpers::standard_mandate("spender").replace("2026-12-31", "2099-12-31"),
        )
        .await;
    assert_eq!(mandate.status, 201, "{}", mandate.text);
    let mandate_id = mandate.body["id"].as_str().unwrap().to_owned();
    // 400 of the 450 a month are spent before the trouble.
    for _ in 0..8 {
        let r = client
            .post(&agent, "/v1/authorizations", &authorization("50"))
            .await;
        assert_eq!(r.body["verdict"], "allow", "{}", r.text);
    }
    let before = counts(&db);

    set_file_size_limit(server.pid(), "4096");
    let failing = [
        (
            Method::POST,
            agent.as_str(),
            "/v1/authorizations".to_owned(),
            Some(authorization("50")),
            None,
        ),
        (
            Method::POST,
            agent.as_str(),
            "/v1/authorizations".to_owned(),
            Some(authorization("60")),
            None,
        ),
        (
            Method::POST,
            agent.as_str(),
            "/v1/authorizations".to_owned(),
            Some(authorization("1")),
            Some("after-the-storm"),
        ),
        (
            Method::POST,
            org.as_str(),
            "/v1/agents".to_owned(),
            Some(r#"{"name": "newcomer"}"#.to_owned()),
            None,
        ),
        (
            Method::POST,
            org.as_str(),
            "/v1/mandates".to_owned(),
            Some(crate::helpers::standard_mandate("spender").replace("2026-12-31", "2099-12-31")),
            None,
        ),
        (
            Method::POST,
            org.as_str(),
            format!("/v1/mandates/{mandate_id}/revoke"),
            None,
            None,
        ),
        (
            Method::POST,
            org.as_str(),
            "/v1/enforcement".to_owned(),
            Some(r#"{"mode": "observe"}"#.to_owned()),
            None,
        ),
    ];
    for (method, key, path, body, idem) in &failing {
        let r = client
            .send(method.clone(), key, path, body.as_deref(), *idem)
            .await
            .unwrap_or_else(|e| panic!("{path}: the server did not answer: {e}"));
        let message = assert_envelope(&r, 500, "server_error");
        assert!(message.contains("retried"), "{message}");
        assert!(!message.contains("sqlite"), "internals leaked: {message}");
    }
    // Reads still work while writes fail.
    let read = client.get(&org, "/v1/decisions?limit=1").await;
    assert_eq!(read.status, 200, "{}", read.text);
    // Nothing of the refused requests reached the file.
    assert_eq!(counts(&db), before, "a refused request left rows behind");

    set_file_size_limit(server.pid(), "unlimited");
    // Nothing of them stayed in memory either: the month-to-date is still 400 and the
    // velocity window holds 8 requests (the refused ones were never counted: either would
    // deny this), the mandate is still active, the mode still enforce.
    let r = client
        .post(&agent, "/v1/authorizations", &authorization("50"))
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.body["verdict"], "allow", "{}", r.text);
    let r = client.get(&org, "/v1/enforcement").await;
    assert_eq!(r.body["mode"], "enforce", "{}", r.text);
    let r = client
        .get(&org, &format!("/v1/mandates/{mandate_id}"))
        .await;
    assert_eq!(r.body["status"], "active", "{}", r.text);
    // A POST refused with a 5xx may be retried with the same Idempotency-Key: it runs now.
    let retry = client
        .send(
            Method::POST,
            &agent,
            "/v1/authorizations",
            Some(&authorization("1")),
            Some("after-the-storm"),
        )
        .await
        .unwrap();
    assert_eq!(retry.status, 201, "{}", retry.text);
    assert!(!retry.replayed);
    assert_eq!(retry.body["verdict"], "deny_limit", "{}", retry.text);
    let r = client
        .post(&org, "/v1/agents", r#"{"name": "newcomer"}"#)
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let after = counts(&db);
    let grew = |table: &str| {
        let find = |c: &[(&str, i64)]| c.iter().find(|(t, _)| *t == table).unwrap().1;
        find(&after) - find(&before)
    };
    assert_eq!(grew("decisions"), 2);
    assert_eq!(grew("reviews"), 0);
    assert_eq!(grew("agents"), 1);
    assert_eq!(grew("mandates"), 0);
}

#[tokio::test]
async fn a_log_sink_that_fails_every_write_loses_lines_not_answers_nor_the_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("full-log.db");
    let org = onboard(&db, "full-log");
    // Its log goes to /dev/full: every write of it fails with ENOSPC.
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let mut server = Server::start_with_stderr(
        &db,
        free_port(),
        &[],
        std::process::Stdio::from(full),
        "info",
    );
    let client = Client::new(&server.api);
    for i in 0..5 {
        let r = client
            .post(&org, "/v1/agents", &format!(r#"{{"name": "writer-{i}"}}"#))
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
    }
    // A write the disk refuses: the 500 envelope, whose detail the server logs (and
    // cannot: the line is lost, not the answer).
    set_file_size_limit(server.pid(), "4096");
    for i in 0..3 {
        let r = client
            .send(
                Method::POST,
                &org,
                "/v1/agents",
                Some(&format!(r#"{{"name": "refused-{i}"}}"#)),
                None,
            )
            .await
            .unwrap_or_else(|e| panic!("the server did not answer: {e}"));
        assert_envelope(&r, 500, "server_error");
    }
    let r = client.get(&org, "/v1/agents").await;
    assert_eq!(r.status, 200, "{}", r.text);
    set_file_size_limit(server.pid(), "unlimited");

    // SIGTERM still stops it promptly, and it says on stdout how many lines it lost.
    let status = Command::new("kill")
        .args(["-TERM", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let mut exited = None;
    for _ in 0..200 {
        if let Some(code) = server.child.try_wait().unwrap() {
            exited = Some(code);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let code = exited.expect("the server did not stop within 10 s of SIGTERM");
    assert!(code.success(), "exit status {code:?}");
    // The reader of its stdout gets the last lines once the pipe closes.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let output = server.output.lock().unwrap().clone();
    let lost: u64 = output
        .iter()
        .find_map(|l| l.strip_prefix("log lines lost: "))
        .unwrap_or_else(|| panic!("no count of lost lines in {output:?}"))
        .parse()
        .unwrap();
    assert!(lost >= 3, "{lost} lines lost, {output:?}");
}
