//! Fuzzing of every parser that takes outside bytes: signed tokens (verdicts and events),
//! pagination cursors, request bodies (mandates, authorization requests, escrow funding),
//! JWK Sets, AP2 mandates (SD-JWTs), amounts, ids and dates.
//!
//! cargo-fuzz needs a nightly toolchain, which CI does not have, so this is byte-level
//! fuzzing with proptest: arbitrary bytes, and structure-aware mutations of valid inputs
//! (bytes replaced, inserted, deleted; JSON fields replaced by arbitrary JSON). Each parser
//! must return (never panic), with its typed error, and a mutated token or cursor must
//! never verify. `PROPTEST_CASES` sets the number of cases per property (default 256 here;
//! CI runs the default); a failure prints the minimal input, which then becomes a case in
//! `regressions` below.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use mandate_core::{
    AgentId, Amount, AuthorizationRequest, Category, Currency, CursorContext, CursorKey,
    DecisionId, EventClaims, EventId, FieldError, JwkSet, MandateDraft, MandateId, Nonce,
    P256Signer, Recipient, Signer, VERDICT_LIFETIME_SECS, Verdict, VerdictClaims, VerifyOptions,
    parse_body, sign_token, verify_closed_mandate, verify_event, verify_open_mandate,
    verify_verdict,
};
use mandate_protocol::{
    amount::amount_from_json,
    ap2::read_stored_open_mandate,
    funding::FundingRequest,
    mandate::{format_date, parse_date},
};
use proptest::prelude::*;
use serde_json::{Value, json};

/// A time from unix seconds.
fn secs(at: i64) -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp(at).unwrap()
}

const AP2_VECTORS: &str = include_str!("../../testdata/ap2/vectors.json");

fn ap2_vectors() -> Value {
    serde_json::from_str(AP2_VECTORS).unwrap()
}

fn ap2_issuers(v: &Value) -> JwkSet {
    JwkSet::from_json(v["issuer_jwks"].to_string().as_bytes()).unwrap()
}

fn ap2_now(v: &Value) -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp(v["now"].as_i64().unwrap()).unwrap()
}

const ISS: &str = "https://verdicts.mandate.example";
const IAT: i64 = 1_767_225_600;

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn signer() -> P256Signer {
    P256Signer::from_secret_bytes("sandbox-1", &[7; 32]).unwrap()
}

fn jwks() -> JwkSet {
    JwkSet {
        keys: vec![signer().public_jwk()],
    }
}

fn options() -> VerifyOptions {
    VerifyOptions {
        issuer: ISS.to_owned(),
        now: secs(IAT + 10),
        leeway_secs: 0,
    }
}

fn verdict_token() -> String {
    let claims = VerdictClaims {
        bindings: mandate_core::Bindings::default(),
        iss: ISS.to_owned(),
        jti: DecisionId::from_random([1; 16]),
        iat: IAT,
        exp: IAT + VERDICT_LIFETIME_SECS,
        verdict: Verdict::Allow,
        policy_verdict: Verdict::Allow,
        mandate: Some(MandateId::from_random([2; 16])),
        policy_version: "pol_2026-01-01.1".to_owned(),
        nonce: Nonce::from_random([3; 16]),
        request: AuthorizationRequest {
            agent: AgentId::parse("agt_buyer").unwrap(),
            amount: Amount::parse("100.10").unwrap(),
            currency: Currency::parse("USD").unwrap(),
            recipient: Recipient::parse("vendor:acme").unwrap(),
            category: Category::parse("software").unwrap(),
        },
    };
    sign_token(&signer() as &dyn Signer, &claims).unwrap()
}

fn event_token() -> String {
    let claims = EventClaims {
        iss: ISS.to_owned(),
        jti: EventId::from_random([5; 16]),
        iat: IAT,
        exp: IAT + 300,
        event_type: "ping".to_owned(),
        data: json!({"webhook": "whk_x"}),
    };
    sign_token(&signer() as &dyn Signer, &claims).unwrap()
}

/// An edit of a byte string: replace, insert or delete at a position (taken modulo the
/// length).
#[derive(Debug, Clone)]
enum Edit {
    Replace(usize, u8),
    Insert(usize, u8),
    Delete(usize),
    Truncate(usize),
}

