//! `Counterparty::check` against the procedure it replaces (the forty lines every embedder
//! copied from `examples/verify_verdict.rs`, with claims read strictly as they were before
//! tokens became forward-compatible), and its replay guard.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use std::collections::HashSet;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use mandate_core::{
    Amount, CheckError, Counterparty, Currency, Environment, EnvironmentPolicy,
    ExpectedTransaction, JwkSet, MemoryReplayGuard, Objection, P256Signer, Recipient, ReplayGuard,
    Seen, Signer, Verdict, VerifyOptions, token_kid, verify_verdict,
};
use proptest::prelude::*;
use serde_json::{Value, json};
use time::OffsetDateTime;

const ISS: &str = "https://verdicts.example.com";
const IAT: i64 = 1_795_348_800;
const NOW: i64 = IAT + 10;

const KNOWN_CLAIMS: [&str; 10] = [
    "iss",
    "jti",
    "iat",
    "exp",
    "verdict",
    "policy_verdict",
    "mandate",
    "policy_version",
    "nonce",
    "request",
];
const KNOWN_REQUEST: [&str; 5] = ["agent", "amount", "currency", "recipient", "category"];
const KNOWN_CODES: [&str; 9] = [
    "allow",
    "review",
    "deny_no_mandate",
    "deny_revoked",
    "deny_expired",
    "deny_velocity",
    "deny_category",
    "deny_recipient",
    "deny_limit",
];

fn claims() -> Value {
    json!({
        "iss": ISS, "jti": "dec_aaaaaaaaaaaaaaaaaaaaaaaaaa", "iat": IAT, "exp": IAT + 300,
        "verdict": "allow", "policy_verdict": "allow", "mandate": "mnd_bbbbbbbbbbbbbbbbbbbbbbbbbb",
        "policy_version": "pol_2026-11-01.1", "nonce": "n_cccccccccccccccccccccccccc",
        "request": {"agent": "agt_buyer", "amount": 42.50, "currency": "USD",
                    "recipient": "vendor:acme", "category": "software"}
    })
}

fn sign(signer: &P256Signer, claims: &Value, corrupt: bool) -> String {
    let header = json!({"alg": "ES256", "typ": "JWT", "kid": signer.kid()});
    let input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let mut signature = signer.sign(input.as_bytes()).unwrap();
    if corrupt {
        signature[40] ^= 1;
    }
    format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature))
}

/// The transaction the tokens are checked against: amount, currency and recipient.
fn transaction() -> (Amount, Currency, Recipient) {
    (
        Amount::parse("42.5").unwrap(),
        Currency::parse("USD").unwrap(),
        "vendor:acme".parse().unwrap(),
    )
}

fn expected() -> ExpectedTransaction {
    let (amount, currency, recipient) = transaction();
    ExpectedTransaction::new(amount, currency, recipient)
}

/// Why the old procedure refused a token, as far as the property needs to know.
#[derive(Debug, PartialEq)]
enum OldRefusal {
    /// Refused only because it carries a claim, verdict code or key type the old crate
    /// did not know: the new one may accept it.
    Unknown,
    /// Refused for any other reason: the new one must refuse it too.
    Other,
}

