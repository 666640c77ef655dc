//! POST /v1/authorizations: verdicts per the engine, signed, durable.

use mandate_core::{VerifyOptions, verify_verdict};
use serde_json::json;

use crate::helpers::{spawn_app, standard_mandate};

#[mandate_test_macros::on_each_engine]
async fn allow_review_and_each_denial_over_http() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "buyer").await;

    let r = app.authorize(&agent, "49.99", "software").await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.body["verdict"], "allow");
    assert_eq!(r.body["policy_verdict"], "allow");
    assert_eq!(r.body["request"]["amount"].to_string(), "49.99");
    assert!(r.body["id"].as_str().unwrap().starts_with("dec_"));
    assert_eq!(r.body["id"], r.body["jti"]);
    assert_eq!(
        r.body["exp"].as_i64().unwrap() - r.body["iat"].as_i64().unwrap(),
        300
    );
    assert!(r.body["nonce"].as_str().unwrap().starts_with("n_"));
    assert!(
        r.body["policy_version"]
            .as_str()
            .unwrap()
            .starts_with("pol_2026-11-22.")
    );
    assert_eq!(r.body["mode"], "enforce");

    let review = app.authorize(&agent, "60", "software").await;
    assert_eq!(review.status, 201);
    assert_eq!(review.body["verdict"], "review");
    assert!(
        review.body["review"]["id"]
            .as_str()
            .unwrap()
            .starts_with("rev_")
    );
    assert_eq!(review.body["review"]["status"], "pending");

    let category = app.authorize(&agent, "10", "food").await;
    assert_eq!(category.status, 201);
    assert_eq!(category.body["verdict"], "deny_category");

    let limit = app.authorize(&agent, "100.50", "software").await;
    assert_eq!(limit.body["verdict"], "deny_limit");
    assert_eq!(
        limit.body["reason"],
        "amount 100.50 exceeds per_transaction limit 100"
    );

    let currency = app
        .post_text(
            &agent,
            "/v1/authorizations",
            r#"{"amount": 5, "currency": "EUR", "recipient": "vendor:a", "category": "software"}"#,
        )
        .await;
    assert_eq!(currency.body["verdict"], "deny_limit");

    // Every verdict is signed and verifies against the published key set.
    let jwks = app.jwks().await;
    let options = VerifyOptions {
        issuer: app.issuer(),
        now: app.clock_now(),
        leeway_secs: 0,
    };
    for response in [&r, &review, &category, &limit, &currency] {
        let claims = verify_verdict(
            response.body["verdict_token"].as_str().unwrap(),
            &jwks,
            &options,
        )
        .unwrap();
        assert_eq!(claims.jti.as_str(), response.body["id"].as_str().unwrap());
        assert_eq!(
            claims.verdict.as_str(),
            response.body["verdict"].as_str().unwrap()
        );
        assert_eq!(
            claims.request.amount.to_string(),
            response.body["request"]["amount"].to_string()
        );
        assert!(claims.iss.starts_with("http://127.0.0.1:"));
    }
}

#[mandate_test_macros::on_each_engine]
async fn no_mandate_revoked_and_expired() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.agent(&org, "lonely").await;
    let r = app.authorize(&agent, "1", "software").await;
    assert_eq!(r.body["verdict"], "deny_no_mandate");
    assert!(r.body.get("mandate").is_none() || r.body["mandate"].is_null());

    let mandate = app.mandate(&org, &standard_mandate("lonely")).await;
    assert_eq!(
        app.authorize(&agent, "1", "software").await.body["verdict"],
        "allow"
    );
    let id = mandate["id"].as_str().unwrap();
    let revoked = app
        .post_empty(&org, &format!("/v1/mandates/{id}/revoke"))
        .await;
    assert_eq!(revoked.status, 200, "{}", revoked.text);
    assert_eq!(revoked.body["status"], "revoked");
    let r = app.authorize(&agent, "1", "software").await;
    assert_eq!(r.body["verdict"], "deny_revoked");

    // A new mandate supersedes; then it expires at the end of its date (UTC).
    app.mandate(
        &org,
        &standard_mandate("lonely").replace("2026-12-31", "2026-11-22"),
    )
    .await;
    assert_eq!(
        app.authorize(&agent, "1", "software").await.body["verdict"],
        "allow"
    );
    app.clock
        .set(time::macros::datetime!(2026-11-22 23:59:59 UTC));
    assert_eq!(
        app.authorize(&agent, "1", "software").await.body["verdict"],
        "allow"
    );
    app.advance(1);
    let expired = app.authorize(&agent, "1", "software").await;
    assert_eq!(expired.body["verdict"], "deny_expired");
    assert!(
        expired.body["reason"]
            .as_str()
            .unwrap()
            .contains("2026-11-22")
    );
}