fn edits() -> impl Strategy<Value = Vec<Edit>> {
    let printable = prop_oneof![any::<u8>(), b' '..=b'~'];
    let edit = prop_oneof![
        (any::<usize>(), printable.clone()).prop_map(|(i, b)| Edit::Replace(i, b)),
        (any::<usize>(), printable).prop_map(|(i, b)| Edit::Insert(i, b)),
        any::<usize>().prop_map(Edit::Delete),
        any::<usize>().prop_map(Edit::Truncate),
    ];
    prop::collection::vec(edit, 1..6)
}

fn mutate(base: &[u8], edits: &[Edit]) -> Vec<u8> {
    let mut out = base.to_vec();
    for edit in edits {
        let len = out.len().max(1);
        match *edit {
            Edit::Replace(i, b) if !out.is_empty() => out[i % len] = b,
            Edit::Insert(i, b) => out.insert(i % (out.len() + 1), b),
            Edit::Delete(i) if !out.is_empty() => {
                out.remove(i % len);
            }
            Edit::Truncate(i) => out.truncate(i % len),
            _ => {}
        }
    }
    out
}

/// Arbitrary JSON text, numbers included as raw text (the parsers keep exact number text).
fn json_text() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("false".to_owned()),
        "-?[0-9]{1,40}(\\.[0-9]{0,40})?([eE][+-]?[0-9]{1,5})?",
        ".{0,80}".prop_map(|s| serde_json::to_string(&s).unwrap()),
        "[a-z_:.0-9-]{0,70}".prop_map(|s| format!("\"{s}\"")),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(|v| format!("[{}]", v.join(","))),
            prop::collection::vec(("[a-z_]{0,12}", inner), 0..6).prop_map(|v| {
                let fields: Vec<String> = v
                    .into_iter()
                    .map(|(k, v)| format!("{}:{v}", serde_json::to_string(&k).unwrap()))
                    .collect();
                format!("{{{}}}", fields.join(","))
            }),
        ]
    })
}

fn json_value() -> impl Strategy<Value = Value> {
    json_text().prop_filter_map("valid JSON", |t| serde_json::from_str(&t).ok())
}

const MANDATE: &str = r#"{"agent": "agt_buyer", "principal": "role:cfo", "limits": {"per_transaction": 100, "per_month": 450, "currency": "USD"}, "categories": ["software", "travel"], "review_above": 50, "expires": "2026-12-31", "escrow": {"required_above": 10}}"#;
const AUTHORIZATION: &str =
    r#"{"amount": 12.50, "currency": "USD", "recipient": "vendor:acme", "category": "software"}"#;
const FUNDING: &str = r#"{"amount": 12.50, "currency": "USD", "buyer": "agt_buyer", "seller": "vendor:acme", "decision": "dec_aaaaaaaaaaaaaaaaaaaaaaaaaa", "arbiter": "role:legal"}"#;

/// Every body parser, on one JSON value: none may panic, and each error names a field or
/// the body.
fn parse_bodies(value: &Value) {
    if let Err(e) = MandateDraft::from_json(value) {
        assert!(!e.to_string().is_empty());
    }
    let agent = AgentId::parse("agt_buyer").unwrap();
    if let Err(e) = AuthorizationRequest::from_json(agent, value) {
        assert!(!e.to_string().is_empty());
    }
    if let Err(e) = FundingRequest::from_json(value) {
        assert!(!e.to_string().is_empty());
    }
    let _ = amount_from_json(value);
}

/// The body bytes as the server reads them: parsed as JSON, then each body parser.
fn parse_body_bytes(bytes: &[u8]) {
    if let Ok(value) = serde_json::from_slice::<Value>(bytes) {
        parse_bodies(&value);
    }
}

/// A JSON object path to replace in a valid body: a top-level or nested key, existing or new.
fn with_field(base: &str, path: &[String], value: Value) -> Value {
    let mut body: Value = serde_json::from_str(base).unwrap();
    let mut at = &mut body;
    for (i, key) in path.iter().enumerate() {
        if !at.is_object() {
            return body;
        }
        if i + 1 == path.len() {
            at[key.as_str()] = value;
            return body;
        }
        at = &mut at[key.as_str()];
    }
    body
}

