//! GET/POST /v1/enforcement: the kill switch, per environment, and what each mode does to
//! a decision.

use serde_json::json;

use crate::helpers::{TestApp, spawn_app};

/// The types of the `acme` organization's events in `env`, oldest first.
fn event_types(app: &TestApp, env: &str) -> Vec<String> {
    app.stored_events("acme", env)
        .into_iter()
        .map(|(t, _)| t)
        .collect()
}

#[mandate_test_macros::on_each_engine]
async fn live_starts_in_observe_and_sandbox_in_enforce() {
    let app = spawn_app().await;
    let live = app.get(&app.org.live, "/v1/enforcement").await;
    assert_eq!(live.status, 200, "{}", live.text);
    assert_eq!(
        live.body,
        json!({"mode": "observe", "since": "2026-11-22T12:00:00Z",
               "organization": "acme", "environment": "live"})
    );
    let sandbox = app.get(&app.org.sandbox, "/v1/enforcement").await;
    assert_eq!(
        sandbox.body,
        json!({"mode": "enforce", "since": "2026-11-22T12:00:00Z",
               "organization": "acme", "environment": "sandbox"})
    );
}

#[mandate_test_macros::on_each_engine]
async fn observe_records_what_enforce_would_say_and_blocks_nothing() {
    let app = spawn_app().await;
    let live = app.org.live.clone();
    let agent = app.standard_agent(&live, "watched").await;

    let over = app.authorize(&agent, "150", "software").await;
    assert_eq!(over.status, 201, "{}", over.text);
    assert_eq!(over.body["verdict"], "allow");
    assert_eq!(over.body["policy_verdict"], "deny_limit");
    assert_eq!(
        over.body["reason"],
        "amount 150 exceeds per_transaction limit 100"
    );
    assert_eq!(over.body["mode"], "observe");
    assert!(over.body["verdict_token"].as_str().is_some());

    let category = app.authorize(&agent, "1", "food").await;
    assert_eq!(category.body["verdict"], "allow");
    assert_eq!(category.body["policy_verdict"], "deny_category");
    assert!(category.body["reason"].as_str().is_some());

    // A review-level amount opens no review in observe.
    let review = app.authorize(&agent, "60", "software").await;
    assert_eq!(review.body["verdict"], "allow");
    assert_eq!(review.body["policy_verdict"], "review");
    assert!(review.body["review"].is_null(), "{}", review.text);
    let stored = app
        .get(
            &live,
            &format!("/v1/decisions/{}", review.body["id"].as_str().unwrap()),
        )
        .await;
    assert_eq!(stored.body["verdict"], "allow");
    assert_eq!(stored.body["policy_verdict"], "review");
    assert!(stored.body["review"].is_null());
    assert_eq!(stored.body["mode"], "observe");
    assert!(event_types(&app, "live").is_empty());

    // The stored record keeps the reason.
    let stored = app
        .get(
            &live,
            &format!("/v1/decisions/{}", over.body["id"].as_str().unwrap()),
        )
        .await;
    assert_eq!(stored.body["policy_verdict"], "deny_limit");
    assert_eq!(
        stored.body["reason"],
        "amount 150 exceeds per_transaction limit 100"
    );

    // Switching live to enforce makes the very next decision enforced.
    let switched = app
        .post(&live, "/v1/enforcement", json!({"mode": "enforce"}))
        .await;
    assert_eq!(switched.status, 200, "{}", switched.text);
    assert_eq!(switched.body["mode"], "enforce");
    let enforced = app.authorize(&agent, "150", "software").await;
    assert_eq!(enforced.body["verdict"], "deny_limit");
    assert_eq!(enforced.body["policy_verdict"], "deny_limit");
    assert_eq!(enforced.body["mode"], "enforce");
    let review = app.authorize(&agent, "60", "software").await;
    assert_eq!(review.body["verdict"], "review");
    assert!(
        review.body["review"]["id"]
            .as_str()
            .unwrap()
            .starts_with("rev_")
    );
    assert_eq!(event_types(&app, "live"), ["decision.review_pending"]);

    // And back to observe: the next one is observed again.
    let back = app
        .post(&live, "/v1/enforcement", json!({"mode": "observe"}))
        .await;
    assert_eq!(back.body["mode"], "observe");
    let observed = app.authorize(&agent, "150", "software").await;
    assert_eq!(observed.body["verdict"], "allow");
    assert_eq!(observed.body["mode"], "observe");
}

