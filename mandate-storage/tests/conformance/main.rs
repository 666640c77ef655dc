//! The storage boundary's conformance suite: what every engine behind
//! `mandate_storage::Store` promises, written once ([`suite`]) and run against each engine
//! by a file of its own that says how to make a fresh, empty store ([`sqlite`],
//! [`postgres`], [`citus`]: the PostgreSQL engine on a Citus cluster, its tables
//! distributed by Mandate's migrations).
//!
//! It is the checklist of a third engine: a crate that implements
//! `mandate_storage::engine::Engine` and `Tx` (a transaction, and SQL for the statements it
//! says otherwise), a dev-dependency here, a file here that makes a fresh store and calls
//! [`conformance!`], and pass. An engine that lacks a capability says so in its
//! [`suite::Capabilities`] and the tests of that category are skipped for it (as SpiceDB's
//! datastore suite does).
//!
//! The suite is this crate's own test and knows nothing above the boundary: what the
//! server's decision service, escrow service and workers would hand the store, it makes by
//! hand (`suite/made.rs`), with mandate-core's signer and mandate-protocol's rules.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines,
    missing_docs
)]

#[macro_use]
mod suite;

use mandate_test_kit::postgres as pg_harness;

use mandate_test_kit::citus as citus_harness;

mod citus;
mod postgres;
mod sqlite;
