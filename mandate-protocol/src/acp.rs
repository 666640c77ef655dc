//! The Agentic Commerce Protocol's delegated payment allowance (ACP, `delegate_payment`,
//! github.com/agentic-commerce-protocol/agentic-commerce-protocol, `$defs/Allowance`) as a
//! verdict binds it.
//!
//! An ACP allowance limits a delegated payment credential: one payment (`reason`
//! `one_time`, the only reason ACP defines) of at most `max_amount` (an integer of minor
//! units) in `currency` (ISO 4217, lower case in ACP: `usd`), to `merchant_id`, for the
//! checkout `checkout_session_id`, until `expires_at` (RFC 3339). Mandate answers the
//! question the allowance leaves open: may this agent commit up to that much, to that
//! merchant, once?
//!
//! - [`Allowance::from_json`] reads one, refusing what ACP's schema refuses (a missing or
//!   unknown member, a reason other than `one_time`, an amount that is not a whole number
//!   of minor units, a currency outside ISO 4217, a time that is not RFC 3339), each
//!   error naming the member (`acp.allowance.max_amount`).
//! - A request under it is for exactly the allowance: amount [`Allowance::max_amount`]
//!   (minor units scaled by the currency's exponent: 2000 `usd` is 20.00 USD), its
//!   currency, recipient [`Allowance::recipient`] (`vendor:<merchant_id>`), before
//!   `expires_at` ([`check_request`]).
//! - A `one_time` allowance is a single-use credential, [`credential_id`]: one
//!   per checkout session (a server keeps it per organization and environment).
//! - The verdict carries the claims `acp_allowance` ([`digest`]: the base64url,
//!   unpadded, SHA-256 of the allowance's RFC 8785 canonical JSON,
//!   [`canonical_json`]) and `acp_checkout_session` (its
//!   `checkout_session_id`).
//! - Whoever settles (the merchant's PSP holding the delegated credential) checks the
//!   verdict is bound to the allowance and that the charge is within it
//!   (`Allowance::settlement_mismatches`: at most the maximum, its currency, its
//!   merchant, before `expires_at`), through [`crate::counterparty::ExpectedTransaction::with_acp`].

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rust_decimal::Decimal;
use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::amount::Amount;
use crate::ap2::minor_unit_exponent;
use crate::field::{FieldError, invalid};
use crate::names::{Currency, Recipient};

/// The one allowance `reason` ACP defines: a single payment.
pub(crate) const ONE_TIME: &str = "one_time";

/// The members of an ACP `Allowance`, all required, in RFC 8785 order.
const MEMBERS: [&str; 6] = [
    "checkout_session_id",
    "currency",
    "expires_at",
    "max_amount",
    "merchant_id",
    "reason",
];

/// The largest `max_amount` read: 2^53 - 1, the largest integer every JSON reader (and
/// RFC 8785's number form) holds exactly.
const MAX_MINOR_UNITS: u64 = (1 << 53) - 1;

/// The longest `checkout_session_id` and `merchant_id` read (ACP bounds `merchant_id` to
/// 256 characters): a bound on what is hashed, stored and signed.
const MAX_ID_LEN: usize = 256;

/// An ACP delegated payment allowance, read and checked. Made by
/// [`Allowance::from_json`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowance {
    max_minor: u64,
    max: Amount,
    currency_text: String,
    currency: Currency,
    checkout_session_id: String,
    merchant_id: String,
    recipient: Recipient,
    expires_at_text: String,
    expires_at: OffsetDateTime,
}

/// How a request, or a charge, is not what an allowance allows. [`member`](Self::member)
/// names the allowance's member it disagrees with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AllowanceMismatch {
    /// A request's amount is not the allowance's maximum (a request under an allowance
    /// is decided on its maximum).
    #[error("amount {amount} is not the allowance's max_amount, {max}")]
    NotMaximum {
        /// The request's amount.
        amount: Amount,
        /// The allowance's maximum, in major units.
        max: Amount,
    },
    /// A charge above the allowance's maximum.
    #[error("amount {amount} is above the allowance's max_amount, {max}")]
    AboveMaximum {
        /// The charge.
        amount: Amount,
        /// The allowance's maximum, in major units.
        max: Amount,
    },
    /// Another currency than the allowance's.
    #[error("currency {currency} is not the allowance's currency {allowed}")]
    Currency {
        /// The request's (or charge's) currency.
        currency: Currency,
        /// The allowance's currency, upper case.
        allowed: Currency,
    },
    /// Another recipient than `vendor:<merchant_id>`.
    #[error("recipient {recipient} is not the allowance's merchant, {allowed}")]
    Recipient {
        /// The request's (or charge's) recipient.
        recipient: Recipient,
        /// `vendor:<merchant_id>`.
        allowed: Recipient,
    },
    /// At or after `expires_at`: ACP's allowance is invalid from then on.
    #[error("the allowance expired at {expires_at}")]
    Expired {
        /// `expires_at`, as sent.
        expires_at: String,
    },
}

