//! The shared verification cases (testdata/verify/cases.json: tokens the real server
//! signed, by mandate-server's tests/verify_cases.rs) through `Counterparty::check`: every
//! check's outcome is the one recorded, which the npm and Python packages' tests hold
//! their own `check` to as well.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use mandate_test_kit::verify_cases as shared_cases;
use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

fn file() -> Value {
    let path = Path::new(
        &std::env::var_os("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("..")
    .join(shared_cases::PATH);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

#[test]
fn every_shared_case_has_the_recorded_outcome() {
    let failures = shared_cases::run(&file());
    assert!(
        failures.is_empty(),
        "{} check(s) differ from testdata/verify/cases.json:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The file covers an acceptance and each refusal a counterparty meets, so that a case
/// dropped by a regeneration is noticed.
#[test]
fn the_cases_cover_every_refusal_a_counterparty_meets() {
    let file = file();
    let mut seen = BTreeSet::new();
    for check in file["cases"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|case| case["checks"].as_array().unwrap())
    {
        let outcome = &check["outcome"];
        seen.insert(outcome["error"].as_str().unwrap_or("ok").to_owned());
        for code in outcome["objections"].as_array().into_iter().flatten() {
            seen.insert(code.as_str().unwrap().to_owned());
        }
    }
    let needed = [
        "ok",
        "wrong_amount",
        "wrong_currency",
        "wrong_recipient",
        "expired",
        "issued_in_future",
        "wrong_issuer",
        "unknown_kid",
        "bad_signature",
        "malformed",
        "replay",
        "not_allow",
        "wrong_environment",
        "wrong_binding",
        "x402_mismatch",
        "above_maximum",
        "acp_mismatch",
        "not_logged",
        "bad_log_proof",
    ];
    let missing: Vec<_> = needed.iter().filter(|c| !seen.contains(**c)).collect();
    assert!(missing.is_empty(), "no case ends in {missing:?}");
}
