//! The shared verification cases (testdata/verify/cases.json) through this crate's JSON
//! face, which the npm and Python packages call: each check's outcome is the recorded one,
//! as it is through the Rust API (mandate-core/tests/verify_cases.rs). The packages' own
//! tests run the same file through JavaScript and Python on top of this.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use mandate_verify_json::{Checker, Failure};
use serde_json::{Value, json};

fn file() -> Value {
    let path = Path::new(
        &std::env::var_os("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("../../testdata/verify/cases.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The outcome as the file writes it.
fn outcome(checked: Result<Value, Failure>) -> Value {
    match checked {
        Ok(v) => json!({"ok": {
            "jti": v["claims"]["jti"],
            "verdict": v["claims"]["verdict"],
            "amount": v["claims"]["request"]["amount"],
            "currency": v["claims"]["request"]["currency"],
            "recipient": v["claims"]["request"]["recipient"],
            "kid": v["kid"],
            "environment": v["environment"],
            "unchecked": v["unchecked"],
        }}),
        Err(Failure::Refused {
            code, objections, ..
        }) => {
            let codes: Vec<&str> = objections.iter().map(|(code, _)| *code).collect();
            json!({"error": code, "objections": codes})
        }
        Err(Failure::Input(message)) => json!({"input": message}),
    }
}

#[test]
fn every_shared_case_has_the_recorded_outcome() {
    let file = file();
    let mut failures = Vec::new();
    for case in file["cases"].as_array().unwrap() {
        let mut checker = Checker::new();
        for (i, check) in case["checks"].as_array().unwrap().iter().enumerate() {
            let got = outcome(
                checker.check(
                    file["tokens"][check["token"].as_str().unwrap()]
                        .as_str()
                        .unwrap(),
                    &check["expected"].to_string(),
                    &file["key_sets"][check["key_set"].as_str().unwrap()].to_string(),
                    &check["options"].to_string(),
                ),
            );
            if got != check["outcome"] {
                failures.push(format!("{} (check {}): {got}", case["name"], i + 1));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn an_amount_given_as_a_number_is_refused_naming_the_member() {
    let file = file();
    let failure = Checker::new()
        .check(
            file["tokens"]["allow"].as_str().unwrap(),
            r#"{"amount": 42.5, "currency": "USD", "recipient": "vendor:acme"}"#,
            &file["key_sets"]["published"].to_string(),
            r#"{"issuer": "https://verdicts.example.com", "now": 1795348810}"#,
        )
        .unwrap_err();
    assert_eq!(failure.code(), "invalid_input");
    assert!(
        failure
            .to_json()
            .contains("expected.amount must be a decimal string"),
        "{}",
        failure.to_json()
    );
}