#[mandate_test_macros::on_each_engine]
async fn velocity_counts_every_request_and_the_eleventh_is_denied() {
    let app = spawn_app().await;
    let agent = app.standard_agent(&app.org.sandbox.clone(), "fast").await;
    for i in 0..10 {
        let verdict = if i % 2 == 0 { "software" } else { "food" };
        let r = app.authorize(&agent, "1", verdict).await;
        assert_ne!(r.body["verdict"], "deny_velocity", "request {}", i + 1);
    }
    let r = app.authorize(&agent, "1", "software").await;
    assert_eq!(r.body["verdict"], "deny_velocity");
    app.advance(60);
    assert_eq!(
        app.authorize(&agent, "1", "software").await.body["verdict"],
        "allow"
    );
}

#[mandate_test_macros::on_each_engine]
async fn per_month_counts_allowed_spend_and_resets_next_month() {
    let app = spawn_app().await;
    let agent = app
        .standard_agent(&app.org.sandbox.clone(), "monthly")
        .await;
    for _ in 0..9 {
        assert_eq!(
            app.authorize(&agent, "50", "software").await.body["verdict"],
            "allow"
        );
        app.advance(10);
    }
    let r = app.authorize(&agent, "0.01", "software").await;
    assert_eq!(r.body["verdict"], "deny_limit");
    assert_eq!(
        r.body["reason"],
        "month-to-date spend 450 plus amount 0.01 exceeds per_month limit 450"
    );
    app.clock.set(time::macros::datetime!(2026-12-01 00:00 UTC));
    assert_eq!(
        app.authorize(&agent, "50", "software").await.body["verdict"],
        "allow"
    );
}

#[mandate_test_macros::on_each_engine]
async fn bad_bodies_are_400_naming_the_field() {
    let app = spawn_app().await;
    let agent = app.standard_agent(&app.org.sandbox.clone(), "sloppy").await;
    let cases = [
        (
            r#"{"currency": "USD", "recipient": "vendor:a", "category": "x"}"#,
            "amount is required",
        ),
        (
            r#"{"amount": "5", "currency": "USD", "recipient": "vendor:a", "category": "x"}"#,
            "amount must be a plain decimal number such as 12.50",
        ),
        (
            r#"{"amount": 5, "currency": "USD", "recipient": "vendor:a", "category": "x", "memo": 1}"#,
            "unknown field memo",
        ),
        (
            r#"{"amount": 5, "currency": "usd", "recipient": "vendor:a", "category": "x"}"#,
            "currency must be three upper-case letters, for example USD",
        ),
        (
            r#"{"amount": -5, "currency": "USD", "recipient": "vendor:a", "category": "x"}"#,
            "amount must be >= 0",
        ),
        (r#"{"amount": 5,"#, "malformed JSON body"),
        (r#"[1]"#, "body must be a JSON object"),
    ];
    for (body, message) in cases {
        let r = app.post_text(&agent, "/v1/authorizations", body).await;
        let got = r.assert_error(400, "invalid_request");
        assert!(got.starts_with(message), "{body}: {got}");
    }
    let no_type = app
        .send(
            reqwest::Method::POST,
            Some(&agent),
            "/v1/authorizations",
            None,
            &[],
        )
        .await;
    no_type.assert_error(400, "invalid_request");
    let text = app
        .client
        .post(format!("{}/v1/authorizations", app.api))
        .header("authorization", format!("Bearer {agent}"))
        .header("content-type", "text/plain")
        .body(r#"{"amount": 1}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(text.status().as_u16(), 400);
    let big = format!(r#"{{"amount": 1, "pad": "{}"}}"#, "x".repeat(70 * 1024));
    let r = app.post_text(&agent, "/v1/authorizations", &big).await;
    assert_eq!(
        r.assert_error(400, "invalid_request"),
        "request body exceeds 64 KiB"
    );
    // Denials are not errors; no decision was stored for the bad requests.
    let list = app.get(&agent, "/v1/decisions").await;
    assert_eq!(list.body["data"].as_array().unwrap().len(), 0);
    let _ = json!(null);
}
