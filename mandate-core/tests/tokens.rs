//! Signed tokens end to end: real verdict claims signed and verified, and hostile tokens each
//! refused with the variant that names what is wrong with them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use mandate_core::amount::Amount;
use mandate_core::claims::{
    EVENT_LIFETIME_SECS, EventClaims, RequestClaims, VERDICT_LIFETIME_SECS, VerdictClaims,
};
use mandate_core::id::{AgentId, DecisionId, EventId, MandateId, Nonce};
use mandate_core::jwk::JwkSet;
use mandate_core::jws::{
    P256Signer, Signer, TokenError, TokenKind, TokenPart, VerifyOptions, sign_token, verify_event,
};
use mandate_core::names::{Category, Currency, Recipient};
use mandate_core::policy::Verdict;
use mandate_core::{
    CheckError, Counterparty, EnvironmentPolicy, ExpectedTransaction, MemoryReplayGuard, Objection,
};
use proptest::prelude::*;
use serde_json::{Value, json};
use sha2::Sha256;

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
        ap2_mandate: None,
        ap2_transaction: None,
        x402_payment: None,
        iss: ISS.to_owned(),
        jti: DecisionId::from_random([seed; 16]),
        iat,
        exp: iat + VERDICT_LIFETIME_SECS,
        verdict: Verdict::Allow,
        policy_verdict: Verdict::Allow,
        mandate: Some(MandateId::from_random([seed.wrapping_add(1); 16])),
        policy_version: "pol_2026-01-01.1".to_owned(),
        nonce: Nonce::from_random([seed.wrapping_add(2); 16]),
        request: RequestClaims {
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
        exp: iat + EVENT_LIFETIME_SECS,
        event_type: "mandate.revoked".to_owned(),
        data: json!({"id": "mnd_abc", "status": "revoked"}),
    }
}

