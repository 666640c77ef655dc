//! ES256 JWS compact tokens: signing verdicts and events, and verifying them.
//!
//! A token is `base64url(header) "." base64url(claims) "." base64url(r || s)`, no padding,
//! with the header `{"alg":"ES256","typ":"JWT","kid":…}`. Signing goes through the small
//! [`Signer`] trait so that the server can plug in another backend without touching the
//! format; [`P256Signer`] is the pure-Rust one.
//!
//! Verification pins ES256, picks the key by `kid` from a [`JwkSet`], checks the raw 64-byte
//! signature with [`verify_es256`] (the same function the Wycheproof vectors run through),
//! then the issuer, the expiry, the issue time and the kind of token: a verdict (`jti`
//! `dec_…`) is never accepted where an event (`evt_…`) is expected, nor the reverse. Header
//! members such as `jku`, `jwk` or `x5u` are never used: keys come from the set only. The
//! header and the claims must each be a JSON object with no member repeated, so that no two
//! verifiers can read one token two ways.
//! Time comes in as [`VerifyOptions::now`]; this module reads no clock.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use p256::ecdsa::signature::Verifier as _;
use p256::ecdsa::{Signature, SigningKey};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;

use crate::claims::{EventClaims, VerdictClaims};
use crate::field::repeated_member;
use crate::id::{DecisionId, EventId};
use crate::jwk::{ES256, Jwk, JwkSet};

/// Why a token could not be signed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SignError {
    /// The secret is not 32 bytes encoding a scalar in `1..n`.
    #[error("secret key must be 32 bytes encoding a p-256 scalar between 1 and n-1")]
    InvalidSecret,
    /// The claims could not be serialized as JSON.
    #[error("claims cannot be serialized: {0}")]
    Claims(String),
    /// The signing backend failed.
    #[error("signing failed: {0}")]
    Backend(String),
}

/// A signing key that makes ES256 signatures: the seam for other backends.
pub trait Signer: Send + Sync {
    /// The key id written into the header of every token this key signs.
    fn kid(&self) -> &str;
    /// Signs the JWS signing input (`header "." claims`, both base64url) with ECDSA P-256 and
    /// SHA-256, returning the raw signature `r || s`, 32 bytes each, big-endian.
    fn sign(&self, signing_input: &[u8]) -> Result<[u8; 64], SignError>;
    /// The public half, as published in the JWK Set.
    fn public_jwk(&self) -> Jwk;
}

/// A P-256 signing key in pure Rust (RFC 6979 deterministic nonces).
#[derive(Clone)]
pub struct P256Signer {
    kid: String,
    key: SigningKey,
    jwk: Jwk,
}

impl P256Signer {
    /// Makes a signer from a 32-byte big-endian scalar. The caller draws the bytes from a
    /// secure RNG (the core has none); a value of zero or at least the group order is refused.
    pub fn from_secret_bytes(kid: impl Into<String>, secret: &[u8]) -> Result<Self, SignError> {
        if secret.len() != 32 {
            return Err(SignError::InvalidSecret);
        }
        let key = SigningKey::from_slice(secret).map_err(|_| SignError::InvalidSecret)?;
        let kid = kid.into();
        let jwk = Jwk::from_verifying_key(kid.clone(), key.verifying_key());
        Ok(Self { kid, key, jwk })
    }

    /// The secret scalar, to persist the key. **This is the private key**: store it only
    /// where secrets belong, never log it, and wipe copies when done.
    #[cfg(test)]
    pub(crate) fn secret_bytes(&self) -> [u8; 32] {
        self.key.to_bytes().into()
    }
}

impl fmt::Debug for P256Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("P256Signer")
            .field("kid", &self.kid)
            .field("secret", &"<redacted>")
            .finish_non_exhaustive()
    }
}

impl Signer for P256Signer {
    fn kid(&self) -> &str {
        &self.kid
    }

    fn sign(&self, signing_input: &[u8]) -> Result<[u8; 64], SignError> {
        let signature: Signature =
            p256::ecdsa::signature::Signer::try_sign(&self.key, signing_input)
                .map_err(|e| SignError::Backend(e.to_string()))?;
        // P-256 ECDSA makes either of (r, s) and (r, n - s); only the low one is emitted,
        // as only the low one is accepted (see `verify_es256`).
        Ok(signature.normalize_s().to_bytes().into())
    }