fn field_path() -> impl Strategy<Value = Vec<String>> {
    let key = prop_oneof![
        Just("agent".to_owned()),
        Just("principal".to_owned()),
        Just("limits".to_owned()),
        Just("per_transaction".to_owned()),
        Just("per_month".to_owned()),
        Just("currency".to_owned()),
        Just("categories".to_owned()),
        Just("review_above".to_owned()),
        Just("expires".to_owned()),
        Just("escrow".to_owned()),
        Just("required_above".to_owned()),
        Just("amount".to_owned()),
        Just("recipient".to_owned()),
        Just("category".to_owned()),
        Just("buyer".to_owned()),
        Just("seller".to_owned()),
        Just("decision".to_owned()),
        Just("arbiter".to_owned()),
        Just("id".to_owned()),
        "[a-z_]{1,10}",
    ];
    prop::collection::vec(key, 1..3)
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn verdict_tokens_from_arbitrary_bytes_are_refused(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        let text = String::from_utf8_lossy(&bytes);
        prop_assert!(verify_verdict(&text, &jwks(), &options()).is_err());
        prop_assert!(verify_event(&text, &jwks(), &options()).is_err());
    }

    #[test]
    fn tokens_of_three_arbitrary_segments_are_refused(
        parts in prop::collection::vec("[A-Za-z0-9_-]{0,120}", 3),
        header in json_text(),
        claims in json_text(),
    ) {
        use base64::Engine as _;
        let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        for token in [
            parts.join("."),
            format!("{}.{}.{}", b64(&header), b64(&claims), parts[2]),
            format!("{}.{}.{}", b64(r#"{"alg":"ES256","typ":"JWT","kid":"sandbox-1"}"#), b64(&claims), parts[2]),
        ] {
            prop_assert!(verify_verdict(&token, &jwks(), &options()).is_err());
            prop_assert!(verify_event(&token, &jwks(), &options()).is_err());
        }
    }

    #[test]
    fn a_mutated_token_never_verifies(edits in edits()) {
        for (original, is_verdict) in [(verdict_token(), true), (event_token(), false)] {
            let mutated = String::from_utf8_lossy(&mutate(original.as_bytes(), &edits)).into_owned();
            let verified = if is_verdict {
                verify_verdict(&mutated, &jwks(), &options()).is_ok()
            } else {
                verify_event(&mutated, &jwks(), &options()).is_ok()
            };
            prop_assert_eq!(verified, mutated == original, "{}", mutated);
        }
    }

    #[test]
    fn cursors_from_arbitrary_text_or_mutations_are_refused(
        text in ".{0,200}",
        edits in edits(),
        position in any::<i64>(),
    ) {
        let key = CursorKey::new(&[9; 32]);
        let context = CursorContext::new("decisions", "org:o:sandbox").with_filter("verdict", "allow");
        let now = IAT;
        prop_assert!(key.open(&text, &context, secs(now)).is_err() || text.starts_with("cur_"));
        let token = key.issue(&context, position, secs(now));
        prop_assert_eq!(key.open(&token, &context, secs(now)).ok(), Some(position));
        let mutated = String::from_utf8_lossy(&mutate(token.as_bytes(), &edits)).into_owned();
        if mutated != token {
            prop_assert!(key.open(&mutated, &context, secs(now)).is_err(), "{}", mutated);
        }
        let prefixed = format!("cur_{text}");
        prop_assert!(key.open(&prefixed, &context, secs(now)).is_err());
    }

    #[test]
    fn request_bodies_from_arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        parse_body_bytes(&bytes);
    }

    #[test]
    fn request_bodies_from_arbitrary_json_never_panic(value in json_value()) {
        parse_bodies(&value);
    }

    #[test]
    fn mutated_valid_bodies_never_panic(edits in edits()) {
        for base in [MANDATE, AUTHORIZATION, FUNDING] {
            parse_body_bytes(&mutate(base.as_bytes(), &edits));
        }
    }

    #[test]
    fn a_field_replaced_by_any_json_is_a_typed_error_naming_a_field(path in field_path(), value in json_value()) {
        for base in [MANDATE, AUTHORIZATION, FUNDING] {
            parse_bodies(&with_field(base, &path, value.clone()));
        }
        // An error from a mandate body starts with the field it is about (or the body).
        let body = with_field(MANDATE, &path, value);
        if let Err(e) = MandateDraft::from_json(&body) {
            let message = e.to_string();
            let first = message.split(' ').next().unwrap_or_default();
            let named = ["body", "unknown", "agent", "principal", "limits", "categories", "review_above", "expires", "escrow", "id"]
                .iter()
                .any(|f| first.starts_with(f));
            prop_assert!(named, "{}", message);
        }
    }

    #[test]
    fn ap2_mandates_from_arbitrary_or_mutated_text_never_panic_nor_change_meaning(
        text in ".{0,300}",
        edits in edits(),
    ) {
        let v = ap2_vectors();
        let (issuers, now) = (ap2_issuers(&v), ap2_now(&v));
        let text_str = text.as_str();
        prop_assert!(verify_open_mandate(text_str, &issuers, now).is_err());
        prop_assert!(read_stored_open_mandate(text_str).is_err());
        let open = verify_open_mandate(v["open_full"].as_str().unwrap(), &issuers, now).unwrap();
        prop_assert!(verify_closed_mandate(text_str, &open, now).is_err());

        // A mutated open mandate is refused, or reads as the same mandate (its signed JWT
        // and limits; only an allowed list may narrow by a dropped disclosure).
        let original = v["open_full"].as_str().unwrap();
        let mutated = String::from_utf8_lossy(&mutate(original.as_bytes(), &edits)).into_owned();
        if let Ok(read) = verify_open_mandate(&mutated, &issuers, now) {
            prop_assert_eq!(read.digest(), open.digest());
            prop_assert_eq!(&read.terms()["limits"], &open.terms()["limits"]);
        }
        let _ = read_stored_open_mandate(&mutated);
        // A mutated presentation is refused, or is the same consent.
        let presented = v["presentation"].as_str().unwrap();
        let closed = verify_closed_mandate(presented, &open, now).unwrap();
        let mutated = String::from_utf8_lossy(&mutate(presented.as_bytes(), &edits)).into_owned();
        if let Ok(read) = verify_closed_mandate(&mutated, &open, now) {
            prop_assert_eq!(mandate_protocol::ap2::credential_id(&read), mandate_protocol::ap2::credential_id(&closed));
            prop_assert_eq!((read.amount, read.payee), (closed.amount, closed.payee));
        }
    }

    #[test]
    fn jwk_sets_from_arbitrary_or_mutated_bytes_never_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..400),
        edits in edits(),
        value in json_value(),
    ) {
        let _ = JwkSet::from_json(&bytes);
        let valid = serde_json::to_vec(&jwks()).unwrap();
        let _ = JwkSet::from_json(&mutate(&valid, &edits));
        let _ = JwkSet::from_json(value.to_string().as_bytes());
        let mut set: Value = serde_json::from_slice(&valid).unwrap();
        set["keys"][0]["x"] = value.clone();
        let _ = JwkSet::from_json(set.to_string().as_bytes());
        set["keys"] = value;
        let _ = JwkSet::from_json(set.to_string().as_bytes());
    }

    #[test]
    fn amounts_parse_or_refuse_and_round_trip(text in prop_oneof![".{0,60}", "-?[0-9]{0,40}(\\.[0-9]{0,40})?([eE][+-]?[0-9]{0,6})?"]) {
        if let Ok(amount) = Amount::parse(&text) {
            prop_assert_eq!(Amount::parse(&amount.to_string()), Ok(amount));
        }
    }

    #[test]
    fn ids_names_and_dates_parse_or_refuse((grammar, text, expect) in grammar_texts()) {
        check_grammar(&GRAMMARS[grammar], &text, expect);
    }
}

