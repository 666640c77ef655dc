//! Exact money amounts.
//!
//! An [`Amount`] is a non-negative `rust_decimal::Decimal` read from the JSON number's own
//! text, never through `f64`: a JSON `100.10` stays `100.10`, digits and scale, all the way
//! to the signature and the database.
//!
//! Serde reads and writes an amount as the number's raw text (serde_json's `RawValue`), so
//! this needs nothing of the program's serde_json features. A `serde_json::Value` is
//! another matter: its numbers keep their text only with serde_json's
//! `arbitrary_precision` (the server and the CLI turn it on). Without it,
//! [`amount_from_json`] refuses a fractional number rather than read it through `f64`.

use std::fmt;
use std::str::FromStr;

use std::sync::OnceLock;

use rust_decimal::Decimal;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

/// Why a value is not a valid amount.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AmountError {
    /// Not a plain decimal number (exponents, strings and other JSON types are refused).
    #[error("must be a plain decimal number such as 12.50")]
    NotDecimal,
    /// Below zero.
    #[error("must be >= 0")]
    Negative,
    /// More than 28 significant digits or more than 18 decimal places.
    #[error("has too many digits (at most 28 significant digits and 18 decimal places)")]
    TooPrecise,
    /// A fractional number in a `serde_json::Value` built without serde_json's
    /// `arbitrary_precision`: its digits went through `f64` and may not be the ones sent.
    #[error(
        "cannot be read exactly: this program's serde_json lacks the arbitrary_precision feature (read the body from its bytes instead)"
    )]
    Inexact,
}

/// A non-negative exact decimal amount of money.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Amount(Decimal);

impl Amount {
    /// Zero.
    pub const ZERO: Amount = Amount(Decimal::ZERO);

    /// The largest amount a `Decimal` holds: where a running total that can no longer
    /// be held exactly is kept, so that it stays over every limit.
    pub const MAX: Amount = Amount(Decimal::MAX);

    /// Parses the text of a JSON number (or a database column) exactly.
    pub fn parse(text: &str) -> Result<Self, AmountError> {
        let bytes = text.as_bytes();
        let digits = bytes.strip_prefix(b"-").unwrap_or(bytes);
        let plain = !digits.is_empty()
            && digits.iter().all(|b| b.is_ascii_digit() || *b == b'.')
            && digits.iter().filter(|b| **b == b'.').count() <= 1
            && digits.first() != Some(&b'.')
            && digits.last() != Some(&b'.');
        if !plain {
            return Err(AmountError::NotDecimal);
        }
        if text.starts_with('-') {
            // "-0" too: a sign on money is refused whatever the digits.
            return Err(AmountError::Negative);
        }
        let scale = text.split_once('.').map_or(0, |(_, frac)| frac.len());
        if scale > 18 {
            return Err(AmountError::TooPrecise);
        }
        let value = Decimal::from_str_exact(text).map_err(|_| AmountError::TooPrecise)?;
        Self::from_decimal(value)
    }

    /// Wraps a decimal, refusing negative values.
    pub fn from_decimal(value: Decimal) -> Result<Self, AmountError> {
        if value.is_sign_negative() && !value.is_zero() {
            return Err(AmountError::Negative);
        }
        Ok(Self(value))
    }

    /// The exact decimal value.
    pub fn value(self) -> Decimal {
        self.0
    }

    /// Adds two amounts exactly; `None` when the sum cannot be held exactly.
    ///
    /// A `Decimal` holds 96 bits of digits (28 or 29 significant digits): past that,
    /// `Decimal` addition rounds away decimal places (9999999999999999999999999999 + 0.4
    /// gives 9999999999999999999999999999). A sum that decides must never be rounded, so
    /// a sum that would be is `None`, like an overflow, and the policy counts it as over
    /// every limit.
    pub fn checked_add(self, other: Amount) -> Option<Amount> {
        let sum = self.0.checked_add(other.0)?;
        // Addition keeps the larger scale unless it had to round.
        (sum.scale() >= self.0.scale().max(other.0.scale())).then_some(Amount(sum))
    }
}