    fn public_jwk(&self) -> Jwk {
        self.jwk.clone()
    }
}

/// Signs claims as a JWS compact token with the header `{"alg":"ES256","typ":"JWT","kid":…}`.
pub fn sign_token<C: Serialize>(signer: &dyn Signer, claims: &C) -> Result<String, SignError> {
    let payload = serde_json::to_vec(claims).map_err(|e| SignError::Claims(e.to_string()))?;
    sign_payload(signer, &payload)
}

/// Signs `payload`, the JSON of a token's claims serialized by the caller, as
/// [`sign_token`] does: for a caller that keeps the claims' JSON for another use (the
/// server answers a decision with the same fields). A payload that is not the JSON of
/// claims this crate reads makes a token that no verifier here accepts.
pub fn sign_payload(signer: &dyn Signer, payload: &[u8]) -> Result<String, SignError> {
    let kid = serde_json::to_string(signer.kid()).map_err(|e| SignError::Claims(e.to_string()))?;
    let header = format!(r#"{{"alg":"{ES256}","typ":"JWT","kid":{kid}}}"#);
    // One buffer sized for the whole token, each part encoded straight into it.
    let encoded_len = |n: usize| (n * 4).div_ceil(3);
    let mut token =
        Vec::with_capacity(encoded_len(header.len()) + encoded_len(payload.len()) + 2 + 86);
    append_base64url(&mut token, header.as_bytes());
    token.push(b'.');
    append_base64url(&mut token, payload);
    let signature = signer.sign(&token)?;
    token.push(b'.');
    append_base64url(&mut token, &signature);
    String::from_utf8(token).map_err(|e| SignError::Claims(e.to_string()))
}

/// The compact token that [`sign_payload`] made for `payload` with the key `kid`, put
/// together again from its raw 64-byte `signature` (as [`token_signature`] takes it out):
/// a store keeps the signature and the claims, not the whole token, and rebuilds it byte
/// for byte.
pub fn compact_token(kid: &str, payload: &[u8], signature: &[u8]) -> Result<String, SignError> {
    let kid = serde_json::to_string(kid).map_err(|e| SignError::Claims(e.to_string()))?;
    let header = format!(r#"{{"alg":"{ES256}","typ":"JWT","kid":{kid}}}"#);
    let mut token = Vec::with_capacity((header.len() + payload.len()) * 4 / 3 + 92);
    append_base64url(&mut token, header.as_bytes());
    token.push(b'.');
    append_base64url(&mut token, payload);
    token.push(b'.');
    append_base64url(&mut token, signature);
    String::from_utf8(token).map_err(|e| SignError::Claims(e.to_string()))
}

/// The raw signature of a compact token (its third part decoded), `None` when the token
/// has no third part or it is not unpadded base64url of 64 bytes.
pub fn token_signature(token: &str) -> Option<[u8; 64]> {
    let (_, encoded) = token.rsplit_once('.')?;
    let mut raw = [0u8; 64];
    match URL_SAFE_NO_PAD.decode_slice(encoded, &mut raw) {
        Ok(64) => Some(raw),
        _ => None,
    }
}

/// Appends the unpadded base64url of `bytes` to `out`.
fn append_base64url(out: &mut Vec<u8>, bytes: &[u8]) {
    let start = out.len();
    out.resize(start + (bytes.len() * 4).div_ceil(3), 0);
    // The room is exactly what unpadded encoding writes, so this cannot fail; if it did,
    // the token would be cut short and fail every verification rather than pass one.
    let written = URL_SAFE_NO_PAD
        .encode_slice(bytes, &mut out[start..])
        .unwrap_or(0);
    out.truncate(start + written);
}

/// Checks a raw ES256 signature (`r || s`, exactly 64 bytes) of `message` against `jwk`.
///
/// Anything that is not 64 bytes (a DER signature, a short encoding), an `r` or `s` of zero
/// or not below the group order, an `s` above half the group order (the "high-S" twin
/// `(r, n - s)` of a valid signature: accepting both would give one verdict two token
/// texts), or a signature that does not verify gives `false`.
pub fn verify_es256(jwk: &Jwk, message: &[u8], signature: &[u8]) -> bool {
    if signature.len() != 64 {
        return false;
    }
    match Signature::from_slice(signature) {
        Ok(signature) if is_low_s(&signature) => {
            jwk.verifying_key().verify(message, &signature).is_ok()
        }
        _ => false,
    }
}

/// Whether `s` is at most half the group order (the canonical one of the two twins).
fn is_low_s(signature: &Signature) -> bool {
    signature.normalize_s() == *signature
}

/// Whether a raw 64-byte `r || s` has an `s` above half the group order and its low-S
/// twin verifies: a valid signature made malleable, told apart from a plain bad one.
fn is_high_s_twin(jwk: &Jwk, message: &[u8], signature: &[u8]) -> bool {
    Signature::from_slice(signature).is_ok_and(|signature| {
        !is_low_s(&signature)
            && jwk
                .verifying_key()
                .verify(message, &signature.normalize_s())
                .is_ok()
    })
}

/// What a verifier expects of a token besides its signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyOptions {
    /// The expected `iss`: the service's verdicts URL, compared exactly.
    pub issuer: String,
    /// The current time (compared in whole seconds with the token's `iat` and `exp`).
    pub now: OffsetDateTime,
    /// Allowed clock skew in seconds (negative values count as zero). A token is valid while
    /// `now < exp + leeway` and refused when `iat > now + leeway`.
    pub leeway_secs: i64,
}

/// The two kinds of signed token, told apart by the prefix of their `jti`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TokenKind {
    /// A signed verdict, `jti` `dec_…`.
    Verdict,
    /// A signed webhook event, `jti` `evt_…`.
    Event,
}