/// What a text drawn for a parser must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Drawn from the parser's grammar: it parses.
    Parses,
    /// Drawn from the grammar with one rule broken: it is refused.
    Refused,
    /// Drawn from anything: either.
    Either,
}

/// What a parser made of a text: the text it writes back, or its refusal's message.
type Parsed = Result<String, String>;

/// A body with a text in one of its fields, parsed.
type BodyWith = fn(&str) -> Result<(), FieldError>;

/// One of the id, name and date parsers, with its grammar as regular expressions.
struct Grammar {
    what: &'static str,
    parse: fn(&str) -> Parsed,
    /// Words every refusal of the parser carries.
    refusal: &'static str,
    /// The body field the parser reads, and that body with the text in the field.
    body: Option<(&'static str, BodyWith)>,
    /// Texts that parse.
    valid: &'static [&'static str],
    /// Texts that are refused: each breaks one rule of the grammar.
    refused: &'static [&'static str],
}

fn shown<T: std::fmt::Display, E: std::fmt::Display>(parsed: Result<T, E>) -> Parsed {
    parsed.map(|v| v.to_string()).map_err(|e| e.to_string())
}

/// `base` with `text` as its top-level `field`, parsed by `parse`.
fn in_body(
    base: &str,
    field: &str,
    text: &str,
    parse: impl Fn(&Value) -> Result<(), FieldError>,
) -> Result<(), FieldError> {
    parse(&with_field(base, &[field.to_owned()], json!(text)))
}

