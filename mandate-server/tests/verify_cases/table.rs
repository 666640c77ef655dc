//! The cases, written from what the server signed: each a name, what it shows, and its
//! checks in order against one replay guard (`token` and `key_set` name entries of the
//! file's `tokens` and `key_sets`; `expected` and `options` are what the packages' `check`
//! takes; `outcome` is `{"ok": {…}}` or `{"error": code, "objections": [codes]}`). The
//! outcomes are written here by hand, from the rules; only the fields of an accepted
//! token (its id, amount, key) are read from the token itself.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

use crate::server::{ISSUER, PAY_TO, Signed};

/// A JSON part of a token: 0 the header, 1 the claims.
fn part(token: &str, index: usize) -> Value {
    let text = token.split('.').nth(index).unwrap();
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(text).unwrap()).unwrap()
}

/// Claim `name` of `token`.
fn claim(token: &str, name: &str) -> Value {
    part(token, 1)[name].clone()
}

fn iat(token: &str) -> i64 {
    part(token, 1)["iat"].as_i64().unwrap()
}

fn exp(token: &str) -> i64 {
    part(token, 1)["exp"].as_i64().unwrap()
}

/// An accepted token's outcome: its own fields, and the bindings left `unchecked`.
fn ok(token: &str, unchecked: Value) -> Value {
    let claims = part(token, 1);
    let kid = part(token, 0)["kid"].as_str().unwrap().to_owned();
    let environment = kid.split('-').next().unwrap().to_owned();
    json!({"ok": {
        "jti": claims["jti"],
        "verdict": claims["verdict"],
        "amount": claims["request"]["amount"].to_string(),
        "currency": claims["request"]["currency"],
        "recipient": claims["request"]["recipient"],
        "kid": kid,
        "environment": environment,
        "unchecked": unchecked,
    }})
}

/// A refusal: the code, and the objections to a token whose signature held.
fn refused(code: &str, objections: &[&str]) -> Value {
    json!({"error": code, "objections": objections})
}

fn tx(amount: &str, currency: &str, recipient: &str) -> Value {
    json!({"amount": amount, "currency": currency, "recipient": recipient})
}

fn options(now: impl Into<Value>) -> Value {
    json!({"issuer": ISSUER, "now": now.into()})
}

/// One check of `token` against the published key set.
fn check(token: &str, expected: Value, options: Value, outcome: Value) -> Value {
    json!({"token": token, "key_set": "published", "expected": expected,
           "options": options, "outcome": outcome})
}

fn case(name: &str, about: &str, checks: Vec<Value>) -> Value {
    json!({"name": name, "about": about, "checks": checks})
}

/// `token` with one character of its signature's `r` half changed.
fn tampered(token: &str) -> String {
    let at = token.rfind('.').unwrap() + 6;
    let mut bytes = token.as_bytes().to_vec();
    bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
    String::from_utf8(bytes).unwrap()
}

/// The file: the key sets, the tokens and the cases.
pub fn cases(signed: &Signed) -> Value {
    let t = &signed.tokens;
    let mut tokens = json!(t);
    tokens["tampered"] = tampered(&t["allow"]).into();
    tokens["malformed"] = "not.a.token".into();
    let live_keys: Vec<Value> = signed.jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|k| !k["kid"].as_str().unwrap_or("").starts_with("live-"))
        .cloned()
        .collect();
    let mut all = plain_cases(signed);
    all.extend(binding_cases(signed));
    all.extend(log_cases(signed));
    json!({
        "about": "Verification cases shared by the Rust, Node and Python tests of the counterparty check. Written by mandate-server/tests/verify_cases (UPDATE_VERIFY_CASES=1) from tokens the real server signed; do not edit by hand.",
        "issuer": ISSUER,
        "key_sets": {"published": signed.jwks, "without_live": {"keys": live_keys}},
        "tokens": tokens,
        "cases": all,
    })
}