/// The old procedure: verification with claims read strictly (no claim it does not know,
/// no verdict code it does not know), then a live key, `allow`, the transaction and the
/// nonce, as `examples/verify_verdict.rs` did before `Counterparty::check`.
fn old_procedure(token: &str, jwks: &JwkSet, accepted: &mut HashSet<String>) -> Option<OldRefusal> {
    let options = VerifyOptions {
        issuer: ISS.to_owned(),
        now: at(NOW),
        leeway_secs: 0,
    };
    let claims = match verify_verdict(token, jwks, &options) {
        Ok(claims) => claims,
        Err(_) => return Some(OldRefusal::Other),
    };
    let payload = URL_SAFE_NO_PAD
        .decode(token.split('.').nth(1).unwrap())
        .unwrap();
    let raw: Value = serde_json::from_slice(&payload).unwrap();
    let unknown_claim = raw
        .as_object()
        .unwrap()
        .keys()
        .any(|k| !KNOWN_CLAIMS.contains(&k.as_str()))
        || raw["request"]
            .as_object()
            .unwrap()
            .keys()
            .any(|k| !KNOWN_REQUEST.contains(&k.as_str()));
    let unknown_code = ["verdict", "policy_verdict"]
        .iter()
        .any(|c| !KNOWN_CODES.contains(&raw[*c].as_str().unwrap_or("")));
    let live =
        Environment::of_kid(&token_kid(token).unwrap_or_default()) == Some(Environment::Live);
    let (amount, currency, recipient) = transaction();
    let matches = claims.request.amount == amount
        && claims.request.currency == currency
        && claims.request.recipient == recipient;
    // A known code that is not allow is a reason of its own; an unknown one is not.
    let known_denial = claims.verdict != Verdict::Allow && claims.verdict != Verdict::Unknown;
    if !live || known_denial || !matches {
        return Some(OldRefusal::Other);
    }
    if unknown_claim || unknown_code {
        return Some(OldRefusal::Unknown);
    }
    if !accepted.insert(claims.nonce.to_string()) {
        return Some(OldRefusal::Other);
    }
    None
}

