//! Verdicts bound to an x402 payment (issue #36): `POST /v1/authorizations` with an `x402`
//! member signs its digest as the `x402_payment` claim; every read of the decision (one,
//! list, export) gives back the same token with the claim; approving a review keeps the
//! binding; an x402 member that is malformed or not the request's payment is a 400 naming
//! the member. Runs on both engines.

use mandate_core::{PaymentRequirements, VerifyOptions, verify_verdict};
use serde_json::{Value, json};

use crate::helpers::{TestApp, spawn_app};

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";

/// The spec's example requirements (x402-specification-v2.md 5.1.1), 20 USDC.
fn requirements() -> Value {
    json!({
        "scheme": "exact",
        "network": "eip155:84532",
        "amount": "20000000",
        "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
        "payTo": PAY_TO,
        "maxTimeoutSeconds": 60,
        "extra": {"name": "USDC", "version": "2"}
    })
}

fn body(amount: &str, x402: &Value) -> String {
    format!(
        r#"{{"amount": {amount}, "currency": "USD", "recipient": "vendor:{PAY_TO}", "category": "software", "x402": {x402}}}"#
    )
}

fn digest(x402: &Value) -> String {
    mandate_protocol::x402::digest(&PaymentRequirements::from_json(x402, "x402").unwrap())
}

async fn reads(app: &TestApp, key: &str, id: &str) -> Vec<Value> {
    let one = app.get(key, &format!("/v1/decisions/{id}")).await;
    assert_eq!(one.status, 200, "{}", one.text);
    let list = app.get(key, "/v1/decisions?limit=100").await;
    let listed = list.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["id"] == id)
        .cloned()
        .unwrap();
    let export = app.get(key, "/v1/exports/decisions").await;
    let exported = export
        .text
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .find(|d| d["id"] == id)
        .unwrap();
    vec![one.body, listed, exported]
}

fn options(app: &TestApp) -> VerifyOptions {
    VerifyOptions {
        issuer: app.issuer(),
        now: app.clock_now(),
        leeway_secs: 0,
    }
}

#[mandate_test_macros::on_each_engine]
async fn a_bound_verdict_carries_the_payment_digest_and_reads_back_byte_for_byte() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "buyer").await;
    let expected = digest(&requirements());
    let answer = app
        .post_text(
            &agent,
            "/v1/authorizations",
            &body("20.00", &requirements()),
        )
        .await;
    assert_eq!(answer.status, 201, "{}", answer.text);
    assert_eq!(answer.body["verdict"], "allow", "{}", answer.text);
    assert_eq!(answer.body["x402_payment"], expected.as_str());
    assert!(answer.body.get("ap2_mandate").is_none(), "{}", answer.text);
    let token = answer.body["verdict_token"].as_str().unwrap();
    let claims = verify_verdict(token, &app.jwks().await, &options(&app)).unwrap();
    assert_eq!(
        claims.bindings.x402_payment.as_deref(),
        Some(expected.as_str())
    );
    assert_eq!(claims.bindings.ap2_mandate, None);
    let id = answer.body["id"].as_str().unwrap();
    for key in [&org, &agent] {
        for read in reads(&app, key, id).await {
            assert_eq!(read["verdict_token"], token, "{read}");
            assert_eq!(read["x402_payment"], expected.as_str(), "{read}");
        }
    }
    // The client's PaymentPayload names the same payment: the same digest.
    let payload = json!({"x402Version": 2, "accepted": requirements(),
                         "payload": {"signature": "0x2d6a"}, "extensions": {}});
    let again = app
        .post_text(&agent, "/v1/authorizations", &body("20", &payload))
        .await;
    assert_eq!(again.status, 201, "{}", again.text);
    assert_eq!(again.body["x402_payment"], expected.as_str());
    // A request without x402 is bound to nothing: no claim, on the answer or a read.
    let plain = app.authorize(&agent, "10", "software").await;
    assert!(plain.body.get("x402_payment").is_none(), "{}", plain.text);
    let id = plain.body["id"].as_str().unwrap();
    for read in reads(&app, &agent, id).await {
        assert!(read.get("x402_payment").is_none(), "{read}");
        assert_eq!(read["verdict_token"], plain.body["verdict_token"]);
    }
}

#[mandate_test_macros::on_each_engine]
async fn approving_a_review_keeps_the_payment_binding() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "buyer").await;
    let mut x402 = requirements();
    x402["amount"] = json!("75250000");
    let asked = app
        .post_text(&agent, "/v1/authorizations", &body("75.25", &x402))
        .await;
    assert_eq!(asked.body["verdict"], "review", "{}", asked.text);
    let review = asked.body["review"]["id"].as_str().unwrap();
    let approved = app
        .post_empty(&org, &format!("/v1/reviews/{review}/approve"))
        .await;
    assert_eq!(approved.status, 201, "{}", approved.text);
    assert_eq!(approved.body["verdict"], "allow");
    assert_eq!(approved.body["x402_payment"], digest(&x402).as_str());
    let token = approved.body["verdict_token"].as_str().unwrap();
    let claims = verify_verdict(token, &app.jwks().await, &options(&app)).unwrap();
    assert_eq!(claims.bindings.x402_payment, Some(digest(&x402)));
    let fresh = approved.body["id"].as_str().unwrap();
    for read in reads(&app, &agent, fresh).await {
        assert_eq!(read["verdict_token"], token, "{read}");
    }
}