impl TokenKind {
    /// The `jti` prefix of tokens of this kind.
    pub fn jti_prefix(self) -> &'static str {
        match self {
            TokenKind::Verdict => DecisionId::PREFIX,
            TokenKind::Event => EventId::PREFIX,
        }
    }

    fn of_jti(jti: &str) -> Option<Self> {
        [TokenKind::Verdict, TokenKind::Event]
            .into_iter()
            .find(|kind| jti.starts_with(kind.jti_prefix()))
    }
}

impl fmt::Display for TokenKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TokenKind::Verdict => "verdict",
            TokenKind::Event => "event",
        })
    }
}

/// The two JSON parts of a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TokenPart {
    /// The JOSE header.
    Header,
    /// The claims (the payload).
    Claims,
}

impl fmt::Display for TokenPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TokenPart::Header => "header",
            TokenPart::Claims => "claims",
        })
    }
}

/// Why a token was refused. Each way a token can be wrong has its own variant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// Not three segments of strict base64url (no padding), or a header that is not a JSON
    /// object of the expected shape.
    #[error("malformed token: {0}")]
    Malformed(&'static str),
    /// The header's `alg` is not exactly `ES256` (JSON text of what was found).
    #[error("unsupported algorithm {0}: only \"ES256\" is accepted")]
    UnsupportedAlgorithm(String),
    /// The header has no `kid`.
    #[error("token header has no kid")]
    MissingKid,
    /// No key in the set has the header's `kid`.
    #[error("no key with kid {0:?} in the key set")]
    UnknownKid(String),
    /// The signature does not decode to exactly 64 bytes (raw `r || s`); a DER signature
    /// lands here. Holds the length found.
    #[error("signature must be 64 bytes (raw r || s), found {0}")]
    SignatureLength(usize),
    /// The signature does not verify against the key named by `kid`.
    #[error("signature does not verify")]
    BadSignature,
    /// The signature's `s` is above half the group order: the malleable twin `(r, n - s)`
    /// of a valid signature, which no signer of the service makes.
    #[error("signature is not in low-S form (s above half the group order)")]
    HighS,
    /// The claims are not a JSON object of the expected shape (including a non-integer `exp`
    /// or `iat`, a missing claim or an unknown one).
    #[error("malformed claims: {0}")]
    MalformedClaims(String),
    /// `iss` is not the expected issuer (holds what was found).
    #[error("wrong issuer {0:?}")]
    WrongIssuer(String),
    /// `exp` has passed (with the leeway).
    #[error("token expired at {exp}")]
    Expired {
        /// The token's `exp`.
        exp: i64,
    },
    /// `iat` is later than now (with the leeway).
    #[error("token issued in the future, at {iat}")]
    IssuedInFuture {
        /// The token's `iat`.
        iat: i64,
    },
    /// The header or the claims are JSON but not an object (an array, a string, a number):
    /// a verifier must not read claims by position.
    #[error("the token's {0} is not a JSON object")]
    NotAnObject(TokenPart),
    /// A member appears twice in one object of the header or the claims (at any depth): a
    /// verifier that keeps the first value would read another token than one that keeps
    /// the last.
    #[error("member {member:?} appears more than once in the token's {part}")]
    DuplicateMember {
        /// Where.
        part: TokenPart,
        /// Its path, dotted (`request.amount`).
        member: String,
    },
    /// A valid token of the other kind: an event presented as a verdict, or the reverse.
    #[error("expected a {expected} token, found a {found} token")]
    WrongKind {
        /// The kind the caller asked for.
        expected: TokenKind,
        /// The kind the token is.
        found: TokenKind,
    },
}