/// One change a hostile or later server may make to a token.
#[derive(Debug, Clone)]
enum Edit {
    Verdict(&'static str),
    PolicyVerdict(&'static str),
    ExtraClaim,
    ExtraRequestClaim,
    Amount(&'static str),
    Currency(&'static str),
    Recipient(&'static str),
    Issuer,
    Expiry(i64),
    IssuedAt(i64),
    Remove(&'static str),
    WrongType(&'static str),
    SandboxKey,
    ForeignKey,
    BadSignature,
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        prop::sample::select(vec!["allow", "review", "deny_limit", "deny_quota", "ALLOW"])
            .prop_map(Edit::Verdict),
        prop::sample::select(vec!["allow", "deny_limit", "deny_quota"])
            .prop_map(Edit::PolicyVerdict),
        Just(Edit::ExtraClaim),
        Just(Edit::ExtraRequestClaim),
        prop::sample::select(vec!["42.50", "42.5", "42.51", "4250", "0"]).prop_map(Edit::Amount),
        prop::sample::select(vec!["USD", "EUR"]).prop_map(Edit::Currency),
        prop::sample::select(vec!["vendor:acme", "vendor:ACME", "vendor:evil"])
            .prop_map(Edit::Recipient),
        Just(Edit::Issuer),
        (-400i64..400).prop_map(Edit::Expiry),
        (-400i64..400).prop_map(Edit::IssuedAt),
        prop::sample::select(KNOWN_CLAIMS.to_vec()).prop_map(Edit::Remove),
        prop::sample::select(KNOWN_CLAIMS.to_vec()).prop_map(Edit::WrongType),
        Just(Edit::SandboxKey),
        Just(Edit::ForeignKey),
        Just(Edit::BadSignature),
    ]
}

/// The token the edits make, signed by the live key unless an edit says otherwise.
fn token(edits: &[Edit]) -> String {
    let mut claims = claims();
    let mut key = P256Signer::from_secret_bytes("live-1", &[7; 32]).unwrap();
    let mut corrupt = false;
    for edit in edits {
        match edit {
            Edit::Verdict(code) => claims["verdict"] = json!(code),
            Edit::PolicyVerdict(code) => claims["policy_verdict"] = json!(code),
            Edit::ExtraClaim => claims["binding"] = json!({"ap2": "sha256:ab"}),
            // A request made an array by an earlier edit has no members to change.
            Edit::ExtraRequestClaim => set_request(&mut claims, "x402", json!("tx_1")),
            Edit::Amount(text) => {
                set_request(&mut claims, "amount", serde_json::from_str(text).unwrap());
            }
            Edit::Currency(code) => set_request(&mut claims, "currency", json!(code)),
            Edit::Recipient(to) => set_request(&mut claims, "recipient", json!(to)),
            Edit::Issuer => claims["iss"] = json!("https://evil.example"),
            Edit::Expiry(delta) => claims["exp"] = json!(IAT + 300 + delta),
            Edit::IssuedAt(delta) => claims["iat"] = json!(IAT + delta),
            Edit::Remove(name) => {
                claims.as_object_mut().unwrap().remove(*name);
            }
            Edit::WrongType(name) => claims[*name] = json!([1]),
            Edit::SandboxKey => {
                key = P256Signer::from_secret_bytes("sandbox-1", &[8; 32]).unwrap();
            }
            Edit::ForeignKey => {
                key = P256Signer::from_secret_bytes("live-1", &[9; 32]).unwrap();
            }
            Edit::BadSignature => corrupt = true,
        }
    }
    sign(&key, &claims, corrupt)
}

/// Sets a member of the claims' `request` unless an edit made it something that holds none.
fn set_request(claims: &mut Value, member: &str, value: Value) {
    let request = &mut claims["request"];
    if request.is_object() || request.is_null() {
        request[member] = value;
    }
}

fn jwks() -> JwkSet {
    let live = P256Signer::from_secret_bytes("live-1", &[7; 32]).unwrap();
    let sandbox = P256Signer::from_secret_bytes("sandbox-1", &[8; 32]).unwrap();
    JwkSet {
        keys: vec![live.public_jwk(), sandbox.public_jwk()],
    }
}

fn at(secs: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(secs).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, failure_persistence: None, ..ProptestConfig::default() })]

    /// A token the old procedure refused for any reason but a claim, a verdict code or a
    /// key type it did not know, the one call refuses too; and what the old one accepted,
    /// the one call accepts, once.
    #[test]
    fn the_one_call_refuses_whatever_the_old_procedure_refused(
        edits in prop::collection::vec(edit(), 0..4),
    ) {
        let token = token(&edits);
        let jwks = jwks();
        let mut old_seen = HashSet::new();
        let old = old_procedure(&token, &jwks, &mut old_seen);
        let mut guard = MemoryReplayGuard::default();
        let new = Counterparty::new(ISS).check(&token, &jwks, &expected(), &mut guard, at(NOW));
        match old {
            Some(OldRefusal::Other) => prop_assert!(new.is_err(), "{edits:?}: old refused, new accepted"),
            Some(OldRefusal::Unknown) => {
                // Accepted only when it is an allow (the code known) for this transaction.
                if let Ok(verified) = &new {
                    prop_assert_eq!(verified.claims.verdict, Verdict::Allow);
                }
            }
            None => {
                prop_assert!(new.is_ok(), "{:?}: old accepted, new refused: {:?}", edits, new);
                // The second time is a replay for both.
                prop_assert_eq!(old_procedure(&token, &jwks, &mut old_seen), Some(OldRefusal::Other));
                let again = Counterparty::new(ISS).check(&token, &jwks, &expected(), &mut guard, at(NOW));
                prop_assert!(
                    matches!(&again, Err(CheckError::Refused { objections, .. }) if objections == &[Objection::Replay("n_cccccccccccccccccccccccccc".parse().unwrap())]),
                    "{:?}", again
                );
            }
        }
        // A refused token burns no nonce.
        if new.is_err() {
            prop_assert!(guard.is_empty());
        }
    }
}

#[test]
fn a_sandbox_token_passes_only_where_the_sandbox_is_accepted() {
    let token = token(&[Edit::SandboxKey]);
    let jwks = jwks();
    let refused = Counterparty::new(ISS)
        .check(
            &token,
            &jwks,
            &expected(),
            &mut MemoryReplayGuard::default(),
            at(NOW),
        )
        .unwrap_err();
    assert!(matches!(
        refused,
        CheckError::Refused { ref objections, .. }
            if objections == &[Objection::Environment { kid: "sandbox-1".into(), environment: Some(Environment::Sandbox) }]
    ));
    let verified = Counterparty::new(ISS)
        .environments(EnvironmentPolicy::LiveOrSandbox)
        .check(
            &token,
            &jwks,
            &expected(),
            &mut MemoryReplayGuard::default(),
            at(NOW),
        )
        .unwrap();
    assert_eq!(verified.environment, Environment::Sandbox);
    // Signature only: no transaction, no replay guard, but still allow and the key.
    let denied = token_with_verdict("deny_limit");
    assert!(
        Counterparty::new(ISS)
            .check_signature_only(&denied, &jwks, at(NOW))
            .is_err()
    );
    assert!(
        Counterparty::new(ISS)
            .check_signature_only(&self::token(&[]), &jwks, at(NOW))
            .is_ok()
    );
}

fn token_with_verdict(code: &'static str) -> String {
    token(&[Edit::Verdict(code)])
}

#[test]
fn every_objection_is_reported_at_once() {
    let token = token(&[
        Edit::SandboxKey,
        Edit::Verdict("review"),
        Edit::Amount("1"),
        Edit::Currency("EUR"),
        Edit::Recipient("vendor:evil"),
    ]);
    let refused = Counterparty::new(ISS)
        .check(
            &token,
            &jwks(),
            &expected(),
            &mut MemoryReplayGuard::default(),
            at(NOW),
        )
        .unwrap_err();
    let CheckError::Refused { objections, claims } = &refused else {
        panic!("{refused:?}");
    };
    assert_eq!(objections.len(), 5, "{objections:?}");
    assert_eq!(claims.verdict, Verdict::Review);
    let text = refused.to_string();
    for part in [
        "sandbox",
        "review",
        "amount 42.5",
        "currency USD",
        "recipient vendor:acme",
    ] {
        assert!(text.contains(part), "{part}: {text}");
    }
}

#[test]
fn the_memory_guard_forgets_a_nonce_once_its_token_expired() {
    let mut guard = MemoryReplayGuard::default();
    assert_eq!(
        guard.check_and_record("n_a", at(100), at(0)).unwrap(),
        Seen::New
    );
    assert_eq!(
        guard.check_and_record("n_b", at(200), at(10)).unwrap(),
        Seen::New
    );
    assert_eq!(
        guard.check_and_record("n_a", at(100), at(100)).unwrap(),
        Seen::Before
    );
    assert_eq!(guard.len(), 2);
    // Past n_a's time it is swept; n_b stays until its own.
    assert_eq!(
        guard.check_and_record("n_c", at(300), at(101)).unwrap(),
        Seen::New
    );
    assert_eq!(guard.len(), 2);
    assert_eq!(
        guard.check_and_record("n_b", at(200), at(150)).unwrap(),
        Seen::Before
    );
    assert_eq!(
        guard.check_and_record("n_d", at(400), at(301)).unwrap(),
        Seen::New
    );
    assert_eq!(guard.len(), 1);
}

/// A guard that cannot record refuses the token: a failing store must not let a nonce
/// through twice.
#[test]
fn a_failing_guard_refuses() {
    struct Broken;
    impl ReplayGuard for Broken {
        fn check_and_record(
            &mut self,
            _: &str,
            _: OffsetDateTime,
            _: OffsetDateTime,
        ) -> Result<Seen, mandate_core::ReplayGuardError> {
            Err(mandate_core::ReplayGuardError("disk full".into()))
        }
    }
    let result =
        Counterparty::new(ISS).check(&token(&[]), &jwks(), &expected(), &mut Broken, at(NOW));
    assert_eq!(
        result.unwrap_err().to_string(),
        "replay guard failed: disk full"
    );
}