fn at(now: i64) -> VerifyOptions {
    VerifyOptions {
        issuer: ISS.to_owned(),
        now,
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
    let result = mandate_core::jws::verify_verdict(token, jwks, options);
    let Ok(now) = time::OffsetDateTime::from_unix_timestamp(options.now) else {
        return result;
    };
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

#[test]
fn algorithms_other_than_es256_are_refused() {
    let key = signer("live-1", 3);
    let jwks = set(&[&key]);
    let claims = b64(verdict_json(IAT).to_string());

    for alg in ["none", "noNE", "None", "NONE"] {
        let header = b64(json!({"alg": alg, "typ": "JWT", "kid": "live-1"}).to_string());
        for token in [format!("{header}.{claims}."), format!("{header}.{claims}")] {
            let result = verify_verdict(&token, &jwks, &at(IAT));
            assert!(
                matches!(
                    result,
                    Err(TokenError::UnsupportedAlgorithm(_) | TokenError::Malformed(_))
                ),
                "{alg}: {result:?}"
            );
        }
        assert_eq!(
            verify_verdict(&format!("{header}.{claims}."), &jwks, &at(IAT)),
            Err(TokenError::UnsupportedAlgorithm(format!("\"{alg}\"")))
        );
    }

    // HS256 keyed with the public JWK's JSON: the classic algorithm-confusion attack.
    let secret = serde_json::to_vec(&key.public_jwk()).unwrap();
    for hs_header in [
        json!({"alg": "HS256", "typ": "JWT", "kid": "live-1"}),
        json!({"alg": "HS256", "typ": "JWT"}),
    ] {
        let input = format!("{}.{claims}", b64(hs_header.to_string()));
        let mut mac = Hmac::<Sha256>::new_from_slice(&secret).unwrap();
        mac.update(input.as_bytes());
        let token = format!("{input}.{}", b64(mac.finalize().into_bytes()));
        assert_eq!(
            verify_verdict(&token, &jwks, &at(IAT)),
            Err(TokenError::UnsupportedAlgorithm("\"HS256\"".to_owned()))
        );
    }

    for alg in [
        json!("ES384"),
        json!("es256"),
        json!("ES256 "),
        json!(["ES256"]),
    ] {
        let token = forge(
            &key,
            &json!({"alg": alg, "kid": "live-1"}),
            &verdict_json(IAT),
        );
        assert!(matches!(
            verify_verdict(&token, &jwks, &at(IAT)),
            Err(TokenError::UnsupportedAlgorithm(_))
        ));
    }
    let token = forge(&key, &json!({"kid": "live-1"}), &verdict_json(IAT));
    assert!(matches!(
        verify_verdict(&token, &jwks, &at(IAT)),
        Err(TokenError::UnsupportedAlgorithm(_))
    ));
}

#[test]
fn the_kid_must_name_a_key_of_the_set() {
    let key = signer("live-1", 3);
    let jwks = set(&[&key]);
    let claims = verdict_json(IAT);

    let token = forge(&key, &es256_header("live-9"), &claims);
    assert_eq!(
        verify_verdict(&token, &jwks, &at(IAT)),
        Err(TokenError::UnknownKid("live-9".to_owned()))
    );
    let token = forge(&key, &json!({"alg": "ES256", "typ": "JWT"}), &claims);
    assert_eq!(
        verify_verdict(&token, &jwks, &at(IAT)),
        Err(TokenError::MissingKid)
    );
    let token = forge(&key, &json!({"alg": "ES256", "kid": 1}), &claims);
    assert!(matches!(
        verify_verdict(&token, &jwks, &at(IAT)),
        Err(TokenError::Malformed(_))
    ));

    // Same kid, another key: the signature is what decides.
    let impostor = signer("live-1", 7);
    let token = sign_token(&impostor, &verdict(IAT, 1)).unwrap();
    assert_eq!(
        verify_verdict(&token, &jwks, &at(IAT)),
        Err(TokenError::BadSignature)
    );
}

#[test]
fn the_issuer_must_match() {
    let key = signer("live-1", 3);
    let jwks = set(&[&key]);
    let mut claims = verdict(IAT, 1);
    claims.iss = "https://evil.example".to_owned();
    let token = sign_token(&key, &claims).unwrap();
    assert_eq!(
        verify_verdict(&token, &jwks, &at(IAT)),
        Err(TokenError::WrongIssuer("https://evil.example".to_owned()))
    );
    let mut claims = verdict_json(IAT);
    claims["iss"] = json!(format!("{ISS}/"));
    let token = forge(&key, &es256_header("live-1"), &claims);
    assert!(matches!(
        verify_verdict(&token, &jwks, &at(IAT)),
        Err(TokenError::WrongIssuer(_))
    ));
}

#[test]
fn expiry_boundaries() {
    let key = signer("live-1", 3);
    let jwks = set(&[&key]);
    let claims = verdict(IAT, 1);
    let exp = claims.exp;
    let token = sign_token(&key, &claims).unwrap();

    assert!(verify_verdict(&token, &jwks, &at(exp - 1)).is_ok());
    assert_eq!(
        verify_verdict(&token, &jwks, &at(exp)),
        Err(TokenError::Expired { exp })
    );
    assert_eq!(
        verify_verdict(&token, &jwks, &at(exp + 1000)),
        Err(TokenError::Expired { exp })
    );

    let lenient = |now| VerifyOptions {
        leeway_secs: 30,
        ..at(now)
    };
    assert!(verify_verdict(&token, &jwks, &lenient(exp + 29)).is_ok());
    assert_eq!(
        verify_verdict(&token, &jwks, &lenient(exp + 30)),
        Err(TokenError::Expired { exp })
    );
}

#[test]
fn time_claims_must_be_integers() {
    let key = signer("live-1", 3);
    let jwks = set(&[&key]);
    let exp = IAT + 300;
    for (name, value) in [
        ("exp", json!(exp.to_string())),
        ("exp", json!(exp as f64 + 0.5)),
        ("exp", json!(format!("{exp}.0").parse::<Value>().unwrap())),
        ("exp", Value::Null),
        ("iat", json!(IAT.to_string())),
        ("iat", json!(null)),
    ] {
        let mut claims = verdict_json(IAT);
        claims[name] = value.clone();
        let token = forge(&key, &es256_header("live-1"), &claims);
        assert!(
            matches!(
                verify_verdict(&token, &jwks, &at(IAT)),
                Err(TokenError::MalformedClaims(_))
            ),
            "{name} = {value}"
        );
    }
    let mut claims = verdict_json(IAT);
    claims.as_object_mut().unwrap().remove("exp");
    let token = forge(&key, &es256_header("live-1"), &claims);
    assert!(matches!(
        verify_verdict(&token, &jwks, &at(IAT)),
        Err(TokenError::MalformedClaims(_))
    ));
}

#[test]
fn a_token_issued_in_the_future_is_refused() {
    let key = signer("live-1", 3);
    let jwks = set(&[&key]);
    let token = sign_token(&key, &verdict(IAT + 10, 1)).unwrap();
    assert_eq!(
        verify_verdict(&token, &jwks, &at(IAT)),
        Err(TokenError::IssuedInFuture { iat: IAT + 10 })
    );
    assert!(verify_verdict(&token, &jwks, &at(IAT + 10)).is_ok());
    let lenient = VerifyOptions {
        leeway_secs: 10,
        ..at(IAT)
    };
    assert!(verify_verdict(&token, &jwks, &lenient).is_ok());
}

#[test]
fn signatures_must_be_raw_64_bytes_and_valid() {
    let key = signer("live-1", 3);
    let jwks = set(&[&key]);
    let token = sign_token(&key, &verdict(IAT, 1)).unwrap();
    let (input, signature) = token.rsplit_once('.').unwrap();
    let raw: [u8; 64] = URL_SAFE_NO_PAD
        .decode(signature)
        .unwrap()
        .try_into()
        .unwrap();

    let der = der(&raw);
    assert!(der.len() > 64 && der[0] == 0x30);
    let der_token = format!("{input}.{}", b64(&der));
    assert_eq!(
        verify_verdict(&der_token, &jwks, &at(IAT)),
        Err(TokenError::SignatureLength(der.len()))
    );

    let zero = format!("{input}.{}", b64([0u8; 64]));
    assert_eq!(
        verify_verdict(&zero, &jwks, &at(IAT)),
        Err(TokenError::BadSignature)
    );
    let short = format!("{input}.{}", b64(&raw[..63]));
    assert_eq!(
        verify_verdict(&short, &jwks, &at(IAT)),
        Err(TokenError::SignatureLength(63))
    );
    let empty = format!("{input}.");
    assert_eq!(
        verify_verdict(&empty, &jwks, &at(IAT)),
        Err(TokenError::SignatureLength(0))
    );
    // Swapping r and s keeps the length and breaks the signature.
    let mut swapped = raw;
    swapped.rotate_left(32);
    let swapped = format!("{input}.{}", b64(swapped));
    assert_eq!(
        verify_verdict(&swapped, &jwks, &at(IAT)),
        Err(TokenError::BadSignature)
    );
}

#[test]
fn the_compact_form_is_strict() {
    let key = signer("live-1", 3);
    let jwks = set(&[&key]);
    let token = sign_token(&key, &verdict(IAT, 1)).unwrap();
    assert!(verify_verdict(&token, &jwks, &at(IAT)).is_ok());
    let (header, rest) = token.split_once('.').unwrap();
    let (claims, signature) = rest.split_once('.').unwrap();

    let malformed = [
        format!("{token}garbage"),
        format!("{token}="),
        format!("{token}=="),
        format!("{token} "),
        format!("{token}\n"),
        format!(" {token}"),
        format!("{token}.{signature}"),
        format!("{token}."),
        format!("{header}.{claims}"),
        format!("{header}.{claims}.{signature}.x.y"),
        format!("{header}=.{claims}.{signature}"),
        format!("{header}.{claims}=.{signature}"),
        token.replace('-', "+").replace('_', "/"),
        String::new(),
        "..".to_owned(),
        "a.b.c".to_owned(),
    ];
    for bad in malformed {
        if bad == token {
            continue;
        }
        let result = verify_verdict(&bad, &jwks, &at(IAT));
        assert!(
            matches!(
                result,
                Err(TokenError::Malformed(_) | TokenError::SignatureLength(_))
            ),
            "{bad:?}: {result:?}"
        );
    }

    let not_json = format!("{}.{claims}.{signature}", b64("{alg:ES256}"));
    assert!(matches!(
        verify_verdict(&not_json, &jwks, &at(IAT)),
        Err(TokenError::Malformed(_))
    ));
    let crit = forge(
        &key,
        &json!({"alg": "ES256", "kid": "live-1", "crit": ["exp"]}),
        &verdict_json(IAT),
    );
    assert!(matches!(
        verify_verdict(&crit, &jwks, &at(IAT)),
        Err(TokenError::Malformed(_))
    ));
}

#[test]
fn claims_must_be_well_formed() {
    let key = signer("live-1", 3);
    let jwks = set(&[&key]);
    // A claim this crate does not know is ignored (a later server may add it), and the
    // known ones still read.
    let mut extra = verdict_json(IAT);
    extra["admin"] = json!(true);
    extra["request"]["binding"] = json!({"kind": "ap2"});
    let token = forge(&key, &es256_header("live-1"), &extra);
    assert_eq!(verify_verdict(&token, &jwks, &at(IAT)), Ok(verdict(IAT, 1)));
    // A known claim of the wrong type is refused.
    let mut version_as_number = verdict_json(IAT);
    version_as_number["policy_version"] = json!(7);
    let mut verdict_as_number = verdict_json(IAT);
    verdict_as_number["verdict"] = json!(1);
    let mut amount_as_text = verdict_json(IAT);
    amount_as_text["request"]["amount"] = json!("100.10");
    let mut no_jti = verdict_json(IAT);
    no_jti.as_object_mut().unwrap().remove("jti");
    let mut review_jti = verdict_json(IAT);
    review_jti["jti"] = json!("rev_abc");
    for claims in [
        version_as_number,
        verdict_as_number,
        amount_as_text,
        no_jti,
        review_jti,
    ] {
        let token = forge(&key, &es256_header("live-1"), &claims);
        assert!(
            matches!(
                verify_verdict(&token, &jwks, &at(IAT)),
                Err(TokenError::MalformedClaims(_))
            ),
            "{claims}"
        );
    }
    // Claims that are not an object are refused as such, however their elements line up.
    // In the claims' own order, the array a derived reader would take by position.
    let fields = [
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
    let whole = verdict_json(IAT);
    let by_position: Vec<Value> = fields.iter().map(|f| whole[*f].clone()).collect();
    for claims in [
        json!([1, 2]),
        Value::Array(by_position),
        json!("x"),
        json!(7),
    ] {
        let token = forge(&key, &es256_header("live-1"), &claims);
        assert_eq!(
            verify_verdict(&token, &jwks, &at(IAT)),
            Err(TokenError::NotAnObject(TokenPart::Claims)),
            "{claims}"
        );
    }
    // A duplicated claim is refused rather than resolved silently.
    let doubled = format!(
        "{},\"iss\":\"{ISS}\"}}",
        verdict_json(IAT).to_string().trim_end_matches('}')
    );
    let input = format!(
        "{}.{}",
        b64(es256_header("live-1").to_string()),
        b64(doubled)
    );
    let token = format!("{input}.{}", b64(key.sign(input.as_bytes()).unwrap()));
    assert_eq!(
        verify_verdict(&token, &jwks, &at(IAT)),
        Err(TokenError::DuplicateMember {
            part: TokenPart::Claims,
            member: "iss".to_owned()
        })
    );
}

/// A token whose header and claims are given as text, properly signed by `signer`.
fn forge_text(signer: &dyn Signer, header: &str, claims: &str) -> String {
    let input = format!("{}.{}", b64(header), b64(claims));
    let signature = signer.sign(input.as_bytes()).unwrap();
    format!("{input}.{}", b64(signature))
}

#[test]
fn a_header_must_be_an_object_with_each_member_once() {
    let key = signer("live-1", 3);
    let jwks = set(&[&key]);
    let claims = verdict_json(IAT).to_string();
    // By position these would read as alg, kid and no crit.
    for header in [
        r#"["ES256", "live-1", null]"#,
        r#"["ES256"]"#,
        "\"ES256\"",
        "1",
    ] {
        let token = forge_text(&key, header, &claims);
        assert_eq!(
            verify_verdict(&token, &jwks, &at(IAT)),
            Err(TokenError::NotAnObject(TokenPart::Header)),
            "{header}"
        );
    }
    for (header, member) in [
        (
            r#"{"alg":"ES256","typ":"JWT","kid":"live-1","kid":"live-2"}"#,
            "kid",
        ),
        (
            r#"{"alg":"none","alg":"ES256","typ":"JWT","kid":"live-1"}"#,
            "alg",
        ),
        (
            r#"{"alg":"ES256","typ":"JWT","typ":"JWS","kid":"live-1"}"#,
            "typ",
        ),
        (
            r#"{"alg":"ES256","typ":"JWT","kid":"live-1","x":{"a":1,"a":2}}"#,
            "x.a",
        ),
    ] {
        let token = forge_text(&key, header, &claims);
        assert_eq!(
            verify_verdict(&token, &jwks, &at(IAT)),
            Err(TokenError::DuplicateMember {
                part: TokenPart::Header,
                member: member.to_owned()
            }),
            "{header}"
        );
    }
    // The same header once each verifies.
    let token = forge_text(
        &key,
        r#"{"alg":"ES256","typ":"JWT","kid":"live-1"}"#,
        &claims,
    );
    assert!(verify_verdict(&token, &jwks, &at(IAT)).is_ok());
}

#[test]
fn a_member_repeated_deep_in_the_claims_is_refused() {
    let key = signer("live-1", 3);
    let jwks = set(&[&key]);
    let header = es256_header("live-1").to_string();
    // In a verdict's request: the amount a counterparty settles.
    let verdict = verdict_json(IAT).to_string();
    let doubled = verdict.replace(r#""amount":100.10"#, r#""amount":100.10,"amount":1"#);
    assert_ne!(doubled, verdict);
    assert_eq!(
        verify_verdict(&forge_text(&key, &header, &doubled), &jwks, &at(IAT)),
        Err(TokenError::DuplicateMember {
            part: TokenPart::Claims,
            member: "request.amount".to_owned()
        })
    );
    // In an event's data, which is free-form.
    let event = serde_json::to_string(&event(IAT)).unwrap();
    let doubled = event.replace(
        r#""status":"revoked""#,
        r#""status":"active","status":"revoked""#,
    );
    assert_ne!(doubled, event);
    assert_eq!(
        verify_event(&forge_text(&key, &header, &doubled), &jwks, &at(IAT)),
        Err(TokenError::DuplicateMember {
            part: TokenPart::Claims,
            member: "data.status".to_owned()
        })
    );
    assert!(verify_event(&forge_text(&key, &header, &event), &jwks, &at(IAT)).is_ok());
}

#[test]
fn verdicts_and_events_are_not_interchangeable() {
    let key = signer("live-1", 3);
    let jwks = set(&[&key]);
    let event_token = sign_token(&key, &event(IAT)).unwrap();
    assert_eq!(
        verify_verdict(&event_token, &jwks, &at(IAT)),
        Err(TokenError::WrongKind {
            expected: TokenKind::Verdict,
            found: TokenKind::Event,
        })
    );
    let verdict_token = sign_token(&key, &verdict(IAT, 1)).unwrap();
    assert_eq!(
        verify_event(&verdict_token, &jwks, &at(IAT)),
        Err(TokenError::WrongKind {
            expected: TokenKind::Event,
            found: TokenKind::Verdict,
        })
    );
}

fn arbitrary_verdict() -> impl Strategy<Value = VerdictClaims> {
    (
        any::<[u8; 16]>(),
        any::<[u8; 16]>(),
        0i64..4_000_000_000,
        0u64..10_000_000_000,
        0u32..3,
        "[a-z0-9][a-z0-9_-]{0,20}",
    )
        .prop_map(|(jti, nonce, iat, cents, scale, agent)| {
            let mut claims = verdict(iat, 0);
            claims.jti = DecisionId::from_random(jti);
            claims.nonce = Nonce::from_random(nonce);
            claims.request.agent = AgentId::parse(&format!("agt_{agent}")).unwrap();
            let amount = rust_decimal::Decimal::new(i64::try_from(cents).unwrap(), scale);
            claims.request.amount = Amount::from_decimal(amount).unwrap();
            claims
        })
}

fn valid_secret() -> impl Strategy<Value = [u8; 32]> {
    any::<[u8; 32]>().prop_filter("a scalar in 1..n", |bytes| {
        P256Signer::from_secret_bytes("k", bytes).is_ok()
    })
}

proptest! {
    #[test]
    fn every_signed_verdict_verifies(secret in valid_secret(), claims in arbitrary_verdict()) {
        let key = P256Signer::from_secret_bytes("sandbox-1", &secret).unwrap();
        let token = sign_token(&key, &claims).unwrap();
        let back = verify_verdict(&token, &set(&[&key]), &at(claims.iat));
        prop_assert_eq!(back, Ok(claims));
    }

    #[test]
    fn changing_any_byte_breaks_the_token(
        claims in arbitrary_verdict(),
        position in any::<prop::sample::Index>(),
        replacement in any::<u8>(),
    ) {
        let key = signer("sandbox-1", 3);
        let jwks = set(&[&key]);
        let token = sign_token(&key, &claims).unwrap();
        let mut bytes = token.clone().into_bytes();
        let index = position.index(bytes.len());
        prop_assume!(bytes[index] != replacement);
        bytes[index] = replacement;
        // A byte that breaks UTF-8 becomes U+FFFD: still a different token.
        let tampered = String::from_utf8_lossy(&bytes).into_owned();
        prop_assert_ne!(&tampered, &token);
        prop_assert!(verify_verdict(&tampered, &jwks, &at(claims.iat)).is_err());
    }
}

/// The order of P-256, big-endian.
const ORDER: [u8; 32] = [
    0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xbc, 0xe6, 0xfa, 0xad, 0xa7, 0x17, 0x9e, 0x84, 0xf3, 0xb9, 0xca, 0xc2, 0xfc, 0x63, 0x25, 0x51,
];

/// `n - s`, big-endian, for `0 < s < n`.
fn negate(s: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; 32];
    let mut borrow = 0i16;
    for i in (0..32).rev() {
        let mut d = i16::from(ORDER[i]) - i16::from(s[i]) - borrow;
        borrow = i16::from(d < 0);
        if d < 0 {
            d += 256;
        }
        out[i] = u8::try_from(d).unwrap();
    }
    out
}

/// The twin `(r, n - s)` of a valid signature verifies in plain ECDSA, but is refused: a
/// verdict has one token text. The signer only ever emits the low twin.
#[test]
fn the_high_s_twin_of_a_signature_is_refused() {
    let jwks_for = |key: &P256Signer| set(&[key]);
    let mut checked = 0;
    for seed in 0..16u8 {
        let key = signer("live-1", seed.wrapping_add(20));
        let jwks = jwks_for(&key);
        let token = sign_token(&key, &verdict(IAT, seed)).unwrap();
        let (input, signature) = token.rsplit_once('.').unwrap();
        let raw = URL_SAFE_NO_PAD.decode(signature).unwrap();
        // Low S: s <= (n - 1) / 2, so its twin n - s is above it.
        let twin_s = negate(&raw[32..]);
        assert!(
            twin_s[..] > raw[32..],
            "the signer emitted a high-S signature"
        );
        let mut twin = raw[..32].to_vec();
        twin.extend(twin_s);
        let twin = format!("{input}.{}", b64(twin));
        assert_eq!(verify_verdict(&token, &jwks, &at(IAT)).map(|_| ()), Ok(()));
        assert_eq!(
            verify_verdict(&twin, &jwks, &at(IAT)),
            Err(TokenError::HighS)
        );
        // A high S that is nobody's twin is a plain bad signature.
        let mut other = raw[..32].to_vec();
        other.extend(negate(&raw[32..]));
        other[0] ^= 1;
        let other = format!("{input}.{}", b64(other));
        assert_eq!(
            verify_verdict(&other, &jwks, &at(IAT)),
            Err(TokenError::BadSignature)
        );
        checked += 1;
    }
    assert_eq!(checked, 16);
}
