//! One Idempotency-Key, one outcome, whatever fails (issue #40, items 1 to 3): a first
//! attempt that stalls past its claim, a client that drops the connection while its
//! decision is being committed, a client that drops it while its claim is being written.
//! Each test makes the database itself wait (a lock held from another connection), on
//! both engines. And item 4: a request the database does not answer in time is answered
//! 503, and its key still has one outcome.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::Value;

use crate::helpers::{Resp, TestApp, spawn_app, spawn_app_with};
use crate::idempotency::{BODY, post_with_key};

/// A lock held on the test's database from a connection of the test's own, so that the
/// server's writes wait for it.
enum Hold {
    Postgres(tokio_postgres::Client),
    Sqlite(rusqlite::Connection),
}

impl Hold {
    /// Holds what the server's write of a decision (or, with `claims`, of an idempotency
    /// claim) needs: on PostgreSQL the agent's row (or the idempotency table), on SQLite the
    /// database's write lock.
    async fn take(app: &TestApp, agent: &str, claims: bool) -> Hold {
        match &app.db.postgres {
            Some(db) => {
                let client = db.connect().await;
                let sql = if claims {
                    "BEGIN; LOCK TABLE idempotency IN EXCLUSIVE MODE".to_owned()
                } else {
                    format!("BEGIN; SELECT 1 FROM agents WHERE id = 'agt_{agent}' FOR UPDATE")
                };
                client.batch_execute(&sql).await.unwrap();
                Hold::Postgres(client)
            }
            None => {
                let conn = rusqlite::Connection::open(&app.db_path).unwrap();
                conn.execute_batch("BEGIN IMMEDIATE").unwrap();
                Hold::Sqlite(conn)
            }
        }
    }

