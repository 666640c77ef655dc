//! # mandate-protocol
//!
//! Mandate's rules, types and wire, whole: what the server, the CLI and the benchmarks
//! build on. [`mandate-core`](https://docs.rs/mandate-core) is the face of this crate that
//! an embedder uses (the types, mandates, `evaluate`, signing and verification,
//! `Counterparty`, JWK Sets, cursors, the log's proofs), re-exported with a stability
//! promise; everything else here (the HTTP API's wire types, the review, escrow, funding
//! and delivery state machines, idempotency, the issuer's side of the transparency log, the
//! protocols' digests and credential ids) changes with the server and carries none.
//!
//! Like mandate-core, this crate does **no I/O**: it reads no clock, draws no random
//! numbers, opens no file or socket and spawns nothing. The caller passes `now` and random
//! bytes in.
//!
//! `mandate-core/public-api.txt` lists the face and `mandate-protocol/api.txt` the rest;
//! mandate-core's `tests/public_api.rs` checks both.
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

pub mod acp;
pub mod amount;
pub mod ap2;
pub mod budget;
pub mod claims;
pub mod counterparty;
pub mod cursor;
pub mod delivery;
pub mod environment;
pub mod escrow;
pub mod field;
pub mod funding;
pub mod history;
pub mod id;
pub mod idempotency;
pub mod jwk;
pub mod jwks_cache;
pub mod jws;
pub mod mandate;
pub mod names;
pub mod policy;
pub mod review;
pub mod timefmt;
pub mod tlog;
pub mod wire;
pub mod x402;
