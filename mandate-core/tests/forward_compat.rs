//! A verifier built from this crate against what a later server may send: tokens with
//! claims and a verdict code it does not know, JWK Sets with keys of other types. The
//! fixtures in `testdata/future/` were made outside this crate (see `testdata/README.md`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use std::path::PathBuf;

use mandate_core::{
    Amount, CheckError, Counterparty, Currency, ExpectedTransaction, JwkError, JwkSet,
    MemoryReplayGuard, Objection, Recipient, TokenError, Verdict, VerifyOptions, verify_verdict,
};
use time::OffsetDateTime;

const ISSUER: &str = "https://verdicts.example.com";
const IAT: i64 = 1_795_348_800;

fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("../testdata/future")
    .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn token(name: &str) -> String {
    String::from_utf8(fixture(name)).unwrap().trim().to_owned()
}

fn now() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(IAT + 10).unwrap()
}

fn expected() -> ExpectedTransaction {
    ExpectedTransaction::new(
        Amount::parse("42.5").unwrap(),
        Currency::parse("USD").unwrap(),
        Recipient::parse("vendor:acme").unwrap(),
    )
}

#[test]
fn a_set_with_ed25519_and_rsa_keys_keeps_ours() {
    let jwks = JwkSet::from_json(&fixture("jwks.json")).unwrap();
    let kids: Vec<&str> = jwks.keys.iter().map(|k| k.kid()).collect();
    assert_eq!(kids, ["live-7"]);
    // Only foreign keys: a clear error that says so.
    let error = JwkSet::from_json(&fixture("jwks_foreign.json")).unwrap_err();
    assert_eq!(error, JwkError::NoUsableKey(2));
    assert!(error.to_string().contains("no usable key"), "{error}");
}

#[test]
fn new_claims_are_ignored_and_our_allow_verifies() {
    let jwks = JwkSet::from_json(&fixture("jwks.json")).unwrap();
    let token = token("allow_new_claims.jwt");
    let options = VerifyOptions {
        issuer: ISSUER.to_owned(),
        now: time::OffsetDateTime::from_unix_timestamp(IAT + 10).unwrap(),
        leeway_secs: 0,
    };
    let claims = verify_verdict(&token, &jwks, &options).unwrap();
    assert_eq!(claims.verdict, Verdict::Allow);
    assert_eq!(claims.request.amount.to_string(), "42.5");
    let mut guard = MemoryReplayGuard::default();
    let verified = Counterparty::new(ISSUER)
        .check(&token, &jwks, &expected(), &mut guard, now())
        .unwrap();
    assert_eq!(verified.claims, claims);
    assert_eq!(verified.kid, "live-7");
    // Once only.
    let again = Counterparty::new(ISSUER).check(&token, &jwks, &expected(), &mut guard, now());
    assert!(matches!(
        again,
        Err(CheckError::Refused { ref objections, .. })
            if matches!(objections[..], [Objection::Replay(_)])
    ));
}

#[test]
fn an_unknown_verdict_code_is_a_denial_with_its_own_reason() {
    let jwks = JwkSet::from_json(&fixture("jwks.json")).unwrap();
    let token = token("verdict_new_code.jwt");
    let options = VerifyOptions {
        issuer: ISSUER.to_owned(),
        now: time::OffsetDateTime::from_unix_timestamp(IAT + 10).unwrap(),
        leeway_secs: 0,
    };
    // Read, not refused as malformed; never allow.
    let claims = verify_verdict(&token, &jwks, &options).unwrap();
    assert_eq!(claims.verdict, Verdict::Unknown);
    assert_eq!(claims.policy_verdict, Verdict::Unknown);
    assert!(claims.verdict.is_denial());
    assert!(!claims.verdict.is_allow());
    let mut guard = MemoryReplayGuard::default();
    let refused = Counterparty::new(ISSUER)
        .check(&token, &jwks, &expected(), &mut guard, now())
        .unwrap_err();
    let CheckError::Refused { objections, .. } = &refused else {
        panic!("{refused:?}");
    };
    assert_eq!(
        objections,
        &[Objection::UnknownVerdict("deny_quota".to_owned())]
    );
    assert!(refused.to_string().contains("\"deny_quota\""), "{refused}");
    // The refusal burnt no nonce.
    assert!(guard.is_empty());
}

#[test]
fn the_fixtures_are_refused_for_every_other_reason() {
    let jwks = JwkSet::from_json(&fixture("jwks.json")).unwrap();
    let token = token("allow_new_claims.jwt");
    let mut guard = MemoryReplayGuard::default();
    let late = OffsetDateTime::from_unix_timestamp(IAT + 300).unwrap();
    assert_eq!(
        Counterparty::new(ISSUER).check(&token, &jwks, &expected(), &mut guard, late),
        Err(CheckError::Token(TokenError::Expired { exp: IAT + 300 }))
    );
    assert_eq!(
        Counterparty::new("https://other.example").check(
            &token,
            &jwks,
            &expected(),
            &mut guard,
            now()
        ),
        Err(CheckError::Token(TokenError::WrongIssuer(
            ISSUER.to_owned()
        )))
    );
    let other = ExpectedTransaction::new(
        Amount::parse("42.51").unwrap(),
        Currency::parse("EUR").unwrap(),
        Recipient::parse("vendor:ACME").unwrap(),
    );
    let refused = Counterparty::new(ISSUER)
        .check(&token, &jwks, &other, &mut guard, now())
        .unwrap_err();
    let CheckError::Refused { objections, .. } = refused else {
        panic!()
    };
    assert_eq!(objections.len(), 3, "{objections:?}");
    assert!(guard.is_empty());
}
