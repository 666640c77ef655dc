//! HTTP-level tests: each runs the real server on 127.0.0.1 port 0 with a fresh database.
//!
//! A test marked `#[on_each_engine]` (mandate-test-kit/macros) runs twice, as
//! `NAME::sqlite` and `NAME::postgres`: on an SQLite file, and on a PostgreSQL database of
//! its own on a throwaway cluster (mandate-test-kit/src/postgres.rs, `fsync=off`: nothing
//! here is about a machine's crash). Without PostgreSQL the `postgres` variants say once
//! that the PostgreSQL tests were skipped and return (MANDATE_REQUIRE_POSTGRES=1: they
//! fail). Plain `#[tokio::test]`s are about the SQLite engine itself and run on it alone:
//! backup.rs (SQLite's online backup), crash.rs (its recovery after kill -9, with `PRAGMA
//! integrity_check`), disk.rs (its file hitting the file-size limit), sqlite_only/ (the
//! bytes of its files, its migrations' history, its writer), key_encryption.rs (signing
//! keys at rest in the SQLite file and its WAL), stopped.rs, admin_host.rs and
//! third_party.rs. postgres_at_rest.rs is PostgreSQL's own. tests/multiprocess covers
//! PostgreSQL's crash safety.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines,
    missing_docs
)]

/// The engine a test runs on: PostgreSQL inside a test's `postgres` variant, SQLite
/// everywhere else (a task the test spawns included: the helpers that ask start servers on
/// the test's own task).
mod engine {
    use std::future::Future;

    /// A storage engine of the suite.
    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    pub enum Engine {
        Sqlite,
        Postgres,
    }

    tokio::task_local! {
        static ENGINE: Engine;
    }

    /// Runs `test` on `engine`.
    pub async fn scope<F: Future>(engine: Engine, test: F) -> F::Output {
        ENGINE.scope(engine, test).await
    }

    /// Whether the running test is a `postgres` variant.
    pub fn postgres() -> bool {
        ENGINE
            .try_with(|engine| *engine == Engine::Postgres)
            .unwrap_or(false)
    }

    /// Whether PostgreSQL is here to run a `postgres` variant on; without it, says once
    /// that the PostgreSQL tests were skipped (and fails the test with
    /// MANDATE_REQUIRE_POSTGRES=1).
    pub fn postgres_available() -> bool {
        crate::postgres::available(crate::postgres::Durability::Fast).is_ok()
    }
}
use mandate_test_kit::ap2 as ap2_tokens;
use mandate_test_kit::postgres;

mod helpers;
mod process;

mod acp;
mod admin_host;
mod agents;
mod ap2;
mod ap2_issuers;
mod api_key_binding;
mod auth;
mod authorizations;
mod backup;
mod concurrency;
mod console;
mod contract;
mod decision_log;
mod decisions;
mod declared;
mod durability;
mod enforcement;
mod escrows;
mod exports;
mod health;
mod idempotency;
mod idempotency_faults;
mod jwks;
mod key_encryption;
mod lifetime_limits;
mod lists;
mod log_refusals;
mod log_tiles;
mod logs;
mod mandate_extensions;
mod mandates;
mod metrics;
mod remaining;
mod reviews;
mod stored_tokens;
mod third_party;
mod webhooks;
mod wire;
mod witness_flags;
mod x402_bindings;

mod crash;
mod disk;
mod hostile;
mod lifecycle;
mod overload;
mod security;
mod sqlite_only;

// PostgreSQL's own.
mod postgres_at_rest;
mod stopped;
mod tls;

/// Without PostgreSQL the `postgres` variants pass and the suite says once that they were
/// skipped; with MANDATE_REQUIRE_POSTGRES=1 they fail saying why. (Runs this target again,
/// on the agents tests, with no PostgreSQL to find.)
#[test]
fn without_postgresql_the_postgres_variants_say_they_were_skipped_unless_required() {
    const CHILD: &str = "MANDATE_TEST_API_NO_POSTGRES_CHILD";
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