fn request_with(field: &str, text: &str) -> Result<(), FieldError> {
    let agent = AgentId::parse("agt_buyer").unwrap();
    let by_value = in_body(AUTHORIZATION, field, text, |v| {
        AuthorizationRequest::from_json(agent.clone(), v).map(drop)
    });
    // The bytes' way (the server's) reads plain strings without a `Value`: the same answer.
    let bytes = with_field(AUTHORIZATION, &[field.to_owned()], json!(text)).to_string();
    let by_bytes = AuthorizationRequest::from_json_bytes(agent, bytes.as_bytes());
    assert_eq!(
        by_bytes.map(drop).map_err(|e| e.to_string()),
        by_value.clone().map_err(|e| e.to_string())
    );
    by_value
}

/// The canonical UTC form of a timestamp: it parses back to the same second.
fn timestamp(text: &str) -> Parsed {
    let at = mandate_protocol::timefmt::parse(text).ok_or("not RFC 3339")?;
    Ok(mandate_protocol::timefmt::format(at))
}

const GRAMMARS: &[Grammar] = &[
    Grammar {
        what: "agent id",
        parse: |t| shown(AgentId::parse(t)),
        refusal: "agent id",
        body: Some(("agent", |t| {
            in_body(MANDATE, "agent", t, |v| {
                MandateDraft::from_json(v).map(drop)
            })
        })),
        valid: &["agt_[a-z0-9][a-z0-9_-]{0,62}"],
        refused: &[
            "agt_",
            "agt_[_-][a-z0-9_-]{0,9}",
            "agt_[a-z0-9]{64,70}",
            "agt_[a-z0-9]{1,9}[^a-z0-9_-][a-z0-9_-]{0,9}",
            "(AGT_|agt|agt-|dec_)[a-z0-9]{1,9}",
        ],
    },
    Grammar {
        what: "decision id",
        parse: |t| shown(DecisionId::parse(t)),
        refusal: "decision id",
        body: Some(("decision", |t| {
            in_body(FUNDING, "decision", t, |v| {
                FundingRequest::from_json(v).map(drop)
            })
        })),
        valid: &["dec_[a-z0-9_-]{1,64}"],
        refused: &[
            "dec_",
            "dec_[a-z0-9_-]{65,70}",
            "dec_[a-z0-9_-]{0,9}[^a-z0-9_-][a-z0-9_-]{0,9}",
            "(DEC_|dec|dec-|mnd_)[a-z0-9]{1,9}",
        ],
    },
    Grammar {
        what: "mandate id",
        parse: |t| shown(MandateId::parse(t)),
        refusal: "mandate id",
        body: None,
        valid: &["mnd_[a-z0-9_-]{1,64}"],
        refused: &[
            "mnd_",
            "mnd_[a-z0-9_-]{65,70}",
            "mnd_[a-z0-9_-]{0,9}[^a-z0-9_-][a-z0-9_-]{0,9}",
            "(MND_|mnd|mnd-|dec_)[a-z0-9]{1,9}",
        ],
    },
    Grammar {
        what: "recipient",
        parse: |t| shown(Recipient::parse(t)),
        refusal: "must be vendor:<name>",
        body: Some(("recipient", |t| request_with("recipient", t))),
        valid: &["vendor:[A-Za-z0-9._-]{1,128}"],
        refused: &[
            "vendor:",
            "vendor:[A-Za-z0-9._-]{129,140}",
            "vendor:[A-Za-z0-9._-]{0,9}[^A-Za-z0-9._-][A-Za-z0-9._-]{0,9}",
            "(Vendor:|vendor|vendor-|role:)[a-z]{1,9}",
        ],
    },
    Grammar {
        what: "category",
        parse: |t| shown(Category::parse(t)),
        refusal: "must be 1 to 64 characters",
        body: Some(("category", |t| request_with("category", t))),
        valid: &["[a-z0-9][a-z0-9_.-]{0,63}"],
        refused: &[
            "",
            "[_.-][a-z0-9]{0,9}",
            "[a-z0-9]{65,70}",
            "[a-z0-9][a-z0-9_.-]{0,9}[^a-z0-9_.-][a-z0-9_.-]{0,9}",
        ],
    },
    Grammar {
        what: "currency",
        parse: |t| shown(Currency::parse(t)),
        refusal: "must be three upper-case letters",
        body: Some(("currency", |t| request_with("currency", t))),
        valid: &["[A-Z]{3}"],
        refused: &["[A-Z]{0,2}", "[A-Z]{4,9}", "[A-Z]{0,2}[^A-Z][A-Z]{0,2}"],
    },
    Grammar {
        what: "date",
        parse: |t| {
            parse_date(t)
                .map(format_date)
                .ok_or_else(|| "not a date".to_owned())
        },
        refusal: "",
        body: Some(("expires", |t| {
            in_body(MANDATE, "expires", t, |v| {
                MandateDraft::from_json(v).map(drop)
            })
        })),
        valid: &[
            "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])",
            "(20(0[048]|[2468][048]|[13579][26]))-02-29",
            "[0-9]{4}-(0[13-9]|1[0-2])-30",
            "[0-9]{4}-(0[13578]|1[02])-31",
        ],
        refused: &[
            "[0-9]{4}-(00|1[3-9])-[0-2][0-9]",
            "[0-9]{4}-[01][0-9]-(00|3[2-9])",
            "[0-9]{4}-02-3[01]",
            "[0-9]{4}-(0[469]|11)-31",
            "[0-9]{1,3}-[01][0-9]-[0-2][0-9]",
            "[0-9]{4}/[01][0-9]/[0-2][0-9]",
            "[0-9]{4}-[01][0-9]-[0-2][0-9]T.{1,9}",
            " [0-9]{4}-[01][0-9]-[0-2][0-9]",
        ],
    },
    Grammar {
        what: "timestamp",
        parse: timestamp,
        refusal: "not RFC 3339",
        body: None,
        valid: &[
            "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]Z",
        ],
        refused: &[
            "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]",
            "[0-9]{4}-(00|1[3-9])-[0-2][0-9]T[01][0-9]:[0-5][0-9]:[0-5][0-9]Z",
            "[0-9]{4}-[01][0-9]-[0-2][0-9]T(2[4-9]|[3-9][0-9]):[0-5][0-9]:[0-5][0-9]Z",
            "[0-9]{2}-[01][0-9]-[0-2][0-9]T[01][0-9]:[0-5][0-9]:[0-5][0-9]Z",
        ],
    },
];

