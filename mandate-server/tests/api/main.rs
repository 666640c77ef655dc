//! HTTP-level tests: each runs the real server on 127.0.0.1 port 0 with a fresh database.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

/// The engine this target runs the suite on: SQLite (tests/api_postgres runs the
/// engine-neutral part of it on PostgreSQL).
mod engine {
    pub const POSTGRES: bool = false;
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
mod x402_bindings;

mod crash;
mod disk;
mod hostile;
mod lifecycle;
mod overload;
mod security;
mod sqlite_only;
mod stopped;
mod tls;
