//! Verdicts with bindings (issue #36) verify unchanged in third-party JWT libraries: PyJWT
//! (Python) and jose (Node), each given only the token and the published JWK Set. One
//! token is the server's answer to a request bound to an x402 payment; the other carries
//! all three bindings (`ap2_mandate`, `ap2_transaction`, `x402_payment`), its claims signed
//! with the server's own key, as it signs a verdict made under an AP2 mandate.
//!
//! The Python is `MANDATE_THIRD_PARTY_PYTHON` (default `python3`) with `jwt` (PyJWT) and
//! `cryptography`; jose is found through `MANDATE_THIRD_PARTY_NODE_PATH` (a `node_modules`
//! directory holding `jose`). Without them the test says it skipped that library, unless
//! `MANDATE_REQUIRE_THIRD_PARTY=1` (CI, which installs both): then it fails.

use std::process::Command;

use mandate_core::{Bindings, VerifyOptions, sign_token, verify_verdict};
use serde_json::{Value, json};

use crate::helpers::spawn_app;

const PYJWT: &str = r#"
import json, sys, jwt
token, jwks, issuer = sys.argv[1], json.load(open(sys.argv[2])), sys.argv[3]
header = jwt.get_unverified_header(token)
keys = {k["kid"]: k for k in jwks["keys"]}
key = jwt.PyJWK(keys[header["kid"]]).key
claims = jwt.decode(token, key, algorithms=["ES256"], issuer=issuer,
                    options={"verify_exp": False, "verify_iat": False})
print(json.dumps(claims))
"#;

const JOSE: &str = r#"
const jose = require('jose');
const fs = require('fs');
const [token, jwksPath, issuer, iat] = process.argv.slice(1);
const keys = jose.createLocalJWKSet(JSON.parse(fs.readFileSync(jwksPath, 'utf8')));
jose.jwtVerify(token, keys, { algorithms: ['ES256'], issuer, currentDate: new Date(Number(iat) * 1000) })
  .then(({ payload }) => console.log(JSON.stringify(payload)))
  .catch((e) => { console.error(String(e)); process.exit(1); });
"#;

fn required() -> bool {
    std::env::var("MANDATE_REQUIRE_THIRD_PARTY").as_deref() == Ok("1")
}

/// The claims a library verified, or `None` when the library is not installed here.
fn run(library: &str, mut command: Command) -> Option<Value> {
    let out = match command.output() {
        Ok(out) => out,
        Err(e) if !required() => {
            mandate_test_kit::skip::say(&format!(
                "{library} (cannot run: {e}; MANDATE_REQUIRE_THIRD_PARTY=1 fails instead)"
            ));
            return None;
        }
        Err(e) => panic!("{library}: {e}"),
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    let missing = stderr.contains("No module named") || stderr.contains("Cannot find module");
    if missing && !required() {
        mandate_test_kit::skip::say(&format!(
            "{library} (not installed; MANDATE_REQUIRE_THIRD_PARTY=1 fails instead): {}",
            stderr.trim()
        ));
        return None;
    }
    assert!(
        out.status.success(),
        "{library} refused the token: {stderr}"
    );
    Some(serde_json::from_slice(&out.stdout).unwrap())
}

#[tokio::test]
async fn bound_verdicts_verify_in_pyjwt_and_jose_unchanged() {
    let app = spawn_app().await;
    let org = app.org.sandbox.clone();
    let agent = app.standard_agent(&org, "buyer").await;
    let pay_to = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
    let x402 = json!({"scheme": "exact", "network": "eip155:84532", "amount": "20000000",
                      "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e", "payTo": pay_to});
    let body = format!(
        r#"{{"amount": 20.00, "currency": "USD", "recipient": "vendor:{pay_to}", "category": "software", "x402": {x402}}}"#
    );
    let answer = app.post_text(&agent, "/v1/authorizations", &body).await;
    assert_eq!(answer.status, 201, "{}", answer.text);
    let served = answer.body["verdict_token"].as_str().unwrap().to_owned();
    let jwks = app.jwks().await;
    let iat = answer.body["iat"].as_i64().unwrap();
    let options = VerifyOptions {
        issuer: app.issuer(),
        now: time::OffsetDateTime::from_unix_timestamp(iat).unwrap(),
        leeway_secs: 0,
    };
    let claims = verify_verdict(&served, &jwks, &options).unwrap();
    let bindings = Bindings {
        ap2_mandate: Some("Zm9vYmFyLW9wZW4tbWFuZGF0ZS1kaWdlc3Q".into()),
        ap2_transaction: Some("txn_7f3a".into()),
        x402_payment: claims.bindings.x402_payment.clone(),
        ..Bindings::default()
    };
    let signer = app
        .running
        .as_ref()
        .unwrap()
        .state
        .signer(mandate_server::model::Env::Sandbox)
        .unwrap();
    let all_three = sign_token(signer.as_ref(), &claims.clone().with_bindings(bindings)).unwrap();
    // The set as published, byte for byte.
    let dir = tempfile::tempdir().unwrap();
    let jwks_path = dir.path().join("jwks.json");
    let published = reqwest::get(format!("{}/.well-known/jwks.json", app.public))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    std::fs::write(&jwks_path, published).unwrap();
    let jwks_arg = jwks_path.display().to_string();
    let issuer = app.issuer();
    let python =
        std::env::var("MANDATE_THIRD_PARTY_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let node_path = std::env::var("MANDATE_THIRD_PARTY_NODE_PATH").unwrap_or_default();
    for token in [&served, &all_three] {
        let mut pyjwt = Command::new(&python);
        pyjwt.args(["-c", PYJWT, token, &jwks_arg, &issuer]);
        let mut jose = Command::new("node");
        jose.env("NODE_PATH", &node_path).args([
            "-e",
            JOSE,
            token,
            &jwks_arg,
            &issuer,
            &iat.to_string(),
        ]);
        let ours = verify_verdict(token, &jwks, &options).unwrap();
        for (library, command) in [("PyJWT", pyjwt), ("jose", jose)] {
            let Some(theirs) = run(library, command) else {
                continue;
            };
            assert_eq!(
                theirs["x402_payment"],
                json!(ours.bindings.x402_payment),
                "{library}"
            );
            assert_eq!(
                theirs["ap2_mandate"],
                json!(ours.bindings.ap2_mandate),
                "{library}"
            );
            assert_eq!(
                theirs["ap2_transaction"],
                json!(ours.bindings.ap2_transaction),
                "{library}"
            );
            assert_eq!(theirs["jti"], ours.jti.as_str(), "{library}");
            assert_eq!(
                theirs["request"]["recipient"],
                ours.request.recipient.as_str()
            );
        }
    }
    // The tampered twin (the bindings of one, the signature of the other) is refused.
    let a: Vec<&str> = served.split('.').collect();
    let b: Vec<&str> = all_three.split('.').collect();
    let tampered = format!("{}.{}.{}", a[0], b[1], a[2]);
    let mut pyjwt = Command::new(&python);
    pyjwt.args(["-c", PYJWT, &tampered, &jwks_arg, &issuer]);
    if let Ok(out) = pyjwt.output()
        && !String::from_utf8_lossy(&out.stderr).contains("No module named")
    {
        assert!(!out.status.success(), "PyJWT accepted a tampered token");
    }
}
