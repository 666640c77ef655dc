//! Test support shared by the suites of `mandate-core`, `mandate-server`, `mandate-cli` and
//! `mandate-storage` (its conformance suite): a throwaway PostgreSQL cluster ([`postgres`])
//! and Citus cluster ([`citus`]) a test process starts for itself, with a fresh database
//! per test; a Patroni set, a primary and a synchronous standby with etcd, for failover
//! ([`patroni`]); what a skipped test says ([`skip`]); AP2 tokens signed as an issuer would
//! ([`ap2`]); what `mandate-server onboard` prints, read back ([`onboard`]); and a fresh
//! database per test on a cluster someone else runs ([`test_db`], for the PostgreSQL
//! engine's unit tests); the shared verification cases of testdata/verify/cases.json run
//! through the Rust check ([`verify_cases`], for mandate-core's and mandate-server's tests).
//!
//! A dev-dependency only: nothing in a release build links it. Its helpers panic on what a
//! test cannot go on without (a cluster that does not start, a query that fails), which is
//! how a test reports it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

pub mod ap2;
pub mod citus;
pub mod onboard;
pub mod patroni;
pub mod postgres;
pub mod skip;
pub mod test_db;
pub mod verify_cases;
