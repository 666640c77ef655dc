//! Which environment signed a token: the sandbox or live.
//!
//! Both environments sign with the same issuer and publish their keys in the same JWK
//! Set; what tells them apart is the signing key's `kid`, `sandbox-<n>` or `live-<n>`. A
//! sandbox organization writes its own mandates, so a sandbox `allow` can be had for any
//! amount and proves nothing about real money: a production verifier refuses every token
//! whose kid is not a live one. [`token_kid`] reads the kid of a token that
//! [`crate::jws::verify_verdict`] or [`crate::jws::verify_event`] accepted, and
//! [`Environment::of_kid`] says whose it is.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Deserialize;

/// The environment a signing key belongs to, named by the prefix of its `kid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Environment {
    /// Test traffic: kids `sandbox-<n>`. Its verdicts authorize no real payment.
    Sandbox,
    /// Production: kids `live-<n>`.
    Live,
}

impl Environment {
    /// The environment a kid belongs to; `None` for a kid with neither prefix, which no
    /// key of the service has.
    pub fn of_kid(kid: &str) -> Option<Self> {
        [Environment::Sandbox, Environment::Live]
            .into_iter()
            .find(|env| kid.starts_with(env.kid_prefix()))
    }

    /// The prefix of this environment's kids: `sandbox-` or `live-`.
    pub(crate) fn kid_prefix(self) -> &'static str {
        match self {
            Environment::Sandbox => "sandbox-",
            Environment::Live => "live-",
        }
    }

    /// The name: `sandbox` or `live`.
    pub fn as_str(self) -> &'static str {
        match self {
            Environment::Sandbox => "sandbox",
            Environment::Live => "live",
        }
    }
}

impl fmt::Display for Environment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Deserialize)]
struct Header {
    kid: Option<String>,
}

/// The `kid` of a compact JWS's header, or `None` when the token has no readable header
/// or no string kid.
///
/// Nothing else is checked, so trust the answer only for a token that
/// [`crate::jws::verify_verdict`] or [`crate::jws::verify_event`] accepted: the header is
/// part of the signed input, so an accepted token's kid names the key that signed it.
pub fn token_kid(token: &str) -> Option<String> {
    let header = token.split('.').next()?;
    let bytes = URL_SAFE_NO_PAD.decode(header).ok()?;
    serde_json::from_slice::<Header>(&bytes).ok()?.kid
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn kids_name_their_environment_by_prefix() {
        assert_eq!(Environment::of_kid("sandbox-1"), Some(Environment::Sandbox));
        assert_eq!(Environment::of_kid("live-12"), Some(Environment::Live));
        assert_eq!(Environment::of_kid("Live-1"), None);
        assert_eq!(Environment::of_kid("sandbox"), None);
        assert_eq!(Environment::of_kid("prod-1"), None);
        assert_eq!(Environment::Sandbox.to_string(), "sandbox");
    }

    #[test]
    fn the_kid_is_read_from_the_header() {
        let header = URL_SAFE_NO_PAD.encode(r#"{"alg":"ES256","typ":"JWT","kid":"live-3"}"#);
        assert_eq!(
            token_kid(&format!("{header}.e30.sig")).as_deref(),
            Some("live-3")
        );
        let no_kid = URL_SAFE_NO_PAD.encode(r#"{"alg":"ES256"}"#);
        assert_eq!(token_kid(&format!("{no_kid}.e30.sig")), None);
        assert_eq!(token_kid("not base64!.x.y"), None);
        assert_eq!(token_kid(""), None);
    }
}
