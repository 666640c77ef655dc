//! `AuthorizationRequest::from_json_bytes` reads plain bodies without a `serde_json::Value`;
//! whatever the body, it must give what parsing into a `Value` and `from_json` give: the
//! same request, or an error with the same message.
//!
//! Bodies are built from fields that are right, wrong, null, repeated, unknown, read-only,
//! escaped or of another type, in any order, with arbitrary whitespace, and from arbitrary
//! bytes. `PROPTEST_CASES` sets the number of cases (default 2,048 here).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use mandate_core::{AgentId, AuthorizationRequest, RequestBodyError, parse_body};
use mandate_protocol::policy::AuthorizationBody;
use proptest::prelude::*;
use serde_json::Value;

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_048);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn agent() -> AgentId {
    AgentId::parse("agt_01jc0000000000000000000000").unwrap()
}

/// The reference: a `Value` read as every body is (`parse_body`: malformed JSON and a
/// repeated member refused), then `from_json`; errors as the text the API would show.
fn through_value(body: &[u8]) -> Result<AuthorizationRequest, String> {
    let value: Value = parse_body(body).map_err(|e| e.to_string())?;
    AuthorizationRequest::from_json(agent(), &value).map_err(|e| e.to_string())
}

fn direct(body: &[u8]) -> Result<AuthorizationRequest, String> {
    AuthorizationRequest::from_json_bytes(agent(), body).map_err(|e| e.to_string())
}

/// JSON texts for a field's value: good and bad ones of every kind.
fn value_text() -> impl Strategy<Value = String> {
    prop_oneof![
        // Amounts.
        Just("12.50".to_owned()),
        Just("0".to_owned()),
        Just("-3".to_owned()),
        Just("1e3".to_owned()),
        Just("12.345".to_owned()),
        Just("99999999999999999999999999999999".to_owned()),
        Just("\"12.50\"".to_owned()),
        // Currencies, recipients, categories, right and wrong.
        Just("\"USD\"".to_owned()),
        Just("\"usd\"".to_owned()),
        Just("\"EUR\"".to_owned()),
        Just("\"vendor:openai\"".to_owned()),
        Just("\"vendor:acme.co\"".to_owned()),
        Just("\"merchant:acme\"".to_owned()),
        Just("\"cloud_compute\"".to_owned()),
        Just("\"software\"".to_owned()),
        Just("\"\"".to_owned()),
        // Escapes: the same text, or not a valid text at all.
        Just("\"U\\u0053D\"".to_owned()),
        Just("\"vendor:openai\\/x\"".to_owned()),
        Just("\"vendor:op\\u0065nai\"".to_owned()),
        Just("\"bad\\ud800\"".to_owned()),
        // Other types.
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("[]".to_owned()),
        Just("{}".to_owned()),
        "[a-z0-9 ._:-]{0,12}".prop_map(|t| format!("\"{t}\"")),
        (-1_000_000i64..1_000_000).prop_map(|n| n.to_string()),
    ]
}

fn key() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        4 => Just("amount"),
        4 => Just("currency"),
        4 => Just("recipient"),
        4 => Just("category"),
        1 => Just("agent"),
        1 => Just("id"),
        1 => Just("verdict"),
        1 => Just("memo"),
        1 => Just("Amount"),
    ]
}

fn whitespace() -> impl Strategy<Value = &'static str> {
    prop_oneof![Just(""), Just(" "), Just("\n\t ")]
}

/// An object of up to seven fields, in any order, possibly repeated.
fn object() -> impl Strategy<Value = String> {
    prop::collection::vec((key(), value_text(), whitespace()), 0..7).prop_map(|fields| {
        let inner: Vec<String> = fields
            .into_iter()
            .map(|(k, v, ws)| format!("{ws}\"{k}\"{ws}:{ws}{v}"))
            .collect();
        format!("{{{}}}", inner.join(","))
    })
}

