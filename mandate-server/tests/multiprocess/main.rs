//! Many `mandate-server serve` processes (the real binary) on one PostgreSQL database behave
//! as one service: exact limits, one outcome per Idempotency-Key, review and escrow races
//! resolved once, changes made through one process seen by the next request on another,
//! background work done once, and no answered decision lost when a process is killed.
//!
//! Each test gets a fresh database on a throwaway cluster (mandate-test-kit/src/postgres.rs);
//! without PostgreSQL they say they were skipped and pass, unless MANDATE_REQUIRE_POSTGRES=1.
//! The exactness tests (`exact.rs`) run on a Citus coordinator with two workers too
//! (`NAME::citus`, mandate-test-kit/src/citus.rs), their organizations on both workers; without
//! Citus those say they were skipped and pass, unless MANDATE_REQUIRE_CITUS=1.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines,
    missing_docs
)]

use mandate_test_kit::ap2 as ap2_tokens;
use mandate_test_kit::citus;
use mandate_test_kit::onboard;
use mandate_test_kit::postgres;

mod deploy;
mod harness;
mod receiver;

mod ap2;
mod background;
mod changes;
mod crash;
mod exact;
mod failover;
mod lifetime;
mod log;
mod startup;
mod upgrade;
