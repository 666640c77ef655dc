//! Object identifiers and their prefixes.
//!
//! Every id the service emits carries a prefix that names its kind (`dec_`, `rev_`, ...).
//! Ids are parsed at the edge into these newtypes so that a review id can never be passed
//! where a decision id is expected. Random ids are made from bytes the caller supplies:
//! the core has no RNG.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::names::AgentName;

/// Why a string is not a valid id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdError {
    /// The prefix is missing or belongs to another kind of object.
    #[error("{value:?} is not a {kind} id: it must start with {prefix}")]
    WrongPrefix {
        /// The kind of id that was expected.
        kind: &'static str,
        /// The prefix that was expected.
        prefix: &'static str,
        /// The value that was given (truncated to 64 bytes).
        value: String,
    },
    /// The part after the prefix is empty, too long or has characters outside `[a-z0-9_-]`.
    #[error("{kind} id has an invalid body: expected 1 to 64 characters of [a-z0-9_-]")]
    BadBody {
        /// The kind of id that was expected.
        kind: &'static str,
    },
}

/// Encodes bytes as lower-case Crockford base32 (no padding): URL-safe and unambiguous.
pub fn base32(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";
    let mut out = String::with_capacity(bytes.len() * 8 / 5 + 1);
    let mut buffer: u32 = 0;
    let mut bits = 0u32;
    for &byte in bytes {
        buffer = (buffer << 8) | u32::from(byte);
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(char::from(ALPHABET[((buffer >> bits) & 31) as usize]));
        }
    }
    if bits > 0 {
        out.push(char::from(ALPHABET[((buffer << (5 - bits)) & 31) as usize]));
    }
    out
}

fn valid_body(body: &str) -> bool {
    !body.is_empty()
        && body.len() <= 64
        && body
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

fn truncated(value: &str) -> String {
    value.chars().take(64).collect()
}

macro_rules! random_id {
    ($(#[$doc:meta])* $name:ident, $prefix:literal, $kind:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(String);

        impl $name {
            /// The prefix every id of this kind starts with.
            pub const PREFIX: &'static str = $prefix;

            /// Makes a fresh id from 16 random bytes supplied by the caller.
            pub fn from_random(bytes: [u8; 16]) -> Self {
                Self(format!("{}{}", $prefix, base32(&bytes)))
            }

            /// Parses an id, checking its prefix and body.
            pub fn parse(value: &str) -> Result<Self, IdError> {
                let Some(body) = value.strip_prefix($prefix) else {
                    return Err(IdError::WrongPrefix {
                        kind: $kind,
                        prefix: $prefix,
                        value: truncated(value),
                    });
                };
                if !valid_body(body) {
                    return Err(IdError::BadBody { kind: $kind });
                }
                Ok(Self(value.to_owned()))
            }

            /// The id as text, prefix included.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl std::str::FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::parse(s)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.0)
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

random_id!(
    /// A mandate id, `mnd_…`.
    MandateId, "mnd_", "mandate"
);
random_id!(
    /// A decision id, `dec_…`; also the `jti` of a signed verdict.
    DecisionId, "dec_", "decision"
);
random_id!(
    /// A review id, `rev_…`.
    ReviewId, "rev_", "review"
);
random_id!(
    /// A webhook id, `whk_…`.
    WebhookId, "whk_", "webhook"
);
random_id!(
    /// An event id, `evt_…`; also the `jti` of a signed event.
    EventId, "evt_", "event"
);
random_id!(
    /// An escrow id, `esc_…`.
    EscrowId, "esc_", "escrow"
);
random_id!(
    /// A request id, `req_…`, sent in `X-Request-Id` and in every error body.
    RequestId, "req_", "request"
);
random_id!(
    /// A single-use nonce, `n_…`, signed into every verdict.
    Nonce, "n_", "nonce"
);

/// An agent id: `agt_<name>`, where the name is a valid [`AgentName`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AgentId(String);

impl AgentId {
    /// The prefix every agent id starts with.
    pub const PREFIX: &'static str = "agt_";

    /// The id of the agent with this name.
    pub(crate) fn for_name(name: &AgentName) -> Self {
        Self(format!("agt_{}", name.as_str()))
    }

    /// Parses `agt_<name>`.
    pub fn parse(value: &str) -> Result<Self, IdError> {
        let Some(body) = value.strip_prefix(Self::PREFIX) else {
            return Err(IdError::WrongPrefix {
                kind: "agent",
                prefix: Self::PREFIX,
                value: truncated(value),
            });
        };
        AgentName::parse(body).map_err(|_| IdError::BadBody { kind: "agent" })?;
        Ok(Self(value.to_owned()))
    }

    /// The agent's name (the part after `agt_`).
    pub fn name(&self) -> &str {
        &self.0[Self::PREFIX.len()..]
    }

    /// The id as text, prefix included.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for AgentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for AgentId {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl Serialize for AgentId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for AgentId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

// What Mandate's server and CLI compute with this module's types beyond their methods
// an embedder sees through mandate-core.

/// The id of the agent with this name.
pub fn agent_id_for(name: &AgentName) -> AgentId {
    AgentId::for_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_ids_carry_their_prefix_and_parse_back() {
        let id = DecisionId::from_random([7; 16]);
        assert!(id.as_str().starts_with("dec_"));
        assert_eq!(id.as_str().len(), 4 + 26);
        assert_eq!(DecisionId::parse(id.as_str()), Ok(id));
    }

    #[test]
    fn a_review_id_is_not_a_decision_id() {
        let review = ReviewId::from_random([1; 16]);
        assert!(matches!(
            DecisionId::parse(review.as_str()),
            Err(IdError::WrongPrefix { .. })
        ));
    }

    #[test]
    fn bodies_are_checked() {
        assert!(DecisionId::parse("dec_").is_err());
        assert!(DecisionId::parse("dec_ABC").is_err());
        assert!(DecisionId::parse("dec_a/b").is_err());
        assert!(DecisionId::parse(&format!("dec_{}", "a".repeat(65))).is_err());
    }

    #[test]
    fn agent_ids_wrap_names() {
        let id = AgentId::parse("agt_buyer-1").ok();
        assert_eq!(id.as_ref().map(AgentId::name), Some("buyer-1"));
        assert!(AgentId::parse("agt_-x").is_err());
        assert!(AgentId::parse("agt_").is_err());
        assert!(AgentId::parse("buyer").is_err());
    }

    #[test]
    fn base32_is_known_answer() {
        assert_eq!(base32(b""), "");
        assert_eq!(base32(&[0xff]), "zw");
        assert_eq!(base32(&[0, 0, 0, 0, 0]), "00000000");
    }
}
