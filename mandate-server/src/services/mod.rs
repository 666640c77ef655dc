//! What the resource routes do below their handlers: the orchestration of a request that
//! is more than one call (read, check, write, shape the answer), so that each route module
//! holds short handlers (extract, call a service, answer). The decision path has its own
//! service (`decision/`); these are the others.
//!
//! A service answers the API's one error type, [`ApiError`]: its messages say what the
//! caller must fix, and `http/error.rs` alone turns it into a status and the envelope.

pub mod ap2;
pub mod exports;
pub mod mandates;

use serde::Serialize;
use serde_json::Value;

use crate::http::error::ApiError;

/// An object of [`mandate_core::wire`] as the JSON value the server answers with (members
/// sorted by name, as the wire module documents).
pub fn wire_json<T: Serialize>(object: &T) -> Result<Value, ApiError> {
    mandate_core::wire::to_value(object)
        .map_err(|e| ApiError::Server(format!("encoding the answer: {e}")))
}
