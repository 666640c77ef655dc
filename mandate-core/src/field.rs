//! Reading JSON request bodies field by field, so that every error names the field.
//!
//! serde's derive reports errors in its own words and positions; a caller fixing a request
//! wants `limits.currency is required`. These helpers read a `serde_json::Value` (parsed
//! with exact number text) and produce a [`FieldError`] whose message starts with the
//! dotted field path.

use serde_json::{Map, Value};

use crate::amount::{Amount, amount_from_json};

/// A problem with a request body, naming the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FieldError {
    /// The body is not a JSON object.
    #[error("body must be a JSON object")]
    NotAnObject,
    /// A required field is absent (or null).
    #[error("{0} is required")]
    Missing(String),
    /// A field that is not part of this body.
    #[error("unknown field {0}")]
    Unknown(String),
    /// A field the server sets; it cannot be written.
    #[error("{0} is read-only and cannot be set")]
    ReadOnly(String),
    /// A field with a value of the wrong form.
    #[error("{field} {problem}")]
    Invalid {
        /// The dotted field path.
        field: String,
        /// What is wrong, phrased to follow the field name.
        problem: String,
    },
}

/// A [`FieldError::Invalid`] for `field`.
pub fn invalid(field: &str, problem: impl std::fmt::Display) -> FieldError {
    FieldError::Invalid {
        field: field.to_owned(),
        problem: problem.to_string(),
    }
}

/// The body as an object, or [`FieldError::NotAnObject`].
pub fn object(body: &Value) -> Result<&Map<String, Value>, FieldError> {
    body.as_object().ok_or(FieldError::NotAnObject)
}

/// Refuses any key outside `known`; keys in `read_only` get their own message.
pub fn check_fields(
    object: &Map<String, Value>,
    prefix: &str,
    known: &[&str],
    read_only: &[&str],
) -> Result<(), FieldError> {
    for key in object.keys() {
        if known.contains(&key.as_str()) {
            continue;
        }
        let path = format!("{prefix}{key}");
        if read_only.contains(&key.as_str()) {
            return Err(FieldError::ReadOnly(path));
        }
        return Err(FieldError::Unknown(path));
    }
    Ok(())
}

/// The value of `key` unless it is absent or null.
pub fn present<'a>(object: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    object.get(key).filter(|v| !v.is_null())
}

/// The value of `key`, or [`FieldError::Missing`] naming `path`.
pub fn required<'a>(
    object: &'a Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<&'a Value, FieldError> {
    present(object, key).ok_or_else(|| FieldError::Missing(path.to_owned()))
}

/// The value as a string.
pub fn string<'a>(value: &'a Value, path: &str) -> Result<&'a str, FieldError> {
    value
        .as_str()
        .ok_or_else(|| invalid(path, "must be a string"))
}

/// The value as an exact amount (a JSON number, never a string or float).
pub fn amount(value: &Value, path: &str) -> Result<Amount, FieldError> {
    amount_from_json(value).map_err(|e| invalid(path, e))
}
