//! `mandate verify --x402 FILE --decimals N` and `--ap2 FILE` (issue #36) against a real
//! server's verdicts: a verdict bound to the payment passes (exit 0); another payment, the
//! wrong decimals or another AP2 binding is refused (exit 6); a binding not asked about is
//! noted; wrong arguments exit 2.

use mandate_core::jws::verify_verdict;
use serde_json::{Value, json};

use crate::support::Env;
use crate::support::start;

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";

/// 42.50 USDC on Base Sepolia to PAY_TO.
fn requirements() -> Value {
    json!({
        "scheme": "exact",
        "network": "eip155:84532",
        "amount": "42500000",
        "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
        "payTo": PAY_TO,
        "maxTimeoutSeconds": 60,
        "extra": {"name": "USDC", "version": "2"}
    })
}

/// `POST /v1/authorizations` of 42.50 USD to vendor:PAY_TO bound to `x402`; the answer.
fn authorize_x402(env: &Env, key: &str, x402: &Value) -> Value {
    let body = format!(
        r#"{{"amount": 42.50, "currency": "USD", "recipient": "vendor:{PAY_TO}", "category": "software", "x402": {x402}}}"#
    );
    let response = reqwest::blocking::Client::new()
        .post(format!("{}/v1/authorizations", env.api))
        .bearer_auth(key)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 201);
    response.json().unwrap()
}

#[test]
fn verify_checks_the_x402_payment_a_verdict_is_bound_to() {
    let env = start();
    let key = env.live_standard_agent("buyer");
    let answer = authorize_x402(&env, &key, &requirements());
    assert_eq!(answer["verdict"], "allow", "{answer}");
    let token = answer["verdict_token"].as_str().unwrap();
    let jwks = env.offline(&["jwks", "fetch", &env.public, "--json"]);
    jwks.ok();
    let jwks = env.write("jwks.json", &jwks.stdout);
    let recipient = format!("vendor:{PAY_TO}");
    let check = |extra: &[&str]| {
        let mut args = vec![
            "verify",
            token,
            "--jwks",
            &jwks,
            "--issuer",
            &env.issuer,
            "--amount",
            "42.50",
            "--currency",
            "USD",
            "--recipient",
            &recipient,
        ];
        args.extend_from_slice(extra);
        env.offline(&args)
    };
    let same = env.write("requirements.json", &requirements().to_string());
    let payload = json!({"x402Version": 2, "accepted": requirements(),
                         "payload": {"signature": "0x2d6a"}, "extensions": {}});
    let payload = env.write("payload.json", &payload.to_string());

    // The payment it was made for, as requirements or as the client's payload: exit 0.
    check(&["--x402", &same, "--decimals", "6"])
        .ok()
        .stdout_has("matches the transaction");
    check(&["--x402", &payload, "--decimals", "6"]).ok();
    // Another payment (one atomic unit more, or to someone else): refused.
    let mut more = requirements();
    more["amount"] = json!("42500001");
    let more = env.write("more.json", &more.to_string());
    check(&["--x402", &more, "--decimals", "6"])
        .code(6)
        .stderr_has("made for another payment")
        .stderr_has("not the x402 amount 42500001");
    let mut elsewhere = requirements();
    elsewhere["payTo"] = json!("0x1111111111111111111111111111111111111111");
    let elsewhere = env.write("elsewhere.json", &elsewhere.to_string());
    check(&["--x402", &elsewhere, "--decimals", "6"])
        .code(6)
        .stderr_has("x402_payment")
        .stderr_has("is not vendor:0x1111111111111111111111111111111111111111");
    // The right payment read at the wrong decimals is not 42.50.
    check(&["--x402", &same, "--decimals", "18"])
        .code(6)
        .stderr_has("at 18 decimals");
    // An AP2 binding asked for and absent: refused.
    let ap2 = env.write("ap2.json", r#"{"ap2_mandate": "open-digest"}"#);
    check(&["--x402", &same, "--decimals", "6", "--ap2", &ap2])
        .code(6)
        .stderr_has("no ap2_mandate claim");
    // Not asked about: accepted, with a note that the x402 binding was not checked.
    check(&[])
        .ok()
        .stderr_has("also bound to")
        .stderr_has("x402_payment");
    // Arguments: --decimals is needed to compare the amount; files must be x402 JSON.
    check(&["--x402", &same]).code(2).stderr_has("--decimals");
    let bad = env.write("bad.json", r#"{"accepts": []}"#);
    check(&["--x402", &bad, "--decimals", "6"])
        .code(2)
        .stderr_has("PaymentRequired");
}

#[test]
fn verify_checks_the_ap2_mandate_and_transaction_a_verdict_is_bound_to() {
    let env = start();
    let key = env.live_standard_agent("buyer");
    let answer = authorize_x402(&env, &key, &requirements());
    let jwks = env.offline(&["jwks", "fetch", &env.public, "--json"]);
    jwks.ok();
    let jwks = env.write("jwks.json", &jwks.stdout);
    // The server's claims with AP2 bindings, signed with its live key, as it signs a
    // verdict made under an imported AP2 mandate.
    let set =
        mandate_core::jwk::JwkSet::from_json(std::fs::read(&jwks).unwrap().as_slice()).unwrap();
    let options = mandate_core::jws::VerifyOptions {
        issuer: env.issuer.clone(),
        now: answer["iat"].as_i64().unwrap(),
        leeway_secs: 0,
    };
    let claims = verify_verdict(answer["verdict_token"].as_str().unwrap(), &set, &options)
        .unwrap()
        .with_bindings(mandate_core::claims::Bindings {
            ap2_mandate: Some("k3v4-open-mandate-digest".into()),
            ap2_transaction: Some("txn_0001".into()),
            x402_payment: None,
        });
    let token = env.sign_live_verdict(&claims);
    let recipient = format!("vendor:{PAY_TO}");
    let check = |ap2: &str| {
        let file = env.write("ap2.json", ap2);
        env.offline(&[
            "verify",
            &token,
            "--jwks",
            &jwks,
            "--issuer",
            &env.issuer,
            "--amount",
            "42.5",
            "--currency",
            "USD",
            "--recipient",
            &recipient,
            "--ap2",
            &file,
        ])
    };
    check(r#"{"ap2_mandate": "k3v4-open-mandate-digest", "ap2_transaction": "txn_0001"}"#).ok();
    check(r#"{"ap2_transaction": "txn_0001"}"#)
        .ok()
        .stderr_has("ap2_mandate");
    check(r#"{"ap2_mandate": "k3v4-open-mandate-digest", "ap2_transaction": "txn_0002"}"#)
        .code(6)
        .stderr_has("ap2_transaction txn_0002 does not match the signed ap2_transaction txn_0001");
    check(r#"{"ap2_mandate": "another"}"#)
        .code(6)
        .stderr_has("made for another payment");
    check(r#"{}"#).code(2).stderr_has("give ap2_mandate");
    check(r#"{"ap2_mandate": 7}"#)
        .code(2)
        .stderr_has("must be a non-empty string");
}