impl AllowanceMismatch {
    /// The allowance's member the mismatch is about: `max_amount`, `currency`,
    /// `merchant_id` or `expires_at`.
    pub fn member(&self) -> &'static str {
        match self {
            Self::NotMaximum { .. } | Self::AboveMaximum { .. } => "max_amount",
            Self::Currency { .. } => "currency",
            Self::Recipient { .. } => "merchant_id",
            Self::Expired { .. } => "expires_at",
        }
    }
}

impl Allowance {
    /// Reads an ACP `Allowance` object found at `path` (a field path for the error
    /// messages, such as `acp.allowance`): exactly the six members of ACP's schema, each
    /// checked (module doc); an error names the member (`acp.allowance.currency`).
    pub fn from_json(value: &Value, path: &str) -> Result<Self, FieldError> {
        let object = value
            .as_object()
            .ok_or_else(|| invalid(path, "must be an ACP Allowance object"))?;
        if let Some(name) = object.keys().find(|k| !MEMBERS.contains(&k.as_str())) {
            return Err(FieldError::Unknown(format!("{path}.{name}")));
        }
        let text = |name: &str| text_member(object, path, name);
        let reason = text("reason")?;
        if reason != ONE_TIME {
            return Err(invalid(
                &format!("{path}.reason"),
                format!("is {reason:?}; ACP defines one reason, {ONE_TIME:?}"),
            ));
        }
        let currency_text = text("currency")?;
        let (currency, exponent) = currency_of(&currency_text, path)?;
        let max_minor = minor_units(object, path)?;
        // Exact, at the currency's minor unit: 2000 at exponent 2 is 20.00.
        let max = Amount::from_decimal(Decimal::from_i128_with_scale(
            i128::from(max_minor),
            exponent,
        ))
        .map_err(|e| invalid(&format!("{path}.max_amount"), e))?;
        let merchant_id = text("merchant_id")?;
        let recipient = Recipient::parse(&format!("vendor:{merchant_id}")).map_err(|_| {
            invalid(
                &format!("{path}.merchant_id"),
                format!("{merchant_id:?} cannot name a Mandate recipient (vendor:<merchant_id>): it must be 1 to 128 characters of [A-Za-z0-9._-]"),
            )
        })?;
        let expires_at_text = text("expires_at")?;
        let expires_at = OffsetDateTime::parse(&expires_at_text, &Rfc3339).map_err(|_| {
            invalid(
                &format!("{path}.expires_at"),
                "must be an RFC 3339 date-time, such as 2026-02-15T18:30:00Z",
            )
        })?;
        Ok(Self {
            max_minor,
            max,
            currency_text,
            currency,
            checkout_session_id: text("checkout_session_id")?,
            merchant_id,
            recipient,
            expires_at_text,
            expires_at,
        })
    }

    /// `max_amount` in major units, exactly, at the currency's minor unit: 2000 `usd`
    /// is 20.00, 500 `jpy` is 500.
    pub fn max_amount(&self) -> Amount {
        self.max
    }

    /// The currency, upper case (`usd` is `USD`).
    pub fn currency(&self) -> &Currency {
        &self.currency
    }

    /// The merchant as a Mandate recipient: `vendor:<merchant_id>`.
    pub fn recipient(&self) -> &Recipient {
        &self.recipient
    }

    /// `checkout_session_id`: the verdict's `acp_checkout_session` claim.
    pub(crate) fn checkout_session_id(&self) -> &str {
        &self.checkout_session_id
    }

