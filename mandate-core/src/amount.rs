//! Exact money amounts.
//!
//! An [`Amount`] is a non-negative `rust_decimal::Decimal` read from the JSON number's own
//! text (serde_json's `arbitrary_precision`), never through `f64`: a JSON `100.10` stays
//! `100.10`, digits and scale, all the way to the signature and the database.

use std::fmt;
use std::str::FromStr;

use rust_decimal::Decimal;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

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
}

/// A non-negative exact decimal amount of money.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Amount(Decimal);

impl Amount {
    /// Zero.
    pub const ZERO: Amount = Amount(Decimal::ZERO);

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

    /// Adds two amounts; `None` on overflow.
    pub fn checked_add(self, other: Amount) -> Option<Amount> {
        self.0.checked_add(other.0).map(Amount)
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
    /// Serializes as a JSON number with exactly the stored digits.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let number =
            serde_json::Number::from_str(&self.0.to_string()).map_err(serde::ser::Error::custom)?;
        number.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Amount {
    /// Deserializes from a JSON number's text; strings and floats-as-f64 are never used.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let number = serde_json::Number::deserialize(deserializer)?;
        Amount::parse(&number.to_string()).map_err(serde::de::Error::custom)
    }
}

/// Reads an amount from a JSON value: it must be a number, kept as its exact text.
pub fn amount_from_json(value: &serde_json::Value) -> Result<Amount, AmountError> {
    match value {
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
