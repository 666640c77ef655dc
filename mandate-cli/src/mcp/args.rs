//! What the tools take: their arguments as JSON Schemas say them (ranges as `minimum` and
//! `maximum`, only the formats JSON Schema defines) and as they are read (a value out of
//! its range refused naming the argument and the range, an amount kept exactly as given).
//!
//! The payment protocols' members (`x402`, `ap2`, `acp`) are taken as the API takes them in
//! `POST /v1/authorizations` (docs/protocols.md) and passed on as given: the API judges
//! them and names what is wrong. A protocol added to the API later is one more optional
//! member of [`Bindings`] and of [`VerifyBindings`].

use mandate_core::Amount;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

/// `wait_for_review`'s wait, in seconds: by default, and its range.
pub const WAIT_DEFAULT_SECS: u64 = 60;
const WAIT_SECS: (i64, i64) = (1, 600);
/// `list_decisions`' page: by default, and its range (the API's own).
const LIST_DEFAULT: i64 = 10;
const LIST_LIMIT: (i64, i64) = (1, 100);
/// The x402 asset's decimals `verify_verdict` takes (as `mandate verify --decimals`).
const DECIMALS: (i64, i64) = (0, 28);

/// `authorize_payment`'s input.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct AuthorizeArgs {
    /// The amount, exact: a JSON number or a decimal string such as "12.50".
    #[schemars(schema_with = "amount_schema")]
    #[serde(deserialize_with = "amount")]
    pub amount: String,
    /// ISO 4217 currency code, such as "USD".
    pub currency: String,
    /// Who is paid, `vendor:<name>`, such as "vendor:acme".
    pub recipient: String,
    /// What for, one of the mandate's categories, such as "software".
    pub category: String,
    /// Reuse the key of an earlier call to retry it without deciding twice; one is
    /// generated when absent.
    #[serde(default)]
    pub idempotency_key: Option<String>,
    /// The payment protocol the agent is about to pay through, so the verdict is bound to
    /// that payment.
    #[serde(flatten)]
    pub bindings: Bindings,
}

/// The protocol members of `authorize_payment`, passed to `POST /v1/authorizations` as
/// given: the signed verdict then carries their claims (`x402_payment`, `ap2_mandate`,
/// `ap2_transaction`).
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct Bindings {
    /// The x402 payment: its v2 PaymentRequirements (the element of `accepts` about to be
    /// paid), or the PaymentPayload whose `accepted` is read. Its `payTo` must be the
    /// recipient's name and a fiat `asset` the currency; the verdict carries
    /// `x402_payment`, the requirements' digest.
    #[serde(default)]
    #[schemars(schema_with = "object_schema")]
    pub x402: Option<Map<String, Value>>,
    /// The AP2 closed payment mandate for exactly this payment (for an agent whose
    /// mandate was imported from an AP2 open mandate); the verdict carries `ap2_mandate`
    /// and `ap2_transaction`.
    #[serde(default)]
    pub ap2: Option<Ap2Presentation>,
    /// The ACP delegated payment allowance the payment is made under (`{"allowance":
    /// {...}}`, as ACP writes it): `amount` must be its `max_amount`, `currency` its
    /// currency, `recipient` `vendor:<merchant_id>`; the verdict carries `acp_allowance`
    /// and `acp_checkout_session`.
    #[serde(default)]
    pub acp: Option<AcpAllowance>,
}

/// `acp` in `authorize_payment` and `verify_verdict`, as the API takes it.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AcpAllowance {
    /// The allowance: `reason`, `max_amount` (minor units), `currency`, `merchant_id`,
    /// `checkout_session_id`, `expires_at`.
    #[schemars(schema_with = "object_schema")]
    pub allowance: Map<String, Value>,
}

