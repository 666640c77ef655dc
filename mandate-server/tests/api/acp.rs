//! ACP delegated payment allowances through the API (issue #51): `POST /v1/authorizations`
//! with `acp: {allowance}` is decided on the allowance's maximum, bound to it (the
//! `acp_allowance` and `acp_checkout_session` claims, checked by `Counterparty::check`),
//! accepted once per checkout session (`deny_replay` after, also for two requests at once;
//! a denied one is not used up), and refused naming the allowance's member when the
//! request is not the allowance. Runs on both engines.

use base64::Engine as _;
use mandate_core::{
    Allowance, Counterparty, EnvironmentPolicy, ExpectedTransaction, MemoryReplayGuard,
};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use time::format_description::well_known::Rfc3339;

use crate::helpers::{Resp, TestApp, spawn_app};

/// An allowance of `max` minor units of `usd` to `acme_store` for `session`, expiring
/// an hour after the server's clock.
fn allowance(app: &TestApp, max: u64, session: &str) -> Value {
    let expires = (app.clock_now() + time::Duration::hours(1))
        .format(&Rfc3339)
        .unwrap();
    json!({"reason": "one_time", "max_amount": max, "currency": "usd",
           "checkout_session_id": session, "merchant_id": "acme_store",
           "expires_at": expires})
}

async fn ask(app: &TestApp, key: &str, amount: &str, recipient: &str, acp: &Value) -> Resp {
    app.post_text(
        key,
        "/v1/authorizations",
        &format!(
            r#"{{"amount": {amount}, "currency": "USD", "recipient": "{recipient}",
                "category": "software", "acp": {acp}}}"#
        ),
    )
    .await
}