impl TokenError {
    /// A stable code for this refusal, in `snake_case`: what the language bindings (the npm
    /// and Python packages) put in their exceptions' `code`, so that a program can branch
    /// on it without reading the message. A code is never renamed or reused; a new variant
    /// gets a new one.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Malformed(_) => "malformed",
            Self::UnsupportedAlgorithm(_) => "unsupported_algorithm",
            Self::MissingKid => "missing_kid",
            Self::UnknownKid(_) => "unknown_kid",
            Self::SignatureLength(_) => "signature_length",
            Self::BadSignature => "bad_signature",
            Self::HighS => "high_s",
            Self::MalformedClaims(_) => "malformed_claims",
            Self::WrongIssuer(_) => "wrong_issuer",
            Self::Expired { .. } => "expired",
            Self::IssuedInFuture { .. } => "issued_in_future",
            Self::NotAnObject(_) => "not_an_object",
            Self::DuplicateMember { .. } => "duplicate_member",
            Self::WrongKind { .. } => "wrong_kind",
        }
    }
}

/// Verifies a signed verdict and returns its claims.
pub fn verify_verdict(
    token: &str,
    jwks: &JwkSet,
    options: &VerifyOptions,
) -> Result<VerdictClaims, TokenError> {
    verify_claims(token, jwks, options, TokenKind::Verdict, &verify_es256)
}

/// An ES256 check: whether the signature `r || s` of the message verifies against the key.
pub type Es256Check<'a> = dyn Fn(&Jwk, &[u8], &[u8]) -> bool + 'a;

/// [`verify_verdict`] with the ES256 arithmetic done by `es256` instead of RustCrypto's
/// p256: for a caller that verifies many tokens and has a faster backend (the server's
/// log worker uses aws-lc). Every other check is the same: `es256(jwk, message, r || s)`
/// is asked only about a 64-byte signature already in low-S form, and must say whether it
/// verifies against `jwk`.
pub fn verify_verdict_with(
    token: &str,
    jwks: &JwkSet,
    options: &VerifyOptions,
    es256: &Es256Check<'_>,
) -> Result<VerdictClaims, TokenError> {
    let low_s = |jwk: &Jwk, message: &[u8], signature: &[u8]| {
        signature.len() == 64
            && Signature::from_slice(signature).is_ok_and(|s| is_low_s(&s))
            && es256(jwk, message, signature)
    };
    verify_claims(token, jwks, options, TokenKind::Verdict, &low_s)
}

/// Verifies a signed webhook event and returns its claims.
pub fn verify_event(
    token: &str,
    jwks: &JwkSet,
    options: &VerifyOptions,
) -> Result<EventClaims, TokenError> {
    verify_claims(token, jwks, options, TokenKind::Event, &verify_es256)
}

#[derive(Deserialize)]
struct Header {
    alg: Option<Value>,
    kid: Option<Value>,
    crit: Option<Value>,
}

