//! Tests of `mandate listen`: verifying, rendering and forwarding received events.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;
use mandate_core::{EventId, P256Signer, Signer as _, sign_token};
use serde_json::{Value, json};
use std::sync::atomic::AtomicUsize;

const ISSUER: &str = "https://verdicts.example";

fn now_unix() -> i64 {
    OffsetDateTime::now_utc().unix_timestamp()
}

fn signer(kid: &str, byte: u8) -> P256Signer {
    P256Signer::from_secret_bytes(kid, &[byte; 32]).unwrap()
}

fn event(signer: &P256Signer, jti: u8) -> String {
    let claims = EventClaims {
        iss: ISSUER.to_owned(),
        jti: EventId::from_random([jti; 16]),
        iat: now_unix(),
        exp: now_unix() + 300,
        event_type: "ping".to_owned(),
        data: json!({"webhook": "whk_x"}),
    };
    sign_token(signer, &claims).unwrap()
}

/// Keys holding `old`'s key, whose loader returns `new`'s key and counts its calls.
fn rotating(
    old: &P256Signer,
    new: &P256Signer,
    lifetime: Option<Duration>,
) -> (Keys, Arc<AtomicUsize>) {
    let loads = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&loads);
    let next = JwkSet {
        keys: vec![old.public_jwk(), new.public_jwk()],
    };
    let keys = Keys {
        set: JwkSet {
            keys: vec![old.public_jwk()],
        },
        issuer: ISSUER.to_owned(),
        lifetime,
        cache: cache_for(lifetime, None),
        load: Box::new(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            Ok((next.clone(), None))
        }),
    };
    (keys, loads)
}

#[test]
fn an_unknown_kid_loads_the_set_once_then_verifies() {
    let (old, new) = (signer("k1", 1), signer("k2", 2));
    let (mut keys, loads) = rotating(&old, &new, None);
    assert!(keys.verify(&event(&old, 1), now_unix()).is_ok());
    assert_eq!(loads.load(Ordering::SeqCst), 0);
    let claims = keys.verify(&event(&new, 2), now_unix()).unwrap();
    assert_eq!(claims.event_type, "ping");
    assert_eq!(loads.load(Ordering::SeqCst), 1);
    // A kid still unknown after the load: rejected, and no second load right away.
    let stranger = signer("k3", 3);
    let refused = keys.verify(&event(&stranger, 3), now_unix()).unwrap_err();
    assert!(refused.contains("no key with kid \"k3\""), "{refused}");
    assert_eq!(loads.load(Ordering::SeqCst), 1);
}

#[test]
fn a_fetched_set_is_fetched_again_when_stale() {
    let (old, new) = (signer("k1", 1), signer("k2", 2));
    let (mut keys, loads) = rotating(&old, &new, Some(Duration::ZERO));
    assert!(keys.verify(&event(&old, 1), now_unix()).is_ok());
    assert_eq!(loads.load(Ordering::SeqCst), 1);
    assert_eq!(keys.set.keys.len(), 2);
}

#[test]
fn a_bad_signature_or_issuer_never_reloads() {
    let (old, new) = (signer("k1", 1), signer("k2", 2));
    let (mut keys, loads) = rotating(&old, &new, None);
    let good = event(&old, 1);
    let parts: Vec<&str> = good.split('.').collect();
    let other = event(&old, 9);
    let swapped: Vec<&str> = other.split('.').collect();
    let tampered = format!("{}.{}.{}", parts[0], swapped[1], parts[2]);
    let refused = keys.verify(&tampered, now_unix()).unwrap_err();
    assert_eq!(refused, "signature does not verify");
    keys.issuer = "https://elsewhere.example".to_owned();
    assert!(
        keys.verify(&good, now_unix())
            .unwrap_err()
            .contains("wrong issuer")
    );
    assert_eq!(loads.load(Ordering::SeqCst), 0);
}

#[test]
fn only_application_jwt_is_read() {
    assert!(is_jwt(Some("application/jwt")));
    assert!(is_jwt(Some("Application/JWT; charset=utf-8")));
    assert!(!is_jwt(Some("application/json")));
    assert!(!is_jwt(None));
}

#[test]
fn lines_show_time_id_type_and_result() {
    let old = signer("k1", 1);
    let (mut keys, _) = rotating(&old, &old, None);
    let claims = keys.verify(&event(&old, 1), now_unix()).unwrap();
    let at = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
    let verified = Outcome {
        received_at: at,
        claims: Some(claims.clone()),
        result: Check::Verified,
        forwarded: Some(Ok(204)),
        status: 204,
    };
    assert_eq!(
        verified.render(false, None),
        format!(
            "2027-01-15T08:00:00Z  {}  ping  verified  forwarded: 204",
            claims.jti
        )
    );
    let line: Value = serde_json::from_str(&verified.render(true, None)).unwrap();
    assert_eq!(line["result"], "verified");
    assert_eq!(line["claims"]["type"], "ping");
    assert_eq!(line["forwarded"]["status"], 204);
    let rejected = Outcome::rejected(at, "bad\x1b[2Jthing".to_owned(), 400);
    assert_eq!(
        rejected.render(false, None),
        "2027-01-15T08:00:00Z  -  -  REJECTED  bad?[2Jthing"
    );
}
