//! The services of the resources beside decisions: what a request to them does, below the
//! routes (which extract, call a service, answer) and above storage (which writes what a
//! service decided).
//!
//! No service knows HTTP: each takes what it needs (a store, the agents' locks, the caller,
//! `now`) rather than the application's state, and answers an error type of its own, whose
//! messages say what the caller must fix. `routes/errors.rs` alone turns them into the
//! spec's envelope.

pub mod acp;
pub mod ap2;
pub mod authorizations;
pub mod decision_log;
pub mod escrows;
pub mod exports;
pub mod mandates;
pub mod webhooks;
pub mod x402;

use serde::Serialize;
use serde_json::Value;

/// An answer that could not be encoded as JSON: the server's fault, never the caller's.
#[derive(Debug, thiserror::Error)]
#[error("encoding the answer: {0}")]
pub struct EncodingError(String);

/// An object of [`mandate_protocol::wire`] as the JSON value the server answers with (members
/// sorted by name, as the wire module documents).
pub fn wire_json<T: Serialize>(object: &T) -> Result<Value, EncodingError> {
    mandate_protocol::wire::to_value(object).map_err(|e| EncodingError(e.to_string()))
}
