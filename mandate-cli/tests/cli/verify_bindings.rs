//! `mandate verify --x402 FILE --decimals N` and `--ap2 FILE` (issue #36) against a real
//! server's verdicts: a verdict bound to the payment passes (exit 0); another payment, the
//! wrong decimals or another AP2 binding is refused (exit 6); a binding not asked about is
//! noted; wrong arguments exit 2.

use mandate_core::verify_verdict;
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
    let set = mandate_core::JwkSet::from_json(std::fs::read(&jwks).unwrap().as_slice()).unwrap();
    let options = mandate_core::VerifyOptions {
        issuer: env.issuer.clone(),
        now: time::OffsetDateTime::from_unix_timestamp(answer["iat"].as_i64().unwrap()).unwrap(),
        leeway_secs: 0,
    };
    let claims = verify_verdict(answer["verdict_token"].as_str().unwrap(), &set, &options)
        .unwrap()
        .with_bindings(mandate_core::Bindings {
            ap2_mandate: Some("k3v4-open-mandate-digest".into()),
            ap2_transaction: Some("txn_0001".into()),
            x402_payment: None,
            acp_allowance: None,
            acp_checkout_session: None,
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

/// `mandate authorize --x402 FILE` binds the verdict to the payment, as the API's `x402`
/// member does (#50 item 6): the verdict carries the requirements' digest; a file that is not
/// JSON is a usage error naming it.
#[test]
fn authorize_binds_the_verdict_to_the_x402_payment_given() {
    let env = start();
    let key = env.live_standard_agent("buyer");
    let file = env.write("requirements.json", &requirements().to_string());
    let recipient = format!("vendor:{PAY_TO}");
    let authorize = |x402: &str| {
        env.with_key(
            &key,
            &[
                "--json",
                "authorize",
                "--amount",
                "42.50",
                "--currency",
                "USD",
                "--recipient",
                &recipient,
                "--category",
                "software",
                "--x402",
                x402,
            ],
        )
    };
    let out = authorize(&file);
    out.ok();
    let answer: Value = serde_json::from_str(&out.stdout).unwrap();
    let digest = mandate_protocol::x402::digest(
        &mandate_core::PaymentRequirements::from_json(&requirements(), "x402").unwrap(),
    );
    assert_eq!(
        answer["x402_payment"].as_str(),
        Some(digest.as_str()),
        "{answer}"
    );
    let bad = env.write("bad.json", "{not json");
    let out = authorize(&bad);
    out.code(2);
    assert!(
        out.stderr.contains("--x402") && out.stderr.contains("not JSON"),
        "{}",
        out.stderr
    );
}

/// `mandate authorize --ap2-closed-mandate FILE` presents an AP2 closed payment mandate,
/// as the API's `ap2.closed_mandate` does (#50 item 6): for an agent whose mandate was
/// imported from the open mandate, the verdict carries `ap2_mandate` (the open mandate's
/// digest) and `ap2_transaction`, and `mandate verify --ap2` accepts exactly those; the
/// same closed mandate again is `deny_replay` (exit 4); one for another amount is the API's
/// 400 naming it (exit 1); a file that does not exist is a usage error naming the option.
#[test]
fn authorize_presents_the_ap2_closed_mandate_given() {
    let env = start();
    let keys = crate::ap2_tokens::Ap2Keys::new(9);
    env.trust_ap2_issuer(&keys.issuer_jwk());
    let key = env.agent("shopper");
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let open = keys.open(
        json!([
            {"type": "payment.amount_range", "currency": "USD", "max": 10000},
            {"type": "payment.allowed_payees", "allowed": [{"id": "shop", "name": "Shop"}]},
        ]),
        now - 60,
        now + 86_400,
    );
    // Imported through the API (`mandate mandates create` takes no AP2 open mandate).
    let imported: Value = reqwest::blocking::Client::new()
        .post(format!("{}/v1/mandates", env.api))
        .bearer_auth(&env.org_key)
        .json(&json!({"agent": "agt_shopper", "categories": ["shopping"],
                      "ap2": {"open_mandate": open}}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let digest = imported["source"]["digest"].as_str().unwrap().to_owned();
    let closed = env.write(
        "closed.txt",
        &format!("{}\n", keys.closed(&open, "tx-7", 4250, "USD", "shop", now)),
    );
    let authorize = |amount: &str, file: &str| {
        env.with_key(
            &key,
            &[
                "--json",
                "authorize",
                "--amount",
                amount,
                "--currency",
                "USD",
                "--recipient",
                "vendor:shop",
                "--category",
                "shopping",
                "--ap2-closed-mandate",
                file,
            ],
        )
    };
    // Another amount than the closed mandate's: the API's 400, naming it.
    authorize("42.51", &closed).code(1).stderr_has("amount");
    let out = authorize("42.50", &closed);
    out.ok();
    let answer = out.json();
    assert_eq!(answer["verdict"], "allow", "{answer}");
    assert_eq!(
        answer["ap2_mandate"].as_str(),
        Some(digest.as_str()),
        "{answer}"
    );
    assert_eq!(answer["ap2_transaction"], "tx-7", "{answer}");
    // The payee checks the binding it settles.
    let jwks = env.offline(&["jwks", "fetch", &env.public, "--json"]);
    jwks.ok();
    let jwks = env.write("jwks.json", &jwks.stdout);
    let verify = |ap2: &str| {
        let file = env.write("ap2.json", ap2);
        env.offline(&[
            "verify",
            answer["verdict_token"].as_str().unwrap(),
            "--jwks",
            &jwks,
            "--issuer",
            &env.issuer,
            "--amount",
            "42.50",
            "--currency",
            "USD",
            "--recipient",
            "vendor:shop",
            "--ap2",
            &file,
            "--sandbox",
        ])
    };
    verify(&json!({"ap2_mandate": digest, "ap2_transaction": "tx-7"}).to_string()).ok();
    verify(r#"{"ap2_transaction": "tx-8"}"#)
        .code(6)
        .stderr_has("ap2_transaction");
    // A closed mandate is one use.
    let again = authorize("42.50", &closed);
    again.code(4);
    assert_eq!(again.json()["verdict"], "deny_replay", "{}", again.stdout);
    authorize("42.50", "no-such-file")
        .code(2)
        .stderr_has("--ap2-closed-mandate");
}

/// `mandate authorize --acp FILE` makes the request under an ACP delegated payment
/// allowance, as the API's `acp` member does (#50 item 6): the verdict carries the
/// allowance's digest and checkout session, which `mandate verify --acp` checks; a request
/// that is not the allowance is the API's 400 naming its member (exit 1).
#[test]
fn authorize_binds_the_verdict_to_the_acp_allowance_given() {
    let env = start();
    let key = env.live_standard_agent("buyer");
    let expires = time::OffsetDateTime::now_utc() + time::Duration::days(1);
    let allowance = json!({"reason": "one_time", "max_amount": 4250, "currency": "usd",
        "checkout_session_id": "csn_cli_1", "merchant_id": "acme_store",
        "expires_at": mandate_protocol::timefmt::format(expires)});
    // As ACP's delegate_payment request carries it.
    let file = env.write(
        "delegate_payment.json",
        &json!({"allowance": allowance, "payment_method": {"type": "card"}}).to_string(),
    );
    let authorize = |amount: &str| {
        env.with_key(
            &key,
            &[
                "--json",
                "authorize",
                "--amount",
                amount,
                "--currency",
                "USD",
                "--recipient",
                "vendor:acme_store",
                "--category",
                "software",
                "--acp",
                &file,
            ],
        )
    };
    authorize("42.49").code(1).stderr_has("acp.allowance");
    let out = authorize("42.50");
    out.ok();
    let answer = out.json();
    let digest = mandate_protocol::acp::digest(
        &mandate_core::Allowance::from_json(&allowance, "allowance").unwrap(),
    );
    assert_eq!(answer["verdict"], "allow", "{answer}");
    assert_eq!(
        answer["acp_allowance"].as_str(),
        Some(digest.as_str()),
        "{answer}"
    );
    assert_eq!(answer["acp_checkout_session"], "csn_cli_1", "{answer}");
    let jwks = env.offline(&["jwks", "fetch", &env.public, "--json"]);
    jwks.ok();
    let jwks = env.write("jwks.json", &jwks.stdout);
    let verify = |acp: &str| {
        env.offline(&[
            "verify",
            answer["verdict_token"].as_str().unwrap(),
            "--jwks",
            &jwks,
            "--issuer",
            &env.issuer,
            "--amount",
            "42.50",
            "--currency",
            "USD",
            "--recipient",
            "vendor:acme_store",
            "--acp",
            acp,
        ])
    };
    verify(&file).ok();
    let other = env.write(
        "other.json",
        &allowance_with_session(&allowance, "csn_cli_2").to_string(),
    );
    verify(&other).code(6).stderr_has("acp_checkout_session");
    env.with_key(
        &key,
        &[
            "authorize",
            "--amount",
            "1",
            "--currency",
            "USD",
            "--recipient",
            "vendor:acme_store",
            "--category",
            "software",
            "--acp",
            "no-such-file",
        ],
    )
    .code(2)
    .stderr_has("--acp");
}

/// `allowance` for another checkout session.
fn allowance_with_session(allowance: &Value, session: &str) -> Value {
    let mut other = allowance.clone();
    other["checkout_session_id"] = json!(session);
    other
}

/// x402 `upto` (the client signs a maximum): the server decides 42.50 and binds the
/// requirements; the facilitator settles what was used, at most 42.50.
#[test]
fn verify_settles_an_upto_payment_at_most_the_signed_maximum() {
    let env = start();
    let key = env.live_standard_agent("buyer");
    let mut upto = requirements();
    upto["scheme"] = json!("upto");
    let answer = authorize_x402(&env, &key, &upto);
    assert_eq!(answer["verdict"], "allow", "{answer}");
    let token = answer["verdict_token"].as_str().unwrap();
    let jwks = env.offline(&["jwks", "fetch", &env.public, "--json"]);
    jwks.ok();
    let jwks = env.write("jwks.json", &jwks.stdout);
    let signed = env.write("upto.json", &upto.to_string());
    let recipient = format!("vendor:{PAY_TO}");
    let settle = |amount: &str| {
        env.offline(&[
            "verify",
            token,
            "--jwks",
            &jwks,
            "--issuer",
            &env.issuer,
            "--amount",
            amount,
            "--currency",
            "USD",
            "--recipient",
            &recipient,
            "--x402",
            &signed,
            "--decimals",
            "6",
        ])
    };
    settle("42.50").ok();
    settle("17.03").ok();
    settle("42.51")
        .code(6)
        .stderr_has("above the signed maximum 42.50");
}

/// `--acp FILE`: a verdict bound to an ACP allowance (the server's claims with the
/// allowance's bindings, signed with its live key) is checked against the allowance.
#[test]
fn verify_checks_the_acp_allowance_a_verdict_is_bound_to() {
    let env = start();
    let key = env.live_standard_agent("buyer");
    let answer = authorize_x402(&env, &key, &requirements());
    let jwks = env.offline(&["jwks", "fetch", &env.public, "--json"]);
    jwks.ok();
    let jwks = env.write("jwks.json", &jwks.stdout);
    let set = mandate_core::JwkSet::from_json(std::fs::read(&jwks).unwrap().as_slice()).unwrap();
    let iat = answer["iat"].as_i64().unwrap();
    let options = mandate_core::VerifyOptions {
        issuer: env.issuer.clone(),
        now: time::OffsetDateTime::from_unix_timestamp(iat).unwrap(),
        leeway_secs: 0,
    };
    let allowance = json!({"reason": "one_time", "max_amount": 4250, "currency": "usd",
        "checkout_session_id": "csn_01", "merchant_id": PAY_TO,
        "expires_at": time::OffsetDateTime::from_unix_timestamp(iat + 3600).unwrap()
            .format(&time::format_description::well_known::Rfc3339).unwrap()});
    let parsed = mandate_core::Allowance::from_json(&allowance, "allowance").unwrap();
    let claims = verify_verdict(answer["verdict_token"].as_str().unwrap(), &set, &options)
        .unwrap()
        .with_bindings(mandate_core::Bindings {
            acp_allowance: Some(mandate_protocol::acp::digest(&parsed)),
            acp_checkout_session: Some("csn_01".into()),
            ..Default::default()
        });
    let token = env.sign_live_verdict(&claims);
    let recipient = format!("vendor:{PAY_TO}");
    let check = |amount: &str, file: &str| {
        env.offline(&[
            "verify",
            &token,
            "--jwks",
            &jwks,
            "--issuer",
            &env.issuer,
            "--amount",
            amount,
            "--currency",
            "USD",
            "--recipient",
            &recipient,
            "--acp",
            file,
        ])
    };
    let file = env.write("allowance.json", &allowance.to_string());
    check("42.50", &file).ok();
    // The charge is at most the maximum; the delegate_payment request carrying it reads
    // the same.
    let request = env.write(
        "delegate.json",
        &json!({"payment_method": {"type": "card"}, "allowance": allowance}).to_string(),
    );
    check("40", &request).ok();
    check("42.51", &file)
        .code(6)
        .stderr_has("above the signed maximum");
    // Another allowance (another session): the token was made for another payment.
    let mut other = allowance.clone();
    other["checkout_session_id"] = json!("csn_02");
    let other = env.write("other.json", &other.to_string());
    check("42.50", &other)
        .code(6)
        .stderr_has("acp_checkout_session csn_02 does not match");
    // Not asked about: accepted, with a note naming the binding.
    env.offline(&[
        "verify",
        &token,
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
    ])
    .ok()
    .stderr_has("acp_allowance");
    // A malformed allowance names the member.
    let bad = env.write("bad.json", r#"{"reason": "recurring"}"#);
    check("42.50", &bad)
        .code(2)
        .stderr_has("the allowance.reason");
}