/// An `allow` for 42.50 USD to vendor:acme, and everything that can be wrong around it.
fn plain_cases(signed: &Signed) -> Vec<Value> {
    let allow = &signed.tokens["allow"];
    let now = iat(allow) + 10;
    let acme = || tx("42.50", "USD", "vendor:acme");
    let ok_allow = || ok(allow, json!({}));
    let other_issuer = json!({"issuer": "https://verdicts.other.example", "now": now});
    let mut without_live = check("allow", acme(), options(now), refused("unknown_kid", &[]));
    without_live["key_set"] = "without_live".into();
    vec![
        case(
            "allow",
            "a live allow for the transaction",
            vec![check("allow", acme(), options(now), ok_allow())],
        ),
        case(
            "allow, the amount written otherwise",
            "amounts compare as exact decimals: 42.5 is 42.50",
            vec![check(
                "allow",
                tx("42.5", "USD", "vendor:acme"),
                options(now),
                ok_allow(),
            )],
        ),
        case(
            "allow, now as RFC 3339",
            "now may be a string",
            vec![check(
                "allow",
                acme(),
                options("2026-11-22T12:00:10Z"),
                ok_allow(),
            )],
        ),
        case(
            "wrong amount",
            "another amount than the signed one",
            vec![check(
                "allow",
                tx("42.51", "USD", "vendor:acme"),
                options(now),
                refused("wrong_amount", &["wrong_amount"]),
            )],
        ),
        case(
            "wrong currency",
            "another currency",
            vec![check(
                "allow",
                tx("42.50", "EUR", "vendor:acme"),
                options(now),
                refused("wrong_currency", &["wrong_currency"]),
            )],
        ),
        case(
            "wrong recipient",
            "another recipient",
            vec![check(
                "allow",
                tx("42.50", "USD", "vendor:other"),
                options(now),
                refused("wrong_recipient", &["wrong_recipient"]),
            )],
        ),
        case(
            "everything wrong",
            "every objection is reported, the first is the code",
            vec![check(
                "allow",
                tx("1", "EUR", "vendor:other"),
                options(now),
                refused(
                    "wrong_amount",
                    &["wrong_amount", "wrong_currency", "wrong_recipient"],
                ),
            )],
        ),
        case(
            "expired",
            "checked one second after exp",
            vec![check(
                "allow",
                acme(),
                options(exp(allow) + 1),
                refused("expired", &[]),
            )],
        ),
        case(
            "expired, within the leeway",
            "leeway_secs allows clock skew",
            vec![check(
                "allow",
                acme(),
                json!({"issuer": ISSUER, "now": exp(allow) + 5, "leeway_secs": 10}),
                ok_allow(),
            )],
        ),
        case(
            "not yet valid",
            "checked a minute before iat",
            vec![check(
                "allow",
                acme(),
                options(iat(allow) - 60),
                refused("issued_in_future", &[]),
            )],
        ),
        case(
            "wrong issuer",
            "a verifier of another issuer",
            vec![check(
                "allow",
                acme(),
                other_issuer,
                refused("wrong_issuer", &[]),
            )],
        ),
        case(
            "unknown kid",
            "the key set lacks the signing key",
            vec![without_live],
        ),
        case(
            "tampered signature",
            "one character of the signature changed",
            vec![check(
                "tampered",
                acme(),
                options(now),
                refused("bad_signature", &[]),
            )],
        ),
        case(
            "not a token",
            "three segments that are not base64url JSON",
            vec![check(
                "malformed",
                acme(),
                options(now),
                refused("malformed", &[]),
            )],
        ),
        case(
            "replay",
            "the second check of the same token with the same checker",
            vec![
                check("allow", acme(), options(now), ok_allow()),
                check(
                    "allow",
                    acme(),
                    options(now + 1),
                    refused("replay", &["replay"]),
                ),
            ],
        ),
        case(
            "a refusal burns nothing",
            "a token refused for another amount is accepted after for its own",
            vec![
                check(
                    "allow",
                    tx("42.51", "USD", "vendor:acme"),
                    options(now),
                    refused("wrong_amount", &["wrong_amount"]),
                ),
                check("allow", acme(), options(now), ok_allow()),
            ],
        ),
        case(
            "review",
            "a review verdict authorizes nothing",
            vec![check(
                "review",
                tx("75", "USD", "vendor:acme"),
                options(now),
                refused("not_allow", &["not_allow"]),
            )],
        ),
        case(
            "deny",
            "a denial authorizes nothing",
            vec![check(
                "deny",
                tx("150", "USD", "vendor:acme"),
                options(now),
                refused("not_allow", &["not_allow"]),
            )],
        ),
        case(
            "sandbox",
            "a sandbox allow is refused by default",
            vec![check(
                "sandbox",
                acme(),
                options(now),
                refused("wrong_environment", &["wrong_environment"]),
            )],
        ),
        case(
            "sandbox, accepted",
            "environments live_or_sandbox, on a test system",
            vec![check(
                "sandbox",
                acme(),
                json!({"issuer": ISSUER, "now": now, "environments": "live_or_sandbox"}),
                ok(&signed.tokens["sandbox"], json!({})),
            )],
        ),
    ]
}

