//! # mandate-server
//!
//! The Mandate service: a thin shell of HTTP, authentication, persistence and workers
//! around `mandate-core`, where every rule lives. axum and tokio serve two listeners (the
//! API host and the public host); an engine behind [`storage::Store`] stores everything:
//! SQLite (one WAL file, the default) or PostgreSQL (shared by many server processes).
//!
//! Handlers extract, call a service (or the decision service) and answer. Below HTTP, each
//! service answers an error enum of its own, mapped to the API's error in one place
//! ([`routes::errors`]); the API's error becomes the spec's envelope in one place
//! ([`http::error`]).

pub mod app;
pub mod clock;
pub mod decision;
pub mod demo;
pub mod http;
pub mod logging;
pub mod model;
pub mod operator;
pub mod routes;
pub mod serve;
pub mod services;
pub mod settlement;
pub mod signing;
pub mod ssrf;
pub mod state;
pub mod storage;
pub mod telemetry;
pub mod workers;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod engine_boundary_tests;
