//! Reading JSON request bodies field by field, so that every error names the field.
//!
//! The module is private: embedders see [`FieldError`] and [`BodyError`] (what the
//! public `from_json` functions return) and [`parse_body`], re-exported at the crate root;
//! the helpers below are the core's own (the server keeps its copies in
//! `mandate-server/src/http/fields.rs`).
//!
//! serde's derive reports errors in its own words and positions; a caller fixing a request
//! wants `limits.currency is required`. These helpers read a `serde_json::Value` (parsed
//! with exact number text) and produce a [`FieldError`] whose message starts with the
//! dotted field path.
//!
//! JSON lets an object repeat a member; `serde_json` keeps the last value. A gateway that
//! keeps the first would then see another request than the one judged or signed, so every
//! body is also read by [`repeated_member`], and a repeat is refused
//! ([`FieldError::Duplicate`]).

use std::cell::RefCell;
use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::amount::{Amount, amount_from_json};

/// A problem with a request body, naming the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
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
    /// A member that appears more than once in one object (its path, dotted, with `[i]`
    /// for array elements).
    #[error("duplicate member {0:?}: send each member once")]
    Duplicate(String),
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
pub(crate) fn invalid(field: &str, problem: impl std::fmt::Display) -> FieldError {
    FieldError::Invalid {
        field: field.to_owned(),
        problem: problem.to_string(),
    }
}

/// The body as an object, or [`FieldError::NotAnObject`].
pub(crate) fn object(body: &Value) -> Result<&Map<String, Value>, FieldError> {
    body.as_object().ok_or(FieldError::NotAnObject)
}

/// Refuses any key outside `known`; keys in `read_only` get their own message.
pub(crate) fn check_fields(
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
pub(crate) fn present<'a>(object: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    object.get(key).filter(|v| !v.is_null())
}

/// The value of `key`, or [`FieldError::Missing`] naming `path`.
pub(crate) fn required<'a>(
    object: &'a Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<&'a Value, FieldError> {
    present(object, key).ok_or_else(|| FieldError::Missing(path.to_owned()))
}

/// The value as a string.
pub(crate) fn string<'a>(value: &'a Value, path: &str) -> Result<&'a str, FieldError> {
    value
        .as_str()
        .ok_or_else(|| invalid(path, "must be a string"))
}

/// The value as an exact amount (a JSON number, never a string or float).
pub(crate) fn amount(value: &Value, path: &str) -> Result<Amount, FieldError> {
    amount_from_json(value).map_err(|e| invalid(path, e))
}

/// Where a member sits: its parent's place and its key or index, kept on the stack while
/// the checker walks below it, so a path is only written out for the repeat it reports.
enum Place<'a> {
    Root,
    Member(&'a Place<'a>, &'a str),
    Element(&'a Place<'a>, usize),
}

impl fmt::Display for Place<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::Root => Ok(()),
            Place::Member(Place::Root, key) => f.write_str(key),
            Place::Member(parent, key) => write!(f, "{parent}.{key}"),
            Place::Element(parent, index) => write!(f, "{parent}[{index}]"),
        }
    }
}

/// Walks one JSON value, recording the path of the first member repeated within an object.
struct Members<'a> {
    place: &'a Place<'a>,
    found: &'a RefCell<Option<String>>,
}

impl<'de> DeserializeSeed<'de> for Members<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Members<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut index = 0;
        loop {
            let place = Place::Element(self.place, index);
            let seed = Members {
                place: &place,
                found: self.found,
            };
            if seq.next_element_seed(seed)?.is_none() {
                return Ok(());
            }
            index += 1;
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        // Keys are compared unescaped: "a" and "\u0061" are the same member.
        let mut seen: HashSet<String> = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if seen.contains(&key) {
                let path = Place::Member(self.place, &key).to_string();
                *self.found.borrow_mut() = Some(path);
                return Err(de::Error::custom("duplicate member"));
            }
            let place = Place::Member(self.place, &key);
            map.next_value_seed(Members {
                place: &place,
                found: self.found,
            })?;
            seen.insert(key);
        }
        Ok(())
    }
}

/// The path of the first member that `json` repeats within one object, at any depth
/// (`amount`, `limits.currency`, `items[2].name`), or `None`: none is repeated, or `json`
/// is not JSON at all (which the caller's own parse reports).
pub(crate) fn repeated_member(json: &[u8]) -> Option<String> {
    let found = RefCell::new(None);
    let mut deserializer = serde_json::Deserializer::from_slice(json);
    let seed = Members {
        place: &Place::Root,
        found: &found,
    };
    // Only a repeat is of interest here; a syntax error is the caller's to report.
    let _ = seed.deserialize(&mut deserializer);
    found.into_inner()
}

/// Why the bytes of a request body are not a body to read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BodyError {
    /// Not JSON at all.
    #[error("malformed JSON body: {0}")]
    Malformed(#[source] serde_json::Error),
    /// JSON, but not a valid body (a repeated member, or a field's problem); the field is
    /// named.
    #[error(transparent)]
    Field(#[from] FieldError),
}

/// Parses `json` as a request body: a [`Value`] with exact number text, with no member
/// repeated within an object ([`FieldError::Duplicate`] names the first).
pub fn parse_body(json: &[u8]) -> Result<Value, BodyError> {
    let value: Value = serde_json::from_slice(json).map_err(BodyError::Malformed)?;
    match repeated_member(json) {
        Some(path) => Err(FieldError::Duplicate(path).into()),
        None => Ok(value),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_member_is_found_at_any_depth_with_its_path() {
        let cases: &[(&str, Option<&str>)] = &[
            (r#"{"amount": 10, "amount": 99999}"#, Some("amount")),
            (r#"{"a": 1, "b": 2, "c": 3}"#, None),
            (
                r#"{"limits": {"currency": "USD", "currency": "EUR"}}"#,
                Some("limits.currency"),
            ),
            (r#"{"a": {"x": 1}, "b": {"x": 1}}"#, None),
            (r#"{"a": [{"k": 1}, {"k": 1, "k": 2}]}"#, Some("a[1].k")),
            (r#"[{"k": 1}, {"k": 2, "k": 3}]"#, Some("[1].k")),
            (r#"{"a": 1, "\u0061": 2}"#, Some("a")),
            (r#"{"n": 1.50, "m": 12345678901234567890.1}"#, None),
            (r#"{"a": {"b": {"c": {"d": 1, "d": 1}}}}"#, Some("a.b.c.d")),
            (r#"{"x": null, "x": null}"#, Some("x")),
            ("not json", None),
            ("[1, 2, 3]", None),
            (r#""a string""#, None),
        ];
        for (json, want) in cases {
            assert_eq!(repeated_member(json.as_bytes()).as_deref(), *want, "{json}");
        }
    }

    #[test]
    fn parse_body_names_the_repeat_and_keeps_exact_numbers() {
        let err = parse_body(br#"{"amount": 10, "amount": 99999}"#).unwrap_err();
        assert!(
            matches!(&err, BodyError::Field(FieldError::Duplicate(p)) if p == "amount"),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            r#"duplicate member "amount": send each member once"#
        );
        assert!(matches!(parse_body(b"{"), Err(BodyError::Malformed(_))));
        let value = parse_body(br#"{"amount": 10.50}"#).unwrap();
        assert_eq!(value["amount"].to_string(), "10.50");
    }
}
