//! GET /v1/decisions/{id} and GET /v1/decisions: the record of every verdict, with the
//! claim names of the signed token.

use std::collections::BTreeSet;

use mandate_core::{VerifyOptions, verify_verdict};
use serde_json::Value;

use crate::helpers::{Resp, TestApp, spawn_app};

/// The members of a decision read from the log (its token included, #35; its place in the
/// decision log, #53).
const FIELDS: [&str; 18] = [
    "verdict_token",
    "log",
    "id",
    "jti",
    "iss",
    "iat",
    "exp",
    "verdict",
    "policy_verdict",
    "mandate",
    "policy_version",
    "nonce",
    "request",
    "mode",
    "reason",
    "supersedes",
    "review",
    "created_at",
];

fn keys(value: &Value) -> BTreeSet<String> {
    value.as_object().unwrap().keys().cloned().collect()
}

fn ids(r: &Resp) -> Vec<String> {
    r.body["data"]
        .as_array()
        .unwrap_or_else(|| panic!("{}", r.text))
        .iter()
        .map(|d| d["id"].as_str().unwrap().to_owned())
        .collect()
}

async fn list(app: &TestApp, key: &str, query: &str) -> Vec<String> {
    let r = app.get(key, &format!("/v1/decisions{query}")).await;
    assert_eq!(r.status, 200, "{query}: {}", r.text);
    ids(&r)
}

