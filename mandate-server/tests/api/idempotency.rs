//! Idempotency-Key on every POST: replay, conflicts, scope, window, restarts.

use std::time::Duration;

use reqwest::Method;

use crate::helpers::{TestApp, spawn_app, standard_mandate};

pub(crate) const BODY: &str =
    r#"{"amount": 10, "currency": "USD", "recipient": "vendor:acme", "category": "software"}"#;

pub(crate) async fn post_with_key(
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

#[mandate_test_macros::on_each_engine]
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

#[mandate_test_macros::on_each_engine]
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

#[mandate_test_macros::on_each_engine]
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

#[mandate_test_macros::on_each_engine]
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
    let mut claimed = false;
    for _ in 0..250 {
        let n: i64 = app.db.query_i64(
            "SELECT COUNT(*) FROM idempotency WHERE idem_key = 'busy' AND status IS NULL",
            &[],
        );
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

#[mandate_test_macros::on_each_engine]
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

#[mandate_test_macros::on_each_engine]
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
