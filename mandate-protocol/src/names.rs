//! Names parsed at the edge: agent names, recipients, principals, categories, currencies.
//!
//! Each type can only hold a valid value, so nothing past the HTTP edge re-validates.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Why a name is not valid. The message says what form is expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NameError {
    /// An agent name outside `[a-z0-9][a-z0-9_-]{0,62}`.
    #[error("must match [a-z0-9][a-z0-9_-]{{0,62}}")]
    AgentName,
    /// A recipient not of the form `vendor:<name>`.
    #[error("must be vendor:<name>, where name is 1 to 128 characters of [A-Za-z0-9._-]")]
    Recipient,
    /// A principal not of the form `role:<name>`.
    #[error("must be role:<name>, where name is 1 to 64 characters of [A-Za-z0-9._-]")]
    Principal,
    /// A category outside `[a-z0-9][a-z0-9_.-]{0,63}`.
    #[error("must be 1 to 64 characters of [a-z0-9_.-], starting with a letter or digit")]
    Category,
    /// A currency that is not three upper-case letters.
    #[error("must be three upper-case letters, for example USD")]
    Currency,
}

fn is_tail_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-'
}

macro_rules! string_newtype {
    ($(#[$doc:meta])* $name:ident, $check:expr, $err:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(String);

        impl $name {
            /// Parses the text, or says which form was expected.
            pub fn parse(value: &str) -> Result<Self, NameError> {
                let check: fn(&str) -> bool = $check;
                if check(value) {
                    Ok(Self(value.to_owned()))
                } else {
                    Err($err)
                }
            }

            /// The value as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.0)
            }
        }

        impl std::str::FromStr for $name {
            type Err = NameError;
            fn from_str(text: &str) -> Result<Self, Self::Err> {
                Self::parse(text)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = String::deserialize(deserializer)?;
                Self::parse(&text).map_err(serde::de::Error::custom)
            }
        }
    };
}

string_newtype!(
    /// An agent's name, `[a-z0-9][a-z0-9_-]{0,62}`, so that `agt_<name>` is URL-safe.
    AgentName,
    |v| {
        let bytes = v.as_bytes();
        !bytes.is_empty()
            && bytes.len() <= 63
            && (bytes[0].is_ascii_lowercase() || bytes[0].is_ascii_digit())
            && bytes[1..]
                .iter()
                .all(|&b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
    },
    NameError::AgentName
);

string_newtype!(
    /// A payment recipient, `vendor:<name>`.
    Recipient,
    |v| match v.strip_prefix("vendor:") {
        Some(name) => !name.is_empty() && name.len() <= 128 && name.bytes().all(is_tail_char),
        None => false,
    },
    NameError::Recipient
);

string_newtype!(
    /// The accountable party of a mandate, `role:<name>`.
    Principal,
    |v| match v.strip_prefix("role:") {
        Some(name) => !name.is_empty() && name.len() <= 64 && name.bytes().all(is_tail_char),
        None => false,
    },
    NameError::Principal
);

string_newtype!(
    /// A spending category, for example `software` or `travel.air`.
    Category,
    |v| {
        let bytes = v.as_bytes();
        !bytes.is_empty()
            && bytes.len() <= 64
            && (bytes[0].is_ascii_lowercase() || bytes[0].is_ascii_digit())
            && bytes[1..].iter().all(|&b| {
                b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-' || b == b'.'
            })
    },
    NameError::Category
);

string_newtype!(
    /// A currency code: three upper-case ASCII letters (`USD`, `EUR`).
    Currency,
    |v| v.len() == 3 && v.bytes().all(|b| b.is_ascii_uppercase()),
    NameError::Currency
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_names() {
        assert!(AgentName::parse("a").is_ok());
        assert!(AgentName::parse("buyer_1-x").is_ok());
        assert!(AgentName::parse(&"a".repeat(63)).is_ok());
        assert!(AgentName::parse(&"a".repeat(64)).is_err());
        assert!(AgentName::parse("").is_err());
        assert!(AgentName::parse("_a").is_err());
        assert!(AgentName::parse("Buyer").is_err());
        assert!(AgentName::parse("a b").is_err());
    }

    #[test]
    fn recipients_principals_categories_currencies() {
        assert!(Recipient::parse("vendor:acme").is_ok());
        assert!(Recipient::parse("vendor:").is_err());
        assert!(Recipient::parse("acme").is_err());
        assert!(Principal::parse("role:cfo").is_ok());
        assert!(Principal::parse("user:cfo").is_err());
        assert!(Category::parse("travel.air").is_ok());
        assert!(Category::parse("Travel").is_err());
        assert!(Currency::parse("USD").is_ok());
        assert!(Currency::parse("usd").is_err());
        assert!(Currency::parse("USDT").is_err());
    }
}