#[mandate_test_macros::on_each_engine]
async fn a_decision_reads_back_with_every_field_and_matches_its_token() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "reader").await;
    let made = app.authorize(&agent, "12.50", "travel").await;
    assert_eq!(made.status, 201, "{}", made.text);
    let id = made.body["id"].as_str().unwrap().to_owned();

    app.advance(30);
    let r = app.get(&org, &format!("/v1/decisions/{id}")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let d = &r.body;
    let expected: BTreeSet<String> = FIELDS.iter().map(|s| (*s).to_owned()).collect();
    assert_eq!(keys(d), expected);
    assert!(id.starts_with("dec_"));
    assert_eq!(d["id"], id.as_str());
    assert_eq!(d["jti"], id.as_str());
    assert_eq!(d["iss"], app.issuer());
    let iat = d["iat"].as_i64().unwrap();
    assert_eq!(iat, crate::helpers::START.unix_timestamp());
    assert_eq!(d["exp"].as_i64().unwrap(), iat + 300);
    assert_eq!(d["verdict"], "allow");
    assert_eq!(d["policy_verdict"], "allow");
    assert!(d["mandate"].as_str().unwrap().starts_with("mnd_"));
    assert!(
        d["policy_version"]
            .as_str()
            .unwrap()
            .starts_with("pol_2026-11-22.")
    );
    assert!(d["nonce"].as_str().unwrap().starts_with("n_"));
    let request: Value = serde_json::from_str(
        r#"{"agent": "agt_reader", "amount": 12.50, "currency": "USD",
            "recipient": "vendor:acme", "category": "travel"}"#,
    )
    .unwrap();
    assert_eq!(d["request"], request);
    assert!(r.text.contains(r#""amount":12.50"#), "{}", r.text);
    assert_eq!(d["mode"], "enforce");
    assert!(d["reason"].is_null());
    assert!(d["supersedes"].is_null());
    assert!(d["review"].is_null());
    assert_eq!(d["created_at"], "2026-11-22T12:00:00Z");

    // The record is the authorization response without the token, and the token carries
    // the same claims.
    let mut response = made.body.clone();
    let token = response
        .as_object_mut()
        .unwrap()
        .remove("verdict_token")
        .unwrap();
    // Read back, it carries the same token, byte for byte (#35).
    assert_eq!(d["verdict_token"], token);
    let mut read_back = d.clone();
    read_back.as_object_mut().unwrap().remove("verdict_token");
    // Its place in the decision log is read beside it, not answered with it.
    read_back.as_object_mut().unwrap().remove("log");
    assert_eq!(response, read_back);
    let options = VerifyOptions {
        issuer: app.issuer(),
        now: app.clock_now(),
        leeway_secs: 0,
    };
    let claims = verify_verdict(token.as_str().unwrap(), &app.jwks().await, &options).unwrap();
    let from_claims = serde_json::to_value(&claims).unwrap();
    assert_eq!(keys(&from_claims).len(), 10);
    for (name, value) in from_claims.as_object().unwrap() {
        assert_eq!(&d[name.as_str()], value, "claim {name}");
    }

    // The agent reads its own decision identically, but for its place in the log: the
    // checkpoint worker may log it between the two reads, and then the second carries it.
    let own = app.get(&agent, &format!("/v1/decisions/{id}")).await;
    let without_log = |body: &Value| {
        let mut body = body.clone();
        body.as_object_mut().unwrap().remove("log");
        body
    };
    assert_eq!(without_log(&own.body), without_log(&r.body));
    if !r.body["log"].is_null() {
        assert_eq!(own.body["log"]["index"], r.body["log"]["index"]);
    }
    app.get(&org, "/v1/decisions/dec_missing")
        .await
        .assert_error(404, "not_found");
}

#[mandate_test_macros::on_each_engine]
async fn denials_reviews_and_approvals_fill_their_fields() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let lonely = app.agent(&org, "lonely").await;
    let r = app.authorize(&lonely, "1", "software").await;
    let none = app
        .get(
            &org,
            &format!("/v1/decisions/{}", r.body["id"].as_str().unwrap()),
        )
        .await;
    assert_eq!(none.body["verdict"], "deny_no_mandate");
    assert!(none.body["reason"].as_str().is_some());
    // Without a mandate there is no mandate claim.
    assert!(none.body["mandate"].is_null(), "{}", none.text);

    let agent = app.standard_agent(&org, "reviewed").await;
    let denied = app.authorize(&agent, "101", "software").await;
    let d = app
        .get(
            &org,
            &format!("/v1/decisions/{}", denied.body["id"].as_str().unwrap()),
        )
        .await;
    assert_eq!(d.body["verdict"], "deny_limit");
    assert_eq!(d.body["policy_verdict"], "deny_limit");
    assert_eq!(
        d.body["reason"],
        "amount 101 exceeds per_transaction limit 100"
    );

    let review = app.authorize(&agent, "75", "software").await;
    let original = review.body["id"].as_str().unwrap().to_owned();
    let review_id = review.body["review"]["id"].as_str().unwrap().to_owned();
    let d = app.get(&org, &format!("/v1/decisions/{original}")).await;
    assert_eq!(d.body["verdict"], "review");
    assert_eq!(d.body["review"], review_id.as_str());

    app.advance(10);
    let approved = app
        .post_empty(&org, &format!("/v1/reviews/{review_id}/approve"))
        .await;
    assert_eq!(approved.status, 201, "{}", approved.text);
    let fresh = approved.body["id"].as_str().unwrap().to_owned();
    assert_ne!(fresh, original);
    let d = app.get(&org, &format!("/v1/decisions/{fresh}")).await;
    let expected: BTreeSet<String> = FIELDS.iter().map(|s| (*s).to_owned()).collect();
    assert_eq!(keys(&d.body), expected);
    assert_eq!(d.body["verdict"], "allow");
    assert_eq!(d.body["supersedes"], original.as_str());
    assert_eq!(d.body["request"]["amount"].to_string(), "75");
    assert_eq!(d.body["created_at"], "2026-11-22T12:00:10Z");
    assert_ne!(d.body["nonce"], review.body["nonce"]);
    // The original stays in the log as it was.
    let o = app.get(&org, &format!("/v1/decisions/{original}")).await;
    assert_eq!(o.body["verdict"], "review");
    assert!(o.body["supersedes"].is_null());
    assert_eq!(list(&app, &org, "?agent=agt_reviewed").await.len(), 3);
}