impl Bindings {
    /// The members to add to the API's request body, in its names.
    pub fn members(&self) -> Vec<(&'static str, Value)> {
        let mut members = Vec::new();
        if let Some(x402) = &self.x402 {
            members.push(("x402", Value::Object(x402.clone())));
        }
        if let Some(ap2) = &self.ap2 {
            members.push((
                "ap2",
                serde_json::json!({"closed_mandate": ap2.closed_mandate}),
            ));
        }
        if let Some(acp) = &self.acp {
            members.push((
                "acp",
                serde_json::json!({"allowance": Value::Object(acp.allowance.clone())}),
            ));
        }
        members
    }
}

/// `ap2` in `authorize_payment`, as the API takes it.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Ap2Presentation {
    /// The presentation as AP2's SDK makes it, `<open-sd-jwt>~~<closed>`, or the closed
    /// hop alone.
    pub closed_mandate: String,
}

/// `wait_for_review`'s input.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct WaitArgs {
    /// The decision (`dec_…`) whose verdict was `review`.
    pub decision: String,
    /// How long to wait, in seconds.
    #[serde(default, deserialize_with = "timeout_seconds")]
    #[schemars(schema_with = "timeout_schema")]
    pub timeout_seconds: Option<u64>,
}

/// `list_decisions`' input.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ListArgs {
    /// How many, newest first.
    #[serde(default, deserialize_with = "limit")]
    #[schemars(schema_with = "limit_schema")]
    pub limit: Option<u64>,
    /// Only this verdict.
    #[serde(default)]
    #[schemars(schema_with = "verdict_schema")]
    pub verdict: Option<String>,
}

impl ListArgs {
    /// The page size asked for, or the default.
    pub fn limit(&self) -> u64 {
        self.limit.unwrap_or(LIST_DEFAULT as u64)
    }
}

/// `verify_verdict`'s input.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct VerifyArgs {
    /// The verdict token (compact JWS) the payer handed over.
    pub token: String,
    /// The amount being paid, exact.
    #[schemars(schema_with = "amount_schema")]
    #[serde(deserialize_with = "amount")]
    pub amount: String,
    /// Its currency.
    pub currency: String,
    /// Who is paid (you), `vendor:<name>`.
    pub recipient: String,
    /// The payment protocol being settled: the verdict must be bound to it.
    #[serde(flatten)]
    pub bindings: VerifyBindings,
}

/// What `verify_verdict` checks the verdict's protocol claims against (mandate-core's
/// `ExpectedTransaction`, as `mandate verify --x402/--ap2/--acp`).
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct VerifyBindings {
    /// The x402 payment being settled (its v2 PaymentRequirements, or a PaymentPayload):
    /// `x402_payment` must be its digest, `payTo` the recipient's name, a fiat `asset`
    /// the currency.
    #[serde(default)]
    #[schemars(schema_with = "object_schema")]
    pub x402: Option<Map<String, Value>>,
    /// With `x402`: the asset's decimals (6 for USDC), so that its atomic `amount` is
    /// compared with `amount` too.
    #[serde(default, deserialize_with = "decimals")]
    #[schemars(schema_with = "decimals_schema")]
    pub decimals: Option<u32>,
    /// The AP2 payment being settled: the verdict's `ap2_mandate` and `ap2_transaction`
    /// must be these (either or both).
    #[serde(default)]
    pub ap2: Option<Ap2Expected>,
    /// The ACP allowance being charged (`{"allowance": {...}}`): the verdict's
    /// `acp_allowance` must be its digest, `acp_checkout_session` its checkout session, and
    /// the charge within it (at most its maximum, its currency and merchant, before it
    /// expires).
    #[serde(default)]
    pub acp: Option<AcpAllowance>,
}

/// `ap2` in `verify_verdict`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Ap2Expected {
    /// The open payment mandate's digest (base64url SHA-256 of its issuer JWT).
    #[serde(default)]
    pub mandate: Option<String>,
    /// The closed payment mandate's transaction id.
    #[serde(default)]
    pub transaction: Option<String>,
}

/// The amount's exact text, from a JSON number (an exponent written out as the plain
/// decimal it is: `1e2` is `100`) or a string (as given); refused, as given, when it is
/// not a usable amount.
fn amount<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    amount_text(&Value::deserialize(d)?).map_err(serde::de::Error::custom)
}

