//! Every stored decision's `verdict_token` on reads (issue #35): `GET /v1/decisions/{id}`,
//! the list and the export give back the token answered, byte for byte; an agent key reads
//! its own only; the fresh decision an approval made is reachable from the original through
//! `review_resolution`; decisions stored without a signature read `null`.

use mandate_core::{VerifyOptions, verify_verdict};
use serde_json::Value;

use crate::helpers::{TestApp, spawn_app};

fn options(app: &TestApp) -> VerifyOptions {
    VerifyOptions {
        issuer: app.issuer(),
        now: app.clock_now(),
        leeway_secs: 0,
    }
}

/// The decision of `id` as the list and the export show it to `key`.
async fn listed(app: &TestApp, key: &str, id: &str) -> (Value, Value) {
    let list = app.get(key, "/v1/decisions?limit=100").await;
    assert_eq!(list.status, 200, "{}", list.text);
    let in_list = list.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["id"] == id)
        .cloned()
        .unwrap_or(Value::Null);
    let export = app.get(key, "/v1/exports/decisions").await;
    assert_eq!(export.status, 200, "{}", export.text);
    let in_export = export
        .text
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .find(|d| d["id"] == id)
        .unwrap_or(Value::Null);
    (in_list, in_export)
}

#[mandate_test_macros::on_each_engine]
async fn every_read_of_a_decision_carries_the_token_answered_byte_for_byte() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "buyer").await;
    // An allow, a denial (deny_category) and a review: every decision is signed.
    for (amount, category) in [("20.00", "software"), ("5", "food"), ("60.5", "travel")] {
        let answer = app.authorize(&agent, amount, category).await;
        assert_eq!(answer.status, 201, "{}", answer.text);
        let id = answer.body["id"].as_str().unwrap();
        let token = answer.body["verdict_token"].as_str().unwrap();
        for key in [&org, &agent] {
            let read = app.get(key, &format!("/v1/decisions/{id}")).await;
            assert_eq!(read.status, 200, "{}", read.text);
            assert_eq!(read.body["verdict_token"], token, "{}", read.text);
            let (in_list, in_export) = listed(&app, key, id).await;
            assert_eq!(in_list["verdict_token"], token);
            assert_eq!(in_export["verdict_token"], token);
        }
    }
    // The allow's token, read back, verifies against the published key set.
    let list = app.get(&agent, "/v1/decisions?verdict=allow").await;
    let token = list.body["data"][0]["verdict_token"].as_str().unwrap();
    let claims = verify_verdict(token, &app.jwks().await, &options(&app)).unwrap();
    assert_eq!(claims.request.amount.to_string(), "20.00");
}

#[mandate_test_macros::on_each_engine]
async fn an_agent_key_reads_its_own_tokens_and_never_another_agents() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let mine = app.standard_agent(&org, "mine").await;
    let theirs = app.standard_agent(&org, "theirs").await;
    let answer = app.authorize(&theirs, "10", "software").await;
    let id = answer.body["id"].as_str().unwrap();
    let read = app.get(&mine, &format!("/v1/decisions/{id}")).await;
    read.assert_error(404, "not_found");
    assert!(!read.text.contains("eyJ"), "{}", read.text);
    let (in_list, in_export) = listed(&app, &mine, id).await;
    assert_eq!(in_list, Value::Null);
    assert_eq!(in_export, Value::Null);
    let asked = app
        .get(&mine, "/v1/decisions?agent=agt_theirs&limit=100")
        .await;
    assert_eq!(asked.body["data"], serde_json::json!([]), "{}", asked.text);
    // Its owner reads it.
    let own = app.get(&theirs, &format!("/v1/decisions/{id}")).await;
    assert_eq!(own.body["verdict_token"], answer.body["verdict_token"]);
}

#[mandate_test_macros::on_each_engine]
async fn the_agent_reaches_the_approved_decision_and_its_token_from_the_original() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "buyer").await;
    let asked = app.authorize(&agent, "75.25", "software").await;
    assert_eq!(asked.body["verdict"], "review", "{}", asked.text);
    let original = asked.body["id"].as_str().unwrap().to_owned();
    let review = asked.body["review"]["id"].as_str().unwrap().to_owned();
    // Pending: no resolution yet.
    let pending = app.get(&agent, &format!("/v1/decisions/{original}")).await;
    assert_eq!(pending.body["review_status"], "pending");
    assert!(
        pending.body.get("review_resolution").is_none(),
        "{}",
        pending.text
    );
    let approved = app
        .post_empty(&org, &format!("/v1/reviews/{review}/approve"))
        .await;
    assert_eq!(approved.status, 201, "{}", approved.text);
    let fresh = approved.body["id"].as_str().unwrap();
    // The agent, which never saw the approval's answer, follows the original to it.
    let read = app.get(&agent, &format!("/v1/decisions/{original}")).await;
    assert_eq!(read.body["review_status"], "approved");
    assert_eq!(read.body["review_resolution"], fresh, "{}", read.text);
    let fresh_read = app.get(&agent, &format!("/v1/decisions/{fresh}")).await;
    assert_eq!(fresh_read.status, 200, "{}", fresh_read.text);
    assert_eq!(fresh_read.body["supersedes"], original.as_str());
    let token = fresh_read.body["verdict_token"].as_str().unwrap();
    assert_eq!(token, approved.body["verdict_token"].as_str().unwrap());
    let claims = verify_verdict(token, &app.jwks().await, &options(&app)).unwrap();
    assert_eq!(claims.jti.as_str(), fresh);
    // Another agent reaches neither.
    let other = app.standard_agent(&org, "other").await;
    app.get(&other, &format!("/v1/decisions/{fresh}"))
        .await
        .assert_error(404, "not_found");
    app.get(&other, &format!("/v1/decisions/{original}"))
        .await
        .assert_error(404, "not_found");
}

#[mandate_test_macros::on_each_engine]
async fn a_decision_stored_without_a_signature_reads_a_null_token() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "buyer").await;
    let answer = app.authorize(&agent, "10", "software").await;
    let id = answer.body["id"].as_str().unwrap();
    // As a decision stored before the signatures were kept (migration 0009 / 0002).
    app.db.execute(
        "UPDATE decisions SET signing_kid = NULL, signature = NULL WHERE id = $1",
        &[id],
    );
    let read = app.get(&agent, &format!("/v1/decisions/{id}")).await;
    assert_eq!(read.status, 200, "{}", read.text);
    assert_eq!(read.body["verdict_token"], Value::Null, "{}", read.text);
    assert!(read.body.as_object().unwrap().contains_key("verdict_token"));
    let (in_list, in_export) = listed(&app, &agent, id).await;
    assert_eq!(in_list["verdict_token"], Value::Null);
    assert!(in_list.as_object().unwrap().contains_key("verdict_token"));
    assert_eq!(in_export["verdict_token"], Value::Null);
}