#[mandate_test_macros::on_each_engine]
async fn since_moves_on_a_real_switch_only() {
    let app = spawn_app().await;
    let live = app.org.live.clone();
    app.advance(60);
    let r = app
        .post(&live, "/v1/enforcement", json!({"mode": "enforce"}))
        .await;
    assert_eq!(
        r.body,
        json!({"mode": "enforce", "since": "2026-11-22T12:01:00Z",
               "organization": "acme", "environment": "live"})
    );
    app.advance(60);
    // The mode already in force: nothing changes, since included.
    let same = app
        .post(&live, "/v1/enforcement", json!({"mode": "enforce"}))
        .await;
    assert_eq!(same.status, 200, "{}", same.text);
    assert_eq!(
        same.body,
        json!({"mode": "enforce", "since": "2026-11-22T12:01:00Z",
               "organization": "acme", "environment": "live"})
    );
    let read = app.get(&live, "/v1/enforcement").await;
    assert_eq!(read.body, same.body);

    app.advance(60);
    let back = app
        .post(&live, "/v1/enforcement", json!({"mode": "observe"}))
        .await;
    assert_eq!(
        back.body,
        json!({"mode": "observe", "since": "2026-11-22T12:03:00Z",
               "organization": "acme", "environment": "live"})
    );
    app.advance(60);
    let same = app
        .post(&live, "/v1/enforcement", json!({"mode": "observe"}))
        .await;
    assert_eq!(same.body["since"], "2026-11-22T12:03:00Z");
    // The sandbox, already in enforce, keeps its original since.
    let sandbox = app
        .post(
            &app.org.sandbox,
            "/v1/enforcement",
            json!({"mode": "enforce"}),
        )
        .await;
    assert_eq!(
        sandbox.body,
        json!({"mode": "enforce", "since": "2026-11-22T12:00:00Z",
               "organization": "acme", "environment": "sandbox"})
    );
}

#[mandate_test_macros::on_each_engine]
async fn bad_modes_and_agent_keys_are_refused() {
    let app = spawn_app().await;
    let live = app.org.live.clone();
    for body in [
        r#"{"mode": "block"}"#,
        r#"{"mode": "Enforce"}"#,
        r#"{"mode": ""}"#,
        r#"{"mode": 1}"#,
        r#"{"mode": null}"#,
    ] {
        let r = app.post_text(&live, "/v1/enforcement", body).await;
        let message = r.assert_error(400, "invalid_request");
        assert!(message.contains("mode"), "{body}: {message}");
    }
    let r = app.post_text(&live, "/v1/enforcement", "{}").await;
    assert_eq!(r.assert_error(400, "invalid_request"), "mode is required");
    let r = app
        .post(&live, "/v1/enforcement", json!({"mode": "enforce", "x": 1}))
        .await;
    assert_eq!(r.assert_error(400, "invalid_request"), "unknown field x");
    let r = app
        .post(
            &live,
            "/v1/enforcement",
            json!({"mode": "enforce", "since": "2026-01-01T00:00:00Z"}),
        )
        .await;
    assert_eq!(
        r.assert_error(400, "invalid_request"),
        "since is read-only and cannot be set"
    );
    app.post_empty(&live, "/v1/enforcement")
        .await
        .assert_error(400, "invalid_request");
    // The read refuses an unknown query parameter, as the lists do, instead of ignoring it.
    let r = app.get(&live, "/v1/enforcement?x=1").await;
    assert_eq!(
        r.assert_error(400, "invalid_request"),
        "unknown query parameter x; GET /v1/enforcement takes no query parameters"
    );
    // None of the refused bodies switched anything.
    assert_eq!(
        app.get(&live, "/v1/enforcement").await.body["mode"],
        "observe"
    );

    let agent = app.agent(&live, "meddler").await;
    app.post(&agent, "/v1/enforcement", json!({"mode": "enforce"}))
        .await
        .assert_error(403, "forbidden");
    app.get(&agent, "/v1/enforcement")
        .await
        .assert_error(403, "forbidden");
    assert_eq!(
        app.get(&live, "/v1/enforcement").await.body["mode"],
        "observe"
    );
}

#[mandate_test_macros::on_each_engine]
async fn switching_the_sandbox_leaves_live_alone() {
    let app = spawn_app().await;
    let sandbox = app.org.sandbox.clone();
    let live = app.org.live.clone();
    let sandbox_agent = app.standard_agent(&sandbox, "sbx").await;
    let live_agent = app.standard_agent(&live, "prd").await;
    app.advance(10);

    let r = app
        .post(&sandbox, "/v1/enforcement", json!({"mode": "observe"}))
        .await;
    assert_eq!(
        r.body,
        json!({"mode": "observe", "since": "2026-11-22T12:00:10Z",
               "organization": "acme", "environment": "sandbox"})
    );
    assert_eq!(
        app.get(&live, "/v1/enforcement").await.body,
        json!({"mode": "observe", "since": "2026-11-22T12:00:00Z",
               "organization": "acme", "environment": "live"})
    );
    let r = app
        .post(&live, "/v1/enforcement", json!({"mode": "enforce"}))
        .await;
    assert_eq!(r.body["mode"], "enforce");
    assert_eq!(
        app.get(&sandbox, "/v1/enforcement").await.body["mode"],
        "observe"
    );
    // Each environment's decisions follow its own mode.
    let s = app.authorize(&sandbox_agent, "150", "software").await;
    assert_eq!(
        (s.body["verdict"].as_str(), s.body["mode"].as_str()),
        (Some("allow"), Some("observe"))
    );
    let l = app.authorize(&live_agent, "150", "software").await;
    assert_eq!(
        (l.body["verdict"].as_str(), l.body["mode"].as_str()),
        (Some("deny_limit"), Some("enforce"))
    );
    // Another organization's environments are separate too.
    let other = app.onboard("other").await;
    assert_eq!(
        app.get(&other.sandbox, "/v1/enforcement").await.body["mode"],
        "enforce"
    );
    assert_eq!(
        app.get(&other.live, "/v1/enforcement").await.body["mode"],
        "observe"
    );
}
