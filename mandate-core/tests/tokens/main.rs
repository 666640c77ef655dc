//! Signed tokens end to end: real verdict claims signed and verified, and hostile tokens each
//! refused with the variant that names what is wrong with them (`refusals.rs`), and the
//! signatures' own rules (`signatures.rs`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use mandate_core::{
    AgentId, Amount, AuthorizationRequest, Category, CheckError, Counterparty, Currency,
    DecisionId, EnvironmentPolicy, EventClaims, EventId, ExpectedTransaction, JwkSet, MandateId,
    MemoryReplayGuard, Nonce, Objection, P256Signer, Recipient, Signer, TokenError, TokenPart,
    VERDICT_LIFETIME_SECS, Verdict, VerdictClaims, VerifyOptions, sign_token, verify_event,
};
use mandate_protocol::jws::TokenKind;
use proptest::prelude::*;
use serde_json::{Value, json};
use sha2::Sha256;

mod refusals;
mod signatures;

const ISS: &str = "https://verdicts.mandate.example";
const IAT: i64 = 1_767_225_600;

fn signer(kid: &str, byte: u8) -> P256Signer {
    P256Signer::from_secret_bytes(kid, &[byte; 32]).unwrap()
}

fn set(signers: &[&P256Signer]) -> JwkSet {
    JwkSet {
        keys: signers.iter().map(|s| s.public_jwk()).collect(),
    }
}

fn verdict(iat: i64, seed: u8) -> VerdictClaims {
    VerdictClaims {
        bindings: mandate_core::Bindings::default(),
        iss: ISS.to_owned(),
        jti: DecisionId::from_random([seed; 16]),
        iat,
        exp: iat + VERDICT_LIFETIME_SECS,
        verdict: Verdict::Allow,
        policy_verdict: Verdict::Allow,
        mandate: Some(MandateId::from_random([seed.wrapping_add(1); 16])),
        policy_version: "pol_2026-01-01.1".to_owned(),
        nonce: Nonce::from_random([seed.wrapping_add(2); 16]),
        request: AuthorizationRequest {
            agent: AgentId::parse("agt_buyer-1").unwrap(),
            amount: Amount::parse("100.10").unwrap(),
            currency: Currency::parse("USD").unwrap(),
            recipient: Recipient::parse("vendor:acme").unwrap(),
            category: Category::parse("software").unwrap(),
        },
    }
}

fn event(iat: i64) -> EventClaims {
    EventClaims {
        iss: ISS.to_owned(),
        jti: EventId::from_random([5; 16]),
        iat,
        exp: iat + mandate_protocol::claims::EVENT_LIFETIME_SECS,
        event_type: "mandate.revoked".to_owned(),
        data: json!({"id": "mnd_abc", "status": "revoked"}),
    }
}

fn at(now: i64) -> VerifyOptions {
    VerifyOptions {
        issuer: ISS.to_owned(),
        now: time::OffsetDateTime::from_unix_timestamp(now).unwrap(),
        leeway_secs: 0,
    }
}

/// The core's verification, with the counterparty check run on the same token beside it:
/// every token the first refuses, the second refuses for the same reason (whatever the
/// transaction), and a token the first accepts the second accepts for its own
/// transaction, or refuses only with objections that hold.
fn verify_verdict(
    token: &str,
    jwks: &JwkSet,
    options: &VerifyOptions,
) -> Result<VerdictClaims, TokenError> {
    let result = mandate_core::verify_verdict(token, jwks, options);
    let now = options.now;
    let counterparty = Counterparty::new(options.issuer.clone())
        .leeway_secs(options.leeway_secs)
        .environments(EnvironmentPolicy::LiveOrSandbox);
    let mut guard = MemoryReplayGuard::default();
    match &result {
        Err(error) => {
            let claims = verdict(IAT, 1);
            let transaction = ExpectedTransaction::new(
                claims.request.amount,
                claims.request.currency,
                claims.request.recipient,
            );
            assert_eq!(
                counterparty.check(token, jwks, &transaction, &mut guard, now),
                Err(CheckError::Token(error.clone())),
                "the counterparty check must refuse what verification refuses"
            );
            assert!(guard.is_empty());
        }
        Ok(claims) => {
            let transaction = ExpectedTransaction::new(
                claims.request.amount,
                claims.request.currency.clone(),
                claims.request.recipient.clone(),
            );
            match counterparty.check(token, jwks, &transaction, &mut guard, now) {
                Ok(verified) => {
                    assert_eq!(&verified.claims, claims);
                    assert_eq!(claims.verdict, Verdict::Allow);
                }
                Err(CheckError::Refused {
                    claims: refused,
                    objections,
                }) => {
                    assert_eq!(&*refused, claims);
                    assert!(!objections.is_empty());
                    for objection in objections {
                        match objection {
                            Objection::NotAllow(v) => assert_eq!(v, claims.verdict),
                            Objection::UnknownVerdict(_) => {
                                assert_eq!(claims.verdict, Verdict::Unknown);
                            }
                            Objection::Environment { .. } => {}
                            other => panic!("unexpected objection {other:?}"),
                        }
                    }
                }
                Err(other) => panic!("{other:?}"),
            }
        }
    }
    result
}