#[mandate_test_macros::on_each_engine]
async fn list_filters_on_verdict_policy_verdict_and_agent() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let a = app.standard_agent(&org, "a").await;
    let b = app.standard_agent(&org, "b").await;
    let id = |r: &Resp| r.body["id"].as_str().unwrap().to_owned();
    let a_allow = id(&app.authorize(&a, "1", "software").await);
    let a_category = id(&app.authorize(&a, "1", "food").await);
    let b_allow = id(&app.authorize(&b, "2", "software").await);
    let b_limit = id(&app.authorize(&b, "500", "software").await);
    let b_review = id(&app.authorize(&b, "60", "travel").await);

    assert_eq!(
        list(&app, &org, "").await,
        [
            b_review.as_str(),
            b_limit.as_str(),
            b_allow.as_str(),
            a_category.as_str(),
            a_allow.as_str()
        ]
    );
    assert_eq!(
        list(&app, &org, "?verdict=allow").await,
        [b_allow.as_str(), a_allow.as_str()]
    );
    assert_eq!(
        list(&app, &org, "?verdict=deny_category").await,
        [a_category.as_str()]
    );
    assert_eq!(
        list(&app, &org, "?verdict=review").await,
        [b_review.as_str()]
    );
    assert!(list(&app, &org, "?verdict=deny_revoked").await.is_empty());
    assert_eq!(
        list(&app, &org, "?agent=agt_a").await,
        [a_category.as_str(), a_allow.as_str()]
    );
    assert_eq!(
        list(&app, &org, "?agent=agt_b&verdict=deny_limit").await,
        [b_limit.as_str()]
    );
    assert!(
        list(&app, &org, "?agent=agt_a&verdict=deny_limit")
            .await
            .is_empty()
    );
    assert!(list(&app, &org, "?agent=agt_nobody").await.is_empty());
    // In enforce, policy_verdict equals verdict.
    assert_eq!(
        list(&app, &org, "?policy_verdict=allow").await,
        [b_allow.as_str(), a_allow.as_str()]
    );

    // In observe they differ, and each filter reads its own column.
    let live = app.org.live.clone();
    let l = app.standard_agent(&live, "l").await;
    // 150 is over per_transaction but, with the 1 after it, within per_month: an allow
    // returned in observe counts as spend.
    let observed = id(&app.authorize(&l, "150", "software").await);
    let plain = id(&app.authorize(&l, "1", "software").await);
    assert_eq!(
        list(&app, &live, "?verdict=allow").await,
        [plain.as_str(), observed.as_str()]
    );
    assert_eq!(
        list(&app, &live, "?policy_verdict=deny_limit").await,
        [observed.as_str()]
    );
    assert!(list(&app, &live, "?verdict=deny_limit").await.is_empty());
    assert_eq!(
        list(&app, &live, "?verdict=allow&policy_verdict=allow").await,
        [plain.as_str()]
    );

    for query in [
        "?verdict=deny",
        "?verdict=ALLOW",
        "?verdict=",
        "?policy_verdict=maybe",
        "?verdict=allow&verdict=review",
    ] {
        let r = app.get(&org, &format!("/v1/decisions{query}")).await;
        let message = r.assert_error(400, "invalid_request");
        assert!(message.contains("verdict"), "{query}: {message}");
    }
    let r = app.get(&org, "/v1/decisions?verdict=nope").await;
    let message = r.assert_error(400, "invalid_request");
    assert!(message.contains("deny_expired"), "{message}");
}

#[mandate_test_macros::on_each_engine]
async fn an_agent_key_lists_only_its_own_decisions() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let a = app.standard_agent(&org, "a").await;
    let b = app.standard_agent(&org, "b").await;
    let a_made = crate::lists::make_decisions(&app, &a, 3).await;
    let b_made = crate::lists::make_decisions(&app, &b, 2).await;

    let mut a_newest: Vec<_> = a_made.clone();
    a_newest.reverse();
    assert_eq!(list(&app, &a, "").await, a_newest);
    assert_eq!(list(&app, &a, "?agent=agt_a").await, a_newest);
    assert_eq!(list(&app, &a, "?verdict=allow").await, a_newest);
    // Asking for another agent's decisions gives nothing, not theirs.
    assert!(list(&app, &a, "?agent=agt_b").await.is_empty());
    assert!(
        list(&app, &a, "?agent=agt_b&verdict=allow")
            .await
            .is_empty()
    );
    let mut b_newest = b_made.clone();
    b_newest.reverse();
    assert_eq!(list(&app, &b, "").await, b_newest);
    for other in &b_made {
        app.get(&a, &format!("/v1/decisions/{other}"))
            .await
            .assert_error(404, "not_found");
    }
    // The organization sees all of them.
    assert_eq!(list(&app, &org, "").await.len(), 5);
}