/// See [`amount`].
pub fn amount_text(value: &Value) -> Result<String, String> {
    let text = match value {
        Value::Number(n) => {
            let written = n.to_string();
            plain_decimal(&written).unwrap_or(written)
        }
        Value::String(s) => s.trim().to_owned(),
        _ => {
            return Err(
                "amount must be a decimal number such as 12.50 (a JSON number or a string)".into(),
            );
        }
    };
    match Amount::parse(&text) {
        Ok(_) => Ok(text),
        Err(e) => Err(format!("amount {text} is not usable: {e}")),
    }
}

/// A JSON number written with an exponent (`1e2`, `1.25E-1`) as the plain decimal it is
/// exactly (`100`, `0.125`); `None` for one without, or with an exponent too large to
/// be an amount.
fn plain_decimal(number: &str) -> Option<String> {
    let (mantissa, exponent) = number.split_once(['e', 'E'])?;
    let exponent: i32 = exponent.parse().ok().filter(|e: &i32| e.abs() <= 40)?;
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", mantissa),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = format!("{whole}{fraction}");
    let point = i32::try_from(whole.len()).ok()? + exponent;
    let padded = if point <= 0 {
        format!("0.{}{digits}", "0".repeat(point.unsigned_abs() as usize))
    } else if point as usize >= digits.len() {
        format!("{digits}{}", "0".repeat(point as usize - digits.len()))
    } else {
        let (left, right) = digits.split_at(point as usize);
        format!("{left}.{right}")
    };
    let trimmed = if padded.contains('.') {
        padded.trim_end_matches('0').trim_end_matches('.')
    } else {
        &padded
    };
    let trimmed = trimmed.trim_start_matches('0');
    let trimmed = if trimmed.is_empty() || trimmed.starts_with('.') {
        format!("0{trimmed}")
    } else {
        trimmed.to_owned()
    };
    Some(format!("{sign}{trimmed}"))
}

/// An integer argument in `range`, or a refusal naming it and the range.
fn bounded<'de, D: Deserializer<'de>>(
    d: D,
    name: &str,
    (min, max): (i64, i64),
) -> Result<Option<i64>, D::Error> {
    let value = Option::<Value>::deserialize(d)?;
    let Some(value) = value.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    match value.as_i64() {
        Some(n) if (min..=max).contains(&n) => Ok(Some(n)),
        _ => Err(serde::de::Error::custom(format!(
            "{name} must be an integer from {min} to {max}, not {value}"
        ))),
    }
}

fn timeout_seconds<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Ok(bounded(d, "timeout_seconds", WAIT_SECS)?.map(|n| n as u64))
}

fn limit<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Ok(bounded(d, "limit", LIST_LIMIT)?.map(|n| n as u64))
}

fn decimals<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    Ok(bounded(d, "decimals", DECIMALS)?.map(|n| n as u32))
}

fn amount_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": ["number", "string"],
        "description": "The amount, exact: a JSON number or a decimal string such as \"12.50\" (a string takes no exponent)."
    })
}

fn integer_schema(description: &str, (min, max): (i64, i64), default: i64) -> schemars::Schema {
    schemars::json_schema!({
        "type": "integer",
        "minimum": min,
        "maximum": max,
        "default": default,
        "description": description,
    })
}

fn timeout_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    integer_schema(
        "How long to wait, in seconds: 60 by default, at most 600.",
        WAIT_SECS,
        WAIT_DEFAULT_SECS as i64,
    )
}

fn limit_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    integer_schema(
        "How many, newest first: 1 to 100 (default 10).",
        LIST_LIMIT,
        LIST_DEFAULT,
    )
}

fn decimals_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "integer",
        "minimum": DECIMALS.0,
        "maximum": DECIMALS.1,
        "description": "With x402: the asset's decimals (6 for USDC), to compare its atomic amount with amount.",
    })
}