fn b64(bytes: impl AsRef<[u8]>) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// A token with any header and claims, properly signed by `signer`.
fn forge(signer: &dyn Signer, header: &Value, claims: &Value) -> String {
    let input = format!("{}.{}", b64(header.to_string()), b64(claims.to_string()));
    let signature = signer.sign(input.as_bytes()).unwrap();
    format!("{input}.{}", b64(signature))
}

fn es256_header(kid: &str) -> Value {
    json!({"alg": "ES256", "typ": "JWT", "kid": kid})
}

fn verdict_json(iat: i64) -> Value {
    serde_json::to_value(verdict(iat, 1)).unwrap()
}

/// Encodes `r || s` as an ASN.1 DER `SEQUENCE { INTEGER r, INTEGER s }`.
fn der(raw: &[u8; 64]) -> Vec<u8> {
    fn integer(bytes: &[u8]) -> Vec<u8> {
        let start = bytes
            .iter()
            .position(|&b| b != 0)
            .unwrap_or(bytes.len() - 1);
        let mut body = bytes[start..].to_vec();
        if body[0] & 0x80 != 0 {
            body.insert(0, 0);
        }
        let mut out = vec![0x02, u8::try_from(body.len()).unwrap()];
        out.extend(body);
        out
    }
    let mut content = integer(&raw[..32]);
    content.extend(integer(&raw[32..]));
    let mut out = vec![0x30, u8::try_from(content.len()).unwrap()];
    out.extend(content);
    out
}

#[test]
fn a_signed_verdict_verifies_to_the_same_claims() {
    let key = signer("live-1", 3);
    let claims = verdict(IAT, 1);
    let token = sign_token(&key, &claims).unwrap();
    assert_eq!(token.split('.').count(), 3);
    let back = verify_verdict(&token, &set(&[&key]), &at(IAT)).unwrap();
    assert_eq!(back, claims);
    assert_eq!(back.request.amount.to_string(), "100.10");
}

#[test]
fn a_signed_event_verifies() {
    let key = signer("live-1", 3);
    let claims = event(IAT);
    let token = sign_token(&key, &claims).unwrap();
    assert_eq!(verify_event(&token, &set(&[&key]), &at(IAT)), Ok(claims));
}

#[test]
fn an_event_lives_five_minutes_like_a_verdict() {
    let key = signer("live-1", 3);
    let jwks = set(&[&key]);
    let claims = event(IAT);
    assert_eq!(claims.exp, IAT + 300);
    let token = sign_token(&key, &claims).unwrap();
    assert!(verify_event(&token, &jwks, &at(IAT + 299)).is_ok());
    assert_eq!(
        verify_event(&token, &jwks, &at(IAT + 300)),
        Err(TokenError::Expired { exp: IAT + 300 })
    );
    // An event without exp, as this service signed them before, is refused.
    let mut old = serde_json::to_value(&claims).unwrap();
    old.as_object_mut().unwrap().remove("exp");
    let token = forge(&key, &es256_header("live-1"), &old);
    assert!(matches!(
        verify_event(&token, &jwks, &at(IAT)),
        Err(TokenError::MalformedClaims(m)) if m == "exp is missing"
    ));
}

#[test]
fn a_rotating_set_verifies_tokens_of_both_keys() {
    let outgoing = signer("live-1", 3);
    let incoming = signer("live-2", 4);
    let jwks = set(&[&outgoing, &incoming]);
    let jwks = JwkSet::from_json(&serde_json::to_vec(&jwks).unwrap()).unwrap();
    for key in [&outgoing, &incoming] {
        let token = sign_token(key, &verdict(IAT, 1)).unwrap();
        assert!(verify_verdict(&token, &jwks, &at(IAT)).is_ok());
        assert_eq!(
            verify_verdict(&token, &set(&[key]), &at(IAT)).map(|c| c.jti),
            Ok(verdict(IAT, 1).jti)
        );
    }
    let retired = set(&[&incoming]);
    let old = sign_token(&outgoing, &verdict(IAT, 1)).unwrap();
    assert_eq!(
        verify_verdict(&old, &retired, &at(IAT)),
        Err(TokenError::UnknownKid("live-1".to_owned()))
    );
}
