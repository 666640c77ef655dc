//! The API suite (tests/api) on PostgreSQL: the same test files, compiled a second time with
//! `engine::POSTGRES`, so that each test runs on a database of its own on a throwaway
//! cluster (mandate-test-kit/src/postgres.rs, `fsync=off`: nothing here is about a machine's crash).
//!
//! Left out, as they are about the SQLite engine itself: backup.rs (SQLite's online backup),
//! crash.rs (SQLite recovery after kill -9, with `PRAGMA integrity_check`), disk.rs (its file
//! hitting the file-size limit), sqlite_only/ (the bytes of its files, its migrations'
//! history, its writer) and key_encryption.rs (signing keys at rest, read from the SQLite
//! file and its WAL; a PostgreSQL URL without a KEK is refused there already).
//! tests/multiprocess covers PostgreSQL's crash safety.
//!
//! Without PostgreSQL the first test that needs a database says the PostgreSQL tests were
//! skipped and ends this process, passing (MANDATE_REQUIRE_POSTGRES=1: failing).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

/// The engine this target runs the suite on.
mod engine {
    pub const POSTGRES: bool = true;
}
use mandate_test_kit::ap2 as ap2_tokens;
use mandate_test_kit::postgres;

#[path = "../api/helpers.rs"]
mod helpers;
#[path = "../api/process.rs"]
mod process;

#[path = "../api/acp.rs"]
mod acp;
#[path = "../api/agents.rs"]
mod agents;
#[path = "../api/ap2.rs"]
mod ap2;
#[path = "../api/ap2_issuers.rs"]
mod ap2_issuers;
#[path = "../api/api_key_binding.rs"]
mod api_key_binding;
#[path = "../api/auth.rs"]
mod auth;
#[path = "../api/authorizations.rs"]
mod authorizations;
#[path = "../api/concurrency.rs"]
mod concurrency;
#[path = "../api/console.rs"]
mod console;
#[path = "../api/contract.rs"]
mod contract;
#[path = "../api/decision_log.rs"]
mod decision_log;
#[path = "../api/decisions.rs"]
mod decisions;
#[path = "../api/declared.rs"]
mod declared;
#[path = "../api/durability.rs"]
mod durability;
#[path = "../api/enforcement.rs"]
mod enforcement;
#[path = "../api/escrows.rs"]
mod escrows;
#[path = "../api/exports.rs"]
mod exports;
#[path = "../api/health.rs"]
mod health;
#[path = "../api/idempotency.rs"]
mod idempotency;
#[path = "../api/idempotency_faults.rs"]
mod idempotency_faults;
#[path = "../api/jwks.rs"]
mod jwks;
#[path = "../api/lifetime_limits.rs"]
mod lifetime_limits;
#[path = "../api/lists.rs"]
mod lists;
#[path = "../api/logs.rs"]
mod logs;
#[path = "../api/mandate_extensions.rs"]
mod mandate_extensions;
#[path = "../api/mandates.rs"]
mod mandates;
#[path = "../api/metrics.rs"]
mod metrics;
#[path = "../api/remaining.rs"]
mod remaining;
#[path = "../api/reviews.rs"]
mod reviews;
#[path = "../api/stored_tokens.rs"]
mod stored_tokens;
#[path = "../api/webhooks/mod.rs"]
mod webhooks;
#[path = "../api/wire.rs"]
mod wire;
#[path = "../api/x402_bindings.rs"]
mod x402_bindings;

#[path = "../api/hostile.rs"]
mod hostile;
#[path = "../api/lifecycle.rs"]
mod lifecycle;
#[path = "../api/overload.rs"]
mod overload;
#[path = "../api/security.rs"]
mod security;
#[path = "../api/tls.rs"]
mod tls;

// PostgreSQL's own.
mod at_rest;

/// Without PostgreSQL this target passes and says once that its tests were skipped; with
/// MANDATE_REQUIRE_POSTGRES=1 it fails saying why. (Runs this target again, on the agents
/// tests, with no PostgreSQL to find.)
#[test]
fn without_postgresql_this_target_says_it_was_skipped_and_passes_unless_required() {
    const CHILD: &str = "MANDATE_TEST_API_POSTGRES_CHILD";
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let run = |require: bool| {
        let mut command = std::process::Command::new(std::env::current_exe().unwrap());
        command
            .args(["agents::", "--test-threads", "2"])
            .env(CHILD, "1")
            .env("MANDATE_TEST_POSTGRES_BIN", "/nonexistent/postgresql/bin")
            .env_remove("MANDATE_TEST_POSTGRES_URL")
            .env_remove("MANDATE_REQUIRE_POSTGRES");
        if require {
            command.env("MANDATE_REQUIRE_POSTGRES", "1");
        }
        let out = command.output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    };
    let (passed, text) = run(false);
    assert!(passed, "{text}");
    assert_eq!(
        text.matches("PostgreSQL tests skipped: ").count(),
        1,
        "{text}"
    );
    let (passed, text) = run(true);
    assert!(!passed, "{text}");
    assert!(
        text.contains("PostgreSQL is required (MANDATE_REQUIRE_POSTGRES=1)"),
        "{text}"
    );
}
