//! The services of the resources beside decisions: what a request to them does, below the
//! routes (which extract, call a service, answer) and above storage (which writes what a
//! service decided). They know no HTTP: each has its own error type, mapped to the spec's
//! envelope in `routes/mod.rs`, where the two meet.

pub mod escrows;
pub mod webhooks;