fn verdict_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let verdicts: Vec<&str> = mandate_core::Verdict::ALL
        .iter()
        .map(|v| v.as_str())
        .collect();
    schemars::json_schema!({
        "type": "string",
        "enum": verdicts,
        "description": "Only decisions with this verdict.",
    })
}

fn object_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "object"})
}

/// The `format` values JSON Schema 2020-12 defines; any other is removed from the tools'
/// schemas (schemars writes `uint64` and the like for Rust integers, which validators
/// warn about as unknown).
const STANDARD_FORMATS: &[&str] = &[
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

/// Removes every non-standard `format` from `schema`, at any depth.
pub fn standard_formats_only(schema: &mut Map<String, Value>) {
    let standard = schema
        .get("format")
        .and_then(Value::as_str)
        .is_none_or(|f| STANDARD_FORMATS.contains(&f));
    if !standard {
        schema.remove("format");
    }
    for value in schema.values_mut() {
        match value {
            Value::Object(inner) => standard_formats_only(inner),
            Value::Array(items) => {
                for item in items.iter_mut().filter_map(Value::as_object_mut) {
                    standard_formats_only(item);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn amounts_keep_their_exact_text_and_exponents_are_written_out() {
        let n: Value = serde_json::from_str("12.50").unwrap();
        assert_eq!(amount_text(&n).unwrap(), "12.50");
        assert_eq!(amount_text(&Value::String(" 0.1 ".into())).unwrap(), "0.1");
        for (written, plain) in [
            ("1e2", "100"),
            ("1E+2", "100"),
            ("1.25e1", "12.5"),
            ("125e-3", "0.125"),
            ("0.5e0", "0.5"),
            ("1e-2", "0.01"),
        ] {
            let v: Value = serde_json::from_str(written).unwrap();
            assert_eq!(amount_text(&v).unwrap(), plain, "{written}");
        }
        for bad in [r#""1e3""#, r#""-5""#, "true", r#""abc""#, "-1e2"] {
            let v: Value = serde_json::from_str(bad).unwrap();
            let message = amount_text(&v).unwrap_err();
            assert!(message.contains("amount"), "{bad}: {message}");
            assert!(!message.contains("e+"), "{bad}: {message}");
        }
        let v: Value = serde_json::from_str(r#""1e3""#).unwrap();
        assert!(amount_text(&v).unwrap_err().starts_with("amount 1e3 "));
    }

    #[test]
    fn integers_out_of_range_are_refused_naming_the_argument_and_range() {
        let read = |json: &str| serde_json::from_str::<ListArgs>(json).map(|a| a.limit());
        assert_eq!(read("{}").unwrap(), 10);
        assert_eq!(read(r#"{"limit": 100}"#).unwrap(), 100);
        for bad in ["1000", "0", "-1", "2.5", "\"5\""] {
            let e = read(&format!(r#"{{"limit": {bad}}}"#)).unwrap_err();
            assert!(
                e.to_string().starts_with(&format!(
                    "limit must be an integer from 1 to 100, not {bad}"
                )),
                "{e}"
            );
        }
        let e = serde_json::from_str::<WaitArgs>(r#"{"decision":"d","timeout_seconds":100000}"#)
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("timeout_seconds must be an integer from 1 to 600, not 100000")
        );
    }

    #[test]
    fn schemas_say_the_ranges_and_only_standard_formats() {
        let mut schema = serde_json::to_value(schemars::schema_for!(ListArgs)).unwrap();
        let limit = &schema["properties"]["limit"];
        assert_eq!(
            (limit["minimum"].clone(), limit["maximum"].clone()),
            (1.into(), 100.into())
        );
        let mut odd =
            serde_json::json!({"a": {"format": "uint64"}, "b": [{"format": "date-time"}]});
        standard_formats_only(odd.as_object_mut().unwrap());
        assert_eq!(
            odd,
            serde_json::json!({"a": {}, "b": [{"format": "date-time"}]})
        );
        standard_formats_only(schema.as_object_mut().unwrap());
    }
}