    /// The single-use credential id of a `one_time` allowance: `acp_` and the base64url
    /// SHA-256 of its `checkout_session_id`. One checkout session is paid once, whatever
    /// allowance is shown for it.
    pub(crate) fn credential_id(&self) -> String {
        format!("acp_{}", b64_sha256(&self.checkout_session_id))
    }

    /// The allowance's RFC 8785 (JCS) canonical JSON: its six members sorted by name, no
    /// whitespace, strings as sent (escaped as JSON requires and no more), `max_amount`
    /// an integer. For ACP's example:
    /// `{"checkout_session_id":"csn_01HV3P3XYZ9ABC","currency":"usd","expires_at":"2025-10-09T07:20:50.52Z","max_amount":2000,"merchant_id":"acme_store","reason":"one_time"}`.
    pub(crate) fn canonical_json(&self) -> String {
        // Written by hand in JCS order; serde_json's string escaping is JCS's for strings.
        let text = |s: &str| serde_json::to_string(s).unwrap_or_default();
        format!(
            "{{\"checkout_session_id\":{},\"currency\":{},\"expires_at\":{},\"max_amount\":{},\"merchant_id\":{},\"reason\":{}}}",
            text(&self.checkout_session_id),
            text(&self.currency_text),
            text(&self.expires_at_text),
            self.max_minor,
            text(&self.merchant_id),
            text(ONE_TIME),
        )
    }

    /// The verdict's `acp_allowance` claim: the base64url (no padding) SHA-256 of
    /// [`canonical_json`](Self::canonical_json). Whoever holds the allowance computes the
    /// same value with any RFC 8785 implementation.
    pub(crate) fn digest(&self) -> String {
        b64_sha256(&self.canonical_json())
    }

    /// Whether a request of `amount`, `currency` and `recipient`, decided at `now`, is
    /// exactly this allowance: the amount its maximum, its currency, its merchant, before
    /// `expires_at`. The first mismatch, in that order.
    pub(crate) fn check_request(
        &self,
        amount: Amount,
        currency: &Currency,
        recipient: &Recipient,
        now: OffsetDateTime,
    ) -> Result<(), AllowanceMismatch> {
        if amount.value() != self.max.value() {
            return Err(AllowanceMismatch::NotMaximum {
                amount,
                max: self.max,
            });
        }
        match self.mismatches(currency, recipient, now).into_iter().next() {
            Some(first) => Err(first),
            None => Ok(()),
        }
    }

    /// What in a charge of `amount`, `currency` and `recipient` at `now` the allowance
    /// does not allow: above its maximum, another currency or merchant, at or after
    /// `expires_at`. Empty when it allows the charge.
    pub(crate) fn settlement_mismatches(
        &self,
        amount: Amount,
        currency: &Currency,
        recipient: &Recipient,
        now: OffsetDateTime,
    ) -> Vec<AllowanceMismatch> {
        let mut out = Vec::new();
        if amount.value() > self.max.value() {
            out.push(AllowanceMismatch::AboveMaximum {
                amount,
                max: self.max,
            });
        }
        out.extend(self.mismatches(currency, recipient, now));
        out
    }

    fn mismatches(
        &self,
        currency: &Currency,
        recipient: &Recipient,
        now: OffsetDateTime,
    ) -> Vec<AllowanceMismatch> {
        let mut out = Vec::new();
        if *currency != self.currency {
            out.push(AllowanceMismatch::Currency {
                currency: currency.clone(),
                allowed: self.currency.clone(),
            });
        }
        if *recipient != self.recipient {
            out.push(AllowanceMismatch::Recipient {
                recipient: recipient.clone(),
                allowed: self.recipient.clone(),
            });
        }
        if now >= self.expires_at {
            out.push(AllowanceMismatch::Expired {
                expires_at: self.expires_at_text.clone(),
            });
        }
        out
    }
}

/// A required string member of 1 to [`MAX_ID_LEN`] characters.
fn text_member(object: &Map<String, Value>, path: &str, name: &str) -> Result<String, FieldError> {
    let field = format!("{path}.{name}");
    let text = object
        .get(name)
        .filter(|v| !v.is_null())
        .ok_or_else(|| FieldError::Missing(field.clone()))?
        .as_str()
        .ok_or_else(|| invalid(&field, "must be a string"))?;
    if text.is_empty() || text.chars().count() > MAX_ID_LEN {
        return Err(invalid(
            &field,
            format!("must be 1 to {MAX_ID_LEN} characters"),
        ));
    }
    Ok(text.to_owned())
}

