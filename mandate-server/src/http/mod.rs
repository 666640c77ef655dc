//! The HTTP layers and extractors every route shares: authentication and the caches it
//! reads, request ids, rate limits, what a client may make the server hold (limits), body
//! reading, idempotency, list paging, CORS for the review console, and the error envelope.
//!
//! Nothing here decides a verdict or knows a resource: routes call these, never the
//! other way round.

pub mod auth;
pub mod body;
pub mod cache;
pub mod connections;
pub mod cors;
pub mod error;
pub mod extract;
pub mod fields;
pub mod idempotency;
pub mod limits;
pub mod list;
pub mod rate_limit;
pub mod request_id;
pub mod request_log;
pub mod seal;