#[mandate_test_macros::on_each_engine]
async fn an_x402_member_that_is_malformed_or_another_payment_is_refused_naming_it() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "buyer").await;
    let with = |key: &str, value: Value| {
        let mut x402 = requirements();
        x402[key] = value;
        x402
    };
    let cases = [
        (json!("exact"), "x402 must be"),
        (
            json!({"accepts": [requirements()]}),
            "x402 is a PaymentRequired",
        ),
        (with("amount", json!("20.5")), "x402.amount must be"),
        (
            with("amount", json!(20000000)),
            "x402.amount must be a string",
        ),
        (
            with("payTo", json!("0x1111111111111111111111111111111111111111")),
            "x402.payTo does not match the request",
        ),
        (
            with("asset", json!("EUR")),
            "x402.asset does not match the request",
        ),
        // Any spelling of an ISO 4217 code is that code (#51): it was compared only when
        // written as three upper-case letters.
        (
            with("asset", json!(" EUR")),
            "x402.asset does not match the request",
        ),
        (
            with("asset", json!("iso4217:EUR")),
            "x402.asset does not match the request",
        ),
        (
            with("asset", json!("eur")),
            "x402.asset does not match the request",
        ),
        (
            json!({"x402Version": 2, "accepted": with("payTo", json!("other"))}),
            "x402.accepted.payTo does not match",
        ),
        (
            json!({"x402Version": 1, "accepted": requirements()}),
            "x402.x402Version must be 2",
        ),
    ];
    for (x402, message) in cases {
        let r = app
            .post_text(&agent, "/v1/authorizations", &body("20", &x402))
            .await;
        r.assert_error(400, "invalid_request");
        let got = r.body["error"]["message"].as_str().unwrap();
        assert!(got.starts_with(message), "{got} for {x402}");
    }
    // The request's own fields are still checked first-hand with an x402 member.
    let r = app
        .post_text(
            &agent,
            "/v1/authorizations",
            &format!(
                r#"{{"amount": 20, "currency": "USD", "category": "software", "x402": {}}}"#,
                requirements()
            ),
        )
        .await;
    r.assert_error(400, "invalid_request");
    assert!(r.text.contains("recipient is required"), "{}", r.text);
    // Nothing was decided.
    let list = app.get(&agent, "/v1/decisions").await;
    assert_eq!(list.body["data"], json!([]), "{}", list.text);
}

/// x402 `upto` (#51): the client signs a maximum; the request is decided on it (its amount
/// is the maximum, counted in full by the limits) and bound to the signed requirements like
/// `exact`; a fiat asset in any spelling of the currency is the currency.
#[mandate_test_macros::on_each_engine]
async fn an_upto_payment_is_decided_on_its_maximum_and_bound() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "buyer").await;
    let mut upto = requirements();
    upto["scheme"] = json!("upto");
    upto["amount"] = json!("60000000");
    let payload = json!({"x402Version": 2, "accepted": upto,
                         "payload": {"signature": "0x2d", "permit2Authorization": {}}});
    // 60 USDC at most: over the mandate's review threshold (50), so a review.
    let r = app
        .post_text(&agent, "/v1/authorizations", &body("60", &payload))
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.body["verdict"], "review", "{}", r.text);
    assert_eq!(r.body["x402_payment"], digest(&upto).as_str());
    let token = r.body["verdict_token"].as_str().unwrap();
    let claims = verify_verdict(token, &app.jwks().await, &options(&app)).unwrap();
    assert_eq!(claims.bindings.x402_payment, Some(digest(&upto)));
    assert_eq!(claims.request.amount.to_string(), "60");
    // Fiat upto: the asset "usd" is the currency USD.
    let mut fiat = upto.clone();
    fiat["asset"] = json!("iso4217:usd");
    fiat["payTo"] = json!("acme");
    fiat["amount"] = json!("1000");
    let r = app
        .post_text(
            &agent,
            "/v1/authorizations",
            &format!(
                r#"{{"amount": 10, "currency": "USD", "recipient": "vendor:acme", "category": "software", "x402": {fiat}}}"#
            ),
        )
        .await;
    assert_eq!(r.body["verdict"], "allow", "{}", r.text);
}