/// The verdicts bound to an x402 payment, an AP2 mandate and an ACP allowance.
fn binding_cases(signed: &Signed) -> Vec<Value> {
    let t = &signed.tokens;
    let now = iat(&t["x402"]) + 10;
    let recipient = format!("vendor:{PAY_TO}");
    let x402 = |requirements: &Value| {
        let mut out = tx("20.00", "USD", &recipient);
        out["x402"] = json!({"requirements": requirements, "decimals": 6});
        out
    };
    let mut other_payment = signed.x402.clone();
    other_payment["amount"] = "20000001".into();
    let x402_digest = claim(&t["x402"], "x402_payment");
    let ap2 = |transaction: &str| {
        let mut out = tx("40", "USD", "vendor:shop");
        out["ap2"] = json!({"mandate": signed.ap2_digest, "transaction": transaction});
        out
    };
    let acp = |amount: &str, allowance: &Value| {
        let mut out = tx(amount, "USD", "vendor:acme_store");
        out["acp"] = json!({"allowance": allowance});
        out
    };
    let mut larger = signed.acp.clone();
    larger["max_amount"] = 2500.into();
    let acp_unchecked = json!({
        "acp_allowance": claim(&t["acp"], "acp_allowance"),
        "acp_checkout_session": "csn_1",
    });
    vec![
        case(
            "x402",
            "bound to the x402 payment expected",
            vec![check(
                "x402",
                x402(&signed.x402),
                options(now),
                ok(&t["x402"], json!({})),
            )],
        ),
        case(
            "x402, not expected",
            "a binding not expected is reported in unchecked, not refused",
            vec![check(
                "x402",
                tx("20.00", "USD", &recipient),
                options(now),
                ok(&t["x402"], json!({"x402_payment": x402_digest})),
            )],
        ),
        case(
            "x402, another payment",
            "another atomic amount: another digest, and not this transaction",
            vec![check(
                "x402",
                x402(&other_payment),
                options(now),
                refused("wrong_binding", &["wrong_binding", "x402_mismatch"]),
            )],
        ),
        case(
            "x402 expected, none signed",
            "a plain verdict where a bound one is expected",
            vec![check(
                "allow",
                {
                    let mut e = tx("42.50", "USD", "vendor:acme");
                    e["x402"] = json!({"requirements": signed.x402});
                    e
                },
                options(now),
                refused("wrong_binding", &["wrong_binding", "x402_mismatch"]),
            )],
        ),
        case(
            "ap2",
            "bound to the AP2 open mandate and transaction expected",
            vec![check(
                "ap2",
                ap2("tx-1"),
                options(now),
                ok(&t["ap2"], json!({})),
            )],
        ),
        case(
            "ap2, another transaction",
            "the closed mandate's transaction differs",
            vec![check(
                "ap2",
                ap2("tx-2"),
                options(now),
                refused("wrong_binding", &["wrong_binding"]),
            )],
        ),
        case(
            "acp",
            "bound to the ACP allowance, settled at its maximum",
            vec![check(
                "acp",
                acp("20.00", &signed.acp),
                options(now),
                ok(&t["acp"], json!({})),
            )],
        ),
        case(
            "acp, settled below the maximum",
            "an allowance's amount is a maximum",
            vec![check(
                "acp",
                acp("12.00", &signed.acp),
                options(now),
                ok(&t["acp"], json!({})),
            )],
        ),
        case(
            "acp, not expected",
            "the allowance's claims reported, not refused",
            vec![check(
                "acp",
                tx("20.00", "USD", "vendor:acme_store"),
                options(now),
                ok(&t["acp"], acp_unchecked),
            )],
        ),
        case(
            "acp, above the maximum",
            "a charge above the signed maximum and the allowance's",
            vec![check(
                "acp",
                acp("20.01", &signed.acp),
                options(now),
                refused("above_maximum", &["above_maximum", "acp_mismatch"]),
            )],
        ),
        case(
            "acp, another allowance",
            "another maximum: another digest",
            vec![check(
                "acp",
                acp("20.00", &larger),
                options(now),
                refused("wrong_binding", &["wrong_binding"]),
            )],
        ),
    ]
}

/// Proof that the verdict is in the issuer's log.
fn log_cases(signed: &Signed) -> Vec<Value> {
    let allow = &signed.tokens["allow"];
    let now = iat(allow) + 10;
    let acme = || tx("42.50", "USD", "vendor:acme");
    let with_log =
        |log: &Value| json!({"issuer": ISSUER, "now": now, "require_log": true, "log": log});
    vec![
        case(
            "log",
            "the decision's log entry proves the verdict is in the log",
            vec![check(
                "allow",
                acme(),
                with_log(&signed.log_allow),
                ok(allow, json!({})),
            )],
        ),
        case(
            "log required, none given",
            "require_log without the entry",
            vec![check(
                "allow",
                acme(),
                json!({"issuer": ISSUER, "now": now, "require_log": true}),
                refused("not_logged", &["not_logged"]),
            )],
        ),
        case(
            "log of another decision",
            "the entry proves another token",
            vec![check(
                "allow",
                acme(),
                with_log(&signed.log_review),
                refused("bad_log_proof", &["bad_log_proof"]),
            )],
        ),
    ]
}