/// A grammar (its index in [`GRAMMARS`]) and a text for it: from anything, from its
/// grammar, or from its grammar with one rule broken.
fn grammar_texts() -> impl Strategy<Value = (usize, String, Expect)> {
    let mut cases: Vec<BoxedStrategy<(usize, String, Expect)>> = Vec::new();
    for (i, grammar) in GRAMMARS.iter().enumerate() {
        cases.push(".{0,140}".prop_map(move |t| (i, t, Expect::Either)).boxed());
        for (regexes, expect) in [
            (grammar.valid, Expect::Parses),
            (grammar.refused, Expect::Refused),
        ] {
            for regex in regexes {
                cases.push(regex.prop_map(move |t| (i, t, expect)).boxed());
            }
        }
    }
    proptest::strategy::Union::new(cases)
}

/// A parsed text writes back as itself (a timestamp as its UTC form, the same instant to
/// the second); a refused one is refused with the parser's words, and in a body with an
/// error that names the field.
fn check_grammar(grammar: &Grammar, text: &str, expect: Expect) {
    let what = grammar.what;
    let parsed = (grammar.parse)(text);
    match (&parsed, expect) {
        (Ok(_), Expect::Refused) => panic!("{what} {text:?} parsed; it breaks the grammar"),
        (Err(e), Expect::Parses) => panic!("{what} {text:?} refused ({e}); it is in the grammar"),
        (Ok(back), _) if what == "timestamp" => {
            let again = timestamp(back);
            assert_eq!(again.as_ref(), Ok(back), "{text:?}");
            if expect == Expect::Parses {
                assert_eq!(back, text);
            }
        }
        (Ok(back), _) => assert_eq!(back, text, "{what} {text:?} writes back as {back:?}"),
        (Err(e), _) => assert!(e.contains(grammar.refusal), "{what} {text:?}: {e}"),
    }
    let Some((field, body)) = grammar.body else {
        return;
    };
    match (body(text), parsed) {
        (Ok(()), Ok(_)) => {}
        (
            Err(FieldError::Invalid {
                field: named,
                problem,
            }),
            Err(_),
        ) => {
            assert_eq!(named, field, "{what} {text:?}: {problem}");
            let message = FieldError::Invalid {
                field: named,
                problem,
            }
            .to_string();
            assert!(message.starts_with(&format!("{field} ")), "{message}");
        }
        (body, parsed) => panic!("{what} {text:?}: the body says {body:?}, the parser {parsed:?}"),
    }
}

