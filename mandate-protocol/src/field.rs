//! Reading JSON request bodies field by field, so that every error names the field.
//!
//! The module is private: embedders see [`FieldError`] and [`BodyError`] (what the
//! public `from_json` functions return) and [`parse_body`], re-exported at the crate root.
//! The helpers below read the core's bodies, and the server reads its routes' own bodies
//! with the same ones, through [`crate::field`], so every body's problem is
//! answered in the same words.
//!
//! serde's derive reports errors in its own words and positions; a caller fixing a request
//! wants `limits.currency is required`. These helpers read a `serde_json::Value` (parsed
//! with exact number text) and produce a [`FieldError`] whose message starts with the
//! dotted field path.
//!
//! JSON lets an object repeat a member; `serde_json` keeps the last value. A gateway that
//! keeps the first would then see another request than the one judged or signed, so every
//! body is read by [`parse_body`], which finds a repeat while it builds the tree, and a
//! repeat is refused ([`FieldError::Duplicate`]).

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
pub(crate) fn amount(value: &Value, path: &str) -> Result<Amount, FieldError> {
    amount_from_json(value).map_err(|e| invalid(path, e))
}

/// Where a member sits: its parent's place and its key or index, kept on the stack while
/// the checker walks below it, so a path is only written out for the repeat it reports.
pub(crate) enum Place<'a> {
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
/// repeated within an object ([`FieldError::Duplicate`] names the first). One pass over
/// the bytes builds the tree and finds a repeat; JSON that is malformed anywhere is
/// [`BodyError::Malformed`], even after a repeat.
pub fn parse_body(json: &[u8]) -> Result<Value, BodyError> {
    let found = RefCell::new(None);
    let mut deserializer = serde_json::Deserializer::from_slice(json);
    let seed = Tree {
        place: &Place::Root,
        found: &found,
    };
    let value = seed
        .deserialize(&mut deserializer)
        .and_then(|value| deserializer.end().map(|()| value))
        .map_err(BodyError::Malformed)?;
    match found.into_inner() {
        Some(path) => Err(FieldError::Duplicate(path).into()),
        None => Ok(value),
    }
}

/// One JSON value read into a [`Value`] exactly as `serde_json` reads it (a repeated
/// member keeps its last value there too), recording on the way the path of the first
/// member repeated within an object: the tree and the repeat check in one pass.
pub(crate) struct Tree<'a> {
    pub(crate) place: &'a Place<'a>,
    pub(crate) found: &'a RefCell<Option<String>>,
}

/// The key under which `serde_json` (with `arbitrary_precision`) hands a number to a
/// visitor: a one-member map holding the number's text.
const NUMBER_TOKEN: &str = "$serde_json::private::Number";

impl<'de> DeserializeSeed<'de> for Tree<'_> {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Tree<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }
    fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
        Ok(Value::from(n))
    }
    fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
        Ok(Value::from(n))
    }
    fn visit_f64<E>(self, n: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(n).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, s: &str) -> Result<Value, E> {
        Ok(Value::String(s.to_owned()))
    }
    fn visit_string<E>(self, s: String) -> Result<Value, E> {
        Ok(Value::String(s))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut elements = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        loop {
            let place = Place::Element(self.place, elements.len());
            let seed = Tree {
                place: &place,
                found: self.found,
            };
            match seq.next_element_seed(seed)? {
                Some(element) => elements.push(element),
                None => return Ok(Value::Array(elements)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut members = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if key == NUMBER_TOKEN && members.is_empty() {
                // A number with its exact text (`arbitrary_precision`), read as `Value` does.
                let text: String = map.next_value()?;
                return text
                    .parse::<serde_json::Number>()
                    .map(Value::Number)
                    .map_err(de::Error::custom);
            }
            // Keys are compared unescaped: "a" and "\u0061" are the same member. The first
            // repeat in the text is the one named, before anything inside its value.
            if members.contains_key(&key) && self.found.borrow().is_none() {
                *self.found.borrow_mut() = Some(Place::Member(self.place, &key).to_string());
            }
            let place = Place::Member(self.place, &key);
            let value = map.next_value_seed(Tree {
                place: &place,
                found: self.found,
            })?;
            members.insert(key, value);
        }
        Ok(Value::Object(members))
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

    /// What `parse_body` was before it read the tree and the repeats in one pass: the
    /// tree as `serde_json` reads it, then the repeat check over the bytes again.
    fn two_passes(json: &[u8]) -> Result<Value, String> {
        let value: Value = serde_json::from_slice(json).map_err(|e| e.to_string())?;
        match repeated_member(json) {
            Some(path) => Err(FieldError::Duplicate(path).to_string()),
            None => Ok(value),
        }
    }

    fn one_pass(json: &[u8]) -> Result<Value, String> {
        parse_body(json).map_err(|e| match e {
            BodyError::Malformed(e) => e.to_string(),
            BodyError::Field(e) => e.to_string(),
        })
    }

    #[test]
    fn one_pass_gives_the_tree_and_the_repeat_of_two() {
        let cases: &[&str] = &[
            r#"{"amount": 12.50, "currency": "USD", "n": -0.000000000000000000001}"#,
            r#"{"big": 123456789012345678901234567890.123456789, "e": 1e400, "neg": -5}"#,
            r#"{"a": 1, "a": {"x": 1, "x": 2}}"#,
            r#"{"a": {"x": 1, "x": 2}, "a": 1}"#,
            r#"{"a": [1, {"b": null, "b": true}], "c": "\u00e9\n"}"#,
            r#"{"a": 1, "a": 2} trailing"#,
            r#"{"a": 1, "a": 2, "b": }"#,
            r#"{"$serde_json::private::Number": "1"}"#,
            r#"[[[{"k": [], "k": {}}]]]"#,
            r#""text""#,
            "1.10",
            "null",
            "",
            "{",
            "[1, 2,]",
        ];
        for json in cases {
            assert_eq!(
                one_pass(json.as_bytes()),
                two_passes(json.as_bytes()),
                "{json}"
            );
        }
        // The number's exact text survives (`arbitrary_precision` in the tests).
        let value = parse_body(br#"{"amount": 1234567890123456789.10}"#).unwrap();
        assert_eq!(value["amount"].to_string(), "1234567890123456789.10");
    }

    fn json_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let token = prop_oneof![
            Just("{"),
            Just("}"),
            Just("["),
            Just("]"),
            Just(","),
            Just(":"),
            Just("\"a\""),
            Just("\"b\""),
            Just("\"\\u0061\""),
            Just("1.50"),
            Just("-0"),
            Just("99999999999999999999.9"),
            Just("null"),
            Just("true"),
            Just(" "),
        ];
        prop::collection::vec(token, 0..24).prop_map(|tokens| tokens.concat())
    }

    proptest::proptest! {
        #[test]
        fn one_pass_is_two_passes_on_any_text(json in json_text()) {
            proptest::prop_assert_eq!(one_pass(json.as_bytes()), two_passes(json.as_bytes()), "{}", json);
        }

        #[test]
        fn one_pass_is_two_passes_on_any_bytes(json in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..48)) {
            proptest::prop_assert_eq!(one_pass(&json), two_passes(&json));
        }
    }

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