/// The currency (any letter case; ACP writes it in lower case) and its minor-unit
/// exponent.
fn currency_of(text: &str, path: &str) -> Result<(Currency, u32), FieldError> {
    let code = text.to_ascii_uppercase();
    let unknown = || {
        invalid(
            &format!("{path}.currency"),
            format!("{text:?} is not an ISO 4217 currency Mandate knows"),
        )
    };
    let exponent = minor_unit_exponent(&code).ok_or_else(unknown)?;
    let currency = Currency::parse(&code).map_err(|_| unknown())?;
    Ok((currency, exponent))
}

/// `max_amount`: a JSON integer of minor units, 0 to [`MAX_MINOR_UNITS`].
fn minor_units(object: &Map<String, Value>, path: &str) -> Result<u64, FieldError> {
    let field = format!("{path}.max_amount");
    object
        .get("max_amount")
        .filter(|v| !v.is_null())
        .ok_or_else(|| FieldError::Missing(field.clone()))?
        .as_u64()
        .filter(|n| *n <= MAX_MINOR_UNITS)
        .ok_or_else(|| {
            invalid(
                &field,
                "must be a whole number of minor units (an integer, such as 2000 for 20.00 USD), at most 2^53 - 1",
            )
        })
}

fn b64_sha256(text: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(text.as_bytes()))
}

// What Mandate's server and CLI compute with this module's types beyond their methods
// an embedder sees through mandate-core.

/// `checkout_session_id`: the verdict's `acp_checkout_session` claim.
pub fn checkout_session_id(allowance: &Allowance) -> &str {
    allowance.checkout_session_id()
}

/// The single-use credential id of a `one_time` allowance: `acp_` and the base64url
/// SHA-256 of its `checkout_session_id` (one checkout session is paid once).
pub fn credential_id(allowance: &Allowance) -> String {
    allowance.credential_id()
}

/// The allowance's RFC 8785 (JCS) canonical JSON, `max_amount` an integer.
pub fn canonical_json(allowance: &Allowance) -> String {
    allowance.canonical_json()
}

/// The verdict's `acp_allowance` claim: the base64url (no padding) SHA-256 of
/// [`canonical_json`].
pub fn digest(allowance: &Allowance) -> String {
    allowance.digest()
}

