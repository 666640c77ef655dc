//! # mandate-server
//!
//! The Mandate service: a thin shell of HTTP, authentication, persistence and workers
//! around `mandate-core`, where every rule lives. axum and tokio serve two listeners (the
//! API host and the public host); SQLite (one WAL file) stores everything.
//!
//! Handlers extract, call the core, persist in one transaction and answer. Errors map to
//! the spec's envelope in one place ([`error`]).

pub mod agent_state;
pub mod app;
pub mod auth;
pub mod body;
pub mod cache;
pub mod clock;
pub mod decision;
pub mod delivery;
pub mod demo;
pub mod error;
pub mod fast_signer;
pub mod idempotency;
pub mod limits;
pub mod list;
pub mod model;
pub mod operator;
pub mod presign;
pub mod rate_limit;
pub mod request_id;
pub mod routes;
pub mod seal;
pub mod serve;
pub mod settlement;
pub mod signing;
pub mod ssrf;
pub mod state;
pub mod storage;
pub mod timers;