/// The registered claims every token is checked on; other claims are left to `C`.
#[derive(Deserialize)]
struct Registered {
    iss: Option<Value>,
    jti: Option<Value>,
    iat: Option<Value>,
    exp: Option<Value>,
}

fn segment(text: &str) -> Result<Vec<u8>, TokenError> {
    URL_SAFE_NO_PAD
        .decode(text)
        .map_err(|_| TokenError::Malformed("a segment is not base64url without padding"))
}

fn shown(value: &Value) -> String {
    value.to_string().chars().take(64).collect()
}

fn integer(value: Option<&Value>, name: &str) -> Result<Option<i64>, TokenError> {
    match value {
        None => Ok(None),
        Some(value) => value
            .as_i64()
            .map(Some)
            .ok_or_else(|| TokenError::MalformedClaims(format!("{name} must be an integer"))),
    }
}

/// The generic decode step: segments, header, key, signature, registered claims, then the
/// typed claims.
fn verify_claims<C: DeserializeOwned>(
    token: &str,
    jwks: &JwkSet,
    options: &VerifyOptions,
    expected: TokenKind,
    es256: &Es256Check<'_>,
) -> Result<C, TokenError> {
    let mut parts = token.split('.');
    let (Some(header_b64), Some(payload_b64), Some(signature_b64), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(TokenError::Malformed("a token has exactly three segments"));
    };
    let header = segment(header_b64)?;
    let payload = segment(payload_b64)?;
    let signature = segment(signature_b64)?;
    let header: Header = Header::deserialize(&object(&header, TokenPart::Header)?)
        .map_err(|_| TokenError::Malformed("the header is not a json object"))?;
    match &header.alg {
        Some(Value::String(alg)) if alg == ES256 => {}
        Some(other) => return Err(TokenError::UnsupportedAlgorithm(shown(other))),
        None => return Err(TokenError::UnsupportedAlgorithm("(none given)".to_owned())),
    }
    if header.crit.is_some() {
        return Err(TokenError::Malformed(
            "critical header extensions are not supported",
        ));
    }
    let kid = match &header.kid {
        None | Some(Value::Null) => return Err(TokenError::MissingKid),
        Some(Value::String(kid)) => kid,
        Some(_) => return Err(TokenError::Malformed("the header kid is not a string")),
    };
    let jwk = jwks
        .find(kid)
        .ok_or_else(|| TokenError::UnknownKid(kid.chars().take(64).collect()))?;
    if signature.len() != 64 {
        return Err(TokenError::SignatureLength(signature.len()));
    }
    let signing_input_len = header_b64.len() + 1 + payload_b64.len();
    let signing_input = token
        .as_bytes()
        .get(..signing_input_len)
        .unwrap_or_default();
    if !es256(jwk, signing_input, &signature) {
        if is_high_s_twin(jwk, signing_input, &signature) {
            return Err(TokenError::HighS);
        }
        return Err(TokenError::BadSignature);
    }

    let claims = object(&payload, TokenPart::Claims)?;
    let registered =
        Registered::deserialize(&claims).map_err(|e| TokenError::MalformedClaims(e.to_string()))?;
    let found = match &registered.jti {
        Some(Value::String(jti)) => TokenKind::of_jti(jti),
        _ => None,
    }
    .ok_or_else(|| {
        TokenError::MalformedClaims(format!("jti must start with {}", expected.jti_prefix()))
    })?;
    if found != expected {
        return Err(TokenError::WrongKind { expected, found });
    }
    match &registered.iss {
        Some(Value::String(iss)) if *iss == options.issuer => {}
        Some(other) => {
            let found = other.as_str().map_or_else(|| shown(other), str::to_owned);
            return Err(TokenError::WrongIssuer(found.chars().take(64).collect()));
        }
        None => return Err(TokenError::MalformedClaims("iss is missing".to_owned())),
    }
    let leeway = options.leeway_secs.max(0);
    let exp = integer(registered.exp.as_ref(), "exp")?;
    let iat = integer(registered.iat.as_ref(), "iat")?
        .ok_or_else(|| TokenError::MalformedClaims("iat is missing".to_owned()))?;
    // Verdicts and events are verified the same way: both carry `exp`.
    let exp = exp.ok_or_else(|| TokenError::MalformedClaims("exp is missing".to_owned()))?;
    let now = options.now.unix_timestamp();
    if now >= exp.saturating_add(leeway) {
        return Err(TokenError::Expired { exp });
    }
    if iat > now.saturating_add(leeway) {
        return Err(TokenError::IssuedInFuture { iat });
    }
    // Typed from the bytes, not from the `Value`: amounts keep their text exactly whatever
    // serde_json's features (the `Value` served the checks above).
    serde_json::from_slice(&payload).map_err(|e| TokenError::MalformedClaims(e.to_string()))
}