/// An x402 asset is an ISO 4217 code, an on-chain address or a CAIP-19 id, in ASCII (#67):
/// a fiat code spelled any other way (a look-alike, an invisible character, another
/// prefix) was taken for a token and allowed with `currency: USD`; each is refused naming
/// `x402.asset`, and nothing is decided.
#[mandate_test_macros::on_each_engine]
async fn an_asset_in_no_x402_spelling_is_refused_naming_it() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "buyer").await;
    let with_asset = |asset: &str| {
        json!({"scheme": "exact", "network": "cloudflare:402", "amount": "2000",
               "asset": asset, "payTo": PAY_TO})
    };
    for asset in [
        "ＥＵＲ",
        "EUR\u{200b}",
        "\u{200b}EUR",
        "EUR\0",
        "iso-4217:EUR",
        "ISO 4217:EUR",
        "fiat:EUR",
        "EU R",
        "ÉUR",
        "\u{395}UR",
        "USDC",
    ] {
        for x402 in [
            with_asset(asset),
            json!({"x402Version": 2, "accepted": with_asset(asset)}),
        ] {
            let r = app
                .post_text(&agent, "/v1/authorizations", &body("20", &x402))
                .await;
            r.assert_error(400, "invalid_request");
            let got = r.body["error"]["message"].as_str().unwrap();
            let member = if x402.get("accepted").is_some() {
                "x402.accepted.asset must be an x402 asset: "
            } else {
                "x402.asset must be an x402 asset: "
            };
            assert!(got.starts_with(member), "{got} for {asset:?}");
        }
    }
    // The spellings x402 uses are read as before: a fiat code is the currency.
    for asset in ["USD", "usd", " USD", "iso4217:USD", "swift:0/iso4217:usd"] {
        let r = app
            .post_text(
                &agent,
                "/v1/authorizations",
                &body("20", &with_asset(asset)),
            )
            .await;
        assert_eq!(r.status, 201, "{asset:?}: {}", r.text);
    }
    let list = app.get(&agent, "/v1/decisions?limit=100").await;
    assert_eq!(
        list.body["data"].as_array().unwrap().len(),
        5,
        "{}",
        list.text
    );
}

/// Where the asset's decimals are known, the atomic amount is the request's amount (#67): a
/// request of 0.01 USD with an `upto` of 100000 USD in cents, or with an `exact` 99 USDC
/// of a token the operator lists at 6 decimals, was allowed; each is a 400 naming the
/// amount, and the payment that is the request's is allowed. A token not listed is left
/// to its verifier.
#[mandate_test_macros::on_each_engine]
async fn an_atomic_amount_at_known_decimals_must_be_the_request_s() {
    let usdc = "0x036CbD53842c5426634e7929541eC2318f3dCF7e";
    let app = crate::helpers::spawn_app_with(|c| {
        c.x402_assets
            .add(&format!("{}=6", usdc.to_ascii_lowercase()))
            .unwrap();
    })
    .await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "buyer").await;
    let fiat_upto = json!({"x402Version": 2, "accepted": {
        "scheme": "upto", "network": "cloudflare:402", "amount": "10000000", "asset": "USD",
        "payTo": PAY_TO}, "payload": {}});
    let mut usdc_exact = requirements();
    usdc_exact["amount"] = json!("99000000");
    let refused = [
        (
            &fiat_upto,
            "x402.accepted.amount does not match the request: amount 0.01 is 1 atomic units at 2 decimals, not the x402 amount 10000000",
        ),
        (
            &usdc_exact,
            "x402.amount does not match the request: amount 0.01 is 10000 atomic units at 6 decimals, not the x402 amount 99000000",
        ),
    ];
    for (x402, message) in refused {
        let r = app
            .post_text(&agent, "/v1/authorizations", &body("0.01", x402))
            .await;
        r.assert_error(400, "invalid_request");
        assert_eq!(r.body["error"]["message"], message, "{}", r.text);
    }
    let list = app.get(&agent, "/v1/decisions").await;
    assert_eq!(list.body["data"], json!([]), "{}", list.text);
    // The payments that are the request's: 0.01 USD is "1" cent, 0.01 USDC "10000".
    let mut fiat = fiat_upto.clone();
    fiat["accepted"]["amount"] = json!("1");
    let mut exact = usdc_exact.clone();
    exact["amount"] = json!("10000");
    for x402 in [&fiat, &exact] {
        let r = app
            .post_text(&agent, "/v1/authorizations", &body("0.01", x402))
            .await;
        assert_eq!(r.body["verdict"], "allow", "{}", r.text);
    }
    // Another network's token at the same address is listed too (the listing names no
    // network); a token not listed is not compared.
    let mut elsewhere = usdc_exact.clone();
    elsewhere["network"] = json!("eip155:8453");
    let r = app
        .post_text(&agent, "/v1/authorizations", &body("0.01", &elsewhere))
        .await;
    r.assert_error(400, "invalid_request");
    let mut unlisted = usdc_exact.clone();
    unlisted["asset"] = json!("0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913");
    let r = app
        .post_text(&agent, "/v1/authorizations", &body("0.01", &unlisted))
        .await;
    assert_eq!(r.body["verdict"], "allow", "{}", r.text);
}