/// Whether a request of `amount`, `currency` and `recipient`, decided at `now`, is
/// exactly the allowance (its maximum, currency and merchant, before `expires_at`):
/// the first mismatch, in that order.
pub fn check_request(
    allowance: &Allowance,
    amount: Amount,
    currency: &Currency,
    recipient: &Recipient,
    now: OffsetDateTime,
) -> Result<(), AllowanceMismatch> {
    allowance.check_request(amount, currency, recipient, now)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    /// ACP's example (`examples/unreleased/examples.delegate_payment.json`).
    fn example() -> Value {
        json!({
            "reason": "one_time",
            "max_amount": 2000,
            "currency": "usd",
            "checkout_session_id": "csn_01HV3P3XYZ9ABC",
            "merchant_id": "acme_store",
            "expires_at": "2025-10-09T07:20:50.52Z"
        })
    }

    fn at(text: &str) -> OffsetDateTime {
        OffsetDateTime::parse(text, &Rfc3339).unwrap()
    }

    #[test]
    fn the_example_is_read_in_major_units_and_canonical_json() {
        let a = Allowance::from_json(&example(), "acp.allowance").unwrap();
        assert_eq!(a.max_amount().to_string(), "20.00");
        assert_eq!(a.max_minor, 2000);
        assert_eq!(a.currency().as_str(), "USD");
        assert_eq!(a.recipient().as_str(), "vendor:acme_store");
        assert_eq!(
            a.canonical_json(),
            r#"{"checkout_session_id":"csn_01HV3P3XYZ9ABC","currency":"usd","expires_at":"2025-10-09T07:20:50.52Z","max_amount":2000,"merchant_id":"acme_store","reason":"one_time"}"#
        );
        // Computed independently: python3, hashlib.sha256 of those bytes, base64url.
        assert_eq!(a.digest(), "sqVoOcHrZYHBI5rYQe3QFeCrDNF5e4qxYsRAiczeFXY");
        assert!(a.credential_id().starts_with("acp_"));
        // JPY has no minor unit, KWD three.
        let mut yen = example();
        yen["currency"] = json!("jpy");
        yen["max_amount"] = json!(500);
        let yen = Allowance::from_json(&yen, "acp.allowance").unwrap();
        assert_eq!(yen.max_amount().to_string(), "500");
        let mut dinar = example();
        dinar["currency"] = json!("KWD");
        dinar["max_amount"] = json!(1234);
        let dinar = Allowance::from_json(&dinar, "acp.allowance").unwrap();
        assert_eq!(dinar.max_amount().to_string(), "1.234");
    }

    #[test]
    fn each_malformed_member_is_named() {
        let cases = [
            ("reason", json!("recurring"), "acp.allowance.reason"),
            ("reason", json!(null), "acp.allowance.reason is required"),
            ("max_amount", json!(20.5), "acp.allowance.max_amount"),
            ("max_amount", json!("2000"), "acp.allowance.max_amount"),
            ("max_amount", json!(-1), "acp.allowance.max_amount"),
            (
                "max_amount",
                json!(9_007_199_254_740_992u64),
                "acp.allowance.max_amount",
            ),
            ("currency", json!("usdollar"), "acp.allowance.currency"),
            ("currency", json!("xyz"), "acp.allowance.currency"),
            (
                "merchant_id",
                json!("acme store"),
                "acp.allowance.merchant_id",
            ),
            ("merchant_id", json!(""), "acp.allowance.merchant_id"),
            (
                "checkout_session_id",
                json!(7),
                "acp.allowance.checkout_session_id",
            ),
            ("expires_at", json!("tomorrow"), "acp.allowance.expires_at"),
            (
                "expires_at",
                json!(1_760_000_000),
                "acp.allowance.expires_at",
            ),
            (
                "spend_limit",
                json!(1),
                "unknown field acp.allowance.spend_limit",
            ),
        ];
        for (member, value, expected) in cases {
            let mut body = example();
            if value.is_null() {
                body.as_object_mut().unwrap().remove(member);
            } else {
                body[member] = value.clone();
            }
            let e = Allowance::from_json(&body, "acp.allowance").unwrap_err();
            assert!(
                e.to_string().starts_with(expected),
                "{member} = {value}: {e}"
            );
        }
        let e = Allowance::from_json(&json!([1]), "acp.allowance").unwrap_err();
        assert!(e.to_string().starts_with("acp.allowance "), "{e}");
    }

    #[test]
    fn a_request_is_the_allowance_and_a_charge_within_it() {
        let a = Allowance::from_json(&example(), "acp.allowance").unwrap();
        let usd = Currency::parse("USD").unwrap();
        let acme = Recipient::parse("vendor:acme_store").unwrap();
        let before = at("2025-10-09T07:20:50.51Z");
        let twenty = Amount::parse("20").unwrap();
        assert_eq!(a.check_request(twenty, &usd, &acme, before), Ok(()));
        let ten = Amount::parse("10.00").unwrap();
        let e = a.check_request(ten, &usd, &acme, before).unwrap_err();
        assert_eq!(e.member(), "max_amount");
        let eur = Currency::parse("EUR").unwrap();
        assert_eq!(
            a.check_request(twenty, &eur, &acme, before)
                .unwrap_err()
                .member(),
            "currency"
        );
        let other = Recipient::parse("vendor:Acme_Store").unwrap();
        assert_eq!(
            a.check_request(twenty, &usd, &other, before)
                .unwrap_err()
                .member(),
            "merchant_id"
        );
        // Invalid at and after expires_at.
        let expiry = at("2025-10-09T07:20:50.52Z");
        assert_eq!(
            a.check_request(twenty, &usd, &acme, expiry)
                .unwrap_err()
                .member(),
            "expires_at"
        );
        // A charge: at most the maximum.
        assert_eq!(a.settlement_mismatches(ten, &usd, &acme, before), vec![]);
        assert_eq!(a.settlement_mismatches(twenty, &usd, &acme, before), vec![]);
        let more = Amount::parse("20.01").unwrap();
        let found = a.settlement_mismatches(more, &eur, &acme, expiry);
        let members: Vec<&str> = found.iter().map(AllowanceMismatch::member).collect();
        assert_eq!(members, ["max_amount", "currency", "expires_at"]);
    }
}
