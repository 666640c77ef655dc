//! Reading a JSON body field by field, so that every error names the field: the routes'
//! own bodies (agents, enforcement, reviews, webhooks). The errors are mandate-core's
//! [`FieldError`], the type its own `from_json` readers return, so every body's problem
//! is answered in the same words; the helpers are the server's, not part of the core's API.

use mandate_core::FieldError;
use serde_json::{Map, Value};

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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_field_and_read_only_fields_are_told_apart() {
        let body: Value =
            serde_json::from_str(r#"{"name": "a", "id": "x", "extra": 1, "n": null}"#).unwrap();
        let fields = object(&body).unwrap();
        assert_eq!(
            check_fields(fields, "hook.", &["name", "extra", "n"], &["id"])
                .unwrap_err()
                .to_string(),
            "hook.id is read-only and cannot be set"
        );
        assert_eq!(
            check_fields(fields, "", &["name", "id", "n"], &[])
                .unwrap_err()
                .to_string(),
            "unknown field extra"
        );
        assert_eq!(
            required(fields, "n", "hook.n").unwrap_err().to_string(),
            "hook.n is required"
        );
        assert_eq!(
            string(required(fields, "extra", "extra").unwrap(), "extra")
                .unwrap_err()
                .to_string(),
            "extra must be a string"
        );
        assert_eq!(string(&body["name"], "name").unwrap(), "a");
        assert!(object(&Value::Null).is_err());
    }
}