/// A plain body with each field drawn from its right values and a few wrong ones.
fn plain() -> impl Strategy<Value = String> {
    let amount = prop_oneof![
        Just("12.50"),
        Just("0.01"),
        Just("250"),
        Just("0"),
        Just("-1"),
        Just("1.005")
    ];
    let currency = prop_oneof![Just("USD"), Just("EUR"), Just("usd"), Just("")];
    let recipient = prop_oneof![
        Just("vendor:openai"),
        Just("vendor:v17"),
        Just("merchant:acme"),
        Just(" ")
    ];
    let category = prop_oneof![Just("cloud_compute"), Just("software"), Just("Bad Cat")];
    (amount, currency, recipient, category)
        .prop_map(|(a, c, r, g)| {
            vec![
                format!(r#""amount":{a}"#),
                format!(r#""currency":"{c}""#),
                format!(r#""recipient":"{r}""#),
                format!(r#""category":"{g}""#),
            ]
        })
        .prop_shuffle()
        .prop_map(|fields| format!("{{{}}}", fields.join(",")))
}

/// An authorization body as the route reads it: the request's result as the text the API
/// would show, and the protocol members taken out (or the body's own error).
type Read = Result<(Result<AuthorizationRequest, String>, [Option<Value>; 3]), String>;

/// The reference: one `Value` (`parse_body`), the members taken out of it, `from_json` on
/// the rest.
fn body_through_value(body: &[u8]) -> Read {
    let mut value: Value = parse_body(body).map_err(|e| e.to_string())?;
    let mut take = |name: &str| value.as_object_mut().and_then(|o| o.remove(name));
    let members = [take("acp"), take("ap2"), take("x402")];
    let request = AuthorizationRequest::from_json(agent(), &value).map_err(|e| e.to_string());
    Ok((request, members))
}

fn body_direct(body: &[u8]) -> Read {
    let read = AuthorizationBody::from_json_bytes(agent(), body).map_err(|e| e.to_string())?;
    let request = read.request.map_err(|e| e.to_string());
    Ok((request, [read.acp, read.ap2, read.x402]))
}

/// A protocol member's value: objects (with a repeat inside, or exact numbers), null,
/// strings, other types.
fn member_text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(r#"{"allowance": {"max_amount": 1250, "currency": "usd"}}"#.to_owned()),
        Just(r#"{"closed_mandate": "eyJ.a.b~~c"}"#.to_owned()),
        Just(r#"{"scheme": "exact", "amount": "1000", "payTo": "0xabc", "n": 12.50}"#.to_owned()),
        Just(r#"{"accepted": {"payTo": "x", "payTo": "y"}}"#.to_owned()),
        Just(r#"{"a": [1, {"b": 1, "b": 2}]}"#.to_owned()),
        Just(r#"{"s": "\u00e9"}"#.to_owned()),
        Just("null".to_owned()),
        Just("[]".to_owned()),
        Just("\"text\"".to_owned()),
        Just("99999999999999999999.000000001".to_owned()),
    ]
}

/// A plain body, with protocol members (any of them, repeated or not) put in anywhere.
fn with_members() -> impl Strategy<Value = String> {
    let member = prop_oneof![Just("acp"), Just("ap2"), Just("x402")];
    (
        plain(),
        prop::collection::vec((member, member_text()), 0..4),
        any::<prop::sample::Index>(),
    )
        .prop_map(|(plain, members, at)| {
            let mut fields: Vec<String> = plain
                .trim_start_matches('{')
                .trim_end_matches('}')
                .split(',')
                .map(str::to_owned)
                .collect();
            for (name, value) in members {
                let position = at.index(fields.len() + 1);
                fields.insert(position, format!(r#""{name}": {value}"#));
            }
            format!("{{{}}}", fields.join(","))
        })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn objects_give_what_the_value_way_gives(body in object()) {
        prop_assert_eq!(direct(body.as_bytes()), through_value(body.as_bytes()), "{}", body);
    }

    #[test]
    fn plain_bodies_give_what_the_value_way_gives(body in plain()) {
        prop_assert_eq!(direct(body.as_bytes()), through_value(body.as_bytes()), "{}", body);
    }

    #[test]
    fn bodies_with_protocol_members_give_what_the_value_way_gives(body in with_members()) {
        prop_assert_eq!(body_direct(body.as_bytes()), body_through_value(body.as_bytes()), "{}", body);
    }

    #[test]
    fn objects_read_as_authorizations_give_what_the_value_way_gives(body in object()) {
        prop_assert_eq!(body_direct(body.as_bytes()), body_through_value(body.as_bytes()), "{}", body);
    }

    #[test]
    fn arbitrary_bytes_give_what_the_value_way_gives(body in prop::collection::vec(any::<u8>(), 0..64)) {
        prop_assert_eq!(direct(&body), through_value(&body));
    }
}

#[test]
fn a_plain_body_is_read() {
    let body = br#"{"amount": 12.50, "currency": "USD", "recipient": "vendor:openai", "category": "cloud_compute"}"#;
    let request = AuthorizationRequest::from_json_bytes(agent(), body).unwrap();
    assert_eq!(request.amount.to_string(), "12.50");
    assert_eq!(request.currency.as_str(), "USD");
    assert_eq!(Ok(request), through_value(body));
    // Escapes go the `Value` way, to the same request.
    let escaped = br#"{"amount":12.50,"currency":"U\u0053D","recipient":"vendor:op\u0065nai","category":"cloud_compute"}"#;
    let request = AuthorizationRequest::from_json_bytes(agent(), escaped).unwrap();
    assert_eq!(request.recipient.as_str(), "vendor:openai");
    assert_eq!(Ok(request), through_value(escaped));
}

#[test]
fn each_kind_of_failure_keeps_its_message() {
    let cases: [(&[u8], &str); 6] = [
        (
            b"{",
            "malformed JSON body: EOF while parsing an object at line 1 column 1",
        ),
        (b"[1]", "body must be a JSON object"),
        (
            br#"{"amount":1,"currency":"USD","recipient":"vendor:a.b","category":"x","memo":1}"#,
            "unknown field memo",
        ),
        (
            br#"{"amount":1,"currency":"USD","recipient":"vendor:a.b","category":"x","id":"d"}"#,
            "id is read-only and cannot be set",
        ),
        (
            br#"{"amount":null,"currency":"USD","recipient":"vendor:a.b","category":"x"}"#,
            "amount is required",
        ),
        (
            br#"{"amount":"1","currency":"USD","recipient":"vendor:a.b","category":"x"}"#,
            "amount must be a plain decimal number such as 12.50",
        ),
    ];
    for (body, message) in cases {
        let error = AuthorizationRequest::from_json_bytes(agent(), body).unwrap_err();
        assert_eq!(
            error.to_string(),
            message,
            "{}",
            String::from_utf8_lossy(body)
        );
        assert_eq!(Err(error.to_string()), through_value(body));
        let malformed = matches!(error, RequestBodyError::Malformed(_));
        assert_eq!(malformed, message.starts_with("malformed"));
    }
}

/// A field given twice is refused, naming it, whichever value comes first: a gateway that
/// keeps the first value must never see another request than the one judged.
#[test]
fn a_repeated_field_is_refused_naming_it() {
    for (body, member) in [
        (
            &br#"{"amount":1,"amount":99999,"currency":"USD","recipient":"vendor:a.b","category":"software"}"#[..],
            "amount",
        ),
        (
            br#"{"amount":1,"currency":"USD","recipient":"vendor:a.b","category":"software","recipient":"vendor:c"}"#,
            "recipient",
        ),
        (
            br#"{"amount":1,"currency":"USD","recipient":"vendor:a.b","category":"software","\u0061mount":2}"#,
            "amount",
        ),
    ] {
        let error = AuthorizationRequest::from_json_bytes(agent(), body).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!("duplicate member \"{member}\": send each member once")
        );
        assert_eq!(Err(error.to_string()), through_value(body));
    }
}

/// An array is not a request, even one whose elements are the four fields in order (serde's
/// derive would read a struct from it by position).
#[test]
fn an_array_body_is_not_read_by_position() {
    let body = br#"[1, "USD", "vendor:a.b", "software"]"#;
    let error = AuthorizationRequest::from_json_bytes(agent(), body).unwrap_err();
    assert_eq!(error.to_string(), "body must be a JSON object");
    assert_eq!(Err(error.to_string()), through_value(body));
}