fn claims(r: &Resp) -> Value {
    let token = r.body["verdict_token"].as_str().unwrap();
    let payload = token.split('.').nth(1).unwrap();
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

#[mandate_test_macros::on_each_engine]
async fn an_allowance_is_decided_on_its_maximum_bound_and_used_once_per_session() {
    let app = spawn_app().await;
    let key = app.standard_agent(&app.org.sandbox, "buyer").await;
    let granted = allowance(&app, 2000, "csn_1");
    let r = ask(
        &app,
        &key,
        "20.00",
        "vendor:acme_store",
        &json!({"allowance": granted}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.body["verdict"], "allow", "{}", r.text);
    // The digest, computed here from the canonical JSON written by hand (RFC 8785: members
    // sorted, no whitespace, the strings as sent, max_amount an integer).
    let canonical = format!(
        r#"{{"checkout_session_id":"csn_1","currency":"usd","expires_at":{},"max_amount":2000,"merchant_id":"acme_store","reason":"one_time"}}"#,
        granted["expires_at"]
    );
    let digest = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(Sha256::digest(canonical.as_bytes()));
    let c = claims(&r);
    assert_eq!(c["acp_allowance"], digest.as_str(), "{c}");
    assert_eq!(c["acp_checkout_session"], "csn_1");
    assert_eq!(r.body["acp_allowance"], digest.as_str());
    let read = app
        .get(
            &app.org.sandbox,
            &format!("/v1/decisions/{}", r.body["id"].as_str().unwrap()),
        )
        .await;
    assert_eq!(read.body["acp_checkout_session"], "csn_1", "{}", read.text);

    // The PSP checks the verdict against the allowance it holds, charging up to 20.00.
    let token = r.body["verdict_token"].as_str().unwrap();
    let held = Allowance::from_json(&granted, "allowance").unwrap();
    let counterparty =
        Counterparty::new(app.issuer()).environments(EnvironmentPolicy::LiveOrSandbox);
    let jwks = app.jwks().await;
    let charge = |amount: &str| {
        ExpectedTransaction::new(
            amount.parse().unwrap(),
            "USD".parse().unwrap(),
            "vendor:acme_store".parse().unwrap(),
        )
        .with_acp(held.clone())
    };
    let now = app.clock_now();
    let mut guard = MemoryReplayGuard::default();
    assert!(
        counterparty
            .check(token, &jwks, &charge("20.01"), &mut guard, now)
            .is_err()
    );
    counterparty
        .check(token, &jwks, &charge("18.40"), &mut guard, now)
        .unwrap();

    // The same checkout session again, even with another allowance: deny_replay.
    let again = allowance(&app, 1500, "csn_1");
    let r = ask(
        &app,
        &key,
        "15",
        "vendor:acme_store",
        &json!({"allowance": again}),
    )
    .await;
    assert_eq!(r.body["verdict"], "deny_replay", "{}", r.text);
    assert!(
        r.body["reason"].as_str().unwrap().contains("acp_"),
        "{}",
        r.text
    );

    // A denied one is not used up: over the mandate's 100 a payment, then within it.
    let big = allowance(&app, 15000, "csn_2");
    let r = ask(
        &app,
        &key,
        "150",
        "vendor:acme_store",
        &json!({"allowance": big}),
    )
    .await;
    assert_eq!(r.body["verdict"], "deny_limit", "{}", r.text);
    let small = allowance(&app, 1000, "csn_2");
    let r = ask(
        &app,
        &key,
        "10",
        "vendor:acme_store",
        &json!({"allowance": small}),
    )
    .await;
    assert_eq!(r.body["verdict"], "allow", "{}", r.text);

    // Two requests for one session at once: one allow.
    let twice = json!({"allowance": allowance(&app, 500, "csn_3")});
    let (a, b) = tokio::join!(
        ask(&app, &key, "5", "vendor:acme_store", &twice),
        ask(&app, &key, "5", "vendor:acme_store", &twice),
    );
    let mut verdicts = [
        a.body["verdict"].as_str().unwrap().to_owned(),
        b.body["verdict"].as_str().unwrap().to_owned(),
    ];
    verdicts.sort();
    assert_eq!(
        verdicts,
        ["allow", "deny_replay"],
        "{} / {}",
        a.text,
        b.text
    );
}

#[mandate_test_macros::on_each_engine]
async fn a_request_that_is_not_its_allowance_is_refused_naming_the_member() {
    let app = spawn_app().await;
    let key = app.standard_agent(&app.org.sandbox, "buyer").await;
    let granted = json!({"allowance": allowance(&app, 2000, "csn_1")});
    for (amount, currency_recipient, named) in [
        (
            "19.99",
            "vendor:acme_store",
            "acp.allowance.max_amount does not match the request",
        ),
        (
            "20.01",
            "vendor:acme_store",
            "acp.allowance.max_amount does not match the request",
        ),
        (
            "20",
            "vendor:other",
            "acp.allowance.merchant_id does not match the request",
        ),
        (
            "20",
            "vendor:ACME_STORE",
            "acp.allowance.merchant_id does not match the request",
        ),
    ] {
        let r = ask(&app, &key, amount, currency_recipient, &granted).await;
        let message = r.assert_error(400, "invalid_request");
        assert!(message.starts_with(named), "{message}");
    }
    let eur = app
        .post_text(
            &key,
            "/v1/authorizations",
            &format!(
                r#"{{"amount": 20, "currency": "EUR", "recipient": "vendor:acme_store",
                    "category": "software", "acp": {granted}}}"#
            ),
        )
        .await;
    let message = eur.assert_error(400, "invalid_request");
    assert!(
        message.starts_with("acp.allowance.currency does not match"),
        "{message}"
    );
    // Malformed allowances and members, each named.
    let mut bad_reason = allowance(&app, 2000, "csn_1");
    bad_reason["reason"] = json!("recurring");
    let mut extra = allowance(&app, 2000, "csn_1");
    extra["spend_limit"] = json!(1);
    let mut fractional = allowance(&app, 2000, "csn_1");
    fractional["max_amount"] = json!(2000.5);
    for (acp, named) in [
        (json!({"allowance": bad_reason}), "acp.allowance.reason"),
        (
            json!({"allowance": extra}),
            "unknown field acp.allowance.spend_limit",
        ),
        (
            json!({"allowance": fractional}),
            "acp.allowance.max_amount must be a whole number",
        ),
        (
            json!("csn_1"),
            "acp must be an object with one member, allowance",
        ),
        (
            json!({"allowance": {}, "mandate": 1}),
            "acp.mandate is not a member of acp",
        ),
    ] {
        let r = ask(&app, &key, "20", "vendor:acme_store", &acp).await;
        let message = r.assert_error(400, "invalid_request");
        assert!(message.starts_with(named), "{message}");
    }
    // With ap2 too: one credential a request.
    let both = app
        .post_text(
            &key,
            "/v1/authorizations",
            &format!(
                r#"{{"amount": 20, "currency": "USD", "recipient": "vendor:acme_store",
                    "category": "software", "acp": {granted}, "ap2": {{"closed_mandate": "x~~y~"}}}}"#
            ),
        )
        .await;
    let message = both.assert_error(400, "invalid_request");
    assert!(
        message.starts_with("acp and ap2 cannot be sent together"),
        "{message}"
    );
    // At and after expires_at: refused; nothing of the above was consumed.
    app.advance(3600);
    let r = ask(&app, &key, "20", "vendor:acme_store", &granted).await;
    let message = r.assert_error(400, "invalid_request");
    assert!(
        message.starts_with("acp.allowance.expires_at does not match"),
        "{message}"
    );
    let fresh = json!({"allowance": allowance(&app, 2000, "csn_1")});
    let r = ask(&app, &key, "20", "vendor:acme_store", &fresh).await;
    assert_eq!(r.body["verdict"], "allow", "{}", r.text);
}
