//! The services of the resources beside decisions: what a request to them does, below the
//! routes (which extract, call a service, answer) and above storage (which writes what a
//! service decided).
//!
//! `escrows` and `webhooks` know no HTTP: each has its own error type, mapped to the spec's
//! envelope in `routes/mod.rs`, where the two meet. `mandates`, `exports` and `ap2` answer
//! the API's error type, [`ApiError`], whose messages say what the caller must fix; only
//! `http/error.rs` turns it into a status and the envelope.

pub mod ap2;
pub mod escrows;
pub mod exports;
pub mod mandates;
pub mod webhooks;

use serde::Serialize;
use serde_json::Value;

use crate::http::error::ApiError;

/// An object of [`mandate_core::wire`] as the JSON value the server answers with (members
/// sorted by name, as the wire module documents).
pub fn wire_json<T: Serialize>(object: &T) -> Result<Value, ApiError> {
    mandate_core::wire::to_value(object)
        .map_err(|e| ApiError::Server(format!("encoding the answer: {e}")))
}