    /// Waits until a statement of the server waits for this lock (PostgreSQL says so; on
    /// SQLite, whose writer retries a busy database, half a second).
    async fn until_waited_on(&self) {
        match self {
            Hold::Postgres(client) => {
                let deadline = Instant::now() + Duration::from_secs(10);
                loop {
                    // This connection's transaction holds the lock, and PostgreSQL keeps
                    // what pg_stat_activity showed first for the rest of a transaction:
                    // the snapshot is dropped before each read, or a wait that began after
                    // the first read would never show.
                    client
                        .batch_execute("SELECT pg_stat_clear_snapshot()")
                        .await
                        .unwrap();
                    let waiting: i64 = client
                        .query_one(
                            "SELECT COUNT(*) FROM pg_stat_activity
                             WHERE datname = current_database() AND wait_event_type = 'Lock'",
                            &[],
                        )
                        .await
                        .unwrap()
                        .get(0);
                    if waiting > 0 {
                        return;
                    }
                    assert!(Instant::now() < deadline, "nothing waited for the lock");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            Hold::Sqlite(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }

    async fn release(self) {
        match self {
            Hold::Postgres(client) => client.batch_execute("ROLLBACK").await.unwrap(),
            Hold::Sqlite(conn) => conn.execute_batch("ROLLBACK").unwrap(),
        }
    }
}

/// Sends the authorization with Idempotency-Key `idem` on a connection of its own, as a
/// task that the test may abort (the client goes away: its connection closes).
fn send_in_task(app: &TestApp, agent: &str, idem: &str) -> tokio::task::JoinHandle<(u16, Value)> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let (url, key, idem) = (
        format!("{}/v1/authorizations", app.api),
        agent.to_owned(),
        idem.to_owned(),
    );
    tokio::spawn(async move {
        let response = client
            .post(url)
            .header("authorization", format!("Bearer {key}"))
            .header("content-type", "application/json")
            .header("idempotency-key", idem)
            .body(BODY)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    })
}

/// Retries `idem` until it is no longer in flight (bounded, 10 s); returns the answer.
async fn retry_until_settled(app: &TestApp, agent: &str, idem: &str) -> Resp {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = post_with_key(app, agent, "/v1/authorizations", BODY, idem).await;
        let in_flight = r.status == 409 && r.text.contains("still being processed");
        if !in_flight {
            return r;
        }
        assert!(
            Instant::now() < deadline,
            "Idempotency-Key {idem} is still in flight after 10 s: {}",
            r.text
        );
        // Not faster: the manual clock stands still, and the key's rate is 100 a second.
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The decisions stored for `agt_<name>`.
async fn stored(app: &TestApp, name: &str) -> Vec<Value> {
    let org = app.org.sandbox.clone();
    let list = app
        .send(
            Method::GET,
            Some(&org),
            &format!("/v1/decisions?agent=agt_{name}&limit=100"),
            None,
            &[],
        )
        .await;
    assert_eq!(list.status, 200, "{}", list.text);
    list.body["data"].as_array().unwrap().clone()
}

/// Item 1: the first attempt stalls (its agent busy) past its claim's 60 s; a retry with the
/// same key takes the claim over and decides. The first attempt, once it gets to store its
/// decision, must find that its claim is no longer its own and store nothing: one decision,
/// and every 201 the same one.
#[mandate_test_macros::on_each_engine]
async fn a_first_attempt_stalled_past_its_claim_stores_nothing_once_a_retry_took_over() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "stalled").await;
    let guard = app.hold_agent_lock("stalled").await;
    let first = send_in_task(&app, &agent, "stall-1");
    let claimed = |app: &TestApp| {
        app.db.query_i64(
            "SELECT COUNT(*) FROM idempotency WHERE idem_key = 'stall-1' AND status IS NULL",
            &[],
        )
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while claimed(&app) == 0 {
        assert!(Instant::now() < deadline, "the first attempt never claimed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The claim runs out; the retry takes it over and waits for the agent in turn.
    app.advance(61);
    let retry = send_in_task(&app, &agent, "stall-1");
    tokio::time::sleep(Duration::from_millis(500)).await;
    drop(guard);
    let (first, retry) = (first.await.unwrap(), retry.await.unwrap());
    let created: Vec<&Value> = [&first, &retry]
        .into_iter()
        .filter(|(status, _)| *status == 201)
        .map(|(_, body)| body)
        .collect();
    assert!(!created.is_empty(), "{first:?} {retry:?}");
    let decisions = stored(&app, "stalled").await;
    assert_eq!(
        decisions.len(),
        1,
        "one key, one decision: {first:?} {retry:?}"
    );
    for body in &created {
        assert_eq!(body["id"], decisions[0]["id"], "{first:?} {retry:?}");
    }
    let replay = retry_until_settled(&app, &agent, "stall-1").await;
    assert_eq!(replay.status, 201, "{}", replay.text);
    assert_eq!(replay.body["id"], decisions[0]["id"]);
}

/// Item 2: the client drops its connection while its decision waits to be committed. Either
/// the decision is stored with its idempotency record (a retry replays it) or nothing is
/// stored (a retry decides afresh): one decision, never two.
#[mandate_test_macros::on_each_engine]
async fn a_client_that_drops_the_connection_during_the_commit_gets_one_decision_on_retry() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "dropper").await;
    for round in 0..3 {
        let idem = format!("drop-{round}");
        let hold = Hold::take(&app, "dropper", false).await;
        let sent = send_in_task(&app, &agent, &idem);
        hold.until_waited_on().await;
        sent.abort();
        // Whatever the server does when it notices the client is gone, it does now.
        tokio::time::sleep(Duration::from_millis(300)).await;
        hold.release().await;
        let retried = retry_until_settled(&app, &agent, &idem).await;
        assert_eq!(retried.status, 201, "round {round}: {}", retried.text);
        let decisions = stored(&app, "dropper").await;
        assert_eq!(
            decisions.len(),
            round + 1,
            "round {round}: one decision for the key, the retry {} ({})",
            retried.text,
            retried.header("idempotency-replayed").unwrap_or("fresh")
        );
        assert_eq!(retried.body["id"], decisions[0]["id"], "round {round}");
    }
}

/// Item 3: the client drops its connection while its request's claim is being written. The
/// claim must not outlive the request: a retry with the key is answered (a replay or a
/// fresh decision), not refused as still being processed.
#[mandate_test_macros::on_each_engine]
async fn a_client_that_drops_the_connection_while_its_claim_is_written_leaves_no_claim() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "aborter").await;
    let hold = Hold::take(&app, "aborter", true).await;
    let sent = send_in_task(&app, &agent, "abort-1");
    hold.until_waited_on().await;
    sent.abort();
    tokio::time::sleep(Duration::from_millis(300)).await;
    hold.release().await;
    let retried = retry_until_settled(&app, &agent, "abort-1").await;
    assert_eq!(retried.status, 201, "{}", retried.text);
    let decisions = stored(&app, "aborter").await;
    assert_eq!(decisions.len(), 1, "{decisions:?}");
    assert_eq!(retried.body["id"], decisions[0]["id"]);
}

/// Item 4: a request the database does not answer within the request deadline is answered
/// `503` in the envelope, at the deadline; it goes on in its own task, and its key keeps
/// one outcome: once the database answers, a retry with the key replays the decision
/// stored (never a second one).
#[mandate_test_macros::on_each_engine]
async fn a_request_past_its_deadline_is_503_and_its_key_keeps_one_outcome() {
    let app = spawn_app_with(|c| c.limits.request_timeout = Duration::from_secs(1)).await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "frozen").await;
    let hold = Hold::take(&app, "frozen", false).await;
    let started = Instant::now();
    let answered = post_with_key(&app, &agent, "/v1/authorizations", BODY, "late-1").await;
    let waited = started.elapsed();
    let message = answered.assert_error(503, "server_error");
    assert!(
        message.contains("retry with the same Idempotency-Key"),
        "{message}"
    );
    assert!(
        waited < Duration::from_secs(4),
        "answered after {waited:?}, past its 1 s deadline"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    hold.release().await;
    let retried = retry_until_settled(&app, &agent, "late-1").await;
    assert_eq!(retried.status, 201, "{}", retried.text);
    let decisions = stored(&app, "frozen").await;
    assert_eq!(decisions.len(), 1, "{decisions:?}");
    assert_eq!(retried.body["id"], decisions[0]["id"]);
}