/// Inputs found by the properties above (or by hand) that once failed, kept as plain tests.
mod regressions {
    use super::*;

    /// The message of a body's refusal, read as the server reads a body: into a tree
    /// (`parse_body`) for any body, and for an authorization also its plain way
    /// (`from_json_bytes`), which must refuse it in the same words.
    fn refusal(body: &[u8]) -> String {
        let agent = AgentId::parse("agt_buyer").unwrap();
        let by_bytes = AuthorizationRequest::from_json_bytes(agent.clone(), body)
            .expect_err("the body is refused")
            .to_string();
        let by_tree = match parse_body(body) {
            Err(e) => e.to_string(),
            Ok(value) => AuthorizationRequest::from_json(agent, &value)
                .expect_err("the body is refused")
                .to_string(),
        };
        assert_eq!(by_bytes, by_tree);
        by_bytes
    }

    /// JSON nested past serde_json's depth limit (128) is refused as malformed, without
    /// overflowing the stack; a number too large, too small or with an exponent is refused
    /// as the amount it would be, in words that say what to send.
    #[test]
    fn deeply_nested_and_huge_numbers_are_refused_cleanly() {
        let depth = |open: &str, close: &str, n: usize| {
            format!("{}1{}", open.repeat(n), close.repeat(n)).into_bytes()
        };
        for nested in [
            vec![b'['; 100_000],
            br#"{"a":"#.repeat(100_000),
            depth("[", "]", 129),
            format!(r#"{{"amount": 1, "x": {}}}"#, "[".repeat(200)).into_bytes(),
        ] {
            let message = refusal(&nested);
            assert!(
                message.starts_with("malformed JSON body: recursion limit exceeded"),
                "{message}"
            );
        }
        // Up to the limit the same shape is read: the refusal is the depth's.
        assert!(parse_body(&depth("[", "]", 127)).is_ok());

        let request = |amount: &str| {
            format!(
                r#"{{"amount": {amount}, "currency": "USD", "recipient": "vendor:a", "category": "a"}}"#
            )
        };
        let too_many =
            "amount has too many digits (at most 28 significant digits and 18 decimal places)";
        let not_plain = "amount must be a plain decimal number such as 12.50";
        for (amount, want) in [
            (format!("1{}", "0".repeat(100_000)), too_many),
            (format!("0.{}1", "0".repeat(100_000)), too_many),
            ("1".repeat(30), too_many),
            ("1e999999999".to_owned(), not_plain),
            ("1E-999999999".to_owned(), not_plain),
        ] {
            assert_eq!(
                refusal(request(&amount).as_bytes()),
                want,
                "{}",
                &amount[..20.min(amount.len())]
            );
        }
        // The largest amounts still read, exactly.
        for amount in ["9".repeat(28), format!("0.{}", "9".repeat(18))] {
            let body = request(&amount);
            let agent = AgentId::parse("agt_buyer").unwrap();
            let read = AuthorizationRequest::from_json_bytes(agent, body.as_bytes()).unwrap();
            assert_eq!(read.amount.to_string(), amount);
        }
        // In a mandate, the limit that is too large is the one named.
        let huge = format!("1{}", "0".repeat(100_000));
        let mut mandate: Value = serde_json::from_str(MANDATE).unwrap();
        mandate["limits"]["per_month"] = serde_json::from_str(&huge).unwrap();
        let message = MandateDraft::from_json(&mandate).unwrap_err().to_string();
        assert_eq!(
            message,
            format!("limits.per_month{}", &too_many["amount".len()..])
        );
    }

    #[test]
    fn a_token_with_empty_or_extra_segments_is_refused() {
        let token = verdict_token();
        for bad in [
            String::new(),
            ".".to_owned(),
            "..".to_owned(),
            "...".to_owned(),
            format!("{token}."),
            format!(".{token}"),
            token.replacen('.', "..", 1),
        ] {
            assert!(verify_verdict(&bad, &jwks(), &options()).is_err(), "{bad}");
        }
    }
}
