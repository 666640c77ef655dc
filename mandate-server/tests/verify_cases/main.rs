//! The shared verification cases (testdata/verify/cases.json) from tokens the real server
//! signs: the server starts in-process on port 0 with a fresh SQLite file, an organization
//! asks for verdicts (allow, review, deny, sandbox, bound to an x402 payment, an AP2
//! mandate, an ACP allowance), and each case records a check of one of those tokens and
//! the outcome the Rust check gives. mandate-core's tests/verify_cases.rs, the npm
//! package's and the Python package's tests all read the file.
//!
//! `UPDATE_VERIFY_CASES=1 cargo test -p mandate-server --test verify_cases` writes the
//! file anew (the tokens change: the server draws fresh keys and nonces). Without it the
//! fresh cases are run through the Rust check all the same, and the committed file must
//! hold the same cases (by name): a case added here and not written fails.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines,
    missing_docs
)]

mod server;
mod table;

use mandate_test_kit::verify_cases as shared_cases;

use std::path::PathBuf;

use serde_json::Value;

fn path() -> PathBuf {
    PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("..")
    .join(shared_cases::PATH)
}

fn names(file: &Value) -> Vec<String> {
    file["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|case| case["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shared_cases_hold_for_tokens_the_server_signs() {
    let signed = server::sign_all().await;
    let fresh = table::cases(&signed);
    let failures = shared_cases::run(&fresh);
    assert!(
        failures.is_empty(),
        "the Rust check does not give the outcomes the cases record:\n{}",
        failures.join("\n")
    );
    let path = path();
    if std::env::var_os("UPDATE_VERIFY_CASES").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let text = serde_json::to_string_pretty(&fresh).unwrap();
        std::fs::write(&path, format!("{text}\n")).unwrap();
        return;
    }
    let committed: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(
        names(&committed),
        names(&fresh),
        "{} holds other cases than this test makes: write it again with \
         UPDATE_VERIFY_CASES=1 cargo test -p mandate-server --test verify_cases",
        path.display()
    );
}