impl fmt::Display for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl FromStr for Amount {
    type Err = AmountError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl Serialize for Amount {
    /// Serializes as a JSON number with exactly the stored digits (written as raw text,
    /// whatever serde_json's features).
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let raw = RawValue::from_string(self.0.to_string()).map_err(serde::ser::Error::custom)?;
        raw.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Amount {
    /// Deserializes from a JSON number's own text; strings and floats-as-f64 are never
    /// used. Exact from JSON bytes whatever serde_json's features; from a
    /// `serde_json::Value`, as exact as the `Value` (see the module doc).
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(deserializer)?;
        Amount::parse(raw.get()).map_err(serde::de::Error::custom)
    }
}

/// Whether this program's serde_json keeps a number's text (`arbitrary_precision`):
/// asked of serde_json once, as features cannot be seen from here.
fn json_numbers_are_exact() -> bool {
    static EXACT: OnceLock<bool> = OnceLock::new();
    *EXACT.get_or_init(|| {
        serde_json::from_str::<serde_json::Number>("0.10").is_ok_and(|n| n.to_string() == "0.10")
    })
}

/// Reads an amount from a JSON value: it must be a number, kept as its exact text. A
/// fractional number is [`AmountError::Inexact`] when this program's `Value` numbers went
/// through `f64` (see the module doc).
pub fn amount_from_json(value: &serde_json::Value) -> Result<Amount, AmountError> {
    match value {
        serde_json::Value::Number(n) if n.is_f64() && !json_numbers_are_exact() => {
            Err(AmountError::Inexact)
        }
        serde_json::Value::Number(n) => Amount::parse(&n.to_string()),
        _ => Err(AmountError::NotDecimal),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_text_keeps_its_digits() {
        let amount: Result<Amount, _> = serde_json::from_str("100.10");
        let amount = amount.ok();
        assert_eq!(amount.map(|a| a.to_string()), Some("100.10".to_owned()));
        let back = amount.and_then(|a| serde_json::to_string(&a).ok());
        assert_eq!(back.as_deref(), Some("100.10"));
    }

    #[test]
    fn no_float_rounding() {
        // 0.1 + 0.2 is exactly 0.3 here, unlike f64.
        let sum = Amount::parse("0.1")
            .ok()
            .zip(Amount::parse("0.2").ok())
            .and_then(|(a, b)| a.checked_add(b));
        assert_eq!(sum, Amount::parse("0.3").ok());
        let big: Result<Amount, _> = serde_json::from_str("12345678901234567.89");
        assert_eq!(
            big.map(|a| a.to_string()).ok().as_deref(),
            Some("12345678901234567.89")
        );
    }

    /// Issue #40 item 7: at 28 digits, adding 0.4 rounded the sum back to the limit.
    #[test]
    fn sums_are_exact_or_none() {
        let a = |t: &str| Amount::parse(t).unwrap_or_default();
        let big = a("9999999999999999999999999999");
        assert_eq!(big.checked_add(a("0.4")), None);
        assert_eq!(big.checked_add(a("0.49")), None);
        assert_eq!(
            big.checked_add(a("1")),
            Some(a("10000000000000000000000000000"))
        );
        assert_eq!(big.checked_add(Amount::ZERO), Some(big));
        assert_eq!(a("79228162514264337593543950335").checked_add(a("1")), None);
        assert_eq!(
            a("1234567890123456789.123456789").checked_add(a("0.000000001")),
            Some(a("1234567890123456789.123456790"))
        );
        // 29 digits with a fraction: the sum would need 30.
        assert_eq!(
            a("99999999999999999999.12345678").checked_add(a("0.000000001")),
            None
        );
        assert_eq!(a("0.1").checked_add(a("0.25")), Some(a("0.35")));
    }

    #[test]
    fn refuses_bad_forms() {
        assert_eq!(Amount::parse("-1"), Err(AmountError::Negative));
        assert_eq!(Amount::parse("1e3"), Err(AmountError::NotDecimal));
        assert_eq!(Amount::parse(".5"), Err(AmountError::NotDecimal));
        assert_eq!(Amount::parse("5."), Err(AmountError::NotDecimal));
        assert_eq!(Amount::parse("1.2.3"), Err(AmountError::NotDecimal));
        assert_eq!(Amount::parse(""), Err(AmountError::NotDecimal));
        assert_eq!(
            Amount::parse("0.1234567890123456789"),
            Err(AmountError::TooPrecise)
        );
        assert!(serde_json::from_str::<Amount>("\"10\"").is_err());
        assert_eq!(Amount::parse("-0"), Err(AmountError::Negative));
    }
}
