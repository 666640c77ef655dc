//! # mandate-core
//!
//! The pure heart of Mandate: types parsed at the edge, mandates, the policy evaluator,
//! verdict and event claims, ES256 JWS signing and verification, JWK Sets, cursor tokens,
//! and the review and escrow state machines.
//!
//! This crate does **no I/O**: it reads no clock, draws no random numbers, opens no file or
//! socket and spawns nothing. The caller passes `now` and random bytes in. That makes every
//! rule a function that can be tested exhaustively and embedded in any service.
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

pub mod amount;
pub mod claims;
pub mod cursor;
pub mod escrow;
pub mod field;
pub mod history;
pub mod id;
pub mod idempotency;
pub mod jwk;
pub mod jws;
pub mod mandate;
pub mod names;
pub mod policy;
pub mod review;