/// The text of a string claim of `token`, read without any check: for a token that
/// [`verify_verdict`] already accepted (to show a verdict code it read as unknown).
pub(crate) fn claim_text(token: &str, name: &str) -> Option<String> {
    let payload = segment(token.split('.').nth(1)?).ok()?;
    let claims: Value = serde_json::from_slice(&payload).ok()?;
    claims
        .get(name)?
        .as_str()
        .map(|text| text.chars().take(64).collect())
}

/// A part of a token as a JSON object whose members each appear once (at any depth).
fn object(json: &[u8], part: TokenPart) -> Result<Value, TokenError> {
    let value: Value = serde_json::from_slice(json).map_err(|e| match part {
        TokenPart::Header => TokenError::Malformed("the header is not a json object"),
        TokenPart::Claims => TokenError::MalformedClaims(e.to_string()),
    })?;
    if !value.is_object() {
        return Err(TokenError::NotAnObject(part));
    }
    if let Some(member) = repeated_member(json) {
        return Err(TokenError::DuplicateMember { part, member });
    }
    Ok(value)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use serde_json::json;

    const ISS: &str = "https://verdicts.example";

    fn signer() -> P256Signer {
        P256Signer::from_secret_bytes("sandbox-1", &[9; 32]).unwrap()
    }

    /// Each part is the base64url of what it encodes, whatever its length mod 3, and the
    /// signature covers the first two parts.
    #[test]
    fn a_payload_is_signed_as_its_base64url() {
        let signer = signer();
        for len in 0..12 {
            let payload: Vec<u8> = (0..len).map(|i| b'a' + i).collect();
            let token = sign_payload(&signer, &payload).unwrap();
            let parts: Vec<&str> = token.split('.').collect();
            assert_eq!(parts.len(), 3);
            assert_eq!(
                parts[0],
                URL_SAFE_NO_PAD.encode(r#"{"alg":"ES256","typ":"JWT","kid":"sandbox-1"}"#)
            );
            assert_eq!(parts[1], URL_SAFE_NO_PAD.encode(&payload));
            let signature = URL_SAFE_NO_PAD.decode(parts[2]).unwrap();
            let (input, _) = token.rsplit_once('.').unwrap();
            assert!(verify_es256(
                &signer.public_jwk(),
                input.as_bytes(),
                &signature
            ));
        }
    }

    fn options(now: i64) -> VerifyOptions {
        let now = OffsetDateTime::from_unix_timestamp(now).unwrap();
        VerifyOptions {
            issuer: ISS.to_owned(),
            now,
            leeway_secs: 0,
        }
    }

    fn event(iat: i64) -> Value {
        json!({
            "iss": ISS,
            "jti": "evt_0123",
            "iat": iat,
            "exp": iat + 300,
            "type": "ping",
            "data": {"webhook": "whk_1"},
        })
    }

    #[test]
    fn secrets_are_32_byte_scalars() {
        assert_eq!(
            P256Signer::from_secret_bytes("k", &[0; 32]).err(),
            Some(SignError::InvalidSecret)
        );
        assert_eq!(
            P256Signer::from_secret_bytes("k", &[0xff; 32]).err(),
            Some(SignError::InvalidSecret)
        );
        assert_eq!(
            P256Signer::from_secret_bytes("k", &[1; 31]).err(),
            Some(SignError::InvalidSecret)
        );
        let signer = signer();
        assert_eq!(signer.secret_bytes(), [9; 32]);
        let again = P256Signer::from_secret_bytes("sandbox-1", &signer.secret_bytes()).unwrap();
        assert_eq!(again.public_jwk(), signer.public_jwk());
    }

    #[test]
    fn debug_hides_the_secret() {
        let text = format!("{:?}", signer());
        assert!(text.contains("sandbox-1"));
        assert!(text.contains("redacted"));
        assert!(!text.contains("9, 9"));
    }

    #[test]
    fn header_is_exact() {
        let token = sign_token(&signer(), &event(1)).unwrap();
        let header = token.split('.').next().unwrap();
        assert_eq!(
            URL_SAFE_NO_PAD.decode(header).unwrap(),
            br#"{"alg":"ES256","typ":"JWT","kid":"sandbox-1"}"#
        );
        assert_eq!(token.split('.').nth(2).unwrap().len(), 86);
        assert!(!token.contains('='));
    }

    /// A token taken apart into its signature and put together again from the kid and the
    /// claims is the signed token, byte for byte; what is not a 64-byte signature is none.
    #[test]
    fn a_token_is_rebuilt_from_its_signature() {
        let payload = serde_json::to_vec(&event(1)).unwrap();
        let token = sign_payload(&signer(), &payload).unwrap();
        let signature = token_signature(&token).unwrap();
        assert_eq!(
            compact_token("sandbox-1", &payload, &signature).unwrap(),
            token
        );
        assert_ne!(
            compact_token("sandbox-2", &payload, &signature).unwrap(),
            token
        );
        for bad in ["", "a.b", "a.b.c", "a.b.!!", &format!("{token}AAAA")] {
            assert_eq!(token_signature(bad), None, "{bad}");
        }
    }

    #[test]
    fn event_round_trip_and_iat_check() {
        let signer = signer();
        let jwks = JwkSet {
            keys: vec![signer.public_jwk()],
        };
        let token = sign_token(&signer, &event(100)).unwrap();
        let claims = verify_event(&token, &jwks, &options(100)).unwrap();
        assert_eq!(claims.event_type, "ping");
        assert_eq!(claims.jti.as_str(), "evt_0123");
        assert_eq!(
            verify_event(&token, &jwks, &options(99)),
            Err(TokenError::IssuedInFuture { iat: 100 })
        );
        let lenient = VerifyOptions {
            leeway_secs: 1,
            ..options(99)
        };
        assert!(verify_event(&token, &jwks, &lenient).is_ok());
        assert_eq!(
            verify_verdict(&token, &jwks, &options(100)),
            Err(TokenError::WrongKind {
                expected: TokenKind::Verdict,
                found: TokenKind::Event
            })
        );
    }

    /// Events are verified like verdicts: `exp` is required and checked.
    #[test]
    fn an_event_expires_and_must_carry_exp() {
        let signer = signer();
        let jwks = JwkSet {
            keys: vec![signer.public_jwk()],
        };
        let token = sign_token(&signer, &event(100)).unwrap();
        assert!(verify_event(&token, &jwks, &options(399)).is_ok());
        assert_eq!(
            verify_event(&token, &jwks, &options(400)),
            Err(TokenError::Expired { exp: 400 })
        );
        let mut without = event(100);
        without.as_object_mut().unwrap().remove("exp");
        let token = sign_token(&signer, &without).unwrap();
        assert_eq!(
            verify_event(&token, &jwks, &options(100)),
            Err(TokenError::MalformedClaims("exp is missing".to_owned()))
        );
    }

    #[test]
    fn verify_es256_checks_length_and_value() {
        let signer = signer();
        let jwk = signer.public_jwk();
        let signature = signer.sign(b"message").unwrap();
        assert!(verify_es256(&jwk, b"message", &signature));
        assert!(!verify_es256(&jwk, b"massage", &signature));
        assert!(!verify_es256(&jwk, b"message", &signature[..63]));
        assert!(!verify_es256(&jwk, b"message", &[0; 64]));
        let mut longer = signature.to_vec();
        longer.push(0);
        assert!(!verify_es256(&jwk, b"message", &longer));
    }

    #[test]
    fn signing_is_deterministic() {
        let signer = signer();
        assert_eq!(signer.sign(b"x").unwrap(), signer.sign(b"x").unwrap());
    }
}
